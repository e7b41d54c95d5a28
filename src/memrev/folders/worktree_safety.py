"""The working tree's lock and its safety checks (a part of ``worktree.py``; see its docstring).

memrev's own directories ``.memrev`` and ``.memrev/tmp`` are opened by descriptor, never through a
symbolic link, and must belong to this user; temporary files are listed, written and unlinked through
the descriptor of ``tmp``; ``.memrev/worktree.lock`` is never opened through a link planted at its name;
and a symbolic link standing at a path of the folder is never replaced or removed by memrev.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from .. import errors
from ..backends import WORKTREE_DIR
from .adopt import open_parent

LOCK_FILE = "worktree.lock"


def own_dir(name: str, dir_fd: int | None, where: str) -> int:
    """A descriptor of memrev's own directory ``name``, made if missing, never through a symlink."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    except (NotADirectoryError, OSError) as e:
        if isinstance(e, (NotADirectoryError, FileNotFoundError)) or e.errno == errno.ELOOP:
            raise errors.UnsafeWorkTree(f"{where} is not a directory (a symbolic link or a file): memrev uses nothing through it") from e
        raise
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise errors.UnsafeWorkTree(f"{where} is owned by uid {st.st_uid}, not by this user ({os.geteuid()}): memrev uses nothing in it")
    return fd


def own_dirs(folder: str) -> int:
    """Check ``.memrev`` and ``.memrev/tmp`` (made if missing); the descriptor of ``tmp``."""
    path = os.path.join(folder, WORKTREE_DIR)
    meta = own_dir(path, None, path)
    try:
        return own_dir("tmp", meta, os.path.join(path, "tmp"))
    finally:
        os.close(meta)


def open_lock(meta: Path) -> int:
    """A descriptor of ``meta/worktree.lock`` (made if missing) for ``flock``."""
    try:  # never through a link planted at the name (.memrev itself was checked just above)
        return os.open(meta / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise errors.UnsafeWorkTree(f"{meta / LOCK_FILE} is a symbolic link: memrev opens nothing through it") from None


@contextlib.contextmanager
def locked(mutex: threading.Lock, lock_fd: int) -> Iterator[None]:
    """Hold ``mutex`` (the threads of this process) and the ``flock`` on ``lock_fd`` (other processes)."""
    import fcntl  # POSIX only, as the working tree is; imported here so memrev imports everywhere

    with mutex:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)


def is_link(root: int, path: str) -> bool:
    """A symbolic link stands at ``path`` itself (the scan counts it as the file gone; memrev's
    write-out must still never replace or remove it)."""
    segments = path[1:].split("/")
    try:
        parent = open_parent(root, segments[:-1])
    except OSError:
        return False
    try:
        return stat.S_ISLNK(os.stat(segments[-1], dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(parent)


def clear_tmp(tmp_fd: int) -> None:
    """Temporary files of a crashed write (we hold the lock: nobody is writing now)."""
    # Listed and unlinked through the descriptor opened with O_NOFOLLOW: never through a link.
    for name in os.listdir(tmp_fd):
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=tmp_fd)
