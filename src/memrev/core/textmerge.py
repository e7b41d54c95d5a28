"""Three-way merge of one file, by its declared kind (see ``core/mergekinds.py``).

For every kind:

- Unchanged on one side: take the other side.
- Deleted on one side and modified on the other, added differently on both
  sides (where the kind has no rule for it), or not UTF-8: a conflict.

Then by kind:

- ``text`` (every path nobody declared): line-based diff3 (``merge3``);
  lines both sides changed are a conflict, whatever the bytes look like.
- ``append-log``: both sides only appended to the base: keep the base, then
  our appended lines, then theirs (a log created on both sides counts as
  appended to an empty base). A last line without its newline that both
  sides extended differently is a conflict. Anything else: as ``text``.
- ``counter``: both sides (and the base) hold one non-negative integer: the
  larger. Anything else: as ``text``.
- ``collection``: files are merged as ``text``; adding the same name on both
  sides is settled by renumbering, which needs the tree (``history.merge``).

``None`` stands for "the file does not exist on that side".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import merge3

from .mergekinds import APPEND_LOG, COUNTER, TEXT

_COUNTER = re.compile(rb"[0-9]{1,30}\n?")


@dataclass(frozen=True, slots=True)
class FileMerge:
    content: bytes | None  # the merged file (None: deleted); meaningless when conflicted
    conflict: str | None = None  # "modify/delete", "add/add", "content", "binary"
    marked: str | None = None  # the text with conflict markers, for a person to read


def merge_file(base: bytes | None, ours: bytes | None, theirs: bytes | None, kind: str = TEXT) -> FileMerge:
    if ours == theirs:
        return FileMerge(ours)
    if base == ours:
        return FileMerge(theirs)
    if base == theirs:
        return FileMerge(ours)
    if ours is None or theirs is None:
        return FileMerge(None, "modify/delete")
    if kind == COUNTER and _is_count(base) and _is_count(ours) and _is_count(theirs):
        return FileMerge(max(ours, theirs, key=int))  # both sides counted on: keep the higher count
    if kind == APPEND_LOG:
        if base is None and (ours.startswith(theirs) or theirs.startswith(ours)):
            return FileMerge(max(ours, theirs, key=len))  # created on both sides, one the start of the other
        appended = _merge_appends(base or b"", ours, theirs)
        if appended is not None:
            return appended
    if base is None:
        return FileMerge(None, "add/add", _marked_whole(ours, theirs))
    return _diff3(base, ours, theirs)


def _is_count(data: bytes | None) -> bool:
    return data is None or _COUNTER.fullmatch(data) is not None


def _merge_appends(base: bytes, ours: bytes, theirs: bytes) -> FileMerge | None:
    """Both sides appended to ``base``: base + ours' part + theirs'. ``None``: not appends only."""
    if not (ours.startswith(base) and theirs.startswith(base)):
        return None
    mine, other = ours[len(base) :], theirs[len(base) :]
    if base and not base.endswith(b"\n"):
        # The base's last line is unfinished: a side that did not start a new
        # line changed that line, and both sides did (neither part is empty here).
        if not (mine.startswith(b"\n") and other.startswith(b"\n")):
            return FileMerge(None, "content", _marked_whole(ours, theirs))
        base, mine, other = base + b"\n", mine[1:], other[1:]
    joiner = b"\n" if mine and not mine.endswith(b"\n") and not other.startswith(b"\n") else b""
    return FileMerge(base + mine + joiner + other)


def _diff3(base: bytes, ours: bytes, theirs: bytes) -> FileMerge:
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
