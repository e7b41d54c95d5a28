"""``memrev mcp``: the store as an MCP server (``memrev.mcp``), over stdio or streamable HTTP.

The ``mcp`` SDK is imported only when the command runs (extra ``memrev[mcp]``).
On stdio, stdout carries the protocol alone: nothing else is ever printed there.
"""

from __future__ import annotations

import os

import click

from ..errors import MemrevError, NoStore
from .app import main, no_store_hint, open_store
from .render import printable

WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a pair; a wildcard or a bad port is a usage error."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (for example 127.0.0.1:8848)", param_hint="--http")
    if host in WILDCARDS:
        raise click.BadParameter(
            "name the address clients connect to, not a wildcard: the Host check admits only that name",
            param_hint="--http",
        )
    return host.strip("[]"), int(port)


@main.command(name="mcp", short_help="Serve the store to MCP clients (Claude, Cursor, VS Code).")
@click.option("--store", "location", default=None, help="Store folder or URL (default: the group's --store).")
@click.option("--branch", default=None, help="Branch the tools work on (default: the group's --branch).")
@click.option("--tools", type=click.Choice(["core", "all"]), default="core", show_default=True,
              help="core: files, search, log, diff, why, restore; all: also branch, merge, revert, tag.")
@click.option("--read-only", is_flag=True, help="Only view, search, log, diff and why.")
@click.option("--http", "listen", default=None, metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; not loopback needs --token.")
@click.option("--token", envvar="MEMREV_TOKEN", default=None, help="With --http: every request needs Authorization: Bearer T.")
@click.pass_context
def mcp_command(
    ctx: click.Context, location: str | None, branch: str | None, tools: str, read_only: bool,
    listen: str | None, token: str | None,
) -> None:
    """Serve the store's memory files and history as MCP tools (needs memrev[mcp]).

    Creates the store on first use, in an empty or new folder (not with
    --read-only; a folder of files is `memrev adopt`ed first). Every change is a
    commit with the client's name, the MCP session and the tool as its provenance.

    Example: claude mcp add memrev -- memrev mcp --store ~/.memrev/claude
    """
    import asyncio

    try:
        from .. import mcp as mcp_server
    except ImportError as e:  # the optional extra is missing
        raise click.ClickException(f"memrev mcp needs: pip install 'memrev[mcp]' ({e})") from None
    where = location or ctx.obj["store"]
    if "://" not in where:  # a client's JSON config runs no shell: ``~`` is expanded here
        where = os.path.expanduser(where)
    on_branch = branch or ctx.obj["branch"]
    address = parse_listen(listen) if listen is not None else None
    if address is not None:
        from ..viewer.security import check_bind

        try:
            check_bind(address[0], token)
        except MemrevError as e:
            raise click.ClickException(str(e).replace("serving on", "--http on")) from None

    async def serve() -> None:
        try:
            store = open_store(where, branch=on_branch, create=False)
        except NoStore:
            # a new store, in a folder of its own: never beside files of somebody else's (that is ``adopt``)
            if read_only or "holds files" in no_store_hint(where):
                raise
            store = open_store(where, branch=on_branch, create=True)
        try:
            server = mcp_server.create_server(store, tools=tools, read_only=read_only)  # type: ignore[arg-type]
            if address is None:
                await server.run_stdio_async()
                return
            import uvicorn

            app = mcp_server.http_app(server, host=address[0], port=address[1], token=token)
            config = uvicorn.Config(app, host=address[0], port=address[1], log_level="warning", lifespan="on")
            click.echo(f"memrev mcp: http://{listen}/mcp ({'token required' if token else 'loopback, no token'})", err=True)
            await uvicorn.Server(config).serve()
        finally:
            store.close()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except NoStore:
        raise click.ClickException(printable(no_store_hint(where), one_line=True)) from None
    except (MemrevError, OSError) as e:
        raise click.ClickException(printable(" ".join(str(e).split("\n")), one_line=True)) from None
