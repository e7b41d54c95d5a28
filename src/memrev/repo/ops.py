"""The operations a commit is made of, as typed records (``Repository.commit(branch, ops)``).

Every layer that plans a commit builds these: the store's ``write``/``append``/
``delete`` and its transactions, merge/revert/restore (``history``), folder
adoption and the working tree, and the AutoGen/OpenAI Agents adapters that plan
item writes (``memrev.frameworks.items``). Paths are normalized store paths; contents
are bytes (the store encodes text once, at its edge).

``ANY_HEAD`` is what ``expect_head`` defaults to: commit on whatever the branch
head is. Any other value (a commit id, or ``None`` for a branch with no commit
yet) makes the commit conditional on the head being exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Protocol

__all__ = [
    "ANY_HEAD", "OP_TYPES", "AnyHead", "Append", "Delete", "Expect", "Op", "SetEntry", "Write", "set_or_delete", "write_or_delete",
]


@dataclass(frozen=True, slots=True)
class Write:
    """Make ``path`` a file holding ``data`` (stored as an append when ``data`` extends the file)."""

    kind: ClassVar[str] = "write"  # the word default commit messages use ("write /a.md")
    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Append:
    """Add ``data`` at the end of ``path`` (creating it).

    With ``offset`` the commit is made only if the file is still exactly
    ``offset`` bytes long (else ``ConcurrentUpdate``): a transaction records the
    offset it reported, so it stays where the bytes land.
    """

    kind: ClassVar[str] = "append"
    path: str
    data: bytes
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove ``path``: the file, and everything under it if it is a directory."""

    kind: ClassVar[str] = "delete"
    path: str


@dataclass(frozen=True, slots=True)
class SetEntry:
    """Point ``path`` at a blob already stored (merge, restore, revert reuse the other side's)."""

    kind: ClassVar[str] = "set"
    path: str
    oid: bytes
    size: int


@dataclass(frozen=True, slots=True)
class Expect:
    """A condition, not a change: the commit is made only if ``path``'s version on the
    branch — the commit that last changed it (``Store.read_versioned``) — is ``version``;
    ``None``: only if the path does not exist. Checked on the locked head, with every
    other ``Expect`` of the commit; otherwise ``WriteConflict`` and nothing is written."""

    kind: ClassVar[str] = "expect"
    path: str
    version: bytes | None


Op = Write | Append | Delete | SetEntry | Expect
OP_TYPES = (Write, Append, Delete, SetEntry, Expect)  # for isinstance()


def write_or_delete(path: str, data: bytes | None) -> Write | Delete:
    """``path`` made to hold ``data``; ``None``: gone (what merge, revert and resolutions produce)."""
    return Delete(path) if data is None else Write(path, data)


def set_or_delete(path: str, entry: _Entry | None) -> SetEntry | Delete:
    """``path`` pointed at another tree's ``entry`` (its blob id and size); ``None``: gone."""
    return Delete(path) if entry is None else SetEntry(path, entry.oid, entry.size)


class _Entry(Protocol):
    @property
    def oid(self) -> bytes: ...

    @property
    def size(self) -> int: ...


class AnyHead:
    """The type of :data:`ANY_HEAD`: no condition on the branch head (test with ``isinstance``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ANY_HEAD"

    def __reduce__(self) -> str:
        return "ANY_HEAD"  # unpickles as the module's own instance


ANY_HEAD: Final = AnyHead()
