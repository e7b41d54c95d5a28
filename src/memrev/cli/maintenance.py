"""The commands that look after a store as a whole: verify it (``fsck``),
collect what nothing reaches (``gc``), and move it as one bundle file
(``export``, ``import``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .app import main, run
from .options import days, json_option
from .render import echo_json, progress, progress_done

if TYPE_CHECKING:
    from ..store.store import Store


@main.command(name="export", short_help="Write branches and tags to one bundle FILE.")
@click.argument("file")
@click.option("--branch", "branches", multiple=True, help="Export only this branch (repeatable; default all).")
@json_option
@click.pass_context
def export_(ctx: click.Context, file: str, branches: tuple[str, ...], as_json: bool) -> None:
    """Write branches, tags and every object they reach to one self-contained FILE.

    Example: memrev export backup.memrev
    """
    n = run(ctx, lambda s: s.export_bundle(file, branches=list(branches) or None, progress=progress()), need_branch=False)
    progress_done()
    if as_json:
        echo_json({"file": file, "objects": n})
        return
    click.echo(f"wrote {n} objects to {file}")


@main.command(name="import", short_help="Verify a bundle FILE, then add its objects and refs.")
@click.argument("file")
@json_option
@click.pass_context
def import_(ctx: click.Context, file: str, as_json: bool) -> None:
    """Verify every hash in a bundle FILE, then add its objects and refs (nothing if anything is wrong).

    Example: memrev --store ./restored import backup.memrev
    """
    refs = run(ctx, lambda s: s.import_bundle(file), create=True, need_branch=False)
    if as_json:
        echo_json(dict(sorted(refs.items())))  # {ref: full id}
        return
    for ref, target in sorted(refs.items()):
        click.echo(f"{ref} -> {target[:10]}")


@main.command(short_help="Delete objects nothing reaches any more.")
@click.option("--keep-days", type=float, default=14.0, show_default=True, callback=days,
              help="Safety window for deleted branches.")
@json_option
@click.pass_context
def gc(ctx: click.Context, keep_days: float, as_json: bool) -> None:
    """Delete objects that no branch, tag or recently deleted branch reaches.

    With --json: the counts removed, {"commits": n, "trees": n, ...}.
    Example: memrev gc --keep-days 7
    """
    removed = run(ctx, lambda s: s.gc(keep_seconds=keep_days * 86400, progress=progress()), need_branch=False)
    progress_done()
    if as_json:
        echo_json(removed)
    else:
        click.echo(", ".join(f"{n} {what}" for what, n in removed.items()) + " removed")


@main.command(short_help="Verify every object, ref and index.")
@click.option("--repair", is_flag=True, help="Rebuild the derived indexes from the objects, then verify again.")
@json_option
@click.pass_context
def fsck(ctx: click.Context, repair: bool, as_json: bool) -> None:
    """Verify every object against its hash, every ref, and the derived indexes.

    Exits 1 when a problem is found. --repair rebuilds the indexes (head and
    per-path change index) from the hash-verified objects first; damaged
    objects themselves cannot be repaired (restore them from a bundle).
    Example: memrev fsck --repair
    """
    async def job(s: Store) -> list[str]:
        if repair:
            await s.reindex()
        return await s.fsck()

    problems = run(ctx, job, need_branch=False)
    if as_json:
        echo_json({"ok": not problems, "problems": problems})
    else:
        for p in problems:
            click.secho(p, fg="red")
        click.echo("ok" if not problems else f"{len(problems)} problem(s)")
    if problems:
        ctx.exit(1)
