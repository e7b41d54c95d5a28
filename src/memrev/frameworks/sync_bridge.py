"""``SyncBridge``: the async ``Store`` for a framework's synchronous callers.

LangGraph calls a store's ``batch`` from a plain thread with no event loop (a
sync ``graph.invoke``) and from a worker thread while the loop the store is
used on keeps running (a sync node inside ``graph.ainvoke``). Both get the
coroutine run to completion on a loop that is free to run it:

- the *home* loop, the one the async face was last used on, while it runs: the
  work joins that loop's tasks (the store's handle is used on one loop at a
  time) and only the calling thread waits; the loop itself never does;
- otherwise the bridge's own loop, one daemon thread started on first use.

A synchronous call made on a running loop's own thread would stop that loop
until it returns (and deadlock if the work needs the loop), so it is refused
with ``asyncio.InvalidStateError``, as LangGraph's own async stores refuse it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["SyncBridge"]

_T = TypeVar("_T")


class SyncBridge:
    """Runs coroutines for synchronous callers (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._home: asyncio.AbstractEventLoop | None = None
        self._own: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def note_loop(self) -> None:
        """Called by the async face: the running loop becomes the home loop."""
        self._home = asyncio.get_running_loop()

    def run(self, make: Callable[[], Coroutine[Any, Any, _T]], what: str) -> _T:
        """``await make()`` on a free loop, for a caller on a thread with no running loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise asyncio.InvalidStateError(
                f"synchronous {what}() of {self._name} called on a running event loop would block it; "
                f"use a{what}() (await store.a{what}(...)) in async code"
            )
        home = self._home
        loop = home if home is not None and home.is_running() else self._loop()
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    def _loop(self) -> asyncio.AbstractEventLoop:
        with self._start:
            if self._own is None or self._own.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=f"{self._name}-sync", daemon=True)
                thread.start()
                self._own, self._thread = loop, thread
            return self._own

    def close(self) -> None:
        """Stop the bridge's own loop (if it started one); the home loop is not the bridge's."""
        with self._start:
            loop, thread = self._own, self._thread
            self._own = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not threading.current_thread():
                thread.join()
            loop.close()
