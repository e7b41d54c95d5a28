"""The history commands: ``log`` (with its pickaxe, ``-S``/``-G``, and the
provenance filters), ``show``, ``diff``, ``history``, ``blame`` and ``why``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..errors import RevisionNotFound
from .app import main, read, run
from .files import print_file
from .options import json_option, when
from .render import (
    branch_labels,
    commit_graph,
    commit_json,
    echo_diff,
    echo_json,
    emit,
    full_log,
    json_text,
    printable,
    word_diff_lines,
)

if TYPE_CHECKING:
    from ..repo.purged import Rewritten
    from ..repo.repository import Commit
    from ..store.reads import Reader


@main.command(short_help="Commits, newest first (of PATH, or --all branches).")
@click.argument("path", required=False)
@click.option("--limit", "-n", type=click.IntRange(min=0), help="Show at most N commits.")
@click.option("--rev", default=None, help="Start from this revision instead of HEAD.")
@click.option("--all", "all_branches", is_flag=True, help="Commits of every branch, each once, with branch labels.")
@click.option("-S", "contains", default=None, help="Only commits where the number of occurrences of TEXT in a file changed.")
@click.option("-i", "--ignore-case", is_flag=True, help="-S ignores case (for -G, write (?i) in the REGEX).")
@click.option("-G", "matching", default=None, help="Only commits whose diff adds or removes a line matching REGEX.")
@click.option("--agent", default=None, help="Only commits made by this agent (provenance).")
@click.option("--tool", default=None, help="Only commits made through this tool (provenance).")
@click.option("--since", default=None, help="Only commits at or after this ISO date/time (UTC), today, yesterday, N days ago.")
@click.option("--until", default=None, help="Only commits at or before this ISO date/time (UTC), or as --since.")
@click.option("--oneline", is_flag=True, help="One line per commit.")
@click.option("--graph", is_flag=True, help="Draw branches and merges (implies --oneline).")
@json_option
@click.pass_context
def log(
    ctx: click.Context,
    path: str | None,
    limit: int | None,
    rev: str | None,
    all_branches: bool,
    contains: str | None,
    matching: str | None,
    agent: str | None,
    tool: str | None,
    since: str | None,
    until: str | None,
    ignore_case: bool,
    oneline: bool,
    graph: bool,
    as_json: bool,
) -> None:
    """Commits, newest first: of the whole store, or only those that changed PATH.

    With --all, the commits of every branch (each once), labelled with the
    branches whose head they are.
    Example: memrev log -S vegetarian -i /memory/working.md --agent chef
    """
    if all_branches and (path is not None or rev is not None):
        raise click.UsageError("log --all takes no PATH and no --rev: it starts from every branch")
    bounds = {"since": when(since), "until": when(until)}
    filters: dict[str, Any] = {"contains": contains, "matching": matching, "agent": agent, "tool": tool, **bounds}
    if ignore_case and contains is None:
        raise click.UsageError("-i (--ignore-case) goes with -S TEXT")

    def job(s: Reader) -> tuple[list[Commit], dict[str, list[str]] | None]:
        if not all_branches:
            return s.log(path, limit=limit, rev=rev, ignore_case=ignore_case, **filters), None
        return s.log_all(limit=limit, ignore_case=ignore_case, **filters), _heads(s.branches())

    commits, labels = read(ctx, job, need_branch=not all_branches)
    unfiltered = all(v is None for v in filters.values()) and limit != 0
    if not commits and path not in (None, "/") and unfiltered:  # filters may rightly find nothing
        raise click.ClickException(f"{path} has no history at {rev or 'HEAD'}")
    if as_json:
        # --all: each commit with the branches whose head it is, as the text output labels them
        emit(ctx, [json_text([commit_json(c) | ({} if labels is None else {"branches": labels.get(c.id, [])})
                              for c in commits])])
    elif graph:
        emit(ctx, commit_graph(commits, labels))
    elif oneline:
        emit(ctx, [f"{click.style(c.id[:10], fg='yellow')}{branch_labels(c, labels)} {c.time:%Y-%m-%d %H:%M:%S} "
                   f"{printable(c.message, one_line=True)}" for c in commits])
    else:
        emit(ctx, [line for c in commits for line in full_log(c, labels)])


def _heads(branches: dict[str, str]) -> dict[str, list[str]]:
    """Branch names by the commit they point at, for labels."""
    out: dict[str, list[str]] = {}
    for name, target in sorted(branches.items()):
        out.setdefault(target, []).append(name)
    return out


@main.command(short_help="A commit and its diff, or a file at a revision.")
@click.argument("spec", default="HEAD")
@json_option
@click.pass_context
def show(ctx: click.Context, spec: str, as_json: bool) -> None:
    """A commit and its diff (REV), or a file as of a revision (REV:PATH).

    With --json, a commit's document also names the revisions compared: "a"
    (its first parent; null for a root commit) and "b" (the commit).
    An old id a purge rewrote shows the commit it is now, after one line
    saying so (--json: a "rewritten" field); one it dropped exits 1.
    Example: memrev show HEAD~1:/memory/working.md
    """
    if ":" in spec:
        rev, path = spec.split(":", 1)
        print_file(ctx, path, rev or None, as_json)
        return

    def job(s: Reader) -> tuple[Rewritten | None, Commit | None, list[Any]]:
        rewritten = s.rewritten(spec)
        try:
            c = s.show(spec)
        except RevisionNotFound:
            if rewritten is None or rewritten.new is not None:
                raise
            return rewritten, None, []  # dropped by a purge: nothing of it is left
        if rewritten is not None and rewritten.new != c.id:
            rewritten = None  # SPEC names something else now (a branch, a commit of today)
        return rewritten, c, s.diff(c.parents[0] if c.parents else None, c.id)

    rewritten, c, changes = read(ctx, job)
    if c is None:
        assert rewritten is not None
        raise click.ClickException(f"commit {rewritten.old[:10]} was removed by purge {_purge_note(rewritten)}: "
                                   "every change it made was purged")
    if as_json:
        a = c.parents[0] if c.parents else None
        doc = commit_json(c) | {"a": a, "b": c.id, "changes": [x.to_json() for x in changes]}
        # only for an old id: the viewer's /api/commit/ID is this document, purge or not
        echo_json(doc if rewritten is None else doc | {"rewritten": _rewritten_json(rewritten)})
        return
    if rewritten is not None:
        if rewritten.dropped:
            click.echo(
                f"commit {rewritten.old[:10]} was dropped by purge {_purge_note(rewritten)}: every change it made was"
                f" purged; its parent is now {c.id[:10]}"
            )
        else:
            click.echo(f"commit {rewritten.old[:10]} was rewritten by purge {_purge_note(rewritten)}; it is now {c.id[:10]}")
    click.secho(f"commit {c.id[:10]}", fg="yellow")
    author, message = printable(c.author, one_line=True), printable(c.message)
    click.echo(f"Author: {author}\nDate:   {c.time:%Y-%m-%d %H:%M:%S} UTC\n\n    {message}\n")
    for x in changes:
        echo_diff(x.diff, None)


def _purge_note(r: Rewritten) -> str:
    """``<record file> (<time>: <reason>)``: which purge rewrote an id, when and why."""
    from datetime import datetime, timezone

    try:
        stamp = datetime.fromisoformat(r.time)
        when = f"{stamp.astimezone(timezone.utc) if stamp.tzinfo else stamp:%Y-%m-%d %H:%M:%S} UTC"
    except ValueError:
        when = r.time
    return printable(f"{r.record} ({when}: {r.reason})", one_line=True)


def _rewritten_json(r: Rewritten) -> dict[str, Any]:
    return {"old": r.old, "new": r.new, "record": r.record, "reason": r.reason, "time": r.time, "dropped": r.dropped}


def _diff_arguments(args: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``REV1 REV2 -- PATH...`` or revisions and paths mixed (a path starts with ``/``) into (revs, paths)."""
    revs, paths = list(args), []
    if "--" in revs:  # click keeps a literal "--" only when it follows other arguments
        i = revs.index("--")
        revs, paths = revs[:i], revs[i + 1 :]
    else:
        paths = [a for a in revs if a.startswith("/")]
        revs = [a for a in revs if not a.startswith("/")]
    if len(revs) > 2:
        raise click.UsageError("diff takes at most two revisions")
    return revs, paths


@main.command(short_help="Changes between two revisions, or PATH's last change.")
@click.argument("args", nargs=-1)
@click.option("--stat", is_flag=True, help="Only list changed paths with their status.")
@click.option("--word-diff", is_flag=True, help="Show changed words inline: [-old-]{+new+}.")
@json_option
@click.pass_context
def diff(ctx: click.Context, args: tuple[str, ...], stat: bool, word_diff: bool, as_json: bool) -> None:
    """Changes between two revisions (default HEAD~1 and HEAD), optionally only under PATHs.

    With one PATH and no revisions: the last change made to that path,
    wherever it is in the log (its newest version against the one before).
    With --json: {"a": id, "b": id, "changes": [...]}, the revisions compared
    ("a" is null when the change made the path in a root commit).
    Example: memrev diff /memory/working.md
    """
    revs, paths = _diff_arguments(args)

    def job(s: Reader) -> tuple[str | None, str, list[Any]]:
        if not revs and len(paths) == 1:
            a, b = s.last_change(paths[0])
        else:
            a, b = s.resolve(revs[0] if revs else "HEAD~1"), s.resolve(revs[1] if len(revs) > 1 else "HEAD")
        return a, b, s.diff(a, b, paths or None)

    a, b, changes = read(ctx, job)
    if as_json and stat:
        echo_json({"a": a, "b": b, "stat": [{"path": c.path, "status": c.status, "added": n[0], "removed": n[1]}
                                           for c in changes for n in [_stat_counts(c)]]})
    elif as_json:
        echo_json({"a": a, "b": b, "changes": [c.to_json() for c in changes]})
    elif stat:
        added = removed = 0
        width = max((len(printable(c.path, one_line=True)) for c in changes), default=0)
        for c in changes:
            if c.left_out:
                click.echo(f"{c.status[0].upper()} {printable(c.path, one_line=True):<{width}}  (too large to diff)")
                continue
            plus, minus = _line_counts(c.diff)
            added, removed = added + plus, removed + minus
            click.echo(f"{c.status[0].upper()} {printable(c.path, one_line=True):<{width}}  +{plus} -{minus}")
        if changes:
            files = f"{len(changes)} file{'s' if len(changes) != 1 else ''} changed"
            click.echo(f"{files}, {added} insertion{'s' if added != 1 else ''}(+), {removed} deletion{'s' if removed != 1 else ''}(-)")
    elif word_diff:
        for c in changes:
            if c.left_out:  # over the line diff's bound: the word diff's too
                echo_diff(c.diff, None)
                continue
            click.secho(f"--- a{c.path}\n+++ b{c.path}", bold=True)
            for line in word_diff_lines(c.old or "", c.new or ""):
                click.echo(line)
    else:
        for c in changes:
            echo_diff(c.diff, None)


def _stat_counts(c: Any) -> tuple[int | None, int | None]:
    """``--stat --json``'s counts: ``None`` for a file whose diff was left out (too large)."""
    return (None, None) if c.left_out else _line_counts(c.diff)


def _line_counts(diff: str) -> tuple[int, int]:
    """Lines a unified diff adds and removes (its ``---``/``+++`` header not counted)."""
    added = removed = 0
    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line.startswith("+"):
            added += 1
        elif in_hunk and line.startswith("-"):
            removed += 1
    return added, removed


@main.command(short_help="Every version of one path, with its size.")
@click.argument("path")
@click.option("--limit", "-n", type=click.IntRange(min=0), help="Show at most N versions.")
@json_option
@click.pass_context
def history(ctx: click.Context, path: str, limit: int | None, as_json: bool) -> None:
    """Every version of one path: revision, time, author, message, size.

    PATH may be a folder: then every version of each file under it, one line
    per file a commit changed, naming the file.

    Example: memrev history /memory/working.md
    """
    from ..core.paths import is_under, normalize

    def job(s: Reader) -> list[tuple[Commit, str | None, int | None]]:
        versions = s.history(path, limit=limit)
        norm = normalize(path)
        inside = {p for c, _ in versions for p in c.paths if p != norm and is_under(p, norm)}
        if not inside:  # a file: its own versions
            return [(c, None, size) for c, size in versions]
        # A folder has no size of its own: each file's versions, by the commits that changed it.
        sizes = {(c.id, p): size for p in inside for c, size in s.history(p)}
        return [(c, p, sizes.get((c.id, p))) for c, _ in versions for p in c.paths if p in inside]

    versions = read(ctx, job)
    if not versions and limit != 0:
        raise click.ClickException(f"{path} has no history at HEAD")
    if as_json:
        emit(ctx, [json_text([commit_json(c) | ({} if p is None else {"path": p}) | {"size": size}
                              for c, p, size in versions])])
        return
    lines = []
    for c, p, size in versions:
        what = "deleted" if size is None else f"{size} B"
        where = "" if p is None else f"{printable(p, one_line=True)}  "
        lines.append(
            f"{click.style(c.id[:10], fg='yellow')} {c.time:%Y-%m-%d %H:%M:%S} {printable(c.author, one_line=True):<12} "
            f"{what:>10}  {where}{printable(c.message, one_line=True)}"
        )
    emit(ctx, lines)


def _provenance_label(meta: dict[str, Any]) -> str:
    """``agent session t<turn> tool`` from a commit's provenance record ('' when it has none).

    The session is cut to 8 characters, as ids are: enough to tell conversations apart."""
    from .. import provenance

    record = provenance.of(meta)
    session = str(record.get("session", ""))[:8]
    turn = f"t{record['turn']}" if "turn" in record else ""
    parts = [str(record.get("agent", "")), session, turn, str(record.get("tool", ""))]
    return " ".join(p for p in parts if p)


@main.command(short_help="The commit that last changed each line of PATH.")
@click.argument("path")
@click.option("--rev", default=None, help="Blame the file as of this revision (default HEAD).")
@json_option
@click.pass_context
def blame(ctx: click.Context, path: str, rev: str | None, as_json: bool) -> None:
    """For each line of PATH, the commit that last changed it: id, agent, turn, tool, time, message.

    With --json, each commit (with its provenance) appears once under "commits";
    lines name their commit by id.
    Example: memrev blame /memory/working.md
    """
    from ..history import browse

    lines = run(ctx, lambda s: s.blame(path, rev=rev))
    if as_json:
        emit(ctx, [json_text(browse.blame_json(path, lines))])
        return
    out = []
    for b in lines:
        c = b.commit
        who = _provenance_label(c.meta) or c.author
        out.append(
            f"{click.style(c.id[:10], fg='yellow')} ({printable(who, one_line=True):<20} {c.time:%Y-%m-%d %H:%M} "
            f"{printable(c.message[:24], one_line=True):<24}) "
            f"{b.number:>4} {b.text}"
        )
    emit(ctx, out)


@main.command(short_help="Why a line is in a file: commit, provenance, turn.")
@click.argument("spec")
@click.option("--rev", default=None, help="Ask about the file as of this revision (default HEAD).")
@json_option
@click.pass_context
def why(ctx: click.Context, spec: str, rev: str | None, as_json: bool) -> None:
    """Why a line is in a file (PATH:LINE), or why the file last changed (PATH): the commit,
    its provenance, the diff hunk, and the event-log entries written in the same turn.

    Example: memrev why /memory/working.md:6
    """
    path, _, number = spec.rpartition(":")
    line = int(number) if path and number.isdigit() else None
    path = path if line is not None else spec
    from ..history import browse

    w = run(ctx, lambda s: s.why(path, line, rev=rev))
    if as_json:
        echo_json(browse.why_json(w))
        return
    c = w.commit
    if w.line is not None:
        click.echo(f"{w.path}:{w.line}: {w.text}")
    click.secho(f"commit {c.id[:10]}", fg="yellow")
    author, message = printable(c.author, one_line=True), printable(c.message)
    click.echo(f"Author: {author}\nDate:   {c.time:%Y-%m-%d %H:%M:%S} UTC\n\n    {message}\n")
    click.echo("Provenance:" if w.provenance else "Provenance: none recorded")
    for key, value in w.provenance.items():
        click.echo(f"    {printable(key + ':', one_line=True):<14}{printable(str(value), one_line=True)}")
    click.echo()
    echo_diff(w.hunk, None)
    if w.event_log is not None:
        where = f"commit {w.event_commit.id[:10]}" if w.event_commit else "no commit of it in this turn"
        click.echo(f"\nEvent log {w.event_log} ({where}), entries of the same turn (--json: as stored):")
        for entry in w.events:
            for said in browse.event_said(entry):
                click.echo(f"    {_clip(said.line())}")


_WHY_WIDTH = 100  # characters of one event line in ``why``'s text output


def _clip(text: str, width: int = _WHY_WIDTH) -> str:
    text = printable(text, one_line=True)
    return text if len(text) <= width else text[: width - 1] + "…"
