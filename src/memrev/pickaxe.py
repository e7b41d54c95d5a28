"""Searching history: git's pickaxe (``-S``, ``-G``) and provenance filters.

Free functions over a :class:`~memrev.repo.Repository` and a stream of
candidate commits. The caller picks the candidates (the per-path log when a
path is given, so only the commits that touched it are read); this module
decides which of them match.

A commit is compared with its first parent, as the per-path change index
is: a merge matches when it brought the text into the first-parent line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from . import errors
from .core import textdiff
from .core.paths import is_under
from .repo import Commit, Repository


@dataclass(frozen=True, slots=True)
class LogFilter:
    """What ``VersionedStore.log`` keeps; ``None`` fields do not filter."""

    contains: str | None = None  # -S: the number of occurrences of this text in a file changed
    matching: str | None = None  # -G: an added or removed line matches this regular expression
    agent: str | None = None  # meta["agent"] equals this
    tool: str | None = None  # meta["tool"] equals this
    since: datetime | None = None  # commit time >= since
    until: datetime | None = None  # commit time <= until

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
    out: list[Commit] = []
    for c in candidates:
        if limit is not None and len(out) >= limit:
            break
        if not by_meta(c):
            continue
        if by_content is None or any(by_content(*_versions(repo, c, p)) for p in _paths(c, under)):
            out.append(c)
    return out


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
        tests.append(lambda old, new: old.count(text) != new.count(text))
    if f.matching is not None:
        pattern = compile_pattern(f.matching)
        tests.append(lambda old, new: any(pattern.search(line) for line in changed_lines(old, new)))
    if not tests:
        return None
    # Both -S and -G given: a file must satisfy both (git ANDs them per file too).
    return lambda old, new: all(t(old, new) for t in tests)


def compile_pattern(regex: str) -> re.Pattern[str]:
    try:
        return re.compile(regex)
    except re.error as e:
        raise errors.InvalidPattern(f"not a valid regular expression {regex!r}: {e}") from None


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
