"""The ``memrev`` command: parses arguments, calls the async Python API, prints.

Every command takes the store from ``--store``, else ``$MEMREV_STORE``, else
the current folder, and writes to click's output stream, so it is testable
with ``click.testing.CliRunner`` and no terminal.

Start time matters (``memrev --help`` should answer in a blink): this module
imports only click and memrev's errors at the top. The store (and with it
asyncio, SQLite, the history modules) is imported when a command opens one,
the viewer only by ``serve``; AutoGen and ag2 never.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import click

from ..errors import ConcurrentUpdate, MemrevError, MergeConflict, NoStore, RevisionNotFound, TransientConflict

if TYPE_CHECKING:
    from ..repo.repository import Commit
    from ..store.store import Store

Job = Callable[["Store"], Awaitable[Any]]
# A merge, revert or restore computed against a head that moved before it
# could commit is computed again on the new head, as often as a commit retries.
_RECOMPUTE_ATTEMPTS = 8


def _open(location: str, **options: Any) -> Store:
    """A store handle; the store module is imported here, not at start (see the module docstring)."""
    from ..store.store import Store

    return Store(location, **options)


def _run(ctx: click.Context, job: Job, *, create: bool = False, need_branch: bool = True, author: str | None = None) -> Any:
    try:
        return _run_raw(ctx, job, create=create, need_branch=need_branch, author=author)
    except MergeConflict as e:
        for c in e.conflicts:
            click.echo(f"CONFLICT ({c.kind}): {c.path}", err=True)
        raise click.ClickException(str(e)) from None


def _no_store_hint(location: str) -> str:
    """Why there is no store, and what to do when the folder holds files (never adopted implicitly)."""
    try:
        holds_files = any(not name.startswith(".") for name in os.listdir(location))
    except OSError:
        holds_files = False
    if holds_files:
        return f"no memrev store at {location}; it holds files: run `memrev adopt {location}` to make them the first commit"
    return f"no memrev store at {location}"


def _run_raw(
    ctx: click.Context, job: Job, *, create: bool = False, need_branch: bool = True, author: str | None = None
) -> Any:
    """Run ``job`` on a store handle; memrev's errors (and the OS's, about files
    the user named: a missing folder, an unwritable export target) become one
    line on stderr and exit 1. Anything else (a ``KeyError``, a ``TypeError``)
    is a bug in memrev and keeps its traceback.

    ``create``: only commands that bring data in (``import``, ``import-dir``)
    may create the store. ``need_branch``: ``--branch`` must name an existing
    branch, unless the store has none yet (a typo never starts a new branch).
    ``author``: who the commits this command makes are by.
    """
    import asyncio

    options: dict[str, Any] = {"branch": ctx.obj["branch"], "create": create}
    if author is not None:
        options["author"] = author

    async def main() -> Any:
        store = _open(ctx.obj["store"], **options)
        try:
            if need_branch:
                await _check_branch(store)
            return await job(store)
        finally:
            store.close()

    try:
        return asyncio.run(main())
    except MergeConflict:
        raise
    except NoStore:
        raise click.ClickException(_printable(_no_store_hint(ctx.obj["store"]), one_line=True)) from None
    except (MemrevError, OSError) as e:
        raise click.ClickException(_printable(" ".join(str(e).split("\n")), one_line=True)) from None


# Control characters (C0 but tab and newline, DEL, C1): a terminal would obey them.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_OR_NEWLINE = re.compile("[\x00-\x1f\x7f-\x9f]")


def _printable(text: str, *, one_line: bool = False) -> str:
    """Text memrev did not write itself (messages, authors, revisions the user
    typed) as it can be shown on a terminal: control characters escaped
    (``\x1b``), never interpreted; ``one_line`` escapes newlines too."""
    pattern = _CONTROL_OR_NEWLINE if one_line else _CONTROL
    return pattern.sub(lambda m: repr(m.group())[1:-1], text)


async def _check_branch(store: Store) -> None:
    if await store.head() is not None:
        return
    branches = await store.branches()
    if branches:
        names = ", ".join(sorted(branches)[:10])
        raise RevisionNotFound(f"branch {store.branch_name!r} does not exist (branches: {names})")


async def _recomputing(step: Callable[[], Awaitable[Any]]) -> Any:
    """``step()`` again when the branch moved between computing and committing.

    Callers resolve revisions before the first attempt, so ``revert HEAD``
    still means the commit that was HEAD when the command started.
    """
    import asyncio

    for attempt in range(_RECOMPUTE_ATTEMPTS):
        try:
            return await step()
        except ConcurrentUpdate as e:
            if isinstance(e, TransientConflict) or attempt == _RECOMPUTE_ATTEMPTS - 1:
                raise  # a transient conflict was retried inside the commit already
            await asyncio.sleep(0.005 * 2**attempt)
    raise AssertionError("unreachable")


def _progress() -> Callable[[str, int], None] | None:
    """Counts for long gc/export runs, on one rewritten stderr line, only on a terminal."""
    if not sys.stderr.isatty():
        return None
    return lambda what, n: click.echo(f"\r{what}: {n:,}", err=True, nl=False)


def _progress_done() -> None:
    if sys.stderr.isatty():
        click.echo("\r\033[K", err=True, nl=False)


# ------------------------------------------------------------------ output: JSON, pager

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (JSON).")


def _json_text(doc: Any) -> str:
    """Every ``--json`` output: one document, indented by 2, keys in the order memrev builds them."""
    return json.dumps(doc, indent=2)


def _echo_json(doc: Any) -> None:
    click.echo(_json_text(doc))


def _pager_command(no_pager: bool, stdout_is_tty: bool, env: dict[str, str]) -> str | None:
    """The shell command to page long output through, or ``None`` to print it as it is.

    As git does: only when standard output is a terminal (never into a pipe
    or a file), never with ``--no-pager``; ``$MEMREV_PAGER``, else
    ``$PAGER``, else ``less`` (with ``LESS=FRX``: it quits at once when the
    output fits on one screen, keeps colours, leaves the text on screen).
    An empty value or ``cat`` means no pager.
    """
    if no_pager or not stdout_is_tty:
        return None
    command = env.get("MEMREV_PAGER", env.get("PAGER", "less"))
    return None if command.strip() in ("", "cat") else command


def _emit(ctx: click.Context, lines: Iterable[str]) -> None:
    """Print long output (log, history, blame) through the pager on a terminal, else as it is."""
    text = "".join(line + "\n" for line in lines)
    command = _pager_command(ctx.obj["no_pager"], sys.stdout.isatty(), dict(os.environ))
    if command is None:
        click.echo(text, nl=False)
        return
    _through_pager(command, text)


def _through_pager(command: str, text: str) -> None:
    import shutil
    import subprocess

    if command.split()[0] == "less" and shutil.which("less") is None:
        click.echo(text, nl=False)  # no less on this system: print, as if there were no pager
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    pager = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env)  # a shell command, as git's
    try:
        assert pager.stdin is not None
        pager.stdin.write(text.encode("utf-8", errors="replace"))
        pager.stdin.close()
    except BrokenPipeError:
        pass  # the reader quit the pager before the end
    while True:
        try:
            pager.wait()
            return
        except KeyboardInterrupt:
            continue  # Ctrl-C is the pager's to handle (less ignores it), as with git


def _commit_json(c: Commit) -> dict[str, Any]:
    return c.to_json()


def _graph(commits: list[Commit], labels: dict[str, list[str]] | None = None) -> list[str]:
    """One line per commit with a lane per line of history, in the manner of ``git log --graph``."""
    lanes: list[str] = []
    out: list[str] = []
    for c in commits:
        if c.id not in lanes:
            lanes.append(c.id)
        i = lanes.index(c.id)
        marks = " ".join("*" if j == i else "|" for j in range(len(lanes)))
        out.append(f"{marks}  {click.style(c.id[:10], fg='yellow')}{_labels(c, labels)} {_printable(c.message, one_line=True)}")
        parents = [p for p in c.parents if p not in lanes]
        lanes[i : i + 1] = parents
        if len(c.parents) > 1:
            out.append(" ".join("|" for _ in range(i + 1)) + "\\")
        while len(lanes) > 1 and lanes.count(lanes[-1]) > 1:
            lanes.pop()
    return out


def _labels(c: Commit, labels: dict[str, list[str]] | None) -> str:
    """`` (main, exp)``: the branches whose head ``c`` is, for ``log --all``; '' otherwise."""
    names = (labels or {}).get(c.id)
    return click.style(f" ({', '.join(names)})", fg="green") if names else ""


def _word_diff_lines(old: str, new: str) -> list[str]:
    """The changed hunks only (3 lines of context), words inline as ``[-old-]{+new+}``, as ``git diff --word-diff``."""
    from ..core.textdiff import word_diff_hunks

    marks = {"delete": ("[-", "-]", "red"), "insert": ("{+", "+}", "green")}
    out = []
    for header, segments in word_diff_hunks(old, new):
        parts = []
        for tag, text in segments:
            if tag == "equal":
                parts.append(text)
                continue
            start, end, colour = marks[tag]
            parts.append(click.style(start + text + end, fg=colour))
        out.append(click.style(header, fg="cyan"))
        out.extend("".join(parts).splitlines())
    return out


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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memrev")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"memrev {_version()}")
        ctx.exit()


@click.group(name="memrev", context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.option("--store", envvar="MEMREV_STORE", default=".", show_default=True,
              help="Store folder or URL (default: $MEMREV_STORE, else the current folder).")
@click.option("--branch", default="main", show_default=True, help="Branch that HEAD names.")
@click.option("--no-pager", is_flag=True, help="Never page long output (log, history, blame) on a terminal.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show memrev's version and exit.")
@click.pass_context
def main(ctx: click.Context, store: str, branch: str, no_pager: bool) -> None:
    """Inspect and undo the history of a memrev store.

    On a terminal, log, history and blame go through a pager ($MEMREV_PAGER,
    else $PAGER, else less -FRX), as git's do; --no-pager prints directly.

    The store is --store, else $MEMREV_STORE, else the current folder.

    Example: memrev --store ./journal-state log /memory/working.md
    """
    ctx.obj = {"store": store, "branch": branch, "no_pager": no_pager}
    if ctx.invoked_subcommand is None:  # bare ``memrev``: the help, as git prints its usage
        click.echo(ctx.get_help())
        ctx.exit(0)


_DAYS_AGO = re.compile(r"(\d+)[ .]days?[ .]ago")


def _when(value: str | None) -> datetime | None:
    """``--since``/``--until``: an ISO 8601 date or time (UTC unless it says otherwise),
    or, as git takes them, ``now``, ``today``, ``yesterday``, ``N days ago`` (UTC days)."""
    if value is None:
        return None
    words = value.strip().lower()
    now = datetime.now(timezone.utc)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if words == "now":
        return now
    if words == "today":
        return midnight
    if words == "yesterday":
        return midnight - timedelta(days=1)
    ago = _DAYS_AGO.fullmatch(words)
    if ago:
        return now - timedelta(days=int(ago.group(1)))
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 date or time (e.g. 2026-11-30 or 2026-11-30T14:00), "
                               "today, yesterday or N days ago") from None


def _days(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``gc --keep-days``: 0 or more (``inf`` keeps deleted branches for ever); NaN and negatives mean nothing."""
    if not value >= 0:  # NaN too
        raise click.BadParameter(f"{value!r} is not a number of days, 0 or more")
    return value


def _provenance_label(meta: dict[str, Any]) -> str:
    """``agent session t<turn> tool`` from a commit's provenance record ('' when it has none).

    The session is cut to 8 characters, as ids are: enough to tell conversations apart."""
    from .. import provenance

    record = provenance.of(meta)
    session = str(record.get("session", ""))[:8]
    turn = f"t{record['turn']}" if "turn" in record else ""
    parts = [str(record.get("agent", "")), session, turn, str(record.get("tool", ""))]
    return " ".join(p for p in parts if p)


def _default_author() -> str:
    """Who a commit made from the shell is by: ``$MEMREV_AUTHOR`` (click reads it), else the user's login name."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's uid without a passwd entry)
        return "memrev"


author_option = click.option(
    "--author", envvar="MEMREV_AUTHOR", default=_default_author,
    help="Author of the new commit (default: $MEMREV_AUTHOR, else your login name).",
)


def _full_log(c: Commit, labels: dict[str, list[str]] | None) -> list[str]:
    """One commit as ``git log`` shows it: header, indented message, then the changed paths after a blank line."""
    from .. import provenance

    stamp = c.time.strftime("%Y-%m-%d %H:%M:%S")
    out = [click.style(f"commit {c.id[:10]}", fg="yellow") + _labels(c, labels),
           f"Author: {_printable(c.author, one_line=True)}", f"Date:   {stamp} UTC"]
    if provenance.of(c.meta):
        record = " ".join(f"{k}={v}" for k, v in provenance.of(c.meta).items())
        out.append("Provenance: " + _printable(record, one_line=True))
    out += ["", *(f"    {line}" for line in _printable(c.message).splitlines() or [""])]
    if c.meta:
        out.append(f"    meta: {json.dumps(c.meta, sort_keys=True)}")
    if c.paths:  # like --name-only: flush left, so no path reads as part of the message
        out += ["", *(_printable(p, one_line=True) for p in c.paths)]
    return [*out, ""]


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
    bounds = {"since": _when(since), "until": _when(until)}
    filters: dict[str, Any] = {"contains": contains, "matching": matching, "agent": agent, "tool": tool, **bounds}
    if ignore_case and contains is None:
        raise click.UsageError("-i (--ignore-case) goes with -S TEXT")

    async def job(s: Store) -> tuple[list[Commit], dict[str, list[str]] | None]:
        if not all_branches:
            return await s.log(path, limit=limit, rev=rev, ignore_case=ignore_case, **filters), None
        return await s.log_all(limit=limit, ignore_case=ignore_case, **filters), _heads(await s.branches())

    commits, labels = _run(ctx, job, need_branch=not all_branches)
    unfiltered = all(v is None for v in filters.values()) and limit != 0
    if not commits and path not in (None, "/") and unfiltered:  # filters may rightly find nothing
        raise click.ClickException(f"{path} has no history at {rev or 'HEAD'}")
    if as_json:
        # --all: each commit with the branches whose head it is, as the text output labels them
        _emit(ctx, [_json_text([_commit_json(c) | ({} if labels is None else {"branches": labels.get(c.id, [])})
                                for c in commits])])
    elif graph:
        _emit(ctx, _graph(commits, labels))
    elif oneline:
        _emit(ctx, [f"{click.style(c.id[:10], fg='yellow')}{_labels(c, labels)} {c.time:%Y-%m-%d %H:%M:%S} "
                    f"{_printable(c.message, one_line=True)}" for c in commits])
    else:
        _emit(ctx, [line for c in commits for line in _full_log(c, labels)])


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
    Example: memrev show HEAD~1:/memory/working.md
    """
    if ":" in spec:
        rev, path = spec.split(":", 1)
        _cat(ctx, path, rev or None, as_json)
        return

    async def job(s: Store) -> tuple[Commit, list[Any]]:
        c = await s.show(spec)
        return c, await s.diff(c.parents[0] if c.parents else None, c.id)

    c, changes = _run(ctx, job)
    if as_json:
        a = c.parents[0] if c.parents else None
        _echo_json(_commit_json(c) | {"a": a, "b": c.id, "changes": [x.to_json() for x in changes]})
        return
    click.secho(f"commit {c.id[:10]}", fg="yellow")
    author, message = _printable(c.author, one_line=True), _printable(c.message)
    click.echo(f"Author: {author}\nDate:   {c.time:%Y-%m-%d %H:%M:%S} UTC\n\n    {message}\n")
    for x in changes:
        _echo_diff(x.diff, None)


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

    async def job(s: Store) -> tuple[str | None, str, list[Any]]:
        if not revs and len(paths) == 1:
            a, b = await s.last_change(paths[0])
        else:
            a, b = await s.resolve(revs[0] if revs else "HEAD~1"), await s.resolve(revs[1] if len(revs) > 1 else "HEAD")
        return a, b, await s.diff(a, b, paths or None)

    a, b, changes = _run(ctx, job)
    if as_json and stat:
        _echo_json({"a": a, "b": b, "stat": [{"path": c.path, "status": c.status, "added": n[0], "removed": n[1]}
                                            for c in changes for n in [_line_counts(c.diff)]]})
    elif as_json:
        _echo_json({"a": a, "b": b, "changes": [c.to_json() for c in changes]})
    elif stat:
        added = removed = 0
        width = max((len(_printable(c.path, one_line=True)) for c in changes), default=0)
        for c in changes:
            plus, minus = _line_counts(c.diff)
            added, removed = added + plus, removed + minus
            click.echo(f"{c.status[0].upper()} {_printable(c.path, one_line=True):<{width}}  +{plus} -{minus}")
        if changes:
            files = f"{len(changes)} file{'s' if len(changes) != 1 else ''} changed"
            click.echo(f"{files}, {added} insertion{'s' if added != 1 else ''}(+), {removed} deletion{'s' if removed != 1 else ''}(-)")
    elif word_diff:
        for c in changes:
            click.secho(f"--- a{c.path}\n+++ b{c.path}", bold=True)
            for line in _word_diff_lines(c.old or "", c.new or ""):
                click.echo(line)
    else:
        for c in changes:
            _echo_diff(c.diff, None)


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


def _cat(ctx: click.Context, path: str, rev: str | None, as_json: bool) -> None:
    text = _run(ctx, lambda s: s.read(path, rev=rev))
    if text is None:
        raise click.ClickException(f"{path} does not exist at {rev or 'HEAD'}")
    if as_json:
        _echo_json({"path": path, "rev": rev or "HEAD", "content": text})
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
    _cat(ctx, path, rev, as_json)


@main.command(name="ls", short_help="List a directory as of a revision.")
@click.argument("path", default="/")
@click.option("--rev", default=None, help="Revision (default HEAD).")
@json_option
@click.pass_context
def ls(ctx: click.Context, path: str, rev: str | None, as_json: bool) -> None:
    """List a directory as of a revision (a file: its path, as ls prints a file's name).

    Example: memrev ls /memory
    """
    async def job(s: Store) -> list[str]:
        names = await s.list(path, rev=rev)
        if not names and path != "/":
            if await s.read(path, rev=rev) is not None:
                return [path]  # a file
            if not await s.exists(path, rev=rev):
                raise click.ClickException(f"{path} does not exist at {rev or 'HEAD'}")
        return names

    names = _run(ctx, job)
    if as_json:
        _echo_json(names)
    elif names:
        click.echo("\n".join(names))


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

    async def job(s: Store) -> list[tuple[Commit, str | None, int | None]]:
        versions = await s.history(path, limit=limit)
        norm = normalize(path)
        inside = {p for c, _ in versions for p in c.paths if p != norm and is_under(p, norm)}
        if not inside:  # a file: its own versions
            return [(c, None, size) for c, size in versions]
        # A folder has no size of its own: each file's versions, by the commits that changed it.
        sizes = {(c.id, p): size for p in inside for c, size in await s.history(p)}
        return [(c, p, sizes.get((c.id, p))) for c, _ in versions for p in c.paths if p in inside]

    versions = _run(ctx, job)
    if not versions and limit != 0:
        raise click.ClickException(f"{path} has no history at HEAD")
    if as_json:
        _emit(ctx, [_json_text([_commit_json(c) | ({} if p is None else {"path": p}) | {"size": size}
                                for c, p, size in versions])])
        return
    lines = []
    for c, p, size in versions:
        what = "deleted" if size is None else f"{size} B"
        where = "" if p is None else f"{_printable(p, one_line=True)}  "
        lines.append(
            f"{click.style(c.id[:10], fg='yellow')} {c.time:%Y-%m-%d %H:%M:%S} {_printable(c.author, one_line=True):<12} "
            f"{what:>10}  {where}{_printable(c.message, one_line=True)}"
        )
    _emit(ctx, lines)


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

    lines = _run(ctx, lambda s: s.blame(path, rev=rev))
    if as_json:
        _emit(ctx, [_json_text(browse.blame_json(path, lines))])
        return
    out = []
    for b in lines:
        c = b.commit
        who = _provenance_label(c.meta) or c.author
        out.append(
            f"{click.style(c.id[:10], fg='yellow')} ({_printable(who, one_line=True):<20} {c.time:%Y-%m-%d %H:%M} "
            f"{_printable(c.message[:24], one_line=True):<24}) "
            f"{b.number:>4} {b.text}"
        )
    _emit(ctx, out)


def _why_json(w: Any) -> dict[str, Any]:
    return {
        "path": w.path,
        "line": w.line,
        "text": w.text,
        "commit": _commit_json(w.commit),
        "provenance": w.provenance,
        "hunk": w.hunk,
        "event_log": w.event_log,
        "event_commit": None if w.event_commit is None else w.event_commit.id,
        "events": w.events,
    }


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
    w = _run(ctx, lambda s: s.why(path, line, rev=rev))
    if as_json:
        _echo_json(_why_json(w))
        return
    c = w.commit
    if w.line is not None:
        click.echo(f"{w.path}:{w.line}: {w.text}")
    click.secho(f"commit {c.id[:10]}", fg="yellow")
    author, message = _printable(c.author, one_line=True), _printable(c.message)
    click.echo(f"Author: {author}\nDate:   {c.time:%Y-%m-%d %H:%M:%S} UTC\n\n    {message}\n")
    click.echo("Provenance:" if w.provenance else "Provenance: none recorded")
    for key, value in w.provenance.items():
        click.echo(f"    {_printable(key + ':', one_line=True):<14}{_printable(str(value), one_line=True)}")
    click.echo()
    _echo_diff(w.hunk, None)
    if w.event_log is not None:
        where = f"commit {w.event_commit.id[:10]}" if w.event_commit else "no commit of it in this turn"
        click.echo(f"\nEvent log {w.event_log} ({where}), entries of the same turn (--json: as stored):")
        for entry in w.events:
            for text in _event_text(entry):
                click.echo(f"    {_clip(text)}")


_WHY_WIDTH = 100  # characters of one event line in ``why``'s text output


def _clip(text: str, width: int = _WHY_WIDTH) -> str:
    text = _printable(text, one_line=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return " ".join(str(p.get("content")) for p in parts if isinstance(p, dict) and p.get("content") is not None)


def _event_text(entry: Any) -> list[str]:
    """An ag2 event-log entry as what a person reads: the user's message, the agent's
    reply, a tool call with its arguments, a tool's output (``[]`` for the aggregates
    that repeat those); anything else by its event type, or as stored."""
    try:
        doc = json.loads(entry) if isinstance(entry, str) else entry
    except ValueError:
        return [str(entry)]
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        return [str(entry)]
    kind, data = str(doc.get("type", "")).rpartition(".")[2], doc["data"]
    if kind == "ModelRequest":
        return [f"user: {_parts_text(data.get('parts'))}"]
    if kind == "ModelResponse":
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        return [] if content is None else [f"agent: {content}"]  # its tool calls follow as their own entries
    if kind == "ToolCallEvent":
        try:
            args = json.loads(data.get("arguments") or "{}")
        except ValueError:
            args = data.get("arguments")
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else repr(args)
        return [f"tool call: {data.get('name')}({shown})"]
    if kind == "ToolResultEvent":
        result = data.get("result")
        inner = result.get("data") if isinstance(result, dict) else None
        text = _parts_text(inner.get("parts")) if isinstance(inner, dict) else str(result)
        return [f"tool output ({data.get('name')}): {text}"]
    if kind in ("ToolCallsEvent", "ToolResultsEvent"):
        return []
    return [f"({kind or 'event'})"]


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
        return await _recomputing(lambda: s.restore(path, target))

    new = _run(ctx, job, author=author)
    if as_json:
        _echo_json({"path": path, "rev": rev, "commit": new})  # commit: null when nothing changed
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
        return await _recomputing(lambda: s.revert(target))

    new = _run(ctx, job, author=author)
    if as_json:
        _echo_json({"rev": rev, "commit": new})  # commit: null when there was nothing to undo
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

    result = _run(ctx, job, need_branch=bool(name) and not delete)
    if as_json and delete:
        _echo_json({"deleted": delete})
    elif as_json and name:
        _echo_json({"branch": name, "commit": result[name]})
    elif delete:
        click.echo(f"deleted branch {delete} (its commits stay until gc's safety window ends)")
    elif name:
        click.echo(f"created branch {name} at {from_rev}")
    elif as_json:
        _echo_json(result)
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
        target = _run(ctx, lambda s: s.tag(name, rev))
        if as_json:
            _echo_json({"tag": name, "commit": target})
        else:
            click.echo(f"tagged {target[:10]} as {name}")
        return
    result = _run(ctx, lambda s: s.tags(), need_branch=False)
    if as_json:
        _echo_json(result)
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
        result = _run_raw(
            ctx, lambda s: _recomputing(lambda: s.merge(source, strategy=strategy, resolutions=resolutions)), author=author
        )
    except MergeConflict as e:
        if as_json:
            _echo_json({"status": "conflict", "conflicts": [
                {"path": c.path, "kind": c.kind, "marked": c.marked} for c in e.conflicts]})
        else:
            click.secho(str(e), fg="red", err=True)
            for c in e.conflicts:
                click.echo(f"CONFLICT ({c.kind}): {c.path}")
                if c.marked:
                    click.echo(c.marked, nl=not c.marked.endswith("\n"))
        ctx.exit(1)
    if as_json:
        _echo_json({"status": result.status, "commit": result.commit, "paths": list(result.paths)})
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


@main.command(name="export", short_help="Write branches and tags to one bundle FILE.")
@click.argument("file")
@click.option("--branch", "branches", multiple=True, help="Export only this branch (repeatable; default all).")
@json_option
@click.pass_context
def export_(ctx: click.Context, file: str, branches: tuple[str, ...], as_json: bool) -> None:
    """Write branches, tags and every object they reach to one self-contained FILE.

    Example: memrev export backup.memrev
    """
    n = _run(ctx, lambda s: s.export_bundle(file, branches=list(branches) or None, progress=_progress()), need_branch=False)
    _progress_done()
    if as_json:
        _echo_json({"file": file, "objects": n})
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
    refs = _run(ctx, lambda s: s.import_bundle(file), create=True, need_branch=False)
    if as_json:
        _echo_json(dict(sorted(refs.items())))  # {ref: full id}
        return
    for ref, target in sorted(refs.items()):
        click.echo(f"{ref} -> {target[:10]}")


@main.command(short_help="Delete objects nothing reaches any more.")
@click.option("--keep-days", type=float, default=14.0, show_default=True, callback=_days,
              help="Safety window for deleted branches.")
@json_option
@click.pass_context
def gc(ctx: click.Context, keep_days: float, as_json: bool) -> None:
    """Delete objects that no branch, tag or recently deleted branch reaches.

    With --json: the counts removed, {"commits": n, "trees": n, ...}.
    Example: memrev gc --keep-days 7
    """
    removed = _run(ctx, lambda s: s.gc(keep_seconds=keep_days * 86400, progress=_progress()), need_branch=False)
    _progress_done()
    if as_json:
        _echo_json(removed)
    else:
        click.echo(", ".join(f"{n} {what}" for what, n in removed.items()) + " removed")


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
        store = _open(folder, branch=ctx.obj["branch"], worktree=worktree or None)
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
        raise click.ClickException(_printable(str(e), one_line=True)) from None
    finally:
        logger.removeFilter(quiet)
    if as_json:
        _echo_json({"folder": folder, "adopted": not existed and first is not None,
                    "already_a_store": existed, "commit": None if existed or first is None else _commit_json(first),
                    "skipped": [] if existed or first is None else first.meta.get("skipped", [])})
        return
    if existed:
        click.echo(f"{folder} already holds a memrev store; nothing adopted (import-dir adds files to it)")
    elif first is None:
        click.echo(f"nothing to adopt in {folder}; an empty store was created")
    else:
        click.echo(f"adopted {folder}: commit {first.id[:10]} ({len(first.paths)} files)")
        for s in first.meta.get("skipped", []):
            click.echo(f"skipped {_printable(s['path'], one_line=True)}: {s['reason']}")


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
    done = _run(ctx, lambda s: s.import_dir(folder), create=True)
    for path, why in done.skipped:
        click.echo(f"skipped {_printable(path, one_line=True)}: {why}", err=True)
    click.echo(f"imported {folder}: commit {done.commit[:10]}" if done.commit else f"nothing new in {folder}")


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

    problems = _run(ctx, job, need_branch=False)
    if as_json:
        _echo_json({"ok": not problems, "problems": problems})
    else:
        for p in problems:
            click.secho(p, fg="red")
        click.echo("ok" if not problems else f"{len(problems)} problem(s)")
    if problems:
        ctx.exit(1)


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
        raise click.ClickException(_printable(_no_store_hint(ctx.obj["store"]), one_line=True)) from None
    except (MemrevError, OSError) as e:  # TokenRequired, ServeError (a bad or busy port), a non-store location
        raise click.ClickException(_printable(" ".join(str(e).split("\n")), one_line=True)) from None

