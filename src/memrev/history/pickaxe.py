"""Questions answered from history: git's pickaxe (``-S``, ``-G``), provenance
filters, and ``why`` (blame joined with provenance and the turn's event log).

Free functions over a :class:`~memrev.repo.Repository` and a stream of
candidate commits. The caller picks the candidates (the per-path log when a
path is given, so only the commits that touched it are read); this module
decides which of them match.

A commit is compared with its first parent, as the per-path change index
is: a merge matches when it brought the text into the first-parent line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from .. import errors, provenance
from ..core import textdiff
from ..core.objects import APPEND
from ..core.paths import is_under
from ..repo.repository import Commit, Repository
from .blame import blame


@dataclass(frozen=True, slots=True)
class LogFilter:
    """What ``VersionedStore.log`` keeps; ``None`` fields do not filter."""

    contains: str | None = None  # -S: the number of occurrences of this text in a file changed
    matching: str | None = None  # -G: an added or removed line matches this regular expression
    agent: str | None = None  # meta["agent"] equals this
    tool: str | None = None  # meta["tool"] equals this
    since: datetime | None = None  # commit time >= since
    until: datetime | None = None  # commit time <= until
    ignore_case: bool = False  # -S -i: count ``contains`` ignoring case

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.contains, self.matching, self.agent, self.tool, self.since, self.until))


def select(
    repo: Repository, candidates: Iterable[Commit], under: str | None, f: LogFilter, limit: int | None = None
) -> list[Commit]:
    """The candidates that pass ``f``, newest first as given, at most ``limit``.

    ``under`` restricts the content search to that path (a file or a
    directory); ``None`` searches every path a commit changed.
    """
    if f.contains == "":
        raise errors.InvalidPattern("the text to search for (-S) must not be empty")
    by_meta = _meta_test(f)
    by_content = _content_test(f)
    if by_content is not None and f.matching is None and f.contains is not None and not f.ignore_case:
        by_path = _count_changed(repo, f.contains)
    elif by_content is not None and f.matching is None and f.contains is not None:
        by_path = _folded_count_changed(repo, f.contains)
    else:
        by_path = None
    out: list[Commit] = []
    for c in candidates:
        if limit is not None and len(out) >= limit:
            break
        if not by_meta(c):
            continue
        if by_content is None:
            out.append(c)
        elif by_path is not None:
            if any(by_path(c, p) for p in _paths(c, under)):
                out.append(c)
        elif any(by_content(*_versions(repo, c, p)) for p in _paths(c, under)):
            out.append(c)
    return out


def _count_changed(repo: Repository, text: str) -> Callable[[Commit, str], bool]:
    """``-S text`` for one path of one commit: whether the number of (non-overlapping,
    ``str.count``) occurrences differs between the first parent's version and ``c``'s.

    When ``c``'s version is an append piece on the parent's (``blobs``: same run, or a
    run started on it), only the bytes it adds and the ``len(text) - 1`` bytes before
    them are read and scanned: a new occurrence has to end in the added bytes. Scanning
    a log of n appends is then linear, not n rebuilds of ever longer versions.
    Counting in bytes equals counting in the decoded text for a needle without
    U+FFFD (a valid UTF-8 needle starts on a lead byte, where decoding restarts).
    """
    try:
        needle = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only the decoded text can be searched
        needle = b""
    if not needle or "\ufffd" in text:
        return lambda c, path: _changed_count(text, *_versions(repo, c, path))
    keep = len(needle) - 1
    # Two occurrences of a needle with no border (a proper prefix that is also a
    # suffix) never overlap, so one that starts in the parent's last bytes is new.
    bordered = any(needle[:k] == needle[-k:] for k in range(1, len(needle)))

    def changed(c: Commit, path: str) -> bool:
        tail = _appended_tail(repo, c, path, keep)
        if tail is not None:
            window, cut = tail  # the parent's last bytes (cut of them), then the added bytes
            if window.find(needle) == -1:
                return False
            if not bordered or window.find(needle, cut) != -1:
                return True
            # A bordered needle straddling the end of the parent's version may overlap the
            # parent's last counted occurrence: count the whole of both (rare).
        return _changed_count(text, *_versions(repo, c, path))

    return changed


def _folded_count_changed(repo: Repository, text: str) -> Callable[[Commit, str], bool]:
    """``-S text -i`` for one path of one commit: whether the number of occurrences of
    ``text.casefold()`` in the casefolded versions differs.

    When ``c``'s version appends to the parent's, an occurrence it adds has to end in the
    added text and start at most ``len(folded) - 1`` characters before it (casefolding
    never shortens a character), so if the casefolded added text and the few characters
    before it hold no occurrence, the count is the parent's: only the added bytes are
    read. Otherwise (and for any other version) both versions are compared whole.
    """
    folded = text.casefold()
    keep = 4 * len(folded)  # bytes: enough for len(folded) - 1 characters of up to 4 bytes each

    def changed(c: Commit, path: str) -> bool:
        tail = _appended_tail(repo, c, path, keep)
        if tail is not None:
            window, _ = tail
            # the leading bytes may cut a character: ignore-decoding drops only those
            if folded not in window.decode("utf-8", errors="ignore").casefold():
                return False
        old, new = _versions(repo, c, path)
        return old.casefold().count(folded) != new.casefold().count(folded)

    return changed


class Counts:
    """The number of occurrences of ``text`` (``str.count``) in versions of a path, by blob.

    A version that is an append piece on its base counts as its base plus the
    occurrences in the added bytes and the ``len(text) - 1`` bytes before them
    (exact for a needle with no border, whose occurrences never overlap), so
    counting every version of an append log reads each piece once. Other
    needles and other versions are counted in full, as the decoded text.
    """

    def __init__(self, repo: Repository, text: str) -> None:
        self.repo = repo
        self.text = text
        try:
            self.needle = text.encode("utf-8")
        except UnicodeEncodeError:
            self.needle = b""
        n = self.needle
        self.fast = bool(n) and "\ufffd" not in text and not any(n[:k] == n[-k:] for k in range(1, len(n)))
        self.memo: dict[bytes, int] = {}

    def at(self, commit: str | None, path: str) -> int:
        """The count in ``path`` at ``commit`` (hex id; 0 where it does not exist)."""
        entry = self.repo.entry_at(bytes.fromhex(commit), path) if commit is not None else None
        if entry is None:
            return 0
        if not self.fast:
            return self.repo.content(entry.oid).decode("utf-8", errors="replace").count(self.text)
        return self._blob(entry.oid)

    def _blob(self, oid: bytes) -> int:
        blobs, keep = self.repo.blobs, len(self.needle) - 1
        chain: list[tuple[bytes, int]] = []  # (blob, occurrences its piece adds), newest first
        while oid not in self.memo:
            row = blobs.row(oid)
            if row.kind != APPEND or row.base is None:
                self.memo[oid] = self.repo.content(oid).count(self.needle)
                break
            lo = max(0, row.start - keep)
            chain.append((oid, blobs.content_range(oid, lo, row.size).count(self.needle)))
            oid = row.base
        count = self.memo[oid]
        for piece, added in reversed(chain):
            count += added
            self.memo[piece] = count
        return count


def _changed_count(text: str, old: str, new: str) -> bool:
    return old.count(text) != new.count(text)


def _appended_tail(repo: Repository, c: Commit, path: str, keep: int) -> tuple[bytes, int] | None:
    """When ``path`` in ``c`` is its first parent's version plus appended bytes: the
    last ``keep`` bytes (or fewer) of the parent's version followed by those added
    bytes, and how many of them came from the parent. ``None`` otherwise."""
    if not c.parents:
        return None
    old = repo.entry_at(bytes.fromhex(c.parents[0]), path)
    new = repo.entry_at(bytes.fromhex(c.id), path)
    if old is None or new is None or old.oid == new.oid:
        return None
    try:
        row = repo.blobs.row(new.oid)
    except errors.IntegrityError:
        return None  # not a blob (a tree, a link): the general path reports it as before
    if row.kind != APPEND or row.base != old.oid:
        return None
    lo = max(0, row.start - keep)
    return repo.content_range(new.oid, lo, row.size), row.start - lo


def _meta_test(f: LogFilter) -> Callable[[Commit], bool]:
    since, until = _aware(f.since), _aware(f.until)

    def test(c: Commit) -> bool:
        if f.agent is not None and c.meta.get("agent") != f.agent:
            return False
        if f.tool is not None and c.meta.get("tool") != f.tool:
            return False
        if since is not None and c.time < since:
            return False
        return until is None or c.time <= until

    return test


def _aware(t: datetime | None) -> datetime | None:
    """Commit times are UTC; a naive bound is read as UTC too."""
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=timezone.utc)


def _content_test(f: LogFilter) -> Callable[[str, str], bool] | None:
    tests: list[Callable[[str, str], bool]] = []
    if f.contains is not None:
        text = f.contains
        if f.ignore_case:
            folded = text.casefold()
            tests.append(lambda old, new: old.casefold().count(folded) != new.casefold().count(folded))
        else:
            tests.append(lambda old, new: old.count(text) != new.count(text))
    if f.matching is not None:
        pattern = compile_pattern(f.matching)
        tests.append(lambda old, new: any(pattern.search(line) for line in changed_lines(old, new)))
    if not tests:
        return None
    # Both -S and -G given: a file must satisfy both (git ANDs them per file too).
    return lambda old, new: all(t(old, new) for t in tests)


def compile_pattern(regex: str) -> Any:
    """A user's ``-G`` pattern, compiled by RE2: linear time, so ``(a+)+$`` cannot freeze the process.

    RE2 has no backreferences or lookaround; such a pattern is an
    ``InvalidPattern`` naming why, not a search that may never end.
    """
    import re2  # type: ignore[import-untyped]  # google-re2 ships no stubs

    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(regex, options)
    except re2.error as e:
        why = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise errors.InvalidPattern(
            f"not a supported regular expression {regex!r}: {why} (memrev uses RE2: no backreferences or lookaround)"
        ) from None


def changed_lines(old: str, new: str) -> list[str]:
    """The lines a diff from ``old`` to ``new`` removes or adds (git ``-G`` looks at these)."""
    a, b = old.splitlines(), new.splitlines()
    out: list[str] = []
    for tag, i1, i2, j1, j2 in textdiff.opcodes(a, b):
        if tag != "equal":
            out.extend(a[i1:i2])
            out.extend(b[j1:j2])
    return out


def _paths(c: Commit, under: str | None) -> list[str]:
    return [p for p in c.paths if under is None or is_under(p, under)]


def _versions(repo: Repository, c: Commit, path: str) -> tuple[str, str]:
    """``path`` as text in the first parent and in ``c`` (``""`` where it does not exist)."""
    parent = bytes.fromhex(c.parents[0]) if c.parents else None
    return _text(repo, parent, path), _text(repo, bytes.fromhex(c.id), path)


def _text(repo: Repository, commit: bytes | None, path: str) -> str:
    entry = repo.entry_at(commit, path) if commit is not None else None
    return "" if entry is None else repo.content(entry.oid).decode("utf-8", errors="replace")


# ================================================================ why


# Where a session's event log lives: ag2's EventLogWriter layout (``/log/<stream>.jsonl``).
EVENT_LOG = "/log/{session}.jsonl"


@dataclass(frozen=True, slots=True)
class Why:
    """Why a line (or a file's last change) is there: the commit, who made it, and the turn around it."""

    path: str
    line: int | None  # 1-based, at the revision asked about; None: the file's last change
    text: str | None  # that line's text
    commit: Commit  # the commit that introduced the line (blame) or last changed the file
    provenance: dict[str, Any]  # the commit's provenance record (documented keys only)
    hunk: str  # the diff hunk(s) of ``path`` in that commit holding the line (the whole diff for a file)
    event_log: str | None  # the session's event log path, when the commit names a session and turn
    event_commit: Commit | None  # the commit of that log written in the same turn
    events: list[str]  # the event-log lines that commit appended


def why(
    repo: Repository, path: str, start: bytes, branch: str, line: int | None = None, *, event_log: str = EVENT_LOG
) -> Why:
    """Explain ``path`` (a file) at commit ``start``: line ``line``, or the file's last change.

    Reads only the versions of ``path`` (blame, per-path log) and of the
    session's event log.
    """
    seq = repo.path_start(path, start, branch)
    text = None
    if line is None:
        commit = repo.path_log(path, seq, 1)[0]
    else:
        lines = blame(repo, path, seq)
        if not 1 <= line <= len(lines):
            raise errors.InvalidPath(f"{path} has {len(lines)} line(s); there is no line {line}")
        commit, text = lines[line - 1].commit, lines[line - 1].text
    log_path, event_commit, events = _turn_events(repo, commit, start, branch, event_log)
    return Why(
        path=path,
        line=line,
        text=text,
        commit=commit,
        provenance=provenance.of(commit.meta),
        hunk=_hunk(repo, commit, path, text),
        event_log=log_path,
        event_commit=event_commit,
        events=events,
    )


def _hunk(repo: Repository, commit: Commit, path: str, text: str | None) -> str:
    parent = bytes.fromhex(commit.parents[0]) if commit.parents else None
    changes = [c for c in repo.diff(parent, bytes.fromhex(commit.id), path) if c.path == path]
    if not changes:
        return ""
    diff = changes[0].diff
    if text is None:
        return diff
    head, hunks = _split_hunks(diff)
    chosen = [h for h in hunks if f"\n+{text}\n" in "\n" + h] or hunks
    return head + "".join(chosen)


def _split_hunks(diff: str) -> tuple[str, list[str]]:
    """The ``---``/``+++`` header and the ``@@`` hunks of a unified diff."""
    head: list[str] = []
    hunks: list[list[str]] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("@@"):
            hunks.append([line])
        elif hunks:
            hunks[-1].append(line)
        else:
            head.append(line)
    return "".join(head), ["".join(h) for h in hunks]


def _turn_events(
    repo: Repository, commit: Commit, start: bytes, branch: str, event_log: str
) -> tuple[str | None, Commit | None, list[str]]:
    """The session's event-log commit made in the same turn as ``commit``, and the lines it appended."""
    session, turn = commit.meta.get("session"), commit.meta.get("turn")
    if not isinstance(session, str) or turn is None:
        return None, None, []
    log_path = event_log.format(session=session)
    same_turn = None
    for c in repo.path_log(log_path, repo.path_start(log_path, start, branch)):
        if c.meta.get("session") == session and c.meta.get("turn") == turn:
            same_turn = c
            break
    if same_turn is None:
        return log_path, None, []
    old, new = _versions(repo, same_turn, log_path)
    return log_path, same_turn, added_lines(old, new)


def added_lines(old: str, new: str) -> list[str]:
    """The lines a diff from ``old`` to ``new`` adds."""
    a, b = old.splitlines(), new.splitlines()
    return [line for tag, _i1, _i2, j1, j2 in textdiff.opcodes(a, b) if tag != "equal" for line in b[j1:j2]]
