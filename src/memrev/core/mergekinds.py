"""Declared kinds of content, by path pattern: how a merge treats a file.

A merge never decides from what bytes look like. Every path is ``text``
(line-based diff3) unless a pattern declares another kind for it:

- ``append-log``: a log only ever appended to. Lines added on both sides
  are all kept (base, then ours, then theirs); a log created on both sides
  counts as appended to an empty one.
- ``collection``: a folder of numbered files that are only ever added
  (``<digits><ext>``). Two branches adding the same number is not a
  conflict: the merged side's file is renumbered past every number in use.
- ``counter``: a file holding one non-negative integer that only counts up;
  both sides counted, so the merge keeps the larger.

Patterns are absolute paths where ``*`` matches within one segment, ``**``
any number of whole segments, ``?`` one character and ``[...]`` a character
class. A table is looked up in order; the first pattern that matches wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidMergeKind

TEXT = "text"
APPEND_LOG = "append-log"
COLLECTION = "collection"
COUNTER = "counter"
KINDS = (TEXT, APPEND_LOG, COLLECTION, COUNTER)

# memrev's own layouts, declared by memrev whatever modules a process imported:
# AutoGen memory items (``<prefix>/<name>/items/<12 digits>.json``, written once
# each, see memrev.autogen) and the ``last-id`` counter beside them.
MEMREV_KINDS: tuple[tuple[str, str], ...] = (
    ("/**/items/" + "[0-9]" * 12 + ".json", COLLECTION),
    ("/**/last-id", COUNTER),
)

# The store's default table: the logs ag2's ``EventLogWriter`` keeps
# (``/log/<stream>.jsonl``, compaction's ``/log/<sid>.dropped-<n>.jsonl``).
# A declaration on the store overrides it.
STORE_DEFAULT_KINDS: tuple[tuple[str, str], ...] = (("/log/*.jsonl", APPEND_LOG),)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression of a path pattern; a malformed one is ``InvalidMergeKind``."""
    if not isinstance(pattern, str) or not pattern.startswith("/") or pattern == "/":
        raise InvalidMergeKind(f"a kind pattern is an absolute path pattern like '/notes/*.log', not {pattern!r}")
    parts = []
    for segment in pattern[1:].split("/"):
        if segment == "**":
            parts.append("(?:/[^/]+)*")
        elif not segment or "**" in segment or any(c in segment for c in "\x00\n\r"):
            raise InvalidMergeKind(f"bad kind pattern {pattern!r}: empty segment or '**' inside a name")
        else:
            parts.append("/" + _segment_regex(segment, pattern))
    try:
        return re.compile("".join(parts))
    except re.error as e:  # a character class like [z-a]
        raise InvalidMergeKind(f"bad kind pattern {pattern!r}: {e}") from None


def _segment_regex(segment: str, pattern: str) -> str:
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = segment.find("]", i + 2)
            if end < 0:
                raise InvalidMergeKind(f"bad kind pattern {pattern!r}: unclosed '['")
            body = segment[i + 1 : end]
            negate = body.startswith("!")
            body = re.sub(r"([\\\]^])", r"\\\1", body[1:] if negate else body)
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def check_kind(kind: object) -> str:
    if kind not in KINDS:
        raise InvalidMergeKind(f"unknown merge kind {kind!r}; one of {', '.join(KINDS)}")
    return kind  # type: ignore[return-value]


@dataclass(frozen=True)
class MergeKinds:
    """An ordered table of (pattern, kind); paths no pattern matches are ``text``."""

    rules: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        compiled = []
        for pattern, kind in self.rules:
            compiled.append((compile_pattern(pattern), check_kind(kind)))
        object.__setattr__(self, "_compiled", tuple(compiled))

    @classmethod
    def for_store(cls, declared: Iterable[tuple[str, str]] = ()) -> MergeKinds:
        """A store's table: its declarations first, then its defaults, then memrev's own layouts."""
        return cls((*declared, *STORE_DEFAULT_KINDS, *MEMREV_KINDS))

    def kind_of(self, path: str) -> str:
        for regex, kind in self._compiled:  # type: ignore[attr-defined]
            if regex.fullmatch(path):
                return kind
        return TEXT
