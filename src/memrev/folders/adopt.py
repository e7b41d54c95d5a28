"""Reading a folder of plain files safely, and adopting one as a store's first commit.

A folder handed to memrev (a ``DiskKnowledgeStore`` folder being adopted, or a
working tree edited by other programs) is untrusted: it may hold symlinks
pointing anywhere, FIFOs that block an ``open``, devices, binary files, names
no memrev path can carry, or more bytes than fit in memory. So:

- every directory is opened relative to its parent's descriptor with
  ``O_NOFOLLOW``, and every file with ``O_NOFOLLOW | O_NONBLOCK`` and checked
  with ``fstat`` before a byte is read: a symlink is never followed (not even
  as a parent directory swapped in mid-walk), a FIFO never blocks;
- only regular files of UTF-8 text are taken; everything else is skipped and
  named, never opened (``lstat`` decides);
- the walk is bounded: at most ``MAX_FILES`` files, ``MAX_FILE_BYTES`` per
  file and ``MAX_TOTAL_BYTES`` in all (an adoption over a limit raises
  ``FolderTooLarge`` and writes nothing).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .. import errors
from ..backends import STORE_FILE, WORKTREE_DIR
from ..core.paths import normalize
from ..repo.ops import Write
from ..repo.repository import Repository
from .read import file_kind

log = logging.getLogger("memrev")

MAX_FILES = 100_000
MAX_FILE_BYTES = 16 << 20
MAX_TOTAL_BYTES = 256 << 20
MAX_NAMED_SKIPS = 1000  # the adoption commit names at most this many skipped entries (and counts all)

ADOPT_AUTHOR = "memrev adopt"
# What memrev itself keeps in a folder: never content, never adopted, never mirrored.
RESERVED = frozenset(
    {WORKTREE_DIR, STORE_FILE, f"{STORE_FILE}-wal", f"{STORE_FILE}-shm", f"{STORE_FILE}-journal", f"{STORE_FILE}-lock"}
)

# POSIX flags (memrev's folder handling, like ag2's DiskKnowledgeStore, is for Linux and macOS);
# getattr keeps ``import memrev`` working where they do not exist.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW


class Unreadable(Exception):
    """A path on disk that cannot become content; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str  # relative to the folder, as found on disk
    reason: str


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(name: str) -> str:
    """A name from disk as text that can be logged and stored (undecodable bytes and controls escaped)."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def is_reserved(path: str) -> bool:
    """True for memrev's own files at the folder root (``/.memrev``, ``/memrev.db`` ...)."""
    return path[1:].split("/", 1)[0] in RESERVED


def in_folder(path: str) -> bool:
    """True for a store path a working-tree folder shows as its own file: not memrev's own, and no
    ``.`` segment (a store may hold ``/a/./b`` beside ``/a/b``, as ag2's stores may; on disk it
    would be ``/a/b``). The others stay in the store only, never written, never scanned."""
    return not is_reserved(path) and "/./" not in path + "/"


# A file changed within this long of a look may change again inside one timestamp tick
# unseen (coarse filesystems tick in 2 s): it is "racy", and compared by content next time.
RACY_NS = 2_000_000_000


def fingerprint(st: os.stat_result) -> tuple[int, int, int, int]:
    """What says a file is unchanged without reading it (as git's index does).

    ``(size, mtime_ns, inode, ctime_ns)``: the ctime catches an edit whose mtime
    was set back, as no user can set the ctime. A file changed less than
    ``RACY_NS`` ago gets ctime ``-1``, equal to no later fingerprint, so its
    next look reads the content (git's racy-clean rule).
    """
    ctime = st.st_ctime_ns
    if time.time_ns() - max(st.st_mtime_ns, ctime) < RACY_NS:
        ctime = -1
    return (st.st_size, st.st_mtime_ns, st.st_ino, ctime)


def unchanged(recorded: tuple[int, int, int, int], st: os.stat_result) -> bool:
    """True if the file with ``st`` is the one ``recorded`` was taken of; never for a racy record."""
    return recorded[3] != -1 and recorded == fingerprint(st)


def walk(root_fd: int) -> Iterator[tuple[str, os.stat_result | None, str | None]]:
    """Every entry under the folder open at ``root_fd``, sorted, without following links.

    Yields ``(memrev path, lstat, None)`` for regular files and ``(relative
    name, None, reason)`` for anything skipped. memrev's own files are left out.
    """
    yield from _walk_dir(root_fd, "")


def _walk_dir(dir_fd: int, prefix: str) -> Iterator[tuple[str, os.stat_result | None, str | None]]:
    with os.scandir(dir_fd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        rel = f"{prefix}/{name}"
        if not prefix and name in RESERVED:
            continue
        try:
            path = normalize(rel)
            if path != rel:
                raise errors.InvalidPath("name changes under normalization")
        except errors.InvalidPath:
            yield printable(rel), None, "name memrev cannot store as a path"
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while we looked
        except OSError as e:  # a directory that can be listed but not entered (mode 444)
            yield rel, None, f"cannot be read ({e.strerror})"
            continue
        if stat.S_ISREG(st.st_mode):
            yield path, st, None
        elif stat.S_ISDIR(st.st_mode):
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as e:
                yield rel, None, f"directory cannot be opened ({e.strerror})"
                continue
            try:
                yield from _walk_dir(child, path)
            finally:
                os.close(child)
        else:
            yield rel, None, file_kind(st.st_mode)


@contextlib.contextmanager
def open_folder(folder: str | os.PathLike[str]) -> Iterator[int]:
    fd = os.open(folder, _DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def open_parent(root_fd: int, segments: list[str], *, create: bool = False) -> int:
    """A descriptor of the directory ``segments`` under the root, never through a symlink.

    With ``create`` missing directories are made. The caller closes the result.
    """
    fd = os.dup(root_fd)
    try:
        for name in segments:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_text_file(root_fd: int, path: str, limit: int = MAX_FILE_BYTES) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular UTF-8 file at memrev ``path``, and its ``fstat``.

    Raises ``FileNotFoundError`` when nothing is there and ``Unreadable`` for
    anything that cannot become content (checked on the open descriptor).
    """
    segments = path[1:].split("/")
    try:
        parent = open_parent(root_fd, segments[:-1])
    except NotADirectoryError:
        raise FileNotFoundError(path) from None
    except OSError as e:
        if e.errno == errno.ELOOP:  # a symlink where a directory was
            raise Unreadable("parent is a symbolic link (not followed)") from None
        if isinstance(e, PermissionError):
            raise Unreadable(f"cannot be read ({e.strerror})") from None
        raise
    try:
        try:
            fd = os.open(segments[-1], _FILE_FLAGS, dir_fd=parent)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise Unreadable("symbolic link (not followed)") from None
            if isinstance(e, PermissionError):  # a mode-000 file, or a directory not to be entered
                raise Unreadable(f"cannot be read ({e.strerror})") from None
            raise
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise Unreadable("directory")
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(file_kind(st.st_mode))
        if st.st_size > limit:
            raise Unreadable(f"larger than {limit} bytes")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise Unreadable(f"larger than {limit} bytes")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("not UTF-8 text (binary)") from None
    return data, st


@dataclass
class FolderContent:
    files: dict[str, bytes]
    stats: dict[str, os.stat_result]
    skipped: list[Skipped]


def read_folder(
    folder: str | os.PathLike[str],
    *,
    max_files: int | None = None,
    max_total_bytes: int | None = None,
    max_file_bytes: int | None = None,
) -> FolderContent:
    """Every regular UTF-8 file under ``folder`` (bounded; module limits by default), and what was skipped."""
    max_files = MAX_FILES if max_files is None else max_files
    max_total_bytes = MAX_TOTAL_BYTES if max_total_bytes is None else max_total_bytes
    max_file_bytes = MAX_FILE_BYTES if max_file_bytes is None else max_file_bytes
    out = FolderContent({}, {}, [])
    total = 0
    with open_folder(folder) as root:
        for path, st, reason in walk(root):
            if st is not None:
                try:
                    data, fst = read_text_file(root, path, max_file_bytes)
                except FileNotFoundError:
                    continue
                except Unreadable as e:
                    reason = e.reason
                else:
                    total += len(data)
                    if len(out.files) >= max_files or total > max_total_bytes:
                        raise errors.FolderTooLarge(
                            f"{folder} holds more than {max_files} files or {max_total_bytes} bytes of text; "
                            "nothing was written (import it in parts with import-dir)"
                        )
                    out.files[path] = data
                    out.stats[path] = fst
                    continue
            out.skipped.append(Skipped(path, reason or "unknown"))
            if len(out.skipped) > max_files:
                raise errors.FolderTooLarge(f"{folder} holds more than {max_files} entries to skip; nothing was written")
    return out


def adopt(repo: Repository, folder: str | os.PathLike[str], branch: str) -> bytes | None:
    """Make the folder's plain files the first commit of ``branch``; the files stay as they are.

    The commit is made only if the branch has no commit yet (compare-and-swap
    on an empty head), so of two processes adopting at once one commits and
    the other finds that commit. Returns the new commit id, or ``None`` when
    there was nothing to adopt or another process won.
    """
    root = os.path.realpath(folder)
    content = read_folder(root)
    for s in content.skipped[:MAX_NAMED_SKIPS]:
        log.warning("adopting %s: skipped %s: %s", root, s.path, s.reason)
    if len(content.skipped) > MAX_NAMED_SKIPS:
        log.warning("adopting %s: skipped %d more", root, len(content.skipped) - MAX_NAMED_SKIPS)
    if not content.files:
        return None
    meta = {
        "adopted_from": root,
        "skipped": [{"path": s.path, "reason": s.reason} for s in content.skipped[:MAX_NAMED_SKIPS]],
        "skipped_count": len(content.skipped),
    }
    ops = [Write(path, data) for path, data in sorted(content.files.items())]
    message = f"adopt {len(ops)} files from folder {root}"
    try:
        result = repo.commit(branch, ops, author=ADOPT_AUTHOR, message=message, meta=meta, expect_head=None)
    except errors.TransientConflict:
        raise  # the database stayed locked: nothing was decided, let the caller see it
    except errors.ConcurrentUpdate:
        return None  # another process adopted the folder (or committed) first
    return result.id


def adoption_commit(repo: Repository, head: bytes | None) -> bytes | None:
    """The root commit of ``head``'s first-parent line, if it is an adoption."""
    commit = head
    while commit is not None:
        data = repo.commit_data(commit)[1]
        if not data.parents:
            return commit if "adopted_from" in data.meta else None
        commit = data.parents[0]
    return None
