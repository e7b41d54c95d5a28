"""The working tree's write-out (a part of ``worktree.py``): the head's version of each path put in
place, only ever with committed content, journaled first.

Before memrev renames or unlinks a file it records the hash it is about to put there (``pending``,
the intent journal), writes the content to a temporary name in ``.memrev/tmp/`` (through that
directory's descriptor) and renames it into place. A file memrev could not store (``_kept`` by the
scan) is never overwritten or unlinked: the head's file waits (``blocked``) until it is moved.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import uuid

from .adopt import fingerprint, open_folder, open_parent
from .worktree_db import ABSENT, Manifest

log = logging.getLogger("memrev")


class WriteOut(Manifest):
    """The part of ``WorkTree`` that writes the head's files into the folder."""

    _durability: str
    _tmp_fd: int  # .memrev/tmp, opened by descriptor (worktree_safety.own_dirs)
    _kept: set[str]  # unstorable files the last scan found where the head has a change: never replaced

    def _write_head(self, paths: list[str], head: bytes | None) -> None:
        """Journal the intents, put the head's version of each path in place, record the result."""
        plan: list[tuple[str, bytes | None, str | None]] = []
        held: list[tuple[str, str | None, tuple[int, int, int, int], int]] = []
        for path in paths:
            entry = self._repo.entry_at(head, path)
            row = self._row(path)
            if path in self._kept:
                # A file memrev could not store stands there: never overwrite or unlink it. The
                # head's file waits (blocked: tried again at every sync) until it is moved.
                if entry is not None or row.sha is not None:
                    self._warn_once(path, "not a file memrev can store; the head's version is not written over it")
                held.append((path, None, (-1, -1, -1, -1), 1 if entry is not None else 0))
                continue
            if entry is None:
                if row.sha is not None or row.blocked or row.pending is not None:
                    plan.append((path, None, None))
                continue
            sha = self._entry_sha(entry)
            if row.sha != sha or row.blocked or row.pending is not None:
                plan.append((path, self._repo.content(entry.oid), sha))
        if not plan:
            self._record(held, synced=head)
            return
        with self._transaction():
            for path, _, want in plan:
                self._db.execute(
                    "INSERT INTO files(path, pending) VALUES (?, ?) ON CONFLICT(path) DO UPDATE SET pending=excluded.pending",
                    (path, want or ABSENT),
                )
        done = []
        # Removals first: a file may be waiting for the directory a removal empties.
        plan.sort(key=lambda item: (item[1] is not None, item[0]))
        with open_folder(self.folder) as root:
            for path, data, want in plan:
                done.append(self._put(root, path, data, want))
        self._record(held + done, synced=head)

    def _put(self, root: int, path: str, data: bytes | None, sha: str | None) -> tuple[str, str | None, tuple[int, int, int, int], int]:
        segments = path[1:].split("/")
        try:
            if data is None:
                _remove(root, segments)
                return path, None, (-1, -1, -1, -1), 0
            return path, sha, self._place(root, segments, data), 0
        except OSError as e:
            # A file where a directory must go or the reverse (a store may hold /a and
            # /a/b; a folder cannot): the database keeps it, the folder cannot show it.
            log.debug("working tree %s: cannot place %s: %s", self.folder, path, e)
            return path, None, (-1, -1, -1, -1), 1 if data is not None else 0

    def _place(self, root: int, segments: list[str], data: bytes) -> tuple[int, int, int, int]:
        parent = open_parent(root, segments[:-1], create=True)
        try:
            mode = None  # a new file gets 0o666 less the umask, as DiskKnowledgeStore's would
            with contextlib.suppress(OSError):
                old = os.stat(segments[-1], dir_fd=parent, follow_symlinks=False)
                if stat.S_ISREG(old.st_mode):
                    mode = stat.S_IMODE(old.st_mode)  # a rewrite keeps the file's permissions
            tmp = f"w-{uuid.uuid4().hex}"
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666, dir_fd=self._tmp_fd
            )
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if self._durability == "full":
                    os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.replace(tmp, segments[-1], src_dir_fd=self._tmp_fd, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=self._tmp_fd)
                raise
            if self._durability == "full":
                os.fsync(parent)
            return fingerprint(os.stat(segments[-1], dir_fd=parent, follow_symlinks=False))
        finally:
            os.close(parent)


def _remove(root: int, segments: list[str]) -> None:
    """Unlink the file at ``segments`` and prune the directories it leaves empty; a directory or a
    symbolic link standing there is not memrev's to remove (``IsADirectoryError``)."""
    fds = [os.dup(root)]
    try:
        for name in segments[:-1]:
            fds.append(open_parent(fds[-1], [name]))
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(segments[-1], dir_fd=fds[-1], follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):  # not memrev's to remove
                raise IsADirectoryError(segments[-1])
            os.unlink(segments[-1], dir_fd=fds[-1])
        # Prune the directories this leaves empty, as DiskKnowledgeStore.delete does.
        for depth in range(len(segments) - 1, 0, -1):
            try:
                os.rmdir(segments[depth - 1], dir_fd=fds[depth - 1])
            except OSError:
                break
    except (FileNotFoundError, NotADirectoryError):
        pass
    finally:
        for fd in fds:
            os.close(fd)
