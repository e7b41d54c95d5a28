"""The rows that cross the backend contract, each a named type: the dataclasses
``BlobRow``, ``HeadRow`` and ``CommitWrite`` and the ``NamedTuple`` rows, which
unpack like the tuples they are. ``memrev.backends.base`` re-exports them all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "BlobRow",
    "ChangeCommit",
    "ChangeLink",
    "ChangeLinkLike",
    "ChangeRow",
    "ChangeRowLike",
    "CommitRow",
    "CommitWrite",
    "FirstParentNumber",
    "HeadRow",
    "PathLogRow",
    "PathLogRowLike",
]


@dataclass(frozen=True, slots=True)
class BlobRow:
    id: bytes
    kind: str  # "F" full, "D" delta, "A" append
    base: bytes | None
    lineage: bytes | None  # append blobs: id of the first append of the run
    start: int  # append blobs: offset at which this blob's bytes begin
    size: int
    depth: int
    data: bytes  # packed payload (see repo.pack)


@dataclass(frozen=True, slots=True)
class HeadRow:
    path: str
    blob: bytes | None  # None: a tombstone (the path was deleted)
    size: int
    seq: int  # the commit (by sequence number) that last changed the path


class CommitRow(NamedTuple):
    """A stored commit: its number, id and record (``iter_commits``, ``commits_at``)."""

    seq: int
    id: bytes
    data: bytes


class ChangeRow(NamedTuple):
    """One row of the change index: commit ``seq`` changed ``path``; ``prev`` is the
    previous change of ``path`` on the first parent's line, ``prev2`` on the merged
    line (a merge), else ``None``."""

    path: str
    seq: int
    prev: int | None
    prev2: int | None


# What change_put takes: ChangeRow, or a plain tuple of its four fields.
ChangeRowLike = tuple[str, int, int | None, int | None]


class ChangeLink(NamedTuple):
    """A change of one path (``change_rows``): its number and its two history links."""

    seq: int
    prev: int | None
    prev2: int | None


class ChangeCommit(NamedTuple):
    """A change of one path with its commit's id and record (``change_commits``);
    ``id`` and ``data`` are ``None`` when the index names a commit that is not there."""

    seq: int
    prev: int | None
    prev2: int | None
    id: bytes | None
    data: bytes | None


class PathLogRow(NamedTuple):
    """``ChangeCommit`` and ``other``: a file other than the path that the commit also
    changed, or ``None`` (``path_log_rows``)."""

    seq: int
    prev: int | None
    prev2: int | None
    id: bytes | None
    data: bytes | None
    other: str | None


# The shapes of the two rows a path's log and blame read by the thousand. A backend may
# hand over its database's own tuples there (no second tuple per row: SQLite streams
# them), so callers unpack them by position; the defaults give the named rows above.
ChangeLinkLike = tuple[int, int | None, int | None]
PathLogRowLike = tuple[int, int | None, int | None, bytes | None, bytes | None, str | None]


class FirstParentNumber(NamedTuple):
    """Commit ``seq`` and the number of the commit its stored first-parent link names
    (``None``: a root, or a parent not stored) (``first_parent_numbers``)."""

    seq: int
    parent_seq: int | None


@dataclass(frozen=True, slots=True)
class CommitWrite:
    """Everything ``write_commit`` stores for one commit computed on ``old``, the branch head.

    ``rows`` are the head rows of every changed path and directory key (their
    ``seq`` is ignored: the new commit's number replaces it). ``links`` says, per
    row path, where the first parent's history of that path ends (the previous
    change's number, ``None`` for none): the repository computes it before
    calling ``write_commit`` (the head row's ``seq``; for a directory key the
    branch has no row for, its per-path lookup), unless the backend declares
    ``computes_links`` and looks the links up itself (PostgreSQL, in its one
    statement); then ``links`` is empty. ``prev2`` holds the merged line's last
    change per path (merges only).
    """

    ref: str
    branch: str
    old: bytes | None  # the ref's target the commit was computed on (its first parent)
    id: bytes
    data: bytes
    rows: list[HeadRow]
    prev2: dict[str, int | None]
    links: dict[str, int | None] = field(default_factory=dict)
