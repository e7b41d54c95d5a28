"""Three-way merge of one file, by kind of content.

- Unchanged on one side: take the other side.
- Both sides only appended to the base (JSONL logs, ``EventLogWriter``):
  keep the base, then our appended lines, then theirs. A log file
  (``.jsonl``, ``.log``, ``.ndjson``) created on both sides counts as
  appended to an empty base.
- Text: line-based diff3 (``merge3``); overlapping edits are a conflict.
- A counter (a file holding one integer) on both sides: the larger.
- Deleted on one side and modified on the other, added differently on both
  sides, or not UTF-8: a conflict.

``None`` stands for "the file does not exist on that side".
"""

from __future__ import annotations

from dataclasses import dataclass

import re

import merge3

_COUNTER = re.compile(rb"\s*[0-9]{1,30}\s*")


@dataclass(frozen=True, slots=True)
class FileMerge:
    content: bytes | None  # the merged file (None: deleted); meaningless when conflicted
    conflict: str | None = None  # "modify/delete", "add/add", "content", "binary"
    marked: str | None = None  # the text with conflict markers, for a person to read


# Line logs: created independently on two branches, both sides' lines are kept.
LOG_SUFFIXES = (".jsonl", ".log", ".ndjson")


def merge_file(base: bytes | None, ours: bytes | None, theirs: bytes | None, path: str = "") -> FileMerge:
    if ours == theirs:
        return FileMerge(ours)
    if base == ours:
        return FileMerge(theirs)
    if base == theirs:
        return FileMerge(ours)
    if ours is None or theirs is None:
        return FileMerge(None, "modify/delete")
    if _COUNTER.fullmatch(ours) and _COUNTER.fullmatch(theirs) and (base is None or _COUNTER.fullmatch(base)):
        return FileMerge(max(ours, theirs, key=int))  # a counter: both sides counted on
    if base is None:
        if not path.endswith(LOG_SUFFIXES):
            return FileMerge(None, "add/add", _marked_whole(ours, theirs))
        base = b""
        if ours.startswith(theirs) or theirs.startswith(ours):
            return FileMerge(max(ours, theirs, key=len))
    if (base or path.endswith(LOG_SUFFIXES)) and ours.startswith(base) and theirs.startswith(base):
        mine, other = ours[len(base) :], theirs[len(base) :]
        joiner = b"\n" if mine and not mine.endswith(b"\n") and not other.startswith(b"\n") else b""
        return FileMerge(base + mine + joiner + other)
    try:
        b, o, t = (x.decode("utf-8").splitlines(keepends=True) for x in (base, ours, theirs))
    except UnicodeDecodeError:
        return FileMerge(None, "binary")
    m = merge3.Merge3(b, o, t)
    if any(group[0] == "conflict" for group in m.merge_groups()):
        marked = "".join(m.merge_lines(name_a="ours", name_b="theirs", start_marker="<<<<<<<", end_marker=">>>>>>>"))
        return FileMerge(None, "content", marked)
    return FileMerge("".join(m.merge_lines()).encode("utf-8"))


def _marked_whole(ours: bytes, theirs: bytes) -> str:
    o = ours.decode("utf-8", errors="replace")
    t = theirs.decode("utf-8", errors="replace")
    nl = lambda s: s if s.endswith("\n") or not s else s + "\n"  # noqa: E731
    return f"<<<<<<< ours\n{nl(o)}=======\n{nl(t)}>>>>>>> theirs\n"
