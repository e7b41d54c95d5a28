"""Plain files outside the store: folders read for import, bundles written by export.

Reading a folder (a ``DiskKnowledgeStore``'s) trusts nothing in it. Only
regular files are read. A symbolic link (to a file or a folder) is never
followed, and a FIFO, socket or device node is never read: the listing comes
from ``lstat`` (``os.scandir`` without following links), and each file is then
opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat`` on the open
descriptor, so neither a link nor a FIFO swapped in after the listing can
redirect the read out of the folder or block it.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from dataclasses import dataclass

from ..errors import FolderTooLarge, NotARegularFile

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class FolderImport:
    """What ``VersionedStore.import_dir`` did: the commit (``None`` if nothing
    changed), the store paths of the files read, and ``(path, reason)`` for
    every entry left out."""

    commit: str | None
    files: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Limits:
    """How much ``read_regular_files`` reads: at most ``files`` files and ``total_bytes`` in all
    (more raises ``FolderTooLarge``), and a file over ``file_bytes`` is skipped."""

    files: int
    total_bytes: int
    file_bytes: int


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for reports of what was skipped (``lstat`` mode)."""
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "symbolic link (not followed)"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device node"
    return "special file"


def _reported(name: str) -> str:
    """A file name as a report can hold it: bytes that are not UTF-8 escaped (``\\xff``)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _read_regular(path: str, limit: int | None = None) -> bytes | str:
    """The bytes of a regular file, or why it is not one (it changed since the listing) or is
    not read (more than ``limit`` bytes)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return file_kind(stat.S_IFLNK)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return file_kind(st.st_mode)
        if limit is not None and st.st_size > limit:
            return f"larger than {limit} bytes"
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20 if limit is None else min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size > limit:
                return f"larger than {limit} bytes"
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_regular_files(
    root: str, limits: Limits | None = None
) -> tuple[list[tuple[str, bytes]], list[tuple[str, str]]]:
    """``([(path, bytes)], [(path, reason skipped)])`` for everything under ``root``,
    paths relative to it in the store's form (``/a/b.md``), in sorted order.
    Skipped names are for reports: bytes that are not UTF-8 are escaped there.
    With ``limits`` the read is bounded (:class:`Limits`), as adoption's is."""
    files: list[tuple[str, bytes]] = []
    skipped: list[tuple[str, str]] = []
    total = 0
    pending = [(root, "")]
    while pending:  # depth-first without recursion: a deep tree cannot exhaust the stack
        folder, prefix = pending.pop()
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name, reverse=True)
        for entry in entries:
            rel = f"{prefix}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                pending.append((entry.path, rel))
            elif entry.is_file(follow_symlinks=False):
                data = _read_regular(entry.path, None if limits is None else limits.file_bytes)
                if isinstance(data, str):
                    skipped.append((_reported(rel), data))
                else:
                    total += len(data)
                    files.append((rel, data))
            else:
                skipped.append((_reported(rel), file_kind(entry.stat(follow_symlinks=False).st_mode)))
            if limits is not None:
                _check_limits(root, limits, len(files), total, len(skipped))
    files.sort()
    skipped.sort()
    return files, skipped


def _check_limits(root: str, limits: Limits, files: int, total: int, skipped: int) -> None:
    if files > limits.files or total > limits.total_bytes:
        raise FolderTooLarge(
            f"{root} holds more than {limits.files} files or {limits.total_bytes} bytes of text; "
            "nothing was written (import it in parts)"
        )
    if skipped > limits.files:
        raise FolderTooLarge(f"{root} holds more than {limits.files} entries to skip; nothing was written")


def _check_replaceable(target: str) -> None:
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotARegularFile(f"{target} is a {file_kind(mode).split(' (')[0]}, not a regular file; refusing to replace it")


def replace_file(target: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``target`` whole or not at all: a new file next to it,
    fsynced, then renamed over it. Only a regular file (or nothing) is replaced;
    a symbolic link, FIFO, device node or folder there raises ``NotARegularFile``.

    The temporary file is created with ``O_EXCL | O_NOFOLLOW`` under a random
    name, so a link planted at a guessable name cannot redirect the write.
    """
    path = os.fspath(target)
    _check_replaceable(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _check_replaceable(path)  # again just before the rename: the target may have changed meanwhile
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)
