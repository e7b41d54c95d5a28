"""How ``memrev serve`` runs uvicorn: bounded connections, and a header-read deadline.

uvicorn (0.54 here) bounds the idle time between requests (``timeout_keep_alive``)
and the size of a request's headers (``h11_max_incomplete_event_size``), but not
the time a client may take to send them: a client that trickles its headers
holds its connection forever (slowloris). ``HeaderDeadline``
closes a connection whose request headers are not complete ``HEADER_TIMEOUT``
seconds after it opened or after its previous response ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0  # seconds for a request's line and headers
LIMIT_CONCURRENCY = 512  # open connections and tasks; beyond, uvicorn answers 503
KEEP_ALIVE = 5  # seconds an idle connection stays open between requests
MAX_HEADER_BYTES = 64 * 1024  # h11's bound on an incomplete request head


class HeaderDeadline(H11Protocol):
    header_timeout = HEADER_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        started = self.cycle  # the request in progress when armed (None: none yet)
        self._deadline = self.loop.call_later(self.header_timeout, self._expire, started)

    def _expire(self, started: Any) -> None:
        if self.cycle is started and (started is None or started.response_complete):
            self.transport.close()  # no new request's headers arrived in time

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._deadline.cancel()
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline.cancel()
        super().connection_lost(exc)


def config(app: Any, host: str, port: int, *, header_timeout: float = HEADER_TIMEOUT) -> Any:
    import uvicorn

    protocol = type("HeaderDeadline", (HeaderDeadline,), {"header_timeout": header_timeout})
    return uvicorn.Config(
        app, host=host, port=port, log_level="warning", http=protocol,
        limit_concurrency=LIMIT_CONCURRENCY, timeout_keep_alive=KEEP_ALIVE,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_graceful_shutdown=2,  # open event streams (/events) would otherwise hold a Ctrl+C shutdown forever
    )
