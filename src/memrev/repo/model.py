"""The records the repository gives back: ``Commit`` (one commit as the history API
returns it), ``FileChange`` (one path's change between two trees), and what a
commit request and its result are (``CommitRequest``, ``CommitResult``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import FrozenInstanceError, dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

from .. import errors
from ..core import textdiff
from ..core.objects import CommitData, commit_fields
from ..core.paths import is_directory_key
from .ops import ANY_HEAD, AnyHead, Op

__all__ = ["Commit", "CommitRequest", "CommitResult", "FileChange", "decode_commit", "file_change"]


class Commit:
    """One commit as the history API returns it (shared between calls: read it, do not change it).

    Fields: ``id`` (hex), ``parents`` (hex ids), ``time`` (UTC ``datetime``),
    ``author``, ``message``, ``meta`` (the JSON object), ``paths`` (the files it
    changed, sorted). Read-only, compared by value like a frozen dataclass.

    A path's log builds thousands of these and a caller often reads a few
    fields of a few of them, so one made from a stored record (``from_record``)
    keeps the record, already checked against its hash, and decodes it on the
    first read of a field other than ``id``: building one costs a few hundred
    nanoseconds instead of the ~20 µs of decoding it (a first
    ``log(path)`` of 5,000 versions spent ~90 ms decoding).
    """

    __slots__ = ("id", "_seq", "_record", "_changed", "_fields")
    id: str
    _seq: int | None
    _record: bytes | None
    _changed: str | Iterable[str] | None  # a str: the one file it changed (a path's log builds thousands)
    _fields: tuple[Any, ...] | None

    _NAMES = ("id", "parents", "time", "author", "message", "meta", "paths")
    __match_args__ = ("id", "parents", "time", "author", "message", "meta", "paths")  # _NAMES, as the frozen dataclass it was: ``case Commit(id, parents)``

    def __init__(
        self,
        id: str,
        parents: tuple[str, ...],
        time: datetime,
        author: str,
        message: str,
        meta: dict[str, Any],
        paths: tuple[str, ...],
    ) -> None:
        _set = object.__setattr__
        _set(self, "id", id)
        _set(self, "_seq", None)
        _set(self, "_record", None)
        _set(self, "_changed", None)
        _set(self, "_fields", (parents, time, author, message, meta, paths))

    @classmethod
    def from_record(cls, oid: bytes, seq: int, record: bytes, changed: str | Iterable[str]) -> Commit:
        """Commit number ``seq`` from its stored bytes (verified against ``oid`` by the
        caller) and the keys the change index holds for it (or, as a ``str``, the one
        file it changed); decoded when first read."""
        self = _new(cls)
        _set_id(self, oid.hex())
        _set_seq(self, seq)
        _set_record(self, record)
        _set_changed(self, changed)
        _set_fields(self, None)
        return self

    def _decoded(self) -> tuple[Any, ...]:
        # Read the change keys before the fields: a decode by another thread sets the
        # fields before dropping the keys, so keys gone means fields there (two threads
        # reading one shared Commit at once both decode it; neither sees keys dropped).
        changed = self._changed
        fields = self._fields
        if fields is None:
            try:
                parents, time_us, author, message, meta = commit_fields(cast(bytes, self._record))  # fields unset: made from a record
            except ValueError as e:
                raise errors.IntegrityError(f"commit {self.id}: {e}") from None
            when = datetime.fromtimestamp(time_us / 1e6, tz=timezone.utc)  # as CommitData.time
            files = (changed,) if changed.__class__ is str else _file_paths(changed)  # type: ignore[arg-type]
            fields = (parents, when, author, message, meta, files)
            object.__setattr__(self, "_fields", fields)
            object.__setattr__(self, "_changed", None)
        return fields

    @property
    def parents(self) -> tuple[str, ...]:
        return self._decoded()[0]

    @property
    def time(self) -> datetime:
        return self._decoded()[1]

    @property
    def author(self) -> str:
        return self._decoded()[2]

    @property
    def message(self) -> str:
        return self._decoded()[3]

    @property
    def meta(self) -> dict[str, Any]:
        return self._decoded()[4]

    @property
    def paths(self) -> tuple[str, ...]:
        return self._decoded()[5]

    def stored_record(self) -> tuple[int, bytes] | None:
        """``(number, record)`` of a commit made by ``from_record`` (the record checked
        against its hash), else ``None``: the repository decodes it or takes its root
        tree id from it instead of reading the commit again."""
        return None if self._record is None or self._seq is None else (self._seq, self._record)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return (self.id, *self._decoded())

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # as a frozen dataclass holding a dict: unhashable

    def __repr__(self) -> str:
        return "Commit(" + ", ".join(f"{n}={v!r}" for n, v in zip(self._NAMES, self._values(), strict=True)) + ")"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Commit, self._values())

    def to_json(self) -> dict[str, Any]:
        """The shape of ``memrev log --json`` (and the viewer's ``/api/`` pages)."""
        return {
            "id": self.id,
            "parents": list(self.parents),
            "time": self.time.isoformat(),
            "author": self.author,
            "message": self.message,
            "meta": self.meta,
            "paths": list(self.paths),
        }


@dataclass(frozen=True)
class _CommitFields:
    """``Commit``'s fields as the frozen dataclass it was before it decoded lazily declared
    them: given to ``Commit`` so ``dataclasses.fields``/``asdict``/``replace`` still work
    on it (callers used them; its own methods need none of this)."""

    id: str
    parents: tuple[str, ...]
    time: datetime
    author: str
    message: str
    meta: dict[str, Any]
    paths: tuple[str, ...]


for _name in ("__dataclass_fields__", "__dataclass_params__"):
    setattr(Commit, _name, getattr(_CommitFields, _name))
del _name

# ``from_record`` sets the slots through their descriptors: a path's log builds thousands
# of commits, and this is a third of the cost of ``object.__setattr__`` by name.
_new = object.__new__
_set_id, _set_seq, _set_record, _set_changed, _set_fields = (
    Commit.__dict__[name].__set__ for name in Commit.__slots__
)


def _file_paths(changed: Iterable[str]) -> tuple[str, ...]:
    """The files among a commit's change keys (directory keys left out), sorted."""
    return tuple(sorted(p for p in changed if not is_directory_key(p)))


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file that differs between two revisions."""

    path: str
    status: str  # "added" | "modified" | "deleted"
    old: str | None
    new: str | None
    diff: str
    # True when the two versions are over textdiff's bound (DIFF_LINES, DIFF_CHARS): ``diff``
    # is then its header and one line saying so, not a line diff.
    left_out: bool = False

    def to_json(self) -> dict[str, Any]:
        """The shape of ``memrev diff --json`` (``left_out`` only when true)."""
        out: dict[str, Any] = {"path": self.path, "status": self.status, "diff": self.diff}
        if self.left_out:
            out["left_out"] = True
        return out




@dataclass(slots=True)
class CommitRequest:
    """One caller's commit in a group (``Repository.commit_group``); the arguments of ``commit``."""

    branch: str
    ops: Sequence[Op]
    author: str
    message: str | None = None
    meta: dict[str, Any] | None = None
    merge_parent: bytes | None = None
    expect_head: bytes | None | AnyHead = ANY_HEAD
    blob_sources: Sequence[bytes] | None = None


@dataclass(slots=True)
class CommitResult:
    id: bytes | None  # None: nothing changed, no commit
    parent: bytes | None = None
    paths: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    # Caches the new commit once its transaction committed (Repository._apply).
    settle: Callable[[], None] | None = field(default=None, repr=False, compare=False)


def decode_commit(oid: bytes, data: bytes) -> CommitData:
    try:
        return CommitData.decode(data)
    except ValueError as e:
        raise errors.IntegrityError(f"commit {oid.hex()}: {e}") from None


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def file_change(path: str, old: bytes | None, new: bytes | None) -> FileChange:
    status = "added" if old is None else "deleted" if new is None else "modified"
    old_t, new_t = _text(old), _text(new)
    over = textdiff.too_large_to_diff(old_t, new_t)
    if over is not None:
        note = (
            f"Diff left out: the two versions have {over[0]:,} lines and {over[1]:,} characters "
            f"(the bound is {textdiff.DIFF_LINES:,} lines or {textdiff.DIFF_CHARS:,} characters); compare them whole\n"
        )
        return FileChange(path=path, status=status, old=old_t, new=new_t, diff=f"--- a{path}\n+++ b{path}\n{note}", left_out=True)
    lines = textdiff.unified(
        (old_t or "").splitlines(keepends=True),
        (new_t or "").splitlines(keepends=True),
        fromfile=f"a{path}",
        tofile=f"b{path}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return FileChange(path=path, status=status, old=old_t, new=new_t, diff=text)
