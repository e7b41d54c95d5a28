"""The file commands of a memory tool, once, for every front end that offers them.

Claude's memory tool (``memory_20250818``: view, create, str_replace, insert,
delete, rename) and the ``memrev mcp`` tools are the same six operations on
the same files; this module is them, on a :class:`~memrev.store.Store`, and the
two front ends only format (``memrev.anthropic``: the text the SDK's
filesystem tool returns; ``memrev.mcp``: structured results). Each mutating
command is exactly one commit (``Store.commit_ops``), made only if what it
read is still there (an ``Expect`` on every file it read, checked under the
commit's lock), so a command never overwrites a change it did not see:

- a caller's ``expected`` (a version, ``"absent"``, or a unique 7+ digit prefix)
  is checked the same way, else ``WriteConflict``;
- without one, a command that edits what it read (``str_replace``, ``insert``,
  ``rename``) is made against the version it read, and retried from a fresh
  read when another writer got there first (``ATTEMPTS`` times, then
  ``ConcurrentUpdate``);
- a path is never both a file and a folder (the store, like ag2's, allows it;
  a file system does not): a write carries ``Expect(folder, None)`` for every
  folder above its path, and a new file is committed only on the head it found
  no folder at (else read again, the same retry).

Errors are typed (``PathNotFound``, ``PathExists``, ``EditRefused``,
``InvalidPath``, ``WriteConflict``) and their messages are the ones Claude's
filesystem tool gives for the same mistake, so both front ends say the same.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .. import errors
from ..core.paths import ancestors, is_under, normalize
from ..repo.ops import ANY_HEAD, Append, Delete, Expect, Write
from ..store.txn import encode_text as _text
from ..store.work import TreeEntry

MAX_LINES = 999_999  # as Claude's filesystem tool: a longer file is refused, not cut
LINE_NUMBER_WIDTH = len(str(MAX_LINES))
ATTEMPTS = 20  # a read-modify-write made again when another writer moved the file first
OFF_LOOP_CHARS = 1 << 20  # a file longer than this is split into lines in a worker thread
MATCH_LINES_SHOWN = 20  # "old_str occurs in lines ...": the first ones, then how many more
_PREFIX = re.compile(r"[0-9a-fA-F]{7,40}")
_T = TypeVar("_T")


@dataclass(frozen=True)
class FileView:
    path: str
    version: str | None
    lines: list[str]  # the lines shown, ``content.split("\n")`` as Claude's tool splits
    first: int  # the number of ``lines[0]``
    total: int  # lines in the file


@dataclass(frozen=True)
class DirView:
    path: str
    version: str | None  # the commit it was read at
    entries: list[TreeEntry]
    size: int  # every file below the folder, in bytes


@dataclass(frozen=True)
class Edit:
    path: str
    version: str | None  # the commit made (the path's new version); unchanged content: the version it has
    content: str = ""  # the file after the edit (``str_replace``, ``insert``)
    line: int = 0  # the 0-based line the edit starts at
    offset: int = 0  # ``append``: where the text landed, in UTF-8 bytes
    paths: list[str] = field(default_factory=list)  # ``rename``, ``delete``: the files moved or removed


def numbered(lines: list[str], first: int) -> str:
    """Lines as Claude's tool shows them: the number right-aligned in six columns, a tab, the line."""
    return "\n".join(f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{line}" for n, line in enumerate(lines, first))


def lines_kept(content: str) -> list[str]:
    """Lines split on LF only (a CR stays), without the empty one a final newline leaves."""
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


class MemoryFiles:
    """The file commands on ``store``, confined to the folder ``root`` (``"/"``: the whole store).

    ``shown_as``: the name callers give the root, when it is not its path in the store (Claude's
    tool always says ``/memories``; ``root="/agents/ada/memories"`` keeps one agent's files there).
    Callers' paths and the messages are in those terms; results carry store paths."""

    def __init__(self, store: Any, *, root: str = "/", shown_as: str | None = None) -> None:
        self.store = store
        self.root = normalize(root)
        self.shown = self.root if shown_as is None else normalize(shown_as)

    # ------------------------------------------------------------ paths and versions

    def path(self, path: object) -> str:
        """``path`` normalized, if it is inside ``root`` (else ``InvalidPath``, Claude's tool's words)."""
        if not isinstance(path, str):
            raise errors.InvalidPath(f"a path is a str, not {type(path).__name__}")
        if self.shown != "/" and not (path == self.shown or path.startswith(self.shown + "/")):
            raise errors.InvalidPath(f"Path must start with {self.shown}, got: {path}")
        # ``..`` resolved as a file system resolves it (``/memories/a/../b`` is ``/memories/b``), then
        # the result must still be inside the root: the store's own paths never hold a ``..``.
        norm = normalize(posixpath.normpath("/" + path.lstrip("/")) if path else path)
        if not is_under(norm, self.shown):
            raise errors.InvalidPath(f"Path {path} would escape {self.shown} directory")
        return _moved(norm, self.shown, self.root)

    async def version(self, expected: str | None) -> str | None:
        """A caller's expected version as ``Store.write`` takes it: ``None``, ``"absent"``, or a full id
        (a unique prefix of 7 or more hex digits is looked up)."""
        if expected is None or expected == "absent":
            return expected
        if not isinstance(expected, str) or not _PREFIX.fullmatch(expected):
            raise errors.InvalidArgument(
                f"a version is a commit id (7 to 40 hex digits) or 'absent', not {str(expected)[:60]!r}"
            )
        if len(expected) == 40:
            return expected.lower()
        return await self.store.resolve(expected)

    async def _expect(self, path: str, expected: str | None) -> Expect | None:
        wanted = await self.version(expected)
        if wanted is None:
            return None
        return Expect(path, None if wanted == "absent" else bytes.fromhex(wanted))

    async def _retrying(self, attempt: Callable[[], Awaitable[_T]], pinned: bool) -> _T:
        """``attempt()`` again while another writer changes what it read; a caller's own
        ``expected`` (``pinned``) is never retried: its conflict is the answer."""
        for _ in range(ATTEMPTS):
            try:
                return await attempt()
            except errors.WriteConflict:
                if pinned:
                    raise
            except errors.ConcurrentUpdate:  # the head moved under a folder's rename
                pass
            await asyncio.sleep(0)
        raise errors.ConcurrentUpdate("the file kept changing under the edit; nothing was written")

    # ------------------------------------------------------------ reading

    async def view(
        self, path: str = "/", *, rev: str | None = None, view_range: list[int] | None = None, depth: int = 2
    ) -> FileView | DirView:
        """A file's lines (``view_range``: ``[first, last]``, ``last`` -1 for the end) or a folder's
        entries ``depth`` levels deep; ``PathNotFound`` when neither."""
        norm = self.path(path)
        at = await self.store.resolve(rev) if rev is not None else await self.store.head()
        content, version = (None, None) if norm == "/" or at is None else await self.store.read_versioned(norm, rev=at)
        if content is not None:
            # a big file is split off the event loop (a 100 MB file takes a few hundred ms)
            lines = await asyncio.to_thread(content.split, "\n") if len(content) > OFF_LOOP_CHARS else content.split("\n")
            total = len(lines)
            if total > MAX_LINES:
                raise errors.EditRefused(f"File {path} exceeds maximum line limit of 999,999 lines.")
            first = 1
            if view_range is not None:
                if len(view_range) != 2 or not all(type(n) is int for n in view_range):
                    raise errors.InvalidArgument(f"view_range is [first, last] (two ints), not {view_range!r:.60}")
                start = max(1, view_range[0]) - 1
                end = len(lines) if view_range[1] == -1 else view_range[1]
                first, lines = start + 1, lines[start:end]
            return FileView(norm, version, lines, first, total)
        entries = [] if at is None else await self.store.tree(norm, rev=at, depth=depth)
        if entries is None and norm == self.root:
            entries = []  # the root is a folder, even with nothing in it
        if entries is None or (norm != self.root and not entries):
            raise errors.PathNotFound(f"The path {path} does not exist. Please provide a valid path.")
        level = norm.rstrip("/").count("/") + 1  # the depth of what is directly in the folder
        top = [e for e in entries if e.path.rstrip("/").count("/") == level]
        return DirView(norm, at, entries, sum(e.size for e in top))

    # ------------------------------------------------------------ writing

    async def create(self, path: str, content: str, *, expected: str | None = None, message: str | None = None) -> Edit:
        """Make ``path`` hold ``content`` (``expected="absent"``: only a new file, as Claude's ``create``).
        A folder is never made a file, nor a file a folder (``PathExists``, ``EditRefused``)."""
        if self.path(path) == self.root:
            raise errors.PathExists(f"File {path} already exists")
        norm = self._file(path)
        data = _text(content)
        guard = await self._expect(norm, expected)

        async def attempt() -> Edit:
            head = await self.store.head()
            if await self._is_dir(norm, head):
                raise errors.PathExists(f"File {path} already exists")
            ops, new = await self._guards(norm, path, head)
            try:
                made = await self.store.commit_ops(
                    [*ops, *([] if guard is None else [guard]), Write(norm, data)],
                    message=message, expect_head=head if new else ANY_HEAD,
                )
            except errors.WriteConflict as e:
                if e.path != norm:  # a folder above became a file: not the caller's version, read again
                    raise errors.ConcurrentUpdate(f"{e.path} changed under the create") from e
                if expected == "absent":
                    raise errors.PathExists(f"File {path} already exists") from e
                raise
            return Edit(norm, made.id or (await self.store.read_versioned(norm))[1], content)

        return await self._retrying(attempt, guard is not None)

    async def str_replace(
        self, path: str, old: str, new: str, *, expected: str | None = None, message: str | None = None
    ) -> Edit:
        """Replace the one occurrence of ``old`` in the file (none, or several: ``EditRefused``)."""
        norm = self._file(path)
        _text(old)
        _text(new)
        pinned = await self.version(expected)

        async def attempt() -> Edit:
            content, version = await self._read_file(norm, path, pinned)
            count = content.count(old)
            if count == 0:
                raise errors.EditRefused(
                    f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
                )
            if count > 1:
                raise errors.EditRefused(
                    f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: "
                    f"{_match_lines(content, old)}. Please ensure it is unique"
                )
            at = content.find(old)
            after = content.replace(old, new)
            made = await self._commit_edit(norm, version, after, message)
            return Edit(norm, made or version, after, content[:at].count("\n"))

        return await self._retrying(attempt, pinned is not None)

    async def insert(
        self, path: str, line: int, text: str, *, expected: str | None = None, message: str | None = None
    ) -> Edit:
        """Insert ``text`` after line ``line`` (0: at the top), as Claude's ``insert``: the file ends
        with a newline afterwards."""
        norm = self._file(path)
        _text(text)
        if type(line) is not int:
            raise errors.InvalidArgument(f"insert_line is an int, not {type(line).__name__}")
        pinned = await self.version(expected)

        async def attempt() -> Edit:
            content, version = await self._read_file(norm, path, pinned)
            lines = lines_kept(content)
            if line < 0 or line > len(lines):
                raise errors.EditRefused(
                    f"Invalid `insert_line` parameter: {line}. It should be within the range [0, {len(lines)}]."
                )
            lines.insert(line, text.rstrip("\n"))
            after = "\n".join(lines)
            if not after.endswith("\n"):
                after += "\n"
            made = await self._commit_edit(norm, version, after, message)
            return Edit(norm, made or version, after, line)

        return await self._retrying(attempt, pinned is not None)

    async def append(self, path: str, content: str, *, message: str | None = None) -> Edit:
        """Add ``content`` at the end of the file (creating it): one commit, and where it landed."""
        norm = self._file(path)
        data = _text(content)

        async def attempt() -> Edit:
            head = await self.store.head()
            if norm == self.root or await self._is_dir(norm, head):
                raise errors.PathNotFound(f"The path {path} is not a file.")
            ops, new = await self._guards(norm, path, head)
            made = await self.store.commit_ops(
                [*ops, Append(norm, data)], message=message, expect_head=head if new else ANY_HEAD
            )
            version = made.id or (await self.store.read_versioned(norm))[1]
            return Edit(norm, version, offset=made.offsets[0] if made.offsets else 0)

        return await self._retrying(attempt, False)

    async def delete(self, path: str, *, expected: str | None = None, message: str | None = None) -> Edit:
        """Remove a file, or a folder and everything in it: one tombstone commit."""
        norm = self.path(path)
        if norm == self.root:
            raise errors.InvalidPath(f"Cannot delete the {self.shown} directory itself")
        guard = await self._expect(norm, expected)
        content, _ = await self.store.read_versioned(norm)
        below = await self.store.tree(norm, depth=1 << 20)
        gone = ([norm] if content is not None else []) + [e.path for e in below or () if e.kind == "file"]
        if not gone:
            raise errors.PathNotFound(f"The path {path} does not exist")
        made = await self.store.commit_ops([*([] if guard is None else [guard]), Delete(norm)], message=message)
        return Edit(norm, made.id, paths=gone)

    async def rename(self, old_path: str, new_path: str, *, message: str | None = None) -> Edit:
        """Move a file, or a folder with everything in it, to a path that does not exist: one commit,
        made only on the head every file was read at (else read again and retried)."""
        old, new = self.path(old_path), self.path(new_path)
        if old == self.root:
            raise errors.InvalidPath(f"Cannot rename the {self.shown} directory itself")

        async def attempt() -> Edit:
            head = await self.store.head()
            if new == self.root or await self._is_dir(new, head) or (
                head is not None and (await self.store.read_versioned(new, rev=head))[0] is not None
            ):
                raise errors.PathExists(f"The destination {new_path} already exists")
            if head is None:
                raise errors.PathNotFound(f"The path {old_path} does not exist")
            moves: list[tuple[str, str]] = []  # (from, to)
            if (await self.store.read_versioned(old, rev=head))[0] is not None:
                moves.append((old, new))
            below = await self.store.tree(old, rev=head, depth=1 << 20)
            moves += [(e.path, new + e.path[len(old) :]) for e in below or () if e.kind == "file"]
            if not moves:
                raise errors.PathNotFound(f"The path {old_path} does not exist")
            if is_under(new, old):
                raise errors.EditRefused(f"Cannot move {old_path} into itself ({new_path})")
            ops: list[Any] = (await self._guards(new, new_path, head))[0]
            for src, dst in moves:
                content, _ = await self.store.read_versioned(src, rev=head)
                ops.append(Write(dst, _text(content)))
            ops.append(Delete(old))
            made = await self.store.commit_ops(ops, message=message or f"rename {old} -> {new}", expect_head=head)
            return Edit(new, made.id, paths=[dst for _, dst in moves])

        return await self._retrying(attempt, False)

    # ------------------------------------------------------------ helpers

    def _file(self, path: str) -> str:
        """``path`` checked for a command on a file; the store's own root never is one."""
        norm = self.path(path)
        if norm == "/":
            raise errors.PathNotFound(f"The path {path} is not a file.")
        return norm

    async def _guards(self, norm: str, path: str, head: str | None) -> tuple[list[Expect], bool]:
        """What keeps a file written at ``norm`` from also being a folder: ``EditRefused`` if a
        folder above it is a file at ``head``, else an ``Expect(folder, None)`` for each (checked
        under the commit's lock); and whether ``norm`` is a new file, which the caller commits on
        ``head`` alone (no condition says "no folder here", so the head must not move under it)."""
        above = [a for a in ancestors(norm) if a != "/"]
        for folder in above:
            if head is not None and (await self.store.read_versioned(folder, rev=head))[0] is not None:
                shown = _moved(folder, self.root, self.shown) if is_under(folder, self.root) else folder
                raise errors.EditRefused(f"Cannot create {path}: {shown} is a file, not a directory")
        new = head is None or (await self.store.read_versioned(norm, rev=head))[0] is None
        return [Expect(folder, None) for folder in above], new

    async def _is_dir(self, norm: str, rev: str | None = None) -> bool:
        return bool(await self.store.tree(norm, rev=rev, depth=1))

    async def _read_file(self, norm: str, path: str, pinned: str | None) -> tuple[str, str]:
        """The file's content and version, if it is at the caller's ``pinned`` version (when one
        is given: else ``WriteConflict``); a folder (the root too) is "not a file", in Claude's words."""
        content, version = await self.store.read_versioned(norm)
        if content is None:
            if norm == self.root or await self._is_dir(norm):
                raise errors.PathNotFound(f"The path {path} is not a file.")
            raise errors.PathNotFound(f"The path {path} does not exist. Please provide a valid path.")
        if pinned is not None and pinned != version:
            raise errors.WriteConflict(
                f"conflict: {norm} is at {version}, not {pinned}; nothing was written", norm, pinned, version
            )
        return content, version

    async def _commit_edit(self, norm: str, version: str, after: str, message: str | None) -> str | None:
        """The edited file, committed only if it is still at ``version`` (else ``WriteConflict``)."""
        ops = [Expect(norm, bytes.fromhex(version)), Write(norm, _text(after))]
        return (await self.store.commit_ops(ops, message=message)).id


def _moved(path: str, old: str, new: str) -> str:
    """``path`` (``old`` or below it) with ``old`` replaced by ``new``."""
    if old == new:
        return path
    rest = "" if path == old else path[len(old.rstrip("/")) :]
    return new.rstrip("/") + rest or "/"


def _match_lines(content: str, old: str) -> str:
    """The lines ``old`` starts on (every start, overlapping ones too, as Claude's tool counts them)."""
    found: list[int] = []
    start, more = 0, 0
    while (pos := content.find(old, start)) != -1:
        if len(found) < MATCH_LINES_SHOWN:
            found.append(content.count("\n", 0, pos) + 1)
        else:
            more += 1
        start = pos + 1
    shown = ", ".join(map(str, found))
    return shown if not more else f"{shown} and {more} more"
