"""How the CLI prints: text made safe for a terminal, ``--json`` documents,
the pager, progress counts, commits (``log``'s formats and ``--graph``) and diffs.

Nothing here opens a store; what it imports at the top is as cheap as the
rest of the CLI's start (``memrev.cli``'s docstring).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..repo.repository import Commit


# Control characters (C0 but tab and newline, DEL, C1): a terminal would obey them.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_OR_NEWLINE = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str, *, one_line: bool = False) -> str:
    """Text memrev did not write itself (messages, authors, revisions the user
    typed) as it can be shown on a terminal: control characters escaped
    (``\x1b``), never interpreted; ``one_line`` escapes newlines too."""
    pattern = _CONTROL_OR_NEWLINE if one_line else _CONTROL
    return pattern.sub(lambda m: repr(m.group())[1:-1], text)


def progress() -> Callable[[str, int], None] | None:
    """Counts for long gc/export runs, on one rewritten stderr line, only on a terminal."""
    if not sys.stderr.isatty():
        return None
    return lambda what, n: click.echo(f"\r{what}: {n:,}", err=True, nl=False)


def progress_done() -> None:
    if sys.stderr.isatty():
        click.echo("\r\033[K", err=True, nl=False)


def json_text(doc: Any) -> str:
    """Every ``--json`` output: one document, indented by 2, keys in the order memrev builds them."""
    return json.dumps(doc, indent=2)


def echo_json(doc: Any) -> None:
    click.echo(json_text(doc))


def pager_command(no_pager: bool, stdout_is_tty: bool, env: dict[str, str]) -> str | None:
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


def emit(ctx: click.Context, lines: Iterable[str]) -> None:
    """Print long output (log, history, blame) through the pager on a terminal, else as it is."""
    text = "".join(line + "\n" for line in lines)
    command = pager_command(ctx.obj["no_pager"], sys.stdout.isatty(), dict(os.environ))
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


def commit_json(c: Commit) -> dict[str, Any]:
    return c.to_json()


def commit_graph(commits: list[Commit], labels: dict[str, list[str]] | None = None) -> list[str]:
    """One line per commit with a lane per line of history, in the manner of ``git log --graph``."""
    lanes: list[str] = []
    out: list[str] = []
    for c in commits:
        if c.id not in lanes:
            lanes.append(c.id)
        i = lanes.index(c.id)
        marks = " ".join("*" if j == i else "|" for j in range(len(lanes)))
        label = branch_labels(c, labels)
        out.append(f"{marks}  {click.style(c.id[:10], fg='yellow')}{label} {printable(c.message, one_line=True)}")
        parents = [p for p in c.parents if p not in lanes]
        lanes[i : i + 1] = parents
        if len(c.parents) > 1:
            out.append(" ".join("|" for _ in range(i + 1)) + "\\")
        while len(lanes) > 1 and lanes.count(lanes[-1]) > 1:
            lanes.pop()
    return out


def branch_labels(c: Commit, labels: dict[str, list[str]] | None) -> str:
    """`` (main, exp)``: the branches whose head ``c`` is, for ``log --all``; '' otherwise."""
    names = (labels or {}).get(c.id)
    return click.style(f" ({', '.join(names)})", fg="green") if names else ""


def full_log(c: Commit, labels: dict[str, list[str]] | None) -> list[str]:
    """One commit as ``git log`` shows it: header, indented message, then the changed paths after a blank line."""
    from .. import provenance

    stamp = c.time.strftime("%Y-%m-%d %H:%M:%S")
    out = [click.style(f"commit {c.id[:10]}", fg="yellow") + branch_labels(c, labels),
           f"Author: {printable(c.author, one_line=True)}", f"Date:   {stamp} UTC"]
    if provenance.of(c.meta):
        record = " ".join(f"{k}={v}" for k, v in provenance.of(c.meta).items())
        out.append("Provenance: " + printable(record, one_line=True))
    out += ["", *(f"    {line}" for line in printable(c.message).splitlines() or [""])]
    if c.meta:
        out.append(f"    meta: {json.dumps(c.meta, sort_keys=True)}")
    if c.paths:  # like --name-only: flush left, so no path reads as part of the message
        out += ["", *(printable(p, one_line=True) for p in c.paths)]
    return [*out, ""]


def word_diff_lines(old: str, new: str) -> list[str]:
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


def echo_diff(text: str, color: bool | None) -> None:
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
