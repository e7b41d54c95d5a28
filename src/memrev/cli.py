"""The ``memrev`` command: parses arguments and calls the async Python API.

Every command takes the store from ``--store``, else ``$MEMREV_STORE``, else
the current folder, and writes to click's output stream, so it is testable
with ``click.testing.CliRunner`` and no terminal.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import click

from .errors import MemrevError
from .repo import Commit
from .store import VersionedStore


def _run(ctx: click.Context, job: Callable[[VersionedStore], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        store = VersionedStore(ctx.obj["store"], branch=ctx.obj["branch"])
        try:
            return await job(store)
        finally:
            store.close()

    try:
        return asyncio.run(main())
    except (MemrevError, KeyError, ValueError, TypeError) as e:
        raise click.ClickException(str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)) from None


def _commit_json(c: Commit) -> dict[str, Any]:
    return {
        "id": c.id,
        "parents": list(c.parents),
        "time": c.time.isoformat(),
        "author": c.author,
        "message": c.message,
        "meta": c.meta,
        "paths": list(c.paths),
    }


def _echo_diff(text: str, color: bool | None) -> None:
    for line in text.splitlines():
        fg = None
        if line.startswith(("+++", "---")):
            fg = "white"
        elif line.startswith("+"):
            fg = "green"
        elif line.startswith("-"):
            fg = "red"
        elif line.startswith("@@"):
            fg = "cyan"
        click.secho(line, fg=fg, bold=line.startswith(("+++", "---")), color=color)


@click.group()
@click.option("--store", envvar="MEMREV_STORE", default=".", show_default=True, help="Store folder or URL.")
@click.option("--branch", default="main", show_default=True, help="Branch that HEAD names.")
@click.pass_context
def main(ctx: click.Context, store: str, branch: str) -> None:
    """Inspect the history of a memrev store.

    Example: memrev --store ./journal-state log /memory/working.md
    """
    ctx.obj = {"store": store, "branch": branch}


@main.command()
@click.argument("path", required=False)
@click.option("--limit", "-n", type=int, help="Show at most N commits.")
@click.option("--rev", default=None, help="Start from this revision instead of HEAD.")
@click.option("--oneline", is_flag=True, help="One line per commit.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def log(ctx: click.Context, path: str | None, limit: int | None, rev: str | None, oneline: bool, as_json: bool) -> None:
    """Commits, newest first: of the whole store, or only those that changed PATH.

    Example: memrev log /memory/working.md --limit 5
    """
    commits = _run(ctx, lambda s: s.log(path, limit=limit, rev=rev))
    if as_json:
        click.echo(json.dumps([_commit_json(c) for c in commits], indent=2))
        return
    for c in commits:
        stamp = c.time.strftime("%Y-%m-%d %H:%M:%S")
        if oneline:
            click.echo(f"{click.style(c.id[:10], fg='yellow')} {stamp} {c.message}")
            continue
        click.secho(f"commit {c.id}", fg="yellow")
        click.echo(f"Author: {c.author}\nDate:   {stamp} UTC\n\n    {c.message}")
        if c.meta:
            click.echo(f"    meta: {json.dumps(c.meta, sort_keys=True)}")
        for p in c.paths:
            click.echo(f"    {p}")
        click.echo()


@main.command()
@click.argument("spec", default="HEAD")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def show(ctx: click.Context, spec: str, as_json: bool) -> None:
    """A commit and its diff (REV), or a file as of a revision (REV:PATH).

    Example: memrev show HEAD~1:/memory/working.md
    """
    if ":" in spec:
        rev, path = spec.split(":", 1)
        text = _run(ctx, lambda s: s.read(path, rev=rev or "HEAD"))
        if text is None:
            raise click.ClickException(f"{path} does not exist at {rev or 'HEAD'}")
        click.echo(json.dumps({"rev": rev, "path": path, "content": text}) if as_json else text, nl=as_json)
        return

    async def job(s: VersionedStore):
        c = await s.show(spec)
        changes = await s.diff(c.parents[0], c.id) if c.parents else None
        if changes is None:
            changes = []
            for p in c.paths:
                from .repo import _file_change

                changes.append(_file_change(p, None, (await s.read(p, rev=c.id) or "").encode()))
        return c, changes

    c, changes = _run(ctx, job)
    if as_json:
        doc = _commit_json(c) | {"changes": [{"path": x.path, "status": x.status, "diff": x.diff} for x in changes]}
        click.echo(json.dumps(doc, indent=2))
        return
    click.secho(f"commit {c.id}", fg="yellow")
    click.echo(f"Author: {c.author}\nDate:   {c.time:%Y-%m-%d %H:%M:%S} UTC\n\n    {c.message}\n")
    for x in changes:
        _echo_diff(x.diff, None)


@main.command()
@click.argument("args", nargs=-1)
@click.option("--stat", is_flag=True, help="Only list changed paths with their status.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def diff(ctx: click.Context, args: tuple[str, ...], stat: bool, as_json: bool) -> None:
    """Changes between two revisions (default HEAD~1 and HEAD), optionally only under PATHs.

    Example: memrev diff HEAD~1 HEAD -- /memory/working.md
    """
    revs, paths = list(args), []
    if "--" in revs:  # click keeps a literal "--" only when it follows other arguments
        i = revs.index("--")
        revs, paths = revs[:i], revs[i + 1 :]
    else:
        paths = [a for a in revs if a.startswith("/")]
        revs = [a for a in revs if not a.startswith("/")]
    if len(revs) > 2:
        raise click.UsageError("diff takes at most two revisions")
    rev_a = revs[0] if revs else "HEAD~1"
    rev_b = revs[1] if len(revs) > 1 else "HEAD"

    async def job(s: VersionedStore):
        changes = await s.diff(rev_a, rev_b)
        if paths:
            from .core.paths import is_under, normalize

            wanted = [normalize(p) for p in paths]
            changes = [c for c in changes if any(is_under(c.path, w) for w in wanted)]
        return changes

    changes = _run(ctx, job)
    if as_json:
        click.echo(json.dumps([{"path": c.path, "status": c.status, "diff": c.diff} for c in changes], indent=2))
    elif stat:
        for c in changes:
            click.echo(f"{c.status[0].upper()} {c.path}")
    else:
        for c in changes:
            _echo_diff(c.diff, None)


@main.command()
@click.argument("path")
@click.option("--rev", default=None, help="Revision (default HEAD).")
@click.pass_context
def cat(ctx: click.Context, path: str, rev: str | None) -> None:
    """Print a file as of a revision.

    Example: memrev cat /memory/working.md --rev HEAD~2
    """
    text = _run(ctx, lambda s: s.read(path, rev=rev))
    if text is None:
        raise click.ClickException(f"{path} does not exist at {rev or 'HEAD'}")
    click.echo(text, nl=False)


@main.command(name="ls")
@click.argument("path", default="/")
@click.option("--rev", default=None, help="Revision (default HEAD).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def ls(ctx: click.Context, path: str, rev: str | None, as_json: bool) -> None:
    """List a directory as of a revision.

    Example: memrev ls /memory
    """
    names = _run(ctx, lambda s: s.list(path, rev=rev))
    click.echo(json.dumps(names) if as_json else "\n".join(names))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def fsck(ctx: click.Context, as_json: bool) -> None:
    """Verify every object against its hash, every ref, and the derived indexes.

    Exits 1 when a problem is found. Example: memrev fsck
    """
    problems = _run(ctx, lambda s: s.fsck())
    if as_json:
        click.echo(json.dumps({"ok": not problems, "problems": problems}, indent=2))
    else:
        for p in problems:
            click.secho(p, fg="red")
        click.echo("ok" if not problems else f"{len(problems)} problem(s)")
    if problems:
        ctx.exit(1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
