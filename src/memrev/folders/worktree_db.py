"""The working tree's bookkeeping database, ``.memrev/worktree.db`` (a part of ``worktree.py``).

It holds the mode (``enabled``, ``branch``), the commit the files were last brought to (``synced``),
the *manifest* (per file: the content hash memrev last knew on disk, its ``stat`` fingerprint, the
intent journal's ``pending`` hash, ``blocked``) and the ``warned`` table (paths the log already named
as left alone). It is derived state: a file that cannot be read is moved aside and made anew
(``connect``), and a manifest the store does not match is dropped (``Manifest._forget``), unless
a purge's record names its synced commit: then it is followed (``Manifest._synced_state``).

``Manifest`` is the part of ``WorkTree`` that reads and writes it; ``WorkTree`` sets the attributes
it declares.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from .. import errors
from ..backends import WORKTREE_DIR
from ..core import trees
from ..repo.cache import LRU
from ..repo.repository import Repository
from .adopt import adoption_commit
from .worktree_merge import refuse_diverged
from .worktree_safety import LOCK_FILE

log = logging.getLogger("memrev")

CONFIG_FILE = "worktree.db"
ABSENT = "-"  # a pending intent to delete

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS config(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # sha NULL: nothing memrev knows of on disk; blocked 1: the head's file could not be placed
    # (a directory or a file stands where it goes) and is tried again at every sync.
    """CREATE TABLE IF NOT EXISTS files(
        path TEXT PRIMARY KEY, sha TEXT, pending TEXT, size INTEGER NOT NULL DEFAULT -1,
        mtime_ns INTEGER NOT NULL DEFAULT -1, ino INTEGER NOT NULL DEFAULT -1, blocked INTEGER NOT NULL DEFAULT 0,
        ctime_ns INTEGER NOT NULL DEFAULT -1
    )""",
    # Paths the log already named as left alone (and why): warned once, not at every open.
    "CREATE TABLE IF NOT EXISTS warned(path TEXT NOT NULL, reason TEXT NOT NULL, PRIMARY KEY(path, reason))",
]


def content_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def connect(path: Path, *, check: bool = False) -> sqlite3.Connection:
    """The bookkeeping database (``check``: every page read, for the tree's own long-lived connection). It is derived state: when the file cannot be read (garbage,
    truncated), it is moved aside and made anew, with a WARNING, and the tree rebuilt from the
    store and the folder (``WorkTree._synced``); what it said of the mode is kept if readable."""
    try:
        return _connect_checked(path, check)
    except sqlite3.DatabaseError as e:
        if not _damaged(e):
            raise  # busy, permissions, a full disk: not the file's fault
        return _rebuild(path, e)


def _connect_checked(path: Path, check: bool = True) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=60.0, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        for statement in _SCHEMA:
            db.execute(statement)
        if "ctime_ns" not in {r[1] for r in db.execute("PRAGMA table_info(files)")}:
            # A manifest of an older memrev: no row's fingerprint matches, so each file is read once.
            with contextlib.suppress(sqlite3.OperationalError):  # another process added it first
                db.execute("ALTER TABLE files ADD COLUMN ctime_ns INTEGER NOT NULL DEFAULT -1")
        db.execute("SELECT key, value FROM config").fetchall()  # what every open reads
        # Reads every page (0.17 s for 100k files): a truncated file is found here, not halfway through a reconcile.
        verdict = db.execute("PRAGMA quick_check(1)").fetchone()[0] if check else "ok"
        if verdict != "ok":
            raise sqlite3.DatabaseError(f"database disk image is malformed ({verdict})")
    except BaseException:
        db.close()
        raise
    return db


def _damaged(e: sqlite3.DatabaseError) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
    return not isinstance(e, sqlite3.OperationalError) or "malformed" in str(e)


def _rebuild(path: Path, cause: Exception) -> sqlite3.Connection:
    """``_rebuild_locked``; a ``.memrev/`` memrev may not write to (read-only, another
    user's) is ``ReadOnlyStore``: the damaged manifest cannot be moved aside there."""
    try:
        return _rebuild_locked(path, cause)
    except OSError as e:
        if not isinstance(e, PermissionError) and e.errno != errno.EROFS:
            raise  # a full disk, an I/O error: not a folder memrev may not write to
        raise errors.ReadOnlyStore(
            f"working tree {path.parent.parent}: its bookkeeping {path} cannot be read ({cause}) "
            f"and cannot be rebuilt: {path.parent} is not writable ({e.strerror}); make it writable "
            "and open the store again"
        ) from None


def _rebuild_locked(path: Path, cause: Exception) -> sqlite3.Connection:
    import fcntl  # POSIX only, as the working tree is

    mode: list[tuple[str, str]] = []
    lock = os.open(path.parent / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process moves it aside; the others find the new one
        try:
            return _connect_checked(path)
        except sqlite3.DatabaseError as e:
            if not _damaged(e):
                raise
        with contextlib.suppress(sqlite3.DatabaseError):  # the mode, if that much is still readable
            old = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
            try:
                mode = old.execute("SELECT key, value FROM config WHERE key IN ('enabled', 'branch')").fetchall()
            finally:
                old.close()
        aside = path.with_name(f"{path.name}.damaged-{uuid.uuid4().hex[:8]}")
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{path}{suffix}", f"{aside}{suffix}")
        lost = "" if mode else "; which branch it followed was lost: open with worktree=True to turn it on again"
        log.warning(
            "working tree %s: its bookkeeping %s could not be read (%s); moved it to %s and rebuilt it "
            "from the store and the folder (files that differ from the head are committed as outside edits)%s",
            path.parent.parent, path, cause, aside.name, lost,
        )
        db = _connect_checked(path)
        # synced '': memrev knows nothing of the files, so none is taken for its own (see WorkTree._forget).
        db.executemany("INSERT OR REPLACE INTO config(key, value) VALUES (?, ?)", [*mode, ("synced", "")])
        return db
    finally:
        os.close(lock)


def config_path(folder: str | os.PathLike[str]) -> Path:
    return Path(folder) / WORKTREE_DIR / CONFIG_FILE


def persisted_branch(folder: str | os.PathLike[str]) -> str | None:
    """The branch the folder's working tree follows, or ``None`` when it is off.

    The mode is stored in the folder (``.memrev/worktree.db``), so every handle
    and process that opens the folder, the CLI included, keeps the files up to date.
    """
    path = config_path(folder)
    if not path.exists():
        return None
    db = connect(path)
    try:
        rows = dict(db.execute("SELECT key, value FROM config WHERE key IN ('enabled', 'branch')").fetchall())
    finally:
        db.close()
    return rows.get("branch") if rows.get("enabled") == "1" else None


def set_mode(folder: str | os.PathLike[str], branch: str | None) -> None:
    """Turn the working tree on (following ``branch``) or off (``None``; files stay as they are)."""
    path = config_path(folder)
    if branch is None and not path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    db = connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT OR REPLACE INTO config(key, value) VALUES ('enabled', ?)", ("0" if branch is None else "1",))
        if branch is not None:
            db.execute("INSERT OR REPLACE INTO config(key, value) VALUES ('branch', ?)", (branch,))
        db.execute("COMMIT")
    finally:
        db.close()


class Row:
    __slots__ = ("blocked", "fp", "pending", "sha")

    def __init__(self, sha: str | None, pending: str | None, fp: tuple[int, int, int, int], blocked: int) -> None:
        self.sha, self.pending, self.fp, self.blocked = sha, pending, fp, blocked

    def known(self) -> set[str | None]:
        """States of the file that memrev itself produced: the last known one and the one in flight."""
        out = {self.sha}
        if self.pending is not None:
            out.add(None if self.pending == ABSENT else self.pending)
        return out


NO_ROW = Row(None, None, (-1, -1, -1, -1), 0)


class Manifest:
    """The part of ``WorkTree`` that keeps its manifest: what memrev knows is on disk, the commit
    the files show (``synced``, seeded the first time the tree is on) and the paths warned of."""

    folder: str
    branch: str
    _repo: Repository
    _db: sqlite3.Connection
    _shas: LRU  # blob id -> content hash; blobs are immutable

    def _config(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM config WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def _row(self, path: str) -> Row:
        r = self._db.execute("SELECT sha, pending, size, mtime_ns, ino, ctime_ns, blocked FROM files WHERE path=?", (path,)).fetchone()
        return NO_ROW if r is None else Row(r[0], r[1], (r[2], r[3], r[4], r[5]), r[6])

    def _record(
        self, rows: Iterable[tuple[str, str | None, tuple[int, int, int, int], int]], *, synced: bytes | None | bool = False
    ) -> None:
        """Set what memrev knows is on disk (a path known absent and not blocked has no row),
        and with ``synced`` the commit the files now show, in the same transaction."""
        with self._transaction():
            if synced is not False:
                self._db.execute(
                    "INSERT OR REPLACE INTO config(key, value) VALUES ('synced', ?)",
                    (synced.hex() if isinstance(synced, bytes) else "",),
                )
            for path, sha, fp, blocked in rows:
                if sha is None and not blocked:
                    self._db.execute("DELETE FROM files WHERE path=?", (path,))
                else:
                    self._db.execute(
                        "INSERT OR REPLACE INTO files(path, sha, pending, size, mtime_ns, ino, ctime_ns, blocked) "
                        "VALUES (?,?,NULL,?,?,?,?,?)",
                        (path, sha, *fp, blocked),
                    )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _synced(self) -> bytes | None:
        """The commit the files were last brought to (see ``_synced_state``)."""
        return self._synced_state()[0]

    def _synced_state(self) -> tuple[bytes | None, bool]:
        """The commit the files were last brought to, seeding the manifest the first time, and
        whether it was *followed* through a purge.

        The first time the tree is on, what memrev last knew of the files is
        the adoption commit's files if the store began by adopting this folder
        (they were left on disk then), else nothing.

        A synced commit the store no longer has is looked up in the purge records
        (``_followed``): a purge by another handle rewrote it while this manifest was not
        looking, so the commit it is now is taken as synced, and ``True`` says so: every
        file of the manifest is then a candidate (``WorkTree._settle``), and one whose
        content is still what the manifest recorded is memrev's (rewritten to the head,
        never committed back); only a file that differs from the record is an outside
        edit. The manifest keeps naming the old commit until the write-out records the
        head, so a crash before that follows the purge again. No record naming it (a
        database restored from a backup): ``_forget``.
        """
        synced = self._config("synced")
        if synced is not None:
            try:
                commit = bytes.fromhex(synced) if synced else None
            except ValueError as e:
                self._forget(e)
                return None, False
            try:
                self._repo.root(commit)  # the store may be older (a backup) or purged since
                return commit, False
            except errors.RevisionNotFound as e:
                assert commit is not None  # the empty tree is always there
                purged, followed = self._followed(commit)
                if purged:
                    return followed, True
                self._forget(e)
                return None, False
        base = adoption_commit(self._repo, self._repo.head(self.branch))
        rows = []
        if base is not None:
            refuse_diverged(self._repo, self.branch, self.folder, base)
            rows = [(p, self._entry_sha(e), (-1, -1, -1, -1), 0) for p, e in trees.walk(self._repo, self._repo.root(base))]
        self._record(rows, synced=base)
        return base, False

    def _followed(self, old: bytes) -> tuple[bool, bytes | None]:
        """(a purge record names ``old``, a synced commit the store no longer has; the commit
        that purge made of it). A commit the purge dropped (its changes all purged) had the
        tree of its nearest kept ancestor, whose new id the records do not keep: the branch's
        head is taken (the files the manifest recorded are memrev's, rewritten to it)."""
        self._repo.fresh()  # the records as they are now, not as this handle's caches saw them
        try:
            hit = self._repo.purge_map().follow(old.hex())
        except errors.IntegrityError as e:
            log.warning("working tree %s: the purge records cannot be read (%s)", self.folder, e)
            return False, None
        if hit is None:
            return False, None
        if hit.new is not None:
            new = bytes.fromhex(hit.new)
            try:
                self._repo.root(new)
                return True, new
            except errors.RevisionNotFound:
                pass  # gone too (a later purge dropped it): as a dropped commit
        return True, self._repo.head(self.branch)

    def _forget(self, cause: Exception) -> None:
        """Drop a manifest the store does not match (a database restored from a backup names
        no such synced commit): know nothing of the files, so every file that differs from the
        head is committed as an outside edit, and every byte stays in history."""
        log.warning(
            "working tree %s: its bookkeeping does not match the store (%s), as after restoring the database "
            "from a backup; rebuilt it from the store and the folder (files that differ from the head are "
            "committed as outside edits)",
            self.folder, cause,
        )
        with self._transaction():
            self._db.execute("DELETE FROM files")
        self._record([], synced=None)

    def _entry_sha(self, entry) -> str:
        sha = self._shas.get(entry.oid)
        if sha is None:
            sha = content_sha(self._repo.content(entry.oid))
            self._shas.put(entry.oid, sha)
        return sha

    def _warn_once(self, path: str, reason: str) -> None:
        """Log a skipped path once: when first skipped, remembered in ``worktree.db`` across opens."""
        if self._db.execute("INSERT OR IGNORE INTO warned(path, reason) VALUES (?, ?)", (path, reason)).rowcount:
            log.warning("working tree %s: leaving %s alone: %s", self.folder, path, reason)
