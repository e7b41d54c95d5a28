"""The commands that look after a store as a whole: verify it (``fsck``),
collect what nothing reaches (``gc``), erase content from all of history
(``purge``), and move it as one bundle file (``export``, ``import``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, BinaryIO

import click

from .app import main, run
from .options import author_option, days, json_option
from .render import echo_json, printable, progress, progress_done

if TYPE_CHECKING:
    from ..maintenance.purge import PurgeReport
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


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _hidden(text: str, strings: tuple[str, ...]) -> str:
    """``text`` (a path pattern) as it may be shown: every string being purged replaced by the
    marker, as the purge record keeps it; the strings themselves are never printed."""
    for s in sorted(set(strings), key=len, reverse=True):
        text = text.replace(s, "[purged]")
    return printable(text, one_line=True)


def _what(paths: tuple[str, ...], texts: tuple[str, ...]) -> str:
    """What a purge matches, as its output names it: the path patterns and how many strings."""
    parts = []
    if paths:
        parts.append(", ".join(_hidden(p, texts) for p in paths))
    if texts:
        parts.append(_plural(len(set(texts)), "string"))
    return " and ".join(parts)


def _report_lines(r: PurgeReport, what: str) -> list[str]:
    """``purge``'s human output: what was (or would be) rewritten, the bytes, the verdict, the record."""
    refs = ", ".join(f"{printable(name, one_line=True)}{' (deleted)' if new is None else ''}"
                     for name, new in r.refs_moved.items()) or "none"
    if r.dry_run:
        return [
            f"dry run, nothing changed: purging {what} would rewrite {_plural(r.commits_rewritten, 'commit')} "
            f"and drop {r.commits_dropped:,}",
            f"versions: {r.versions_removed:,} would be removed, {r.versions_redacted:,} redacted ({r.bytes_purged:,} B)",
            f"refs that would move: {refs}",
        ]
    lines = [
        f"purged {what}: {_plural(r.commits_rewritten, 'commit')} rewritten, {r.commits_dropped:,} dropped",
        f"versions: {r.versions_removed:,} removed, {r.versions_redacted:,} redacted ({r.bytes_purged:,} B)",
        f"refs moved: {refs}",
        f"store: {r.bytes_before:,} B -> {r.bytes_after:,} B ({r.bytes_reclaimed:,} B reclaimed)",
    ]
    if r.verified:
        lines.append("verified: yes, found nowhere")
    else:
        lines.append(f"verified: NO, still found in {_plural(len(r.found), 'place')}:")
        lines += [f"    {printable(place, one_line=True)}" for place in r.found]
    lines.append("record: none (nothing matched)" if r.record is None else f"record: {r.record[:10]} on refs/purges")
    return lines


def _verify(ctx: click.Context, texts: tuple[str, ...], as_json: bool) -> None:
    """``purge --verify``: where the strings still are; exit 1 when anywhere."""
    found = run(ctx, lambda s: s.verify_purged(text=list(texts)), need_branch=False)
    if as_json:
        echo_json({"verified": not found, "found": found})
    else:
        for place in found:
            click.secho(printable(place, one_line=True), fg="red")
        click.echo("not found" if not found else f"found in {_plural(len(found), 'place')}")
    if found:
        ctx.exit(1)


# --text-from reads at most this much: as many strings as a purge takes, each at its size limit, is far more
TEXT_FROM_BYTES = 8 << 20


def _strings_from(fh: BinaryIO) -> tuple[str, ...]:
    """The non-empty lines of a --text-from file (UTF-8, without their line ends), bounded."""
    raw = fh.read(TEXT_FROM_BYTES + 1)
    if len(raw) > TEXT_FROM_BYTES:
        raise click.UsageError(f"--text-from: more than {TEXT_FROM_BYTES} bytes; nothing was purged")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise click.UsageError("--text-from: not UTF-8 text; nothing was purged") from None
    return tuple(line for line in text.splitlines() if line)


@main.command(short_help="Erase paths or strings from every revision, for good.")
@click.option("--path", "paths", multiple=True, metavar="GLOB",
              help="Remove every version of the files matching GLOB (/a/** is all under /a; repeatable).")
@click.option("--text", "texts", multiple=True, metavar="STRING",
              help="Replace STRING (exact, case-sensitive) by [purged] everywhere (repeatable).")
@click.option("--text-from", "text_from", type=click.File("rb"), default=None, metavar="FILE",
              help="Read more strings from FILE, one per line ('-': stdin), so they stay out of the shell's history.")
@click.option("--reason", default=None, help="Why (who asked): kept in the purge record on refs/purges.")
@click.option("--dry-run", is_flag=True, help="Report what would be rewritten; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation on a terminal.")
@click.option("--verify", is_flag=True, help="Only look for the --text strings everywhere; rewrite nothing.")
@author_option
@json_option
@click.pass_context
def purge(
    ctx: click.Context,
    paths: tuple[str, ...],
    texts: tuple[str, ...],
    text_from: BinaryIO | None,
    reason: str | None,
    dry_run: bool,
    yes: bool,
    verify: bool,
    author: str,
    as_json: bool,
) -> None:
    """Erase files (--path) and strings (--text) from every revision on every
    branch, tag and deleted branch, and from the store's bytes; then verify it.

    History is rewritten: the commits from the first one affected get new ids
    (an old id still resolves, and `memrev show OLD` says where it went);
    commits left empty are dropped. A record (the reason, the counts, the old
    -> new ids; never the strings) is committed on refs/purges. On a terminal
    it asks first (--yes does not); --dry-run only reports. Exits 1 when the
    check afterwards still finds something.

    --verify --text S: only say where S is still found (exit 1 if anywhere).
    With --json: the report (the counts, "id_map" old -> new id, "found").
    Example: memrev purge --text "555-0100" --reason "user asked, ticket 42"
    """
    if text_from is not None:
        texts = texts + _strings_from(text_from)
    if verify:
        if not texts or paths or reason is not None or dry_run:
            raise click.UsageError("purge --verify takes --text STRING (repeatable) and no --path, --reason or --dry-run")
        _verify(ctx, texts, as_json)
        return
    if not paths and not texts:
        raise click.UsageError("purge needs --path GLOB or --text STRING (or both); nothing was purged")
    if reason is None:
        raise click.UsageError("purge needs --reason TEXT (who asked, why): it is kept in the purge record")
    why, what = reason, _what(paths, texts)
    ask = not (yes or dry_run) and sys.stdin.isatty() and sys.stdout.isatty()

    async def job(s: Store) -> PurgeReport | None:
        from ..maintenance import purge as purge_mod

        if ask:
            purge_mod.Predicate(paths, texts)  # what the store checks first: errors before the question
            purge_mod.check_reason(why)
            question = (f"Purge {what} from every revision of {printable(s.location, one_line=True)}? "
                        "History is rewritten; this cannot be undone.")
            if not click.confirm(question, default=False, err=True):
                return None
        return await s.purge(paths=list(paths), text=list(texts), reason=why, dry_run=dry_run,
                             progress=progress())

    report = run(ctx, job, need_branch=False, author=author)
    progress_done()
    if report is None:
        click.echo("nothing purged", err=True)
        ctx.exit(1)
    if as_json:
        echo_json(report.as_dict())
    else:
        for line in _report_lines(report, what):
            click.echo(line)
    if not report.dry_run and not report.verified:
        ctx.exit(1)
