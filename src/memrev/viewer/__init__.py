"""``memrev serve``: a read-only history viewer in the browser (``pip install 'memrev[viewer]'``).

``create_app(location)`` is an ASGI app (Starlette) that only renders what
``Store``'s async API answers; ``serve()`` runs it with uvicorn.
Templates, JavaScript and CSS ship inside this package (no CDN).
"""

from __future__ import annotations

from .app import create_app
from .security import TokenRequired, check_bind

__all__ = ["TokenRequired", "check_bind", "create_app", "serve"]


def serve(location: str, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          branch: str = "main", open_browser: bool = False) -> None:
    """Serve the viewer until interrupted. A non-loopback ``host`` needs ``token``."""
    import uvicorn

    check_bind(host, token)
    app = create_app(location, branch=branch, token=token)
    if open_browser:
        import threading
        import webbrowser

        url = f"http://{'localhost' if host in ('127.0.0.1', '::1', 'localhost') else host}:{port}/"
        threading.Timer(1.0, webbrowser.open, [url + (f"?token={token}" if token else "")]).start()
    # open event streams (/events) would otherwise hold a Ctrl+C shutdown forever
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)
