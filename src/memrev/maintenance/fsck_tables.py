"""What fsck keeps in memory about a whole store, compactly: ids and numbers in arrays, not objects.

fsck (:mod:`memrev.maintenance.fsck`) reads each table once and keeps only what
its later checks need: each blob's kind, size and depth (``BlobFacts``), each
commit's parents' numbers (``ParentNumbers``), the change index (``ChangeRows``)
and which trees the commits reached (``ReachedIds``). Each costs a few machine
integers per row, so a check of a large history stays within memory.
"""

from __future__ import annotations

import bisect
import heapq
from array import array
from collections.abc import Iterable, Iterator

from .. import errors
from ..backends.base import BlobRow
from ..core.objects import APPEND, DELTA, FULL

__all__ = ["BlobFacts", "ChangeRows", "ParentNumbers", "ReachedIds", "id_prefix"]


class BlobFacts:
    """What later checks need of each blob, a packed integer per id (kind, size,
    depth) instead of a tuple of objects; an append piece's lineage kept apart."""

    _KINDS = (FULL, DELTA, APPEND)

    def __init__(self) -> None:
        self._packed: dict[bytes, int] = {}
        self._lineage: dict[bytes, bytes] = {}

    def put(self, row: BlobRow) -> None:
        kind = self._KINDS.index(row.kind) if row.kind in self._KINDS else 3
        self._packed[row.id] = (max(row.size, 0) << 16) | (min(max(row.depth, 0), 0x3FFF) << 2) | kind
        if row.lineage is not None:
            self._lineage[row.id] = row.lineage

    def get(self, oid: bytes) -> tuple[str, int, int, bytes | None] | None:
        """``(kind, size, depth, lineage)``, or ``None`` for a blob not scanned."""
        packed = self._packed.get(oid)
        if packed is None:
            return None
        kind = packed & 3
        return (self._KINDS[kind] if kind < 3 else "?", packed >> 16, (packed >> 2) & 0x3FFF, self._lineage.get(oid))

    def size(self, oid: bytes) -> int | None:
        packed = self._packed.get(oid)
        return None if packed is None else packed >> 16

    def __contains__(self, oid: bytes) -> bool:
        return oid in self._packed


class ParentNumbers:
    """Each checked commit's parents' numbers, the first in an array indexed by
    commit number (8 bytes a commit, not a dict entry and a tuple), a merge's
    others apart. Numbers far past the array (a damaged store) go to a dict."""

    _ABSENT, _ROOT, _MISSING = -(2**63), -(2**63) + 1, -(2**63) + 2
    _SPARSE = 1 << 20  # how far past the array a number may be and still grow it

    def __init__(self) -> None:
        self._first = array("q")
        self._others: dict[int, tuple[int | None, ...]] = {}
        self._sparse: dict[int, tuple[int | None, ...]] = {}

    def __setitem__(self, seq: int, parents: tuple[int | None, ...]) -> None:
        if seq < 0 or seq >= len(self._first) + self._SPARSE:
            self._sparse[seq] = parents
            return
        if seq >= len(self._first):
            self._first.extend(array("q", [self._ABSENT]) * (seq + 1 - len(self._first)))
        self._first[seq] = self._ROOT if not parents else self._MISSING if parents[0] is None else parents[0]
        if len(parents) > 1:
            self._others[seq] = parents[1:]

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        if 0 <= seq < len(self._first):
            return self._first[seq] != self._ABSENT
        return seq in self._sparse

    def __getitem__(self, seq: int) -> tuple[int | None, ...]:
        if not 0 <= seq < len(self._first):
            return self._sparse[seq]
        first = self._first[seq]
        if first == self._ABSENT:
            raise KeyError(seq)
        head = () if first == self._ROOT else (None,) if first == self._MISSING else (first,)
        return head + self._others.get(seq, ())

    def items(self) -> Iterator[tuple[int, tuple[int | None, ...]]]:
        for seq, first in enumerate(self._first):
            if first != self._ABSENT:
                yield seq, self[seq]
        yield from sorted(self._sparse.items())


class ChangeRows:
    """The change index, held compactly for the checks that need all of it:
    each row as four machine integers (arrays, not a tuple of objects per row),
    each path's text once. Rows come in commit-number order, so a commit's rows
    are a slice found by bisection."""

    def __init__(self, rows: Iterable[tuple[str, int, int | None, int | None]]) -> None:
        self._paths: list[str] = []
        number: dict[str, int] = {}
        self._seq, self._path, self._prev, self._prev2 = array("q"), array("q"), array("q"), array("q")
        for path, seq, prev, prev2 in rows:
            if self._seq and seq < self._seq[-1]:
                raise errors.IntegrityError("the change index is not in commit order")
            n = number.get(path)
            if n is None:
                n = number[path] = len(self._paths)
                self._paths.append(path)
            self._seq.append(seq)
            self._path.append(n)
            self._prev.append(_NONE if prev is None else prev)
            self._prev2.append(_NONE if prev2 is None else prev2)

    def at(self, seq: int) -> list[tuple[str, int | None, int | None]]:
        """The rows of commit ``seq`` as ``(path, prev, prev2)``."""
        lo, hi = bisect.bisect_left(self._seq, seq), bisect.bisect_right(self._seq, seq)
        return [(self._paths[self._path[k]], _or_none(self._prev[k]), _or_none(self._prev2[k])) for k in range(lo, hi)]

    def seqs(self) -> Iterator[int]:
        """The commits that have rows, each once, in order."""
        last = None
        for seq in self._seq:
            if seq != last:
                yield seq
                last = seq


_NONE = -(2**63)  # "no previous change" in ChangeRows' arrays (no commit number is this)


def _or_none(n: int) -> int | None:
    return None if n == _NONE else n


class ReachedIds:
    """A set of object ids kept as sorted 8-byte prefixes in one array (8 bytes
    per id, not a set of objects at ~85 bytes). ``add`` while collecting, then
    ``freeze`` once; membership is by prefix, so the caller decides what a
    shared prefix means (``_check_unreached_trees``)."""

    _CHUNK = 1 << 13  # sorted a chunk at a time as they fill: no list of many ids as Python ints

    def __init__(self) -> None:
        self._ids = array("Q")  # the ids added since the last chunk was sorted; after freeze: all, sorted
        self._chunks: list[array[int]] = []  # sorted, each without repeats
        self._frozen = False

    def add(self, oid: bytes) -> None:
        if not self._frozen:  # frozen: the array is sorted, and what comes later was not reached by a commit
            self._ids.append(id_prefix(oid))
            if len(self._ids) >= self._CHUNK:
                self._chunks.append(array("Q", sorted(set(self._ids))))
                self._ids = array("Q")

    def freeze(self) -> None:
        """Merge the sorted chunks and drop repeats (an id read again is added again):
        what is held meanwhile is the chunks and the result, about twice the ids."""
        self._chunks.append(array("Q", sorted(set(self._ids))))
        chunks, self._chunks = self._chunks, []
        out, last = array("Q"), None
        for prefix in heapq.merge(*chunks):
            if prefix != last:
                out.append(prefix)
                last = prefix
        self._ids = out
        self._frozen = True

    def __contains__(self, oid: bytes) -> bool:
        prefix = id_prefix(oid)
        i = bisect.bisect_left(self._ids, prefix)
        return i < len(self._ids) and self._ids[i] == prefix

    def __len__(self) -> int:
        return len(self._ids)


def id_prefix(oid: bytes) -> int:
    """The 8-byte prefix by which ``ReachedIds`` knows an id, as an integer."""
    return int.from_bytes(oid[:8], "big")
