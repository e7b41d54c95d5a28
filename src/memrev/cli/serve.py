"""``memrev serve``: the web viewer, imported only when the command runs (the
CLI works without the ``viewer`` extra)."""

from __future__ import annotations

import click

from ..errors import MemrevError, NoStore
from .app import main, no_store_hint
from .render import printable


@main.command(short_help="Browse the history in a web browser.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on; not loopback needs --token.")
@click.option("--port", default=8765, show_default=True, type=int, help="Port to listen on.")
@click.option("--token", envvar="MEMREV_TOKEN", default=None, help="Required by every request (Bearer header, or ?token= once).")
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in a web browser.")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, token: str | None, open_browser: bool) -> None:
    """Browse the store's history in a web browser (read-only; needs memrev[viewer]).

    Example: memrev --store ./journal-state serve --open
    """
    try:
        from ..viewer import serve as run_viewer
    except ImportError as e:  # the optional extra is missing
        raise click.ClickException(f"the viewer needs: pip install 'memrev[viewer]' ({e})") from None
    try:
        run_viewer(ctx.obj["store"], host=host, port=port, token=token, branch=ctx.obj["branch"], open_browser=open_browser)
    except NoStore:  # as every read command: the viewer never creates or adopts a store
        raise click.ClickException(printable(no_store_hint(ctx.obj["store"]), one_line=True)) from None
    except (MemrevError, OSError) as e:  # TokenRequired, ServeError (a bad or busy port), a non-store location
        raise click.ClickException(printable(" ".join(str(e).split("\n")), one_line=True)) from None
