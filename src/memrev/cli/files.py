"""The commands about files: read one or a folder of the store as of a
revision (``cat``, ``ls``), and bring a folder's files in (``adopt``, ``import-dir``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..errors import MemrevError
from .app import main, open_store, read, run
from .options import json_option
from .render import commit_json, echo_json, printable

if TYPE_CHECKING:
    from ..store.reads import Reader


def print_file(ctx: click.Context, path: str, rev: str | None, as_json: bool) -> None:
    """One file as of a revision, for ``cat`` and ``show REV:PATH``."""
    text = read(ctx, lambda s: s.read(path, rev=rev))
    if text is None:
        raise click.ClickException(f"{path} does not exist at {rev or 'HEAD'}")
    if as_json:
        echo_json({"path": path, "rev": rev or "HEAD", "content": text})
    else:
        click.echo(text, nl=False)


@main.command(short_help="Print a file as of a revision.")
@click.argument("path")
@click.option("--rev", default=None, help="Revision (default HEAD).")
@json_option
@click.pass_context
def cat(ctx: click.Context, path: str, rev: str | None, as_json: bool) -> None:
    """Print a file as of a revision.

    Example: memrev cat /memory/working.md --rev HEAD~2
    """
    print_file(ctx, path, rev, as_json)


@main.command(name="ls", short_help="List a directory as of a revision.")
@click.argument("path", default="/")
@click.option("--rev", default=None, help="Revision (default HEAD).")
@json_option
@click.pass_context
def ls(ctx: click.Context, path: str, rev: str | None, as_json: bool) -> None:
    """List a directory as of a revision (a file: its path, as ls prints a file's name).

    Example: memrev ls /memory
    """
    def job(s: Reader) -> list[str]:
        names = s.list(path, rev=rev)
        if not names and path != "/":
            if s.read(path, rev=rev) is not None:
                return [path]  # a file
            if not s.exists(path, rev=rev):
                raise click.ClickException(f"{path} does not exist at {rev or 'HEAD'}")
        return names

    names = read(ctx, job)
    if as_json:
        echo_json(names)
    elif names:
        click.echo("\n".join(names))


@main.command(name="adopt", short_help="Make a DiskKnowledgeStore FOLDER a memrev store.")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option("--worktree", is_flag=True, help="Keep the files at the branch head too (history in FOLDER/.memrev/).")
@json_option
@click.pass_context
def adopt_(ctx: click.Context, folder: str, worktree: bool, as_json: bool) -> None:
    """Make a DiskKnowledgeStore FOLDER a memrev store: its files become the first commit.

    Nothing on disk is changed or deleted; binary files, symlinks and special
    files are skipped and named. On a folder that already has a store, says so
    (use import-dir to add files to an existing store).
    Example: memrev adopt ./journal-state
    """
    import asyncio

    from ..backends import folder_store_file

    existed = any(folder_store_file(folder, worktree=w).exists() for w in (False, True))

    async def job() -> Any:
        store = open_store(folder, branch=ctx.obj["branch"], worktree=worktree or None)
        try:
            commits = await store.log()
            return commits[-1] if commits else None
        finally:
            store.close()

    import logging

    # The store logs each skipped file as a warning (for programs); this
    # command names them itself below, so they are not printed twice.
    logger, quiet = logging.getLogger("memrev"), _NotFrom("adopt")
    logger.addFilter(quiet)
    try:
        first = asyncio.run(job())
    except (MemrevError, OSError) as e:
        raise click.ClickException(printable(str(e), one_line=True)) from None
    finally:
        logger.removeFilter(quiet)
    if as_json:
        echo_json({"folder": folder, "adopted": not existed and first is not None,
                   "already_a_store": existed, "commit": None if existed or first is None else commit_json(first),
                   "skipped": [] if existed or first is None else first.meta.get("skipped", [])})
        return
    if existed:
        click.echo(f"{folder} already holds a memrev store; nothing adopted (import-dir adds files to it)")
    elif first is None:
        click.echo(f"nothing to adopt in {folder}; an empty store was created")
    else:
        click.echo(f"adopted {folder}: commit {first.id[:10]} ({len(first.paths)} files)")
        for s in first.meta.get("skipped", []):
            click.echo(f"skipped {printable(s['path'], one_line=True)}: {s['reason']}")


class _NotFrom:
    """A logging filter dropping the records of one memrev module."""

    def __init__(self, module: str) -> None:
        self.module = module

    def filter(self, record: Any) -> bool:
        return record.module != self.module


@main.command(name="import-dir", short_help="Turn a DiskKnowledgeStore FOLDER into one commit.")
@click.argument("folder")
@click.pass_context
def import_dir(ctx: click.Context, folder: str) -> None:
    """Turn a DiskKnowledgeStore FOLDER into one commit, to migrate an existing agent.

    Example: memrev --store ./journal-versioned import-dir ./journal-state
    """
    done = run(ctx, lambda s: s.import_dir(folder), create=True)
    for path, why in done.skipped:
        click.echo(f"skipped {printable(path, one_line=True)}: {why}", err=True)
    click.echo(f"imported {folder}: commit {done.commit[:10]}" if done.commit else f"nothing new in {folder}")
