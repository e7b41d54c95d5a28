"""Blame: which commit last changed each line of a file, walked along the path's
own history (the change index), with append runs read piece by piece."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .. import errors
from ..core import blame as blame_mod
from ..core import trees
from ..core.objects import APPEND
from ..core.paths import split
from ..repo.repository import Commit, Repository
from .merge import entry_bytes


@dataclass(frozen=True, slots=True)
class BlameLine:
    number: int  # 1-based
    text: str
    commit: Commit


def blame(repo: Repository, path: str, start_seq: int | None) -> list[BlameLine]:
    """Attribute each line of ``path`` to the commit that last changed it.

    Reads only the versions of ``path`` (the per-path index), never the
    commits that did not touch it, newest first and only as far back as a
    line still needs (``blame_walk``).
    """
    if start_seq is None:
        return []
    versions = Versions(repo, path, start_seq)
    lines = versions.lines(start_seq)
    bottom, kept, appended = _append_chain(repo, versions, start_seq, lines)
    below = lines[:kept]
    owners = blame_mod.blame_walk(bottom, lambda s: below if s == bottom else versions.lines(s), versions.parents)
    owners += appended
    infos = dict(zip(sorted(set(owners)), repo.commits_at(sorted(set(owners))), strict=True))
    return [BlameLine(i, line.rstrip("\n"), infos[seq]) for i, (line, seq) in enumerate(zip(lines, owners, strict=True), 1)]


def _append_chain(repo: Repository, versions: Versions, start: int, lines: list[str]) -> tuple[int, int, list[int]]:
    """Peel the appends off the top of ``path``'s history without rebuilding them.

    While a version has one parent version and is an append piece on the parent's
    blob cut at the end of a line ending in ``\\n``, the parent's lines are the first
    lines of this version, and the line diff ``blame_walk`` makes hands every one of
    them down unchanged (a prefix matches itself): the lines after the cut belong
    to this version. Returns the version where the walk must go on, how many of
    ``lines`` it holds, and the owners of the lines after them. An append that
    continues a last line without a newline stops the chain there: the line diff
    decides that line (and what follows) as before.
    """
    if "\ufffd" in "".join(lines):  # maybe undecodable bytes: byte offsets of lines are not known
        return start, len(lines), []
    line_ends: dict[int, int] = {}  # byte offset just after a line ending in "\n" -> lines up to it
    at = 0
    for i, line in enumerate(lines, 1):
        at += len(line.encode("utf-8", "surrogatepass"))
        if line.endswith("\n"):
            line_ends[at] = i
    segments: list[list[int]] = []  # owners of appended lines, newest first
    seq, kept = start, len(lines)
    oid = versions.blob(seq)
    while oid is not None:
        parents = versions.parents(seq)
        if len(parents) != 1:
            break
        row = repo.blobs.row(oid)
        cut = line_ends.get(row.start)
        parent_oid = versions.blob(parents[0])
        if row.kind != APPEND or parent_oid is None or row.base != parent_oid or cut is None:
            break
        segments.append([seq] * (kept - cut))
        seq, kept, oid = parents[0], cut, parent_oid
    return seq, kept, [owner for segment in reversed(segments) for owner in segment]


class Versions:
    """The versions of one path by commit number, read on demand for ``blame_walk``.

    The path's change links come in one range read; commits are read in
    batches of the next ``_BATCH`` versions down the path's history (a walk
    that goes on reads them anyway; one that stops early wastes at most a batch).
    """

    _BATCH = 64

    def __init__(self, repo: Repository, path: str, start: int) -> None:
        self.repo = repo
        self.path = path
        rows = repo.backend.change_rows(path, start)
        self.links = {seq: [s for s in (prev, prev2) if s is not None] for seq, prev, prev2 in rows}
        self.order = sorted(self.links, reverse=True)
        self.ids: dict[int, bytes] = {}
        self.deleted: set[int] = set()

    def _load(self, seq: int) -> None:
        if seq not in self.ids:
            at = bisect.bisect_left(self.order, -seq, key=lambda s: -s)
            self.ids.update(self.repo.commit_ids_at(self.order[at : at + self._BATCH] or [seq]))
        if seq not in self.ids:  # a damaged index names a commit that is not stored
            raise errors.IntegrityError(f"change index names missing commit #{seq}")

    def blob(self, seq: int) -> bytes | None:
        """The blob of the path at change ``seq`` (``None``: deleted there), not read."""
        self._load(seq)
        entry = trees.lookup(self.repo, self.repo.root(self.ids[seq]), split(self.path))
        return None if entry is None else entry.oid

    def lines(self, seq: int) -> list[str]:
        self._load(seq)
        data, _ = entry_bytes(self.repo, self.repo.root(self.ids[seq]), self.path)
        if data is None:  # a deletion: what came before it does not carry over
            self.deleted.add(seq)
            return []
        return data.decode("utf-8", errors="replace").splitlines(keepends=True)

    def parents(self, seq: int) -> list[int]:
        found = [] if seq in self.deleted else self.links.get(seq, [])
        if any(p >= seq for p in found):  # blame_walk goes to older changes only: a loop would never end
            raise errors.IntegrityError(f"change index of {self.path} links change #{seq} to a later change")
        return found
