"""The commands that move branches and tags: ``branch``, ``tag``, ``merge``, and
the two that undo as a new commit, ``revert`` and ``restore``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..errors import MergeConflict
from .app import main, recomputing, run, run_raw
from .options import author_option, json_option
from .render import echo_json

if TYPE_CHECKING:
    from ..store.store import Store


@main.command(short_help="Make PATH what it was at REV, as a new commit.")
@click.argument("path")
@click.option("--rev", required=True, help="The revision to bring PATH back from.")
@author_option
@json_option
@click.pass_context
def restore(ctx: click.Context, path: str, rev: str, author: str, as_json: bool) -> None:
    """Make PATH (a file or a directory) what it was at REV, as a new commit.

    Example: memrev restore /memory/working.md --rev HEAD~3
    """
    async def job(s: Store) -> str | None:
        target = await s.resolve(rev)
        return await recomputing(lambda: s.restore(path, target))

    new = run(ctx, job, author=author)
    if as_json:
        echo_json({"path": path, "rev": rev, "commit": new})  # commit: null when nothing changed
        return
    click.echo(f"restored {path} to {rev}: commit {new[:10]}" if new else f"{path} is already as it was at {rev}")


@main.command(short_help="A new commit that undoes what REV changed.")
@click.argument("rev")
@author_option
@json_option
@click.pass_context
def revert(ctx: click.Context, rev: str, author: str, as_json: bool) -> None:
    """A new commit that undoes what REV changed. Conflicts are listed and nothing is written.

    Example: memrev revert HEAD~2
    """
    async def job(s: Store) -> str | None:
        target = await s.resolve(rev)
        return await recomputing(lambda: s.revert(target))

    new = run(ctx, job, author=author)
    if as_json:
        echo_json({"rev": rev, "commit": new})  # commit: null when there was nothing to undo
        return
    click.echo(f"reverted {rev}: commit {new[:10]}" if new else f"nothing to revert: {rev} changes nothing now")


@main.command(short_help="List, create or delete branches.")
@click.argument("name", required=False)
@click.option("--from", "from_rev", default="HEAD", show_default=True, help="Where the new branch starts.")
@click.option("-d", "--delete", "delete", default=None, metavar="NAME", help="Delete branch NAME.")
@json_option
@click.pass_context
def branch(ctx: click.Context, name: str | None, from_rev: str, delete: str | None, as_json: bool) -> None:
    """List branches, create branch NAME at --from, or delete one with -d.

    Example: memrev branch experiment --from HEAD~2
    """
    async def job(s: Store) -> dict[str, str] | None:
        if delete:
            await s.delete_branch(delete)
            return None
        if name:
            (await s.branch(name, at=from_rev)).close()
            return {name: (await s.branches())[name]}
        return await s.branches()

    result = run(ctx, job, need_branch=bool(name) and not delete)
    if as_json and delete:
        echo_json({"deleted": delete})
    elif as_json and name:
        echo_json({"branch": name, "commit": result[name]})
    elif delete:
        click.echo(f"deleted branch {delete} (its commits stay until gc's safety window ends)")
    elif name:
        click.echo(f"created branch {name} at {from_rev}")
    elif as_json:
        echo_json(result)
    else:
        for b, target in sorted(result.items()):
            mark = "*" if b == ctx.obj["branch"] else " "
            click.echo(f"{mark} {b:<20} {target[:10]}")


@main.command(short_help="List tags, or tag a revision.")
@click.argument("name", required=False)
@click.argument("rev", default="HEAD")
@json_option
@click.pass_context
def tag(ctx: click.Context, name: str | None, rev: str, as_json: bool) -> None:
    """List tags, or tag REV (default HEAD) as NAME.

    With --json: the tags ({name: id}); after tagging, {"tag": NAME, "commit": id}.
    Example: memrev tag before-cleanup
    """
    if name:
        target = run(ctx, lambda s: s.tag(name, rev))
        if as_json:
            echo_json({"tag": name, "commit": target})
        else:
            click.echo(f"tagged {target[:10]} as {name}")
        return
    result = run(ctx, lambda s: s.tags(), need_branch=False)
    if as_json:
        echo_json(result)
    elif result:
        click.echo("\n".join(f"{t:<20} {c[:10]}" for t, c in sorted(result.items())))


@main.command(short_help="Merge a branch or revision into a branch.")
@click.argument("source")
@click.option("--into", default=None, help="Branch to merge into (default: --branch, i.e. main).")
@click.option("--strategy", type=click.Choice(["ours", "theirs"]), default=None, help="Settle conflicts for one side.")
@click.option("--resolve", "resolve_", multiple=True, metavar="PATH=FILE", help="Settle PATH with FILE's content.")
@author_option
@json_option
@click.pass_context
def merge(
    ctx: click.Context, source: str, into: str | None, strategy: str | None, resolve_: tuple[str, ...], author: str,
    as_json: bool,
) -> None:
    """Merge SOURCE (a branch or revision) into a branch as one commit with two parents.

    On conflicts nothing is written; they are listed (with conflict markers)
    and the command exits 1. Settle them with --strategy or --resolve.
    Example: memrev merge experiment --into main
    """
    resolutions = _read_resolutions(resolve_)
    if into:
        ctx.obj["branch"] = into
    try:
        # SOURCE is looked up again on a retry: a branch name means its tip, as in git.
        result = run_raw(
            ctx, lambda s: recomputing(lambda: s.merge(source, strategy=strategy, resolutions=resolutions)), author=author
        )
    except MergeConflict as e:
        if as_json:
            echo_json({"status": "conflict", "conflicts": [
                {"path": c.path, "kind": c.kind, "marked": c.marked} for c in e.conflicts]})
        else:
            click.secho(str(e), fg="red", err=True)
            for c in e.conflicts:
                click.echo(f"CONFLICT ({c.kind}): {c.path}")
                if c.marked:
                    click.echo(c.marked, nl=not c.marked.endswith("\n"))
        ctx.exit(1)
    if as_json:
        echo_json({"status": result.status, "commit": result.commit, "paths": list(result.paths)})
    elif result.status == "up-to-date":
        click.echo(f"already up to date with {source}")
    else:
        click.echo(f"merged {source} into {ctx.obj['branch']}: commit {result.commit[:10]} ({len(result.paths)} paths)")


def _read_resolutions(items: tuple[str, ...]) -> dict[str, str | None]:
    """``--resolve PATH=FILE`` options as {path: FILE's text}."""
    resolutions: dict[str, str | None] = {}
    for item in items:
        path, _, file = item.partition("=")
        if not file:
            raise click.UsageError("--resolve takes PATH=FILE")
        try:
            with open(file, encoding="utf-8") as fh:
                resolutions[path] = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            raise click.UsageError(f"--resolve {item}: cannot read {file}: {e}") from None
    return resolutions
