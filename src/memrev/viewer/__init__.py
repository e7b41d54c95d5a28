"""``memrev serve``: a read-only history viewer in the browser (``pip install 'memrev[viewer]'``).

``create_app(location)`` is an ASGI app (Starlette) that only renders what
``Store``'s async API answers; ``serve()`` runs it with uvicorn.
Templates, JavaScript and CSS ship inside this package (no CDN).
"""

from __future__ import annotations

import socket

from ..errors import MemrevError
from .app import create_app
from .security import TokenRequired, check_bind

__all__ = ["ServeError", "TokenRequired", "access_rule", "check_bind", "create_app", "serve"]


class ServeError(MemrevError):
    """``memrev serve`` cannot start: no store at the location, or the address cannot be bound."""


def _check_store(location: str, branch: str) -> None:
    """The viewer never creates or adopts a store (as every read command): ``NoStore`` otherwise."""
    import asyncio

    from ..store.store import Store

    async def probe() -> None:
        Store(location, branch=branch, create=False).close()

    asyncio.run(probe())


def _bind(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise ServeError(f"port {port} is not a port number (0 to 65535)")
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def access_rule(host: str, token: str | None) -> str:
    """The line ``memrev serve`` prints under its URL: who may open the pages (never the token itself)."""
    if token is None:
        return "loopback only: other machines cannot reach it (another --host needs --token)"
    return ("every request needs the token: in a browser open the URL with ?token=... once (it becomes a cookie); "
            "scripts send Authorization: Bearer ...")


def serve(location: str, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          branch: str = "main", open_browser: bool = False) -> None:
    """Serve the viewer until interrupted. A non-loopback ``host`` needs ``token``; the store must exist."""
    import uvicorn

    from .server import config

    check_bind(host, token)
    _check_store(location, branch)
    sock = _bind(host, port)
    port = sock.getsockname()[1]
    app = create_app(location, branch=branch, token=token)
    shown = "localhost" if host in ("127.0.0.1", "::1", "localhost") else (f"[{host}]" if ":" in host else host)
    url = f"http://{shown}:{port}/"
    print(f"memrev viewer at {url} (Ctrl+C stops it)", flush=True)
    print(access_rule(host, token), flush=True)
    if open_browser:
        import threading
        import webbrowser

        threading.Timer(1.0, webbrowser.open, [url + (f"?token={token}" if token else "")]).start()
    uvicorn.Server(config(app, host, port)).run(sockets=[sock])
