"""Read-only history queries for browsing a store a page at a time.

Free functions over a :class:`~memrev.repo.Repository`, exposed through
``VersionedStore.log_page`` and ``VersionedStore.find_text``; the web viewer
and the CLI render them. Nothing here writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import errors, provenance
from ..core import textdiff
from ..core.paths import is_under
from ..repo.repository import Commit, Repository
from . import pickaxe

# A filtered page (by author, by a provenance field, by a directory) stops
# after reading this many commits even if it is not full, and hands back a
# cursor: a filter that matches nothing never walks a 100k-commit store in
# one request.
SCAN_BUDGET = 2_000

WHOLE, PATH = "c", "p"


@dataclass(frozen=True, slots=True)
class Page:
    """At most ``limit`` commits, newest first, and the cursor of the next page (``None``: no more)."""

    commits: list[Commit]
    cursor: str | None


def encode_cursor(kind: str, frontier: list) -> str | None:
    if not frontier:
        return None
    return kind + ":" + ",".join(x.hex() if isinstance(x, bytes) else str(x) for x in frontier)


def decode_cursor(cursor: str, kind: str) -> list:
    """The frontier a cursor names; a cursor of another kind or malformed is ``InvalidCursor``."""
    prefix, _, body = cursor.partition(":")
    try:
        if prefix != kind or not body:
            raise ValueError
        if kind == WHOLE:
            ids = [bytes.fromhex(x) for x in body.split(",")]
            if any(len(x) != 20 for x in ids):
                raise ValueError
            return ids
        return [int(x) for x in body.split(",")]
    except ValueError:
        raise errors.InvalidCursor(f"not a log cursor for this query: {cursor[:80]!r}") from None


def log_page(
    repo: Repository,
    frontier: list,
    *,
    path: str | None,
    limit: int,
    keep: Callable[[Commit], bool] | None = None,
) -> Page:
    """One page of the log from ``frontier`` (commit ids; per-path walk: commit numbers).

    With ``path`` (a file) only the commits that changed it are read, through
    the per-path index. ``keep`` filters; it is applied while walking, at most
    ``SCAN_BUDGET`` commits per page.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    repo.fresh()  # a cursor names commits by id: one a purge removed is not read from a cache
    kind = PATH if path is not None else WHOLE
    out: list[Commit] = []
    scanned = 0
    while frontier and len(out) < limit and scanned < SCAN_BUDGET:
        want = limit - len(out) if keep is None else min(limit, SCAN_BUDGET - scanned)
        if path is None:
            batch, frontier = repo.log_page(frontier, want)
        else:
            batch, frontier = repo.path_log_page(path, frontier, want)
        scanned += len(batch)
        for i, c in enumerate(batch):
            if keep is None or keep(c):
                out.append(c)
            if len(out) == limit:  # the rest of the batch is read again on the next page
                frontier = _resume(repo, batch[i + 1 :], frontier, kind)
                break
    return Page(out, encode_cursor(kind, frontier))


def _resume(repo: Repository, unread: list[Commit], frontier: list, kind: str) -> list:
    if not unread:
        return frontier
    oids = [bytes.fromhex(c.id) for c in unread]
    # A path walk's frontier holds commit numbers, the others commit ids.
    firsts: list = [repo.commit_data(oid)[0] for oid in oids] if kind == PATH else oids
    return sorted(set(firsts) | set(frontier), key=_order(repo, kind), reverse=True)


def _order(repo: Repository, kind: str) -> Callable:
    return (lambda x: x) if kind == PATH else (lambda oid: repo.commit_data(oid)[0])


def under(prefix: str) -> Callable[[Commit], bool]:
    """A ``keep`` filter: commits that changed something under directory ``prefix``."""
    return lambda c: any(is_under(p, prefix) for p in c.paths)


def blame_json(path: str, lines: list) -> dict:
    """The shape of ``memrev blame --json``: each commit once (with its provenance), lines by commit id."""
    commits = {b.commit.id: b.commit.to_json() | {"provenance": provenance.of(b.commit.meta)} for b in lines}
    return {"path": path, "commits": commits, "lines": [{"line": b.number, "text": b.text, "commit": b.commit.id} for b in lines]}


@dataclass(frozen=True, slots=True)
class TextChange:
    """A commit where the number of occurrences of a text in a path changed (git's pickaxe, ``-S``)."""

    commit: Commit
    before: int
    after: int

    @property
    def kind(self) -> str:
        if self.before == 0:
            return "appeared"
        return "disappeared" if self.after == 0 else "count changed"


def find_text(repo: Repository, path: str, text: str, start_seq: int | None) -> list[TextChange]:
    """Oldest first: the commits where the count of ``text`` in ``path`` changed, with both counts.

    The commits are git's pickaxe (``pickaxe.select``, ``-S``: each commit
    compared with its first parent, reading only the commits that changed
    ``path``); this adds the counts before and after, so a page can say
    "appeared" or "disappeared".
    """
    if not text:
        raise errors.InvalidPattern("the text to find must not be empty")
    hits = pickaxe.select(repo, repo.path_log(path, start_seq), path, pickaxe.LogFilter(contains=text))
    counts = pickaxe.Counts(repo, text)  # an append log's pieces are each read once, not rebuilt per version
    out = []
    for c in reversed(hits):
        before = counts.at(c.parents[0] if c.parents else None, path)
        out.append(TextChange(c, before, counts.at(c.id, path)))
    return out


def history_filter(repo: Repository, text: str, ignore_case: bool = False) -> Callable[[Commit], bool]:
    """A ``keep`` filter for ``log_page``: the pickaxe (``-S text``, ``-i``) over every path a
    commit changed, so a page of "in history" search reads at most ``SCAN_BUDGET`` commits."""
    if not text:
        raise errors.InvalidPattern("the text to find must not be empty")
    wanted = pickaxe.LogFilter(contains=text, ignore_case=ignore_case)
    return lambda c: bool(pickaxe.select(repo, [c], None, wanted))


def why_json(w: pickaxe.Why) -> dict[str, Any]:
    """The shape of ``memrev why --json`` (and the viewer's ``/api/why``): the events as stored."""
    return {
        "path": w.path,
        "line": w.line,
        "text": w.text,
        "commit": w.commit.to_json(),
        "provenance": w.provenance,
        "hunk": w.hunk,
        "event_log": w.event_log,
        "event_commit": None if w.event_commit is None else w.event_commit.id,
        "events": w.events,
    }


# ------------------------------------------------------------------ event logs as transcripts

EVENT_TEXT = 20_000  # characters of one event a reader shows; the rest is cut (the stored line stays whole)


@dataclass(frozen=True, slots=True)
class Said:
    """One readable part of an event-log entry: who (``user``, ``agent``, ``tool call``,
    ``tool output``, ``event``: another event type, ``raw``: not an ag2 event) and the text."""

    role: str
    text: str
    tool: str | None = None  # the tool whose output this is

    def line(self) -> str:
        """As ``memrev why`` prints it: ``user: ...``, ``tool output (name): ...``."""
        if self.role in ("event", "raw"):
            return f"({self.text})" if self.role == "event" else self.text
        return f"{self.role}{f' ({self.tool})' if self.tool is not None else ''}: {self.text}"


def _clip(text: str, width: int = EVENT_TEXT) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return " ".join(str(p.get("content")) for p in parts if isinstance(p, dict) and p.get("content") is not None)


def event_said(entry: Any) -> list[Said]:
    """An ag2 event-log entry (one JSON line of ``/log/<stream>.jsonl``) as what a person reads:
    the user's message, the agent's reply, a tool call with its arguments, a tool's output
    (``[]`` for the aggregates that repeat those); any other event by its type; a line that is
    not an ag2 event as it is. The event types are ag2's declared ones, read by name."""
    if isinstance(entry, str) and len(entry) > 4 * EVENT_TEXT * 10:  # not parsed whole: shown cut
        return [Said("raw", _clip(entry))]
    try:
        doc = json.loads(entry) if isinstance(entry, str) else entry
    except (ValueError, RecursionError):
        return [Said("raw", _clip(str(entry)))]
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        return [Said("raw", _clip(str(entry)))]
    kind, data = str(doc.get("type", "")).rpartition(".")[2], doc["data"]
    if kind == "ModelRequest":
        return [Said("user", _clip(_parts_text(data.get("parts"))))]
    if kind == "ModelResponse":
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        return [] if content is None else [Said("agent", _clip(str(content)))]  # its tool calls follow
    if kind == "ToolCallEvent":
        try:
            args = json.loads(data.get("arguments") or "{}")
        except (ValueError, TypeError, RecursionError):
            args = data.get("arguments")
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else repr(args)
        return [Said("tool call", _clip(f"{data.get('name')}({shown})"))]
    if kind == "ToolResultEvent":
        result = data.get("result")
        inner = result.get("data") if isinstance(result, dict) else None
        text = _parts_text(inner.get("parts")) if isinstance(inner, dict) else str(result)
        return [Said("tool output", _clip(text), str(data.get("name")))]
    if kind in ("ToolCallsEvent", "ToolResultsEvent"):
        return []
    return [Said("event", kind or "event")]


def appended_lines(old: str | None, new: str | None) -> list[str]:
    """The lines one version of an event log added to the one before: the tail when it grew
    by appending (EventLogWriter rewrites the whole, growing log), else the diff's added lines."""
    old, new = old or "", new or ""
    if new.startswith(old) and (not old or old.endswith("\n") or new[len(old) : len(old) + 1] == "\n"):
        return [line for line in new[len(old) :].splitlines() if line]
    if textdiff.too_large_to_diff(old, new) is not None:  # past the diff bound: the lines not in the old version
        before = set(old.splitlines())
        return [line for line in new.splitlines() if line not in before]
    return pickaxe.added_lines(old, new)
