"""SQLite backend: the embedded default, one file, stdlib ``sqlite3``, WAL.

One module of ~830 lines on purpose: the schema, its migrations and the
statements on it change together, and much of the length is SQL text.

Writers take SQLite's write lock at the start of the transaction
(``BEGIN IMMEDIATE``), so the branch head read inside the transaction cannot
move before the transaction commits: several processes on one file serialize
there instead of failing with ``database is locked``. Before it they queue on
an ``flock`` of ``<db>-lock`` (``_WriteQueue``): a waiter sleeps in the kernel
until the holder commits, for at most the busy timeout. Readers never block
in WAL mode. WAL checkpoints run in a thread of the handle, behind its
commits (``_CHECKPOINT_BYTES``).

Durability: in WAL mode with ``synchronous=NORMAL`` (``durability="normal"``)
a commit is in the WAL file when the call returns, so it survives the process
being killed; the last commits before a power loss or OS crash may be lost.
``durability="full"`` sets ``synchronous=FULL``: the WAL is fsynced on every
commit.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, cast
from urllib.parse import quote

from ..errors import (
    IntegrityError,
    MemrevError,
    NoStore,
    NotAMemrevStore,
    ReadOnlyStore,
    SchemaTooNew,
    StoreFull,
    TransientConflict,
)
from .base import (
    BackendBase,
    BlobRow,
    ChangeCommit,
    ChangeLinkLike,
    ChangeRow,
    ChangeRowLike,
    CommitRow,
    FirstParentNumber,
    HeadRow,
    PathLogRowLike,
)

APPLICATION_ID = 0x6D656D72  # "memr"

# Position in this list is the schema version (PRAGMA user_version).
# blobs is a rowid table on purpose: its records (compressed payloads) run to
# a few KB, and a WITHOUT ROWID table moves any record over ~1 KB to an
# overflow page of its own; a rowid table keeps up to ~4 KB in the page and
# fills pages in insertion order. Trees stay WITHOUT ROWID: their nodes are
# kept under 1 KB (core/trees.py).
MIGRATIONS: list[str] = [
    """
    CREATE TABLE blobs(
        rowid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, kind TEXT NOT NULL, base BLOB, lineage BLOB,
        start INTEGER NOT NULL, size INTEGER NOT NULL, depth INTEGER NOT NULL,
        data BLOB NOT NULL
    );
    CREATE UNIQUE INDEX blobs_lineage ON blobs(lineage, start) WHERE lineage IS NOT NULL;
    CREATE TABLE trees(id BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
    CREATE TABLE commits(seq INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, parent BLOB, data BLOB NOT NULL);
    CREATE TABLE refs(name TEXT PRIMARY KEY, target BLOB NOT NULL) WITHOUT ROWID;
    CREATE TABLE head(
        branch TEXT NOT NULL, path TEXT NOT NULL, blob BLOB, size INTEGER NOT NULL,
        seq INTEGER NOT NULL, PRIMARY KEY(branch, path)
    ) WITHOUT ROWID;
    CREATE TABLE changes(
        path TEXT NOT NULL, seq INTEGER NOT NULL, prev INTEGER, prev2 INTEGER,
        PRIMARY KEY(path, seq)
    ) WITHOUT ROWID;
    CREATE INDEX changes_by_seq ON changes(seq);
    """,
    # Walks along first parents step by commit number (one rowid lookup a step,
    # not an id index lookup and a row fetch). Directory keys in the change
    # index ("/a/b/", docs/design.md) exist only for commits made from now on:
    # "stale" says so until reindex fills them for the older commits.
    """
    ALTER TABLE commits ADD COLUMN parent_seq INTEGER;
    UPDATE commits SET parent_seq = (SELECT p.seq FROM commits p WHERE p.id = commits.parent) WHERE parent IS NOT NULL;
    CREATE TABLE stale(name TEXT PRIMARY KEY) WITHOUT ROWID;
    INSERT INTO stale(name) SELECT 'directory-keys' WHERE EXISTS (SELECT 1 FROM commits);
    """,
    # First-parent walks (``HEAD~n``) read (seq, parent_seq) pairs, ~270 to a page, instead
    # of whole commit rows, ~30 to a page: HEAD~5000 on a cold page cache read ~170 pages of
    # the commits table, one at a time.
    """
    CREATE INDEX commits_first_parents ON commits(seq, parent_seq);
    """,
]

_BUSY_TIMEOUT_MS = 60_000  # how long a writer waits for another process's write lock
# Checkpoints run behind the writer, never on a committing caller's path (issue 26:
# a wal_checkpoint(RESTART) every ~80 commits landed on one unlucky caller; the mean
# write was 2.7x the median). Writers of every process count the WAL bytes they
# committed since its last restart in one shared count (the first 8 bytes of the
# write queue's lock file, read and written under the lock; the checkpoint thread
# sets it to the truth). The COMMIT that carries that count past another
# _CHECKPOINT_BYTES only wakes its handle's checkpoint thread (_Checkpointer),
# which has its own connection:
# 1. wal_checkpoint(PASSIVE): copies what it can without taking the write lock,
#    so writers of every process keep committing meanwhile (the copy runs in C,
#    without the GIL);
# 2. if the WAL still holds _RESTART_FRAMES or more, it queues for the write lock
#    like a writer (_WriteQueue) and runs wal_checkpoint(RESTART) with the lock
#    free: it copies the few frames committed during step 1 and starts the WAL
#    file over, so the next COMMIT cuts the file back to journal_size_limit.
# Tried before, and why it is not this: PASSIVE alone let four writer processes
# grow the WAL without bound (a writer always committed during the copy, so the
# WAL never restarted: 37-55 MB after 1,200 commits); a checkpoint thread that
# ran RESTART at once fought the writer for the write lock during the whole
# copy. Step 2 holds the lock only for the remainder.
# SQLite's own autocheckpoint stays off but for a net far above: it fires on every
# commit while the WAL holds that many frames, and with several writer processes
# the WAL often cannot restart (another process is reading it at that instant),
# so every commit paid a checkpoint: four processes wrote less than one.
# 1 MB (256 pages): at 96 a single writer paid ~30 % more CPU and ~2 context switches per
# commit for the thread's wake-ups, fsyncs and GIL hand-offs (issue 26, measured against
# 512 and 1,000). Each connection counted only its own commits before the count was
# shared: four writer processes that started together woke their threads together, at
# 4 MB (CI saw 4.8 MB).
_CHECKPOINT_BYTES = 256 * 4096
# 1 MB: above it the thread restarts the WAL. What the writers commit while the thread waits for
# the CPU, the GIL and the write queue comes on top, up to _WAL_PRESSURE_BYTES: a commit that
# finds the shared count there waits (once, bounded) for its own thread's pass before it
# begins (_keep_pace), so the file stays within 4 MB above the database.
_RESTART_FRAMES = 256
_WAL_PRESSURE_BYTES = 3 << 20
_RESTART_WAIT_MS = 200  # how long the thread's RESTART waits for a reader still on old WAL frames
_CLOSE_WAIT_S = 1.0  # how long the thread waits for the write lock to restart the WAL, and close() for the thread
# Each connection counts only its own commits, so writers that each write less
# than that (short-lived processes: the CLI, an agent restarted per task) while
# another connection keeps the store open would never checkpoint: the WAL grew
# without bound (77 MB after 600 handles of 3 small commits each). Two guards:
# a connection that opens on a WAL file grown past journal_size_limit since its
# last restart checkpoints after its first commit (and ``close`` waits for that
# checkpoint), and SQLite's autocheckpoint stays on as a net far above the
# writers' own threshold.
_AUTOCHECKPOINT_NET_PAGES = 10_000
# What a commit's fixed rows cost in WAL bytes beyond the payloads it stores:
# a W1 commit dirties about 12 pages (tests/test_commit_cost.py counts them).
_COMMIT_WAL_BYTES = 12 * 4096
_INDEX_ROW_BYTES = 100  # a head or change row with its index entry, for that estimate
_JOURNAL_SIZE_LIMIT = 4 << 20
_BLOB_COLS = "id, kind, base, lineage, start, size, depth, data"
_SCAN_PAGE = 500
_GC_KEYS = {"commits": "seq", "trees": "id", "blobs": "rowid"}  # each object table's key, for gc's scan in key order


_REFS_AT: dict[int, str] = {}  # get_refs' statement by number of names


def _blob(row: tuple | None) -> BlobRow | None:
    return None if row is None else BlobRow(*row)


def _busy(e: sqlite3.OperationalError) -> bool:
    """Another connection holds the lock (SQLITE_BUSY/SQLITE_LOCKED), by error code, else by wording."""
    name, text = getattr(e, "sqlite_errorname", "") or "", str(e)
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text or "busy" in text


def _operational(e: sqlite3.OperationalError) -> MemrevError:
    """An ``OperationalError`` in memrev's terms, by SQLite's error code, not its wording."""
    name, text = getattr(e, "sqlite_errorname", "") or "", str(e)
    if name.startswith("SQLITE_READONLY"):
        return ReadOnlyStore(f"the store is read-only (read-only mount or no write permission); nothing was written ({text})")
    if name == "SQLITE_FULL":
        return StoreFull(f"the store's disk is full; nothing of this call was written ({text})")
    if _busy(e):
        return TransientConflict(f"the store stayed locked by another writer; nothing was written ({text})")
    return IntegrityError(f"the store file cannot be read: {text}")


class _Translated:
    """sqlite3's errors in memrev's terms: a lock held too long is transient, a damaged file is damage.

    A class rather than a ``@contextmanager`` generator: it wraps every
    statement, a dozen per commit, and a generator-based context manager costs
    several times more to enter and leave.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: object) -> Literal[False]:
        if kind is None:
            return False
        if issubclass(kind, sqlite3.OperationalError):
            raise _operational(e) from None  # type: ignore[arg-type]
        if issubclass(kind, sqlite3.DatabaseError) and not issubclass(kind, sqlite3.IntegrityError):
            raise IntegrityError(f"the store file is damaged: {e}") from None
        return False


_TRANSLATED = _Translated()


def _translated() -> _Translated:
    return _TRANSLATED


def _uri(path: Path, query: str) -> str:
    return f"file:{quote(str(path.absolute()))}?{query}"


def _cannot_open(e: sqlite3.OperationalError) -> bool:
    """SQLite could not open the file, or the files next to it (``-wal``, ``-shm``), for writing."""
    name = getattr(e, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN"))


class WriteCounts:
    """What one backend's writes did, counted (tests and the benchmark read them, never time)."""

    __slots__ = (
        "begin_attempts", "checkpoint_errors", "checkpoint_waits", "checkpoints_behind", "checkpoints_due",
        "checkpoints_in_commit", "lock_waits",
    )

    def __init__(self) -> None:
        self.begin_attempts = 0  # BEGIN IMMEDIATE statements tried
        self.lock_waits = 0  # write transactions that queued behind another writer
        self.checkpoints_in_commit = 0  # WAL checkpoints run on a committing caller's path (whole-store work only)
        self.checkpoints_due = 0  # commits after which the checkpoint thread was woken
        self.checkpoints_behind = 0  # WAL checkpoints run by the checkpoint thread, after the caller was answered
        self.checkpoint_waits = 0  # commits that waited for that thread to catch up (back-pressure, _keep_pace)
        self.checkpoint_errors = 0  # passes of that thread that failed (disk full, I/O): the next one copies it


class _WriteQueue:
    """Where writers of every process queue for SQLite's write lock: an ``flock`` on ``<db>-lock``.

    Taken before ``BEGIN IMMEDIATE``, released after ``COMMIT``. A waiter
    sleeps in the kernel and is woken when the holder lets go, instead of
    polling ``BEGIN IMMEDIATE`` (every 50 µs growing to 1 ms: the waiters
    either spun or slept past the moment the lock was free). The kernel
    drops the lock of a process killed with ``kill -9``. ``flock`` has no
    timeout, so a wait that does not get the lock at once runs in a helper
    thread (blocked in the kernel, without the GIL) while the writer waits
    for it with the busy timeout; a wait given up is released by the helper
    when it gets the lock. One descriptor per backend: two handles of one
    process on one file queue like two processes (a lock belongs to its
    open file description).
    """

    def __init__(self, path: str) -> None:
        import fcntl

        self._fcntl = fcntl
        flags = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
        except PermissionError:  # made by another user: flock needs only a descriptor to read
            self._fd = os.open(path, os.O_RDONLY | flags)
        self._mutex = threading.Lock()
        self._wake = threading.Condition(self._mutex)
        self._got = threading.Event()
        self._wanted = False  # a writer waits for the helper's flock
        self._helper: threading.Thread | None = None
        self._blocked = False  # the helper is inside flock()
        self._closed = False

    def try_take(self) -> bool:
        if self._blocked:
            # A wait given up is still in flock() on this descriptor: were the lock taken here,
            # that flock() would return at once (same description) and its unlock free it.
            return False
        try:
            self._fcntl.flock(self._fd, self._fcntl.LOCK_EX | self._fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def take(self, timeout: float) -> bool:
        """Wait for the lock up to ``timeout`` seconds; ``False``: not taken (nothing held)."""
        with self._mutex:
            self._got.clear()
            self._wanted = True
            if self._helper is None:
                self._helper = threading.Thread(target=self._wait_in_kernel, name="memrev-write-queue", daemon=True)
                self._helper.start()
            self._wake.notify()
        if self._got.wait(timeout):
            return True
        with self._mutex:
            if self._got.is_set():  # taken just as the wait ran out
                return True
            self._wanted = False  # the helper lets go of it when it gets it
            return False

    def _wait_in_kernel(self) -> None:
        while True:
            with self._mutex:
                while not (self._wanted or self._closed):
                    self._wake.wait()
                if self._closed:
                    os.close(self._fd)
                    return
                self._blocked = True
            self._fcntl.flock(self._fd, self._fcntl.LOCK_EX)
            with self._mutex:
                self._blocked = False
                if self._wanted:
                    self._wanted = False
                    self._got.set()
                else:  # its writer gave up meanwhile
                    self._fcntl.flock(self._fd, self._fcntl.LOCK_UN)

    def release(self) -> None:
        self._fcntl.flock(self._fd, self._fcntl.LOCK_UN)

    def add(self, n: int) -> tuple[int, int] | None:
        """While held: add ``n`` to the WAL bytes every process's writers committed since the last
        restart of the WAL (the first 8 bytes of the lock file); the count before and after, ``None``
        where the file cannot be written (then each connection counts only its own commits)."""
        try:
            before = int.from_bytes(os.pread(self._fd, 8, 0).ljust(8, b"\0"), "little")
            os.pwrite(self._fd, (before + n).to_bytes(8, "little"), 0)
        except (OSError, OverflowError):
            return None
        return before, before + n

    def peek(self) -> int | None:
        """The shared count now, read without the lock (a hint: a writer may be adding to it)."""
        try:
            return int.from_bytes(os.pread(self._fd, 8, 0).ljust(8, b"\0"), "little")
        except OSError:
            return None

    def set_count(self, n: int) -> None:
        """While held: the WAL holds ``n`` bytes (0: it was just restarted)."""
        try:
            os.pwrite(self._fd, n.to_bytes(8, "little"), 0)
        except (OSError, OverflowError):
            pass

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            if self._helper is not None:
                self._wake.notify()  # the helper closes the descriptor (once out of flock(), if in it)
                return
        os.close(self._fd)


def _write_queue(path: Path) -> _WriteQueue | None:
    """The write queue beside the database, ``None`` where ``flock`` or the lock file is not to be had
    (not POSIX; a folder this process may not write): then writers poll ``BEGIN IMMEDIATE`` as before."""
    try:
        return _WriteQueue(f"{path}-lock")
    except (ImportError, OSError):
        return None


class _Checkpointer:
    """The thread that copies a handle's WAL into the database after its commits were answered.

    Own connection, so the copy overlaps the writer's next commits; what it
    does and why: the comment at ``_CHECKPOINT_BYTES``.
    """

    def __init__(self, uri: str, path: Path, counts: WriteCounts) -> None:
        self._uri, self._path, self._counts = uri, path, counts
        self._cv = threading.Condition()
        self._due = False
        self._running = False  # a pass is under way
        self._missed = 0  # wakes that found the thread still due or busy since its last pass ended
        self._stop = False
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        with self._cv:
            if self._thread is not None and not self._thread.is_alive():
                # It died (a bug, MemoryError): left dead, no pass would ever clear ``_due``, every
                # wake would count as missed and every other commit wait _CLOSE_WAIT_S for it.
                self._thread, self._due, self._running, self._missed = None, False, False, 0
            if self._due or self._running:
                self._missed += 1
            self._due = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="memrev-checkpoint", daemon=True)
                self._thread.start()
            self._cv.notify()

    def behind(self) -> bool:
        """The writer woke the thread twice more while it was still copying (a machine short of CPU)."""
        return self._missed >= 2

    def catch_up(self) -> None:
        """Wait (at most _CLOSE_WAIT_S) until the thread has no pass due or under way."""
        with self._cv:
            self._cv.wait_for(
                lambda: not (self._due or self._running) or self._thread is None or not self._thread.is_alive(),
                _CLOSE_WAIT_S,
            )
            self._missed = 0

    def close(self) -> None:
        """Stop the thread after the checkpoint it owes (a short-lived writer's WAL is still
        bounded), waiting at most _CLOSE_WAIT_S for it: ``Store.close()`` may run on an event loop."""
        with self._cv:
            self._stop = True
            self._cv.notify()
            thread = self._thread
        if thread is not None:
            thread.join(_CLOSE_WAIT_S)

    def _loop(self) -> None:
        conn = None
        queue = None
        try:
            conn = sqlite3.connect(self._uri, uri=True, timeout=0, isolation_level=None, check_same_thread=False)
            # PASSIVE never waits; RESTART (under the write queue, so no memrev writer is in) waits
            # this long for readers still on the old WAL frames, instead of failing at once.
            conn.execute(f"PRAGMA busy_timeout={_RESTART_WAIT_MS}")
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            queue = _write_queue(self._path)
            while True:
                with self._cv:
                    while not (self._due or self._stop):
                        self._cv.wait()
                    if not self._due:
                        return
                    self._due = False
                    self._running = True
                try:
                    self._checkpoint(conn, queue, page)
                except sqlite3.Error:
                    # Disk full, I/O error, busy: every commit is durable in the WAL already, and the
                    # next pass copies it. The thread stays: before, it ended here, and the handle
                    # never checkpointed again while every other commit waited 1 s for it.
                    self._counts.checkpoint_errors += 1
                finally:
                    with self._cv:
                        self._running = False
                        if not self._due:
                            self._missed = 0
                        self._cv.notify_all()
        except sqlite3.Error:
            pass  # the thread's own connection would not open: the next wake starts another
        finally:
            if queue is not None:
                queue.close()
            if conn is not None:
                conn.close()

    def _checkpoint(self, conn: sqlite3.Connection, queue: _WriteQueue | None, page: int) -> None:
        self._counts.checkpoints_behind += 1
        busy, frames, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy or frames < 0:
            return  # another connection's checkpoint is running (no count to learn here): it does this pass's work
        if frames < _RESTART_FRAMES:
            if queue is not None and queue.try_take():  # the writers' shared count was an estimate: the truth
                try:
                    queue.set_count(max(frames, 0) * page)
                finally:
                    queue.release()
            return
        if queue is not None and not (queue.try_take() or queue.take(_CLOSE_WAIT_S)):
            return  # a long transaction holds the lock: the next pass restarts the WAL
        try:
            busy, _frames, _copied = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            if queue is not None and busy == 0:
                queue.set_count(0)
        finally:
            if queue is not None:
                queue.release()


class SqliteBackend(BackendBase):
    # Calls never wait on a network, and ``write(wait=False)`` fails at once
    # instead of waiting for another writer: VersionedStore may run them on
    # its event loop (see docs/design.md, "Async").
    local = True

    def __init__(
        self, path: Path, *, durability: str = "normal", create: bool = True, location: str | None = None
    ) -> None:
        self.path = path
        self.read_only = False  # opened for reading only: every write() raises ReadOnlyStore
        self._shown = str(path) if location is None else location
        self._lock = threading.RLock()
        self._conn, found = self._connect(create)
        self._busy_ms = self._conn.execute("PRAGMA busy_timeout").fetchone()[0]
        self._busy_off = False  # busy_timeout is 0 since the last BEGIN IMMEDIATE (see _reads_may_wait)
        self._txn_bytes = 0  # payload bytes written in the open write transaction
        self._wal_bytes = 0  # WAL bytes this connection wrote since its last checkpoint (estimate)
        self._shared_wal = 0  # the processes' shared count after this connection's last commit (_WriteQueue.add)
        self._pressed = False  # a commit waited for the checkpoint since the shared count passed the pressure mark
        self.counts = WriteCounts()
        self._queue: _WriteQueue | None = None
        self._checkpointer: _Checkpointer | None = None
        try:
            self._open(durability, create, *found)
        except BaseException:
            self._conn.close()
            raise
        if not self.read_only:
            self._queue = _write_queue(path)
            self._checkpointer = _Checkpointer(_uri(path, "mode=rw"), path, self.counts)

    def _connect(self, create: bool) -> tuple[sqlite3.Connection, tuple[int, int, int]]:
        """A connection, read-write if the file system allows it, else read-only.

        Read-only fallbacks: ``mode=ro`` (the ``-wal``/``-shm`` files exist or can be
        made), then ``immutable=1`` (they cannot be made: a read-only folder or mount),
        which is only safe when no write-ahead log holds commits the file lacks.
        """
        if not create and not self.path.is_file():
            raise NoStore(f"no memrev store at {self._shown}")
        if create:
            self._make_folder()
        attempts = [("rwc" if create else "rw", False), ("ro", True)]
        wal = Path(f"{self.path}-wal")
        if not wal.exists() or wal.stat().st_size == 0:
            attempts.append(("immutable", True))
        for i, (mode, read_only) in enumerate(attempts):
            query = "immutable=1" if mode == "immutable" else f"mode={mode}"
            conn = None
            try:
                conn = sqlite3.connect(
                    _uri(self.path, query), uri=True, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
                )
                found = self._probe(conn)
            except sqlite3.OperationalError as e:
                if conn is not None:
                    conn.close()
                if not _cannot_open(e):
                    raise NotAMemrevStore(f"{self._shown} is not a memrev store ({e})") from None
                if not self.path.exists():
                    if self.path.parent.is_dir() and not os.access(self.path.parent, os.W_OK):
                        raise ReadOnlyStore(f"cannot create a store at {self._shown}: the folder is read-only") from None
                    raise NotAMemrevStore(f"cannot create a store at {self._shown} ({e})") from None
                if not self.path.is_file():
                    raise NotAMemrevStore(f"{self._shown} is not a memrev store ({e})") from None
                # Degrade to reading only when the OS says writing is impossible, never
                # because of a passing failure (a writer handle must not silently turn read-only).
                if i + 1 < len(attempts) and not self._writable():
                    continue
                raise NotAMemrevStore(f"{self._shown} cannot be opened ({e})") from None
            except sqlite3.DatabaseError as e:
                if conn is not None:
                    conn.close()
                raise NotAMemrevStore(f"{self._shown} is not a memrev store ({e})") from None
            # SQLite opens a write-protected file read-only without saying so.
            self.read_only = read_only or not os.access(self.path, os.W_OK)
            return conn, found
        raise AssertionError("unreachable")

    def _writable(self) -> bool:
        """The OS lets this process write the file and make its -wal/-shm files
        (``access`` also says no on a read-only mount, even to root)."""
        return os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)

    def _make_folder(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise ReadOnlyStore(f"cannot create a store at {self._shown}: {e.strerror}") from None
            raise NotAMemrevStore(f"cannot create a store at {self._shown}: {e.strerror}") from None

    @staticmethod
    def _probe(conn: sqlite3.Connection) -> tuple[int, int, int]:
        # One read transaction: another process may be creating the store
        # right now, and the three answers must come from the same state.
        conn.execute("BEGIN")
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            conn.execute("COMMIT")
        return app_id, version, tables

    def _open(self, durability: str, create: bool, app_id: int, version: int, tables: int) -> None:
        c = self._conn
        if app_id != APPLICATION_ID and (tables or app_id):
            raise NotAMemrevStore(f"{self._shown} is an SQLite database of another application, not a memrev store")
        if version > len(MIGRATIONS):
            raise SchemaTooNew(
                f"{self._shown} has schema version {version}; this memrev reads up to {len(MIGRATIONS)}. Upgrade memrev."
            )
        if not create and version == 0 and not tables:
            raise NoStore(f"no memrev store at {self._shown}")  # an empty file, e.g. made by `touch`
        if not self.read_only:
            self._use_wal()
        c.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
        # This backend checkpoints itself (_CHECKPOINT_BYTES); SQLite's own is a net far above.
        c.execute(f"PRAGMA wal_autocheckpoint={_AUTOCHECKPOINT_NET_PAGES}")
        c.execute(f"PRAGMA journal_size_limit={_JOURNAL_SIZE_LIMIT}")
        if not self.read_only and self._wal_file_bytes() > _JOURNAL_SIZE_LIMIT:
            self._wal_bytes = _CHECKPOINT_BYTES  # grown by writers that never checkpointed: after our first commit
        if version < len(MIGRATIONS):
            if self.read_only:
                raise ReadOnlyStore(f"cannot create a store at {self._shown}: it is read-only")
            with _translated():
                self._migrate()

    def _use_wal(self) -> None:
        for attempt in range(200):  # switching to WAL needs a moment alone with a brand-new file
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if _cannot_open(e) and not self._writable():  # a write-protected file SQLite opened for reading
                    self.read_only = True
                    return
                if "locked" not in str(e) or attempt == 199:
                    raise _operational(e) from None
                time.sleep(0.01)

    def _migrate(self) -> None:
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            version = c.execute("PRAGMA user_version").fetchone()[0]  # another process may have won
            app_id = c.execute("PRAGMA application_id").fetchone()[0]
            if app_id not in (0, APPLICATION_ID):
                raise NotAMemrevStore(f"{self._shown} is an SQLite database of another application")
            for script in MIGRATIONS[version:]:
                for stmt in filter(str.strip, script.split(";")):
                    c.execute(stmt)
            c.execute(f"PRAGMA application_id={APPLICATION_ID}")
            c.execute(f"PRAGMA user_version={len(MIGRATIONS)}")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._lock:
            self._conn.close()
            if self._queue is not None:
                self._queue.close()
                self._queue = None

    @contextmanager
    def write(self, *, exclusive: bool = False, wait: bool = True) -> Iterator[None]:
        # Every SQLite write transaction is exclusive already (BEGIN IMMEDIATE).
        if self.read_only:
            raise ReadOnlyStore(f"{self._shown} is open for reading only (read-only mount or no write permission)")
        with self._lock:
            self._keep_pace(wait)
            self._enqueue(wait)
            try:
                with _translated():
                    self._begin(wait)
                self._txn_bytes = 0
                try:
                    yield
                    with _translated():
                        self._conn.execute("COMMIT")
                except BaseException:
                    # A COMMIT that failed (disk full) may leave the transaction open.
                    if self._conn.in_transaction:
                        with _translated():
                            self._conn.execute("ROLLBACK")
                    raise
                added = self._txn_bytes + _COMMIT_WAL_BYTES
                shared = None if self._queue is None else self._queue.add(added)
            finally:
                if self._queue is not None:
                    self._queue.release()
            self._after_commit(added, shared, whole_store=exclusive)

    def _keep_pace(self, wait: bool) -> None:
        """Back-pressure: while the checkpoint thread falls behind, a commit waits for it first (in
        the worker: ``wait=False`` is ``TransientConflict``, so the store sends it there), instead of
        letting the WAL grow past its bound. It never runs the checkpoint itself."""
        cp = self._checkpointer
        if cp is None:
            return
        pressed = self._shared_wal >= _WAL_PRESSURE_BYTES and not self._pressed
        if pressed and self._queue is not None:  # seen at this handle's last commit: another thread may have restarted the WAL since
            now = self._queue.peek()
            if now is not None and now < _WAL_PRESSURE_BYTES:
                self._shared_wal, pressed = now, False
        if not (pressed or cp.behind()):
            return
        if not wait:
            raise TransientConflict(f"{self._shown}: the WAL checkpoint is behind; this commit waits for it off the event loop")
        self.counts.checkpoint_waits += 1
        if pressed:  # once per time past the mark: a reader that keeps the WAL from restarting costs one wait
            self._pressed = True
            cp.wake()
        cp.catch_up()

    def _enqueue(self, wait: bool) -> None:
        """Take this store's place in the processes' write queue (``_WriteQueue``); ``wait=False``:
        ``TransientConflict`` at once if another writer holds it."""
        queue = self._queue
        if queue is None or queue.try_take():
            return
        if wait:
            self.counts.lock_waits += 1
            if queue.take(self._busy_ms / 1000):
                return
        raise TransientConflict(f"the store stayed locked by another writer; nothing was written ({self._shown})")

    def _after_commit(self, added: int, shared: tuple[int, int] | None, *, whole_store: bool) -> None:
        """Wake the checkpoint thread once this commit carried the processes' shared count
        (``shared``: before and after) past another ``_CHECKPOINT_BYTES`` (the comment there
        says what it does; without the count, once this connection's own commits wrote that
        much); the caller is not kept for it. After whole-store work (gc, reindex: ``exclusive``), whose
        deletes and rewrites the estimate does not count, the WAL is copied here,
        at once: RESTART with the busy timeout at 0 (``_begin`` set it), which
        never waits. The commit is durable already (in the WAL), so a checkpoint
        that fails (disk full, busy) is left to the next one.
        """
        if shared is None:
            self._wal_bytes += added
            due = self._wal_bytes >= _CHECKPOINT_BYTES
        else:
            before, self._shared_wal = shared
            if self._shared_wal < _WAL_PRESSURE_BYTES:
                self._pressed = False
            due = self._wal_bytes >= _CHECKPOINT_BYTES or before // _CHECKPOINT_BYTES != self._shared_wal // _CHECKPOINT_BYTES
        if not (due or whole_store):
            return
        self._wal_bytes = 0
        # No net that restarts the WAL from here when the thread falls behind: tried, its
        # RESTART found the thread's PASSIVE holding the checkpoint lock and failed, commit after commit.
        if not whole_store and self._checkpointer is not None:
            self.counts.checkpoints_due += 1
            self._checkpointer.wake()
            return
        self.counts.checkpoints_in_commit += 1
        try:
            self._conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        except sqlite3.Error:
            pass

    def _wal_file_bytes(self) -> int:
        try:
            return os.stat(f"{self.path}-wal").st_size
        except OSError:
            return 0

    # ------------------------------------------------------------ erasure (purge)

    def restack_commit(self, oid: bytes) -> int:
        with self._lock, _translated():
            c = self._conn
            c.execute("UPDATE commits SET seq = (SELECT max(seq) FROM commits) + 1 WHERE id = ?", (oid,))
            row = c.execute("SELECT seq FROM commits WHERE id = ?", (oid,)).fetchone()
        if row is None:
            raise KeyError(oid.hex())
        return cast(int, row[0])

    def secure_delete(self, on: bool) -> None:
        with self._lock, _translated():
            self._conn.execute(f"PRAGMA secure_delete={'ON' if on else 'OFF'}")

    def reclaim(self) -> None:
        """``VACUUM`` (the database rebuilt from its live rows: no free page, no slack of a
        deleted cell), then ``wal_checkpoint(TRUNCATE)`` (the WAL copied in and cut to zero
        bytes), waiting up to the busy timeout for other connections' reads to end."""
        if self.read_only:
            raise ReadOnlyStore(f"{self._shown} is open for reading only (read-only mount or no write permission)")
        with self._lock, _translated():
            self._reads_may_wait()
            self._conn.execute("VACUUM")
            deadline = time.monotonic() + self._busy_ms / 1000
            while True:
                busy, _frames, _copied = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    break
                if time.monotonic() >= deadline:
                    raise TransientConflict(
                        f"{self._shown}: other connections kept reading the WAL for {self._busy_ms / 1000:.0f} s;"
                        " the purge is committed, its bytes are not all reclaimed yet: run it again"
                    )
                time.sleep(0.01)
            self._wal_bytes = 0

    def storage_files(self) -> list[str]:
        return [str(self.path), f"{self.path}-wal", f"{self.path}-shm"]

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        # A deferred BEGIN: in WAL mode a reader keeps the snapshot of its first read
        # until COMMIT, and other processes keep committing meanwhile. The handle's
        # lock is held throughout, so no other thread's statement joins the
        # transaction. While it is open, checkpoints cannot restart the WAL (it grows
        # by what others commit during the block; the next checkpoint after it resets it).
        with self._lock:
            with _translated():
                self._reads_may_wait()  # the busy timeout back before BEGIN: inside, it would not be
                self._conn.execute("BEGIN")
            try:
                yield
            finally:
                if self._conn.in_transaction:
                    with _translated():
                        self._conn.execute("COMMIT")

    savepoints = True

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside ``write()``: undo only what runs inside on an exception (one request of a group commit)."""
        self._exec("SAVEPOINT memrev_one", ())
        try:
            yield
        except BaseException:
            self._exec("ROLLBACK TO memrev_one", ())
            self._exec("RELEASE memrev_one", ())
            raise
        self._exec("RELEASE memrev_one", ())

    def _begin(self, wait: bool) -> None:
        """Take the write lock; ``wait=False``: ``TransientConflict`` at once if another writer holds it.

        Writers of memrev queue on ``_WriteQueue`` first, so this finds the
        lock free but for a writer that does not (another program, the
        checkpoint net, or no queue: not POSIX). Waiting polls ``BEGIN IMMEDIATE`` itself, every 50 µs growing to 1 ms,
        for at most the busy timeout, instead of leaving it to SQLite's busy
        handler: that one sleeps 1, 2, 5, 10 ... 100 ms between tries, so
        with several writer processes, whose commits take a fraction of a
        millisecond, the waiters slept while the lock was free and four
        writers committed less than one. SQLITE_BUSY on ``BEGIN IMMEDIATE``
        means nothing was done, so trying again is always safe.
        """
        if not self._busy_off:
            self._conn.execute("PRAGMA busy_timeout=0")
            self._busy_off = True
        deadline = time.monotonic() + self._busy_ms / 1000
        pause = 0.00005
        while True:
            self.counts.begin_attempts += 1
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if not wait or not _busy(e) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 1.5, 0.001)

    def _reads_may_wait(self) -> None:
        """Give the busy timeout back before a read outside a write transaction.

        ``_begin`` turns SQLite's busy handler off; inside the transaction
        nothing waits for another connection (the write lock is held, a WAL
        commit and its passive checkpoint never wait). A read outside one can
        meet another process's exclusive moment (closing its last connection,
        recovering the WAL) and must wait then. Restored lazily, so commits in
        a row pay no PRAGMA at all.
        """
        if self._busy_off and not self._conn.in_transaction:
            self._conn.execute(f"PRAGMA busy_timeout={int(self._busy_ms)}")
            self._busy_off = False

    def _one(self, sql: str, args: tuple) -> tuple | None:
        with self._lock, _translated():
            self._reads_may_wait()
            return self._conn.execute(sql, args).fetchone()

    def _all(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock, _translated():
            self._reads_may_wait()
            return self._conn.execute(sql, args).fetchall()

    def _exec(self, sql: str, args: tuple) -> int:
        with self._lock, _translated():
            self._reads_may_wait()
            return self._conn.execute(sql, args).rowcount

    # ------------------------------------------------------------ objects

    def get_blob(self, oid: bytes) -> BlobRow | None:
        return _blob(self._one(f"SELECT {_BLOB_COLS} FROM blobs WHERE id=?", (oid,)))

    def put_blob(self, row: BlobRow) -> None:
        self._txn_bytes += len(row.data)
        # Only a duplicate id is harmless (content-addressed); a clash on the
        # append-run position must fail loudly, never drop the row.
        self._exec(
            f"INSERT INTO blobs({_BLOB_COLS}) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(id) DO NOTHING",
            (row.id, row.kind, row.base, row.lineage, row.start, row.size, row.depth, row.data),
        )

    def lineage_has(self, lineage: bytes, start: int) -> bool:
        return self._one("SELECT 1 FROM blobs WHERE lineage=? AND start=?", (lineage, start)) is not None

    def lineage_pieces(self, lineage: bytes, lo: int, hi: int) -> list[BlobRow]:
        """Pieces of a run that hold bytes in ``[lo, hi)``, in order."""
        first = self._one("SELECT max(start) FROM blobs WHERE lineage=? AND start<=?", (lineage, lo))
        floor = first[0] if first and first[0] is not None else lo
        rows = self._all(
            f"SELECT {_BLOB_COLS} FROM blobs WHERE lineage=? AND start>=? AND start<? ORDER BY start",
            (lineage, floor, hi),
        )
        return [BlobRow(*r) for r in rows]

    def get_tree(self, oid: bytes) -> bytes | None:
        row = self._one("SELECT data FROM trees WHERE id=?", (oid,))
        return None if row is None else row[0]

    def blob_chain(self, oid: bytes, limit: int) -> list[BlobRow]:
        # One recursive query down the delta bases instead of a statement per link.
        rows = self._all(
            "WITH RECURSIVE chain(n, id, kind, base, lineage, start, size, depth, data) AS ("
            f" SELECT 1, {_BLOB_COLS} FROM blobs WHERE id = ?"
            " UNION ALL SELECT chain.n + 1, b.id, b.kind, b.base, b.lineage, b.start, b.size, b.depth, b.data"
            " FROM chain JOIN blobs b ON b.id = chain.base WHERE chain.kind = 'D' AND chain.n < ?)"
            f" SELECT {_BLOB_COLS} FROM chain ORDER BY n",
            (oid, limit),
        )
        return [BlobRow(*r) for r in rows]

    def get_trees(self, oids: list[bytes]) -> dict[bytes, bytes]:
        found: dict[bytes, bytes] = {}
        for i in range(0, len(oids), _SCAN_PAGE):  # well under SQLite's limit on bound parameters
            part = oids[i : i + _SCAN_PAGE]
            found.update(self._all(f"SELECT id, data FROM trees WHERE id IN ({','.join('?' * len(part))})", tuple(part)))
        return found

    def put_tree(self, oid: bytes, data: bytes) -> None:
        self._txn_bytes += len(data)
        self._exec("INSERT OR IGNORE INTO trees(id, data) VALUES (?,?)", (oid, data))

    def put_trees(self, rows: list[tuple[bytes, bytes]]) -> None:
        self._txn_bytes += sum(len(data) for _, data in rows)
        with self._lock, _translated():
            self._conn.executemany("INSERT OR IGNORE INTO trees(id, data) VALUES (?,?)", rows)

    def get_commit(self, oid: bytes) -> tuple[int, bytes] | None:
        return self._one("SELECT seq, data FROM commits WHERE id=?", (oid,))

    def commit_at(self, seq: int) -> tuple[bytes, bytes] | None:
        return self._one("SELECT id, data FROM commits WHERE seq=?", (seq,))

    def put_commit(self, oid: bytes, parent: bytes | None, data: bytes) -> int:
        with self._lock, _translated():
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO commits(id, parent, data, parent_seq)"
                " VALUES (?,?,?, (SELECT seq FROM commits WHERE id = ?))",
                (oid, parent, data, parent),
            )
            if cur.rowcount:
                return cast(int, cur.lastrowid)  # an INSERT that stored a row has its rowid
        return cast(tuple[int, bytes], self.get_commit(oid))[0]  # OR IGNORE: it is there

    def commits_with_prefix(self, prefix: bytes, limit: int) -> list[bytes]:
        hi = (int.from_bytes(prefix, "big") + 1).to_bytes(len(prefix) + 1, "big")[-len(prefix) :]
        if hi <= prefix:  # prefix was all 0xff
            rows = self._all("SELECT id FROM commits WHERE id>=? LIMIT ?", (prefix, limit))
        else:
            rows = self._all("SELECT id FROM commits WHERE id>=? AND id<? LIMIT ?", (prefix, hi, limit))
        return [r[0] for r in rows]

    def first_parent(self, oid: bytes, steps: int) -> bytes | None:
        # A run of commits each made on the one numbered just before it (linear history,
        # the common case) is answered by counting: if every commit numbered in
        # (seq - steps, seq] has the previous number as its first parent, the walk is
        # seq, seq - 1, ... seq - steps. One range read of the index in key order
        # (a step of the walk below is a search from the root). Commit rows never change
        # once written, so the reads need no common snapshot.
        row = self._one("SELECT seq FROM commits WHERE id = ?", (oid,))
        if row is None:
            return None
        seq = row[0]
        if 0 < steps < seq:
            linear = self._one(
                "SELECT count(*) FROM commits INDEXED BY commits_first_parents"
                " WHERE seq > ? AND seq <= ? AND parent_seq = seq - 1",
                (seq - steps, seq),
            )
            if linear is not None and linear[0] == steps:
                found = self._one("SELECT id FROM commits WHERE seq = ?", (seq - steps,))
                if found is not None:
                    return found[0]
        row = self._one(
            """
            WITH RECURSIVE walk(seq, n) AS (
                SELECT seq, 0 FROM commits WHERE id = ?
                UNION ALL
                SELECT c.parent_seq, walk.n + 1 FROM walk JOIN commits c INDEXED BY commits_first_parents ON c.seq = walk.seq
                WHERE walk.n < ? AND c.parent_seq IS NOT NULL
            )
            SELECT id FROM commits WHERE seq = (SELECT seq FROM walk WHERE n = ?)
            """,
            (oid, steps, steps),
        )
        return None if row is None else row[0]

    # ------------------------------------------------------------ refs

    def get_ref(self, name: str) -> bytes | None:
        row = self._one("SELECT target FROM refs WHERE name=?", (name,))
        return None if row is None else row[0]

    lock_ref = get_ref  # BEGIN IMMEDIATE already holds the database write lock

    def get_refs(self, names: Sequence[str]) -> dict[str, bytes]:
        # Every read at a head comes here (the branch and refs/purges). One row of scalar
        # subqueries, each a primary-key lookup: cheaper than one "= ?" lookup, where
        # "IN (?, ?)" builds a temporary index of its list first (+1 µs of 5).
        if not names:
            return {}
        sql = _REFS_AT.get(len(names)) or _REFS_AT.setdefault(
            len(names), "SELECT " + ", ".join(["(SELECT target FROM refs WHERE name=?)"] * len(names))
        )
        with self._lock, _translated():
            self._reads_may_wait()
            row = self._conn.execute(sql, tuple(names)).fetchone()
        return {name: target for name, target in zip(names, row, strict=True) if target is not None}

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        if old is None:
            return self._exec("INSERT OR IGNORE INTO refs(name, target) VALUES (?,?)", (name, new)) == 1
        return self._exec("UPDATE refs SET target=? WHERE name=? AND target=?", (new, name, old)) == 1

    def delete_ref(self, name: str) -> None:
        self._exec("DELETE FROM refs WHERE name=?", (name,))

    def list_refs(self, prefix: str) -> dict[str, bytes]:
        rows = self._all("SELECT name, target FROM refs WHERE substr(name, 1, ?) = ?", (len(prefix), prefix))
        return dict(rows)

    # ------------------------------------------------------------ derived indexes

    def head_get(self, branch: str, path: str) -> HeadRow | None:
        row = self._one("SELECT path, blob, size, seq FROM head WHERE branch=? AND path=?", (branch, path))
        return None if row is None else HeadRow(*row)

    def head_put(self, branch: str, rows: list[HeadRow]) -> None:
        self._txn_bytes += _INDEX_ROW_BYTES * len(rows)
        with self._lock, _translated():
            self._conn.executemany(
                "INSERT OR REPLACE INTO head(branch, path, blob, size, seq) VALUES (?,?,?,?,?)",
                [(branch, r.path, r.blob, r.size, r.seq) for r in rows],
            )

    def head_all(self, branch: str) -> list[HeadRow]:
        rows = self._all("SELECT path, blob, size, seq FROM head WHERE branch=?", (branch,))
        return [HeadRow(*r) for r in rows]

    def scan_head(self, branch: str, tombstones: bool = False) -> Iterator[HeadRow]:
        last = ""  # keyset pages on the primary key (branch, path); "" sorts before every path
        while rows := self._all(
            "SELECT path, blob, size, seq FROM head WHERE branch=? AND path>? ORDER BY path LIMIT ?", (branch, last, _SCAN_PAGE)
        ):
            yield from (HeadRow(*r) for r in rows if tombstones or r[1] is not None)
            last = rows[-1][0]

    def clear_indexes(self) -> None:
        self._exec("DELETE FROM changes", ())
        self._exec("DELETE FROM head", ())

    def head_clear(self, branch: str) -> None:
        self._exec("DELETE FROM head WHERE branch=?", (branch,))

    def change_put(self, rows: Sequence[ChangeRowLike]) -> None:
        self._txn_bytes += _INDEX_ROW_BYTES * len(rows)
        with self._lock, _translated():
            self._conn.executemany("INSERT OR REPLACE INTO changes(path, seq, prev, prev2) VALUES (?,?,?,?)", rows)

    def change_prev(self, path: str, seq: int) -> tuple[int | None, int | None] | None:
        return self._one("SELECT prev, prev2 FROM changes WHERE path=? AND seq=?", (path, seq))

    def change_chain(self, path: str, start: int) -> list[int]:
        """Every change of ``path`` reachable from change ``start`` (both parents), newest first."""
        rows = self._all(
            """
            WITH RECURSIVE v(seq) AS (
                SELECT ?
                UNION
                SELECT c.prev FROM changes c JOIN v ON c.path = ? AND c.seq = v.seq WHERE c.prev IS NOT NULL
                UNION
                SELECT c.prev2 FROM changes c JOIN v ON c.path = ? AND c.seq = v.seq WHERE c.prev2 IS NOT NULL
            )
            SELECT seq FROM v ORDER BY seq DESC
            """,
            (start, path, path),
        )
        return [r[0] for r in rows]

    def change_rows(self, path: str, upto: int) -> list[ChangeLinkLike]:
        """``(seq, prev, prev2)`` of every change of ``path`` up to commit ``upto``, in one range read."""
        return self._all("SELECT seq, prev, prev2 FROM changes WHERE path=? AND seq<=?", (path, upto))

    def change_commits(self, path: str, upto: int) -> list[ChangeCommit]:
        rows = self._all(
            "SELECT ch.seq, ch.prev, ch.prev2, c.id, c.data FROM changes ch LEFT JOIN commits c ON c.seq = ch.seq"
            " WHERE ch.path=? AND ch.seq<=?",
            (path, upto),
        )
        return list(map(ChangeCommit._make, rows))

    def change_paths(self, path: str, upto: int) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        rows = self._all(
            "SELECT other.seq, other.path FROM changes ch JOIN changes other ON other.seq = ch.seq"
            " WHERE ch.path=? AND ch.seq<=?",
            (path, upto),
        )
        for seq, key in rows:
            out.setdefault(seq, []).append(key)
        return out

    def path_log_rows(self, path: str, upto: int, *, records: bool = True) -> Iterator[PathLogRowLike]:
        # One statement, streamed: rows are handed over one at a time (no list of thousands
        # of tuples alive at once: they cost a first log(path) its garbage collections).
        # The other files come from changes_by_seq, in path order; a file row ends without "/".
        sql = (
            "SELECT ch.seq, ch.prev, ch.prev2, c.id, c.data, o.path FROM changes ch"
            " LEFT JOIN commits c ON c.seq = ch.seq"
            " LEFT JOIN changes o ON o.seq = ch.seq AND o.path <> ch.path AND substr(o.path, -1) <> '/'"
            if records
            else "SELECT ch.seq, ch.prev, ch.prev2, c.id, NULL, NULL FROM changes ch LEFT JOIN commits c ON c.seq = ch.seq"
        )
        with self._lock, _translated():
            self._reads_may_wait()
            yield from self._conn.execute(sql + " WHERE ch.path = ? AND ch.seq <= ? ORDER BY ch.seq DESC", (path, upto))

    def stale_indexes(self) -> set[str]:
        return {r[0] for r in self._all("SELECT name FROM stale")}

    def set_index_fresh(self, name: str) -> None:
        self._exec("DELETE FROM stale WHERE name=?", (name,))

    def commits_at(self, seqs: list[int]) -> list[CommitRow]:
        out: list[CommitRow] = []
        for i in range(0, len(seqs), 500):
            chunk = seqs[i : i + 500]
            marks = ",".join("?" * len(chunk))
            out += map(CommitRow._make, self._all(f"SELECT seq, id, data FROM commits WHERE seq IN ({marks})", tuple(chunk)))
        return out

    def paths_at(self, seqs: list[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for i in range(0, len(seqs), 500):
            chunk = seqs[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for seq, path in self._all(f"SELECT seq, path FROM changes WHERE seq IN ({marks})", tuple(chunk)):
                out.setdefault(seq, []).append(path)
        return out

    def change_before(self, path: str, seq: int) -> int | None:
        row = self._one("SELECT max(seq) FROM changes WHERE path=? AND seq<=?", (path, seq))
        return None if row is None else row[0]

    # ------------------------------------------------------------ scans

    # Scans read in pages of _SCAN_PAGE rows by key, so a whole-store pass holds
    # one page at a time (not the store) and no statement stays open between pages.

    def iter_commits(self) -> Iterator[CommitRow]:
        last = 0
        while rows := self._all("SELECT seq, id, data FROM commits WHERE seq > ? ORDER BY seq LIMIT ?", (last, _SCAN_PAGE)):
            yield from map(CommitRow._make, rows)
            last = rows[-1][0]

    def iter_blobs(self) -> Iterator[BlobRow]:
        """Every blob row, in the order they were stored (bases before the versions built on them)."""
        last = 0
        while rows := self._all(
            f"SELECT rowid, {_BLOB_COLS} FROM blobs WHERE rowid > ? ORDER BY rowid LIMIT ?", (last, _SCAN_PAGE)
        ):
            yield from (BlobRow(*r[1:]) for r in rows)
            last = rows[-1][0]

    def iter_commits_newest_first(self) -> Iterator[CommitRow]:
        rows = self._all("SELECT seq, id, data FROM commits ORDER BY seq DESC LIMIT ?", (_SCAN_PAGE,))
        while rows:
            yield from map(CommitRow._make, rows)
            rows = self._all("SELECT seq, id, data FROM commits WHERE seq < ? ORDER BY seq DESC LIMIT ?", (rows[-1][0], _SCAN_PAGE))

    def first_parent_numbers(self) -> Iterator[FirstParentNumber]:
        last = 0
        while rows := self._all("SELECT seq, parent_seq FROM commits WHERE seq > ? ORDER BY seq LIMIT ?", (last, _SCAN_PAGE)):
            yield from map(FirstParentNumber._make, rows)
            last = rows[-1][0]

    def relink_first_parent(self, seq: int, parent: bytes | None, parent_seq: int | None) -> None:
        self._exec("UPDATE commits SET parent = ?, parent_seq = ? WHERE seq = ?", (parent, parent_seq, seq))

    def blob_bases(self, oids: list[bytes]) -> dict[bytes, bytes | None]:
        found: dict[bytes, bytes | None] = {}
        for i in range(0, len(oids), _SCAN_PAGE):  # well under SQLite's limit on bound parameters
            part = oids[i : i + _SCAN_PAGE]
            found.update(self._all(f"SELECT id, base FROM blobs WHERE id IN ({','.join('?' * len(part))})", tuple(part)))
        return found

    def delete_unreachable(self, table: str, keep: set[bytes]) -> int:
        """Delete rows of ``table`` (commits, trees, blobs) whose id is not in ``keep``.

        The table is read in key order a page of ids at a time and each page's
        unkept rows deleted by key: O(rows / page) statements, memory bounded
        by a page. (Copying ``keep`` into a temporary table in hash order and
        deleting ``NOT IN`` it grew faster than the store: a random-order
        B-tree of every id, 3.4 s of a 100,000-commit gc.)
        """
        if table not in _GC_KEYS:
            raise ValueError(f"not an object table: {table!r}")
        key = _GC_KEYS[table]
        deleted = 0
        with self._lock, _translated():
            c = self._conn
            last: bytes | int = b"" if key == "id" else 0
            while rows := c.execute(f"SELECT {key}, id FROM {table} WHERE {key} > ? ORDER BY {key} LIMIT ?", (last, _SCAN_PAGE)).fetchall():
                last = rows[-1][0]
                gone = tuple([k for k, oid in rows if oid not in keep])
                if gone:
                    marks = ",".join("?" * len(gone))
                    if table == "commits":
                        c.execute(f"DELETE FROM changes WHERE seq IN ({marks})", gone)
                    deleted += c.execute(f"DELETE FROM {table} WHERE {key} IN ({marks})", gone).rowcount
        return deleted

    def iter_changes(self) -> Iterator[ChangeRow]:
        return iter(list(map(ChangeRow._make, self._all("SELECT path, seq, prev, prev2 FROM changes ORDER BY seq"))))

    def scan_changes(self) -> Iterator[ChangeRow]:
        # Keyset pages on (seq, path): changes_by_seq holds both (the primary key rides along).
        rows = self._all("SELECT path, seq, prev, prev2 FROM changes ORDER BY seq, path LIMIT ?", (_SCAN_PAGE,))
        while rows:
            yield from map(ChangeRow._make, rows)
            last = rows[-1]
            rows = self._all(
                "SELECT path, seq, prev, prev2 FROM changes WHERE (seq, path) > (?, ?) ORDER BY seq, path LIMIT ?",
                (last[1], last[0], _SCAN_PAGE),
            )

    def iter_blob_ids(self) -> Iterator[bytes]:
        return iter([r[0] for r in self._all("SELECT id FROM blobs")])

    def iter_trees(self) -> Iterator[tuple[bytes, bytes]]:
        last = b""
        while rows := self._all("SELECT id, data FROM trees WHERE id > ? ORDER BY id LIMIT ?", (last, _SCAN_PAGE)):
            yield from rows
            last = rows[-1][0]
