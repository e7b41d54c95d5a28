"""The working tree's scan (a part of ``worktree.py``): what changed on disk behind memrev's back
becomes commits by ``OUTSIDE_AUTHOR``, in pieces of about ``OUTSIDE_PIECE_BYTES``.

A file is *memrev's* when its hash is the manifest's known one or its pending one; anything else is
an outside change. A file memrev cannot store (binary, a symbolic link, too big, unreadable) is left
alone, named once in the log, and kept (``_kept``): the write-out never replaces or removes it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field

from ..repo.ops import Delete, Op, Write
from .adopt import MAX_FILE_BYTES, Unreadable, fingerprint, open_folder, open_parent, read_text_file, unchanged, walk
from .worktree_db import NO_ROW, Manifest, Row, content_sha
from .worktree_merge import merged_outside
from .worktree_safety import is_link

OUTSIDE_AUTHOR = "outside"
# Outside edits are committed in pieces of about this many bytes of text (at least one file), so a
# reconcile holds one piece in memory, not every changed file of the folder.
OUTSIDE_PIECE_BYTES = 32 << 20


@dataclass
class _Piece:
    """What ``Scan._read_piece`` read of one piece of the candidates, for ``Scan._commit_outside``."""

    # The outside edits, merged with the head by kind where they merge.
    ops: list[Op | None] = field(default_factory=list)
    # Manifest rows of files that already hold the head's version: recorded, nothing committed.
    same: list[tuple[str, str | None, tuple[int, int, int, int], int]] = field(default_factory=list)
    # Warned of once, storable now: warned of again if skipped later.
    storable: list[tuple[str]] = field(default_factory=list)
    # Manifest rows once the commit is made: what the files hold.
    committed: list[tuple[str, str | None, tuple[int, int, int, int], int]] = field(default_factory=list)
    more: bool = False  # candidates were left for another piece


class Scan(Manifest):
    """The part of ``WorkTree`` that scans the folder and commits outside edits."""

    _unreadable: dict[str, tuple[int, int, int, int]]  # skipped files, by fingerprint: not read again
    _kept: set[str]  # unstorable files the last scan found where the head has a change: never replaced

    def _unstorable(self, root: int, path: str) -> str | None:
        """Why the file at ``path`` cannot be content, or ``None`` (absent, storable, or a directory)."""
        if is_link(root, path):
            return "a symbolic link"
        try:
            self._disk_state(root, path, self._row(path))
        except Unreadable as e:
            return None if e.reason == "directory" or e.reason.startswith("parent") else e.reason
        except OSError:
            return None
        return None

    def _changed_on_disk(self) -> set[str]:
        """Paths whose file differs from the manifest by ``stat``, or vanished, or appeared."""
        rows = {
            r[0]: (r[1], (r[2], r[3], r[4], r[5]))
            for r in self._db.execute("SELECT path, sha, size, mtime_ns, ino, ctime_ns FROM files")
        }
        changed: set[str] = set()
        seen: set[str] = set()
        skipped: set[str] = set()
        with open_folder(self.folder) as root:
            for path, st, reason in walk(root):
                if st is None:
                    skipped.add(path)
                    self._warn_once(path, reason or "skipped")
                    continue
                seen.add(path)
                if unchanged(self._unreadable.get(path, NO_ROW.fp), st):
                    continue
                row = rows.get(path)
                if row is None or row[0] is None or not unchanged(row[1], st):
                    changed.add(path)
        changed |= {p for p, (sha, _) in rows.items() if sha is not None and p not in seen}
        # A path no longer there is warned of again if it comes back unstorable.
        gone = [(p,) for (p,) in self._db.execute("SELECT DISTINCT path FROM warned") if p not in seen and p not in skipped]
        if gone:
            with self._transaction():
                self._db.executemany("DELETE FROM warned WHERE path=?", gone)
        return changed

    def _disk_state(self, root: int, path: str, row: Row) -> tuple[str | None, tuple[int, int, int, int]]:
        """(content hash or ``None`` if absent, fingerprint); ``Unreadable`` if it cannot be content.

        A directory or a symbolic link at the path, or on the way to it, is no
        file: the path is absent (a file replaced by a directory or a link is
        a removal), and what stands there is left alone.
        """
        segments = path[1:].split("/")
        try:
            parent = open_parent(root, segments[:-1])
        except (FileNotFoundError, NotADirectoryError):
            return None, NO_ROW.fp
        except OSError as e:
            if e.errno == errno.ELOOP:  # a symbolic link where a directory was
                return None, NO_ROW.fp
            if isinstance(e, PermissionError):  # not absent: what is there cannot be read
                raise Unreadable(f"cannot be read ({e.strerror})") from None
            raise
        try:
            st = os.stat(segments[-1], dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None, NO_ROW.fp
        except PermissionError as e:  # a directory that can be listed but not entered
            raise Unreadable(f"cannot be read ({e.strerror})") from None
        finally:
            os.close(parent)
        if stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            return None, NO_ROW.fp
        if stat.S_ISREG(st.st_mode) and row.sha is not None and unchanged(row.fp, st):
            return row.sha, row.fp
        try:
            data, fst = read_text_file(root, path, MAX_FILE_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return None, (-1, -1, -1, -1)
        return content_sha(data), fingerprint(fst)

    def _commit_outside(self, paths: list[str], head: bytes | None) -> tuple[bool, bool]:
        """Commit the candidates the disk changed behind memrev's back, at most one piece of
        ``OUTSIDE_PIECE_BYTES``: (a commit was made, candidates were left for another piece)."""
        piece = self._read_piece(paths, head)
        if piece.storable:
            with self._transaction():
                self._db.executemany("DELETE FROM warned WHERE path=?", piece.storable)
        if piece.same:
            self._record(piece.same)
        made = [op for op in piece.ops if op is not None]
        if not made:
            return False, False
        changed = [op.path for op in made]
        message = f"outside edit: {changed[0]}" if len(changed) == 1 else f"outside edit: {len(changed)} paths"
        self._repo.commit(
            self.branch, made, author=OUTSIDE_AUTHOR, message=message, meta={"outside": True, "folder": self.folder}
        )
        # The files hold what was just committed: recorded so the next piece does not read them again
        # (after the commit, never before: a crash in between must leave them outside edits).
        self._record(piece.committed)
        return True, piece.more

    def _read_piece(self, paths: list[str], head: bytes | None) -> _Piece:
        """Read the candidates on disk, in order, until a piece of ``OUTSIDE_PIECE_BYTES`` is held:
        what to commit and the manifest rows around it (unstorable files skipped and ``_kept``)."""
        piece = _Piece()
        warned = {p for (p,) in self._db.execute("SELECT DISTINCT path FROM warned")}
        held = 0
        synced = self._synced()
        self._kept = set()
        with open_folder(self.folder) as root:
            for path in paths:
                if held >= OUTSIDE_PIECE_BYTES:
                    piece.more = True
                    break
                row = self._row(path)
                try:
                    disk, fp = self._disk_state(root, path, row)
                except Unreadable as e:
                    self._skip(path, e.reason)
                    if e.reason != "directory" and not e.reason.startswith("parent"):
                        self._kept.add(path)  # its bytes are in no commit: _write_head leaves it be
                    continue
                if disk is None and is_link(root, path):
                    self._kept.add(path)  # the user's link: its removal is committed, the link stays
                if path in warned:
                    piece.storable.append((path,))
                entry = self._repo.entry_at(head, path)
                want = None if entry is None else self._entry_sha(entry)
                if disk == want:
                    if row.sha != disk or row.fp != fp or row.pending is not None:
                        piece.same.append((path, disk, fp, 0))
                elif disk not in row.known():
                    op, read_fp = self._outside_op(root, path, disk)
                    if op is not None:  # None: changed again while we looked; the next scan sees it
                        read_sha = content_sha(op.data) if isinstance(op, Write) else None
                        merged = merged_outside(self._repo, op, path, synced, head)
                        if merged is not None:
                            piece.ops.append(merged)
                            held += len(merged.data) if isinstance(merged, Write) else 0
                        piece.committed.append((path, read_sha, read_fp, 0))  # what the file holds
        return piece

    def _outside_op(self, root: int, path: str, disk: str | None) -> tuple[Write | Delete | None, tuple[int, int, int, int]]:
        """The op that commits what is on disk, and the fingerprint of what it read."""
        if disk is None:
            return Delete(path), NO_ROW.fp
        try:
            data, st = read_text_file(root, path, MAX_FILE_BYTES)
        except (FileNotFoundError, Unreadable):
            return None, NO_ROW.fp  # changed again while we looked; the next scan sees it
        return Write(path, data), fingerprint(st)


    def _skip(self, path: str, reason: str) -> None:
        """A file that cannot be content stays untouched, and is not read again until it changes."""
        with contextlib.suppress(OSError):
            self._unreadable[path] = fingerprint(os.stat(os.path.join(self.folder, path[1:]), follow_symlinks=False))
        if reason != "directory":  # a directory where the head has a file: shown as blocked, not an error
            self._warn_once(path, reason)
