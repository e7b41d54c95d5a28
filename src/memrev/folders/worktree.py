"""The working tree: a folder that keeps one branch's head as plain files.

The folder is laid out exactly as ag2's ``DiskKnowledgeStore`` lays it out
(path ``/a/b.md`` is the file ``folder/a/b.md``; deleting a file prunes the
directories it leaves empty), so every tool that reads or edits the folder
keeps working. The database is the truth; the files are a view reconciled
with it (docs/design.md, "The working tree"):

- ``.memrev/worktree.db`` (SQLite) holds the *manifest*: for each file, the
  content hash memrev last knew on disk and its ``stat`` fingerprint, plus the
  commit the files were last brought to (``synced``). It also holds the
  *intent journal*: before memrev renames or unlinks a file it records the
  hash it is about to put there (``pending``), and clears it afterwards.
- A file on disk is *memrev's* when its hash is the known one or the pending
  one; anything else is an *outside* change and becomes a commit by
  ``OUTSIDE_AUTHOR``. A file whose content is already the head's is never
  committed again, so a crash between the database commit and the file
  update can neither lose an acknowledged write nor record a spurious
  outside revert of it.
- Files are only ever written with committed content (after the commit), to
  a temporary name in ``.memrev/tmp/`` and renamed into place.
- All of it runs under ``.memrev/worktree.lock`` (``flock``) so processes
  sharing the folder take turns, and always brings files to the *current*
  head, never to the snapshot of the commit that triggered it.

One ``WorkTree`` per folder per process; it has its own database connection
and a watcher thread (watchdog events if installed, else polling) that turns
outside edits into commits while any handle has the store open.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import sqlite3
import stat
import threading
import uuid
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from .. import errors
from ..backends import WORKTREE_DIR, open_backend
from ..core import trees
from ..core.textmerge import merge_file
from ..history.kinds import merge_kinds
from ..repo.cache import LRU
from ..repo.ops import Delete, Op, Write
from ..repo.repository import Repository
from .adopt import (
    MAX_FILE_BYTES,
    Unreadable,
    adoption_commit,
    fingerprint,
    is_reserved,
    open_folder,
    open_parent,
    read_text_file,
    unchanged,
    walk,
)

log = logging.getLogger("memrev")

OUTSIDE_AUTHOR = "outside"
CONFIG_FILE = "worktree.db"
ABSENT = "-"  # a pending intent to delete
# With watchdog, events wake the watcher; this slower poll is the safety net for missed events.
SAFETY_POLL_SECONDS = 30.0
DEBOUNCE_SECONDS = 0.1
QUIET_ROUNDS = 20  # a folder that never goes quiet is still scanned every 2 s
# Outside edits are committed in pieces of about this many bytes of text (at least one file), so a
# reconcile holds one piece in memory, not every changed file of the folder.
OUTSIDE_PIECE_BYTES = 32 << 20

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


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _connect(path: Path, *, check: bool = False) -> sqlite3.Connection:
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
    import fcntl  # POSIX only, as the working tree is

    mode: list[tuple[str, str]] = []
    lock = os.open(path.parent / "worktree.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
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
    db = _connect(path)
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
    db = _connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT OR REPLACE INTO config(key, value) VALUES ('enabled', ?)", ("0" if branch is None else "1",))
        if branch is not None:
            db.execute("INSERT OR REPLACE INTO config(key, value) VALUES ('branch', ?)", (branch,))
        db.execute("COMMIT")
    finally:
        db.close()


def _own_dir(name: str, dir_fd: int | None, where: str) -> int:
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


def _own_dirs(folder: str) -> int:
    """Check ``.memrev`` and ``.memrev/tmp`` (made if missing); the descriptor of ``tmp``."""
    path = os.path.join(folder, WORKTREE_DIR)
    meta = _own_dir(path, None, path)
    try:
        return _own_dir("tmp", meta, os.path.join(path, "tmp"))
    finally:
        os.close(meta)


class _Row:
    __slots__ = ("blocked", "fp", "pending", "sha")

    def __init__(self, sha: str | None, pending: str | None, fp: tuple[int, int, int, int], blocked: int) -> None:
        self.sha, self.pending, self.fp, self.blocked = sha, pending, fp, blocked

    def known(self) -> set[str | None]:
        """States of the file that memrev itself produced: the last known one and the one in flight."""
        out = {self.sha}
        if self.pending is not None:
            out.add(None if self.pending == ABSENT else self.pending)
        return out


_NO_ROW = _Row(None, None, (-1, -1, -1, -1), 0)


class WorkTree:
    """The plain files of one folder, kept equal to one branch's head (see the module docstring)."""

    def __init__(self, folder: str, branch: str, durability: str) -> None:
        self.folder = os.path.realpath(folder)
        self.branch = branch
        self._durability = durability
        meta = Path(self.folder) / WORKTREE_DIR
        self._tmp_fd = _own_dirs(self.folder)  # checked before anything opens a path under .memrev/
        self._tmp = meta / "tmp"
        self._repo = Repository(open_backend(self.folder, durability=durability, worktree=True))
        self._db = _connect(meta / CONFIG_FILE, check=True)
        self._db.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
        self._mutex = threading.Lock()
        try:  # never through a link planted at the name (.memrev itself was checked just above)
            self._lock_fd = os.open(
                meta / "worktree.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644
            )
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise errors.UnsafeWorkTree(f"{meta / 'worktree.lock'} is a symbolic link: memrev opens nothing through it") from None
        self._shas = LRU(100_000)  # blob id -> content hash; blobs are immutable
        self._unreadable: dict[str, tuple[int, int, int, int]] = {}  # skipped files, by fingerprint: not read again
        self._kept: set[str] = set()  # unstorable files the last scan found where the head has a change: never replaced
        self._watcher: _Watcher | None = None
        self.users = 0

    # ------------------------------------------------------------ lifecycle

    def start_watching(self, interval: float) -> None:
        if self._watcher is None:
            self._watcher = _Watcher(self, interval)
            self._watcher.start()

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        with self._mutex:
            self._db.close()
            self._repo.backend.close()
            os.close(self._lock_fd)
            os.close(self._tmp_fd)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl  # POSIX only, as the working tree is; imported here so memrev imports everywhere

        with self._mutex:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # ------------------------------------------------------------ entry points

    def reconcile(self) -> None:
        """Scan the whole folder: commit outside changes, then bring every file to the head.

        Run at open (which also finishes or undoes a crashed process's journaled
        intents) and by the watcher.
        """
        with self._locked():
            self._clear_tmp()
            self._synced()  # seed the manifest first, so the scan compares against it
            self._settle(self._changed_on_disk())

    def sync(self) -> None:
        """After a commit through memrev: bring the files the head changed up to date.

        Costs what the commit changed, not what the folder holds; an outside
        edit to one of those files not yet seen is committed first, never overwritten.
        """
        with self._locked():
            self._settle(set())

    def refuse_unstorable(self, paths: Iterable[str]) -> None:
        """Before a commit that writes, appends to or removes ``paths`` (a directory: the head's
        files under it): raise ``UnstorableFileInTheWay`` if the folder holds, at any of them, a
        file memrev could not store (binary, a symbolic link, too big), whose bytes that commit's
        write-out would destroy. A directory in the way is not refused (the path is shown blocked).
        Reads only (no folder lock); a file put there after the check is still never replaced (_write_head)."""
        with self._mutex:
            head = self._repo.head(self.branch)
            found: list[str] = []
            reasons: list[str] = []
            with open_folder(self.folder) as root:
                for path in paths:
                    for p in self._head_files_at(head, path):
                        reason = self._unstorable(root, p)
                        if reason is not None:
                            found.append(p)
                            reasons.append(f"{p} ({reason})")
            if found:
                raise errors.UnstorableFileInTheWay(
                    f"working tree {self.folder}: {', '.join(reasons[:5])}{' ...' if len(reasons) > 5 else ''}"
                    " is a file memrev cannot store, and this change would overwrite or remove it; nothing was"
                    " committed (move it away, or make it a text file, first)",
                    found,
                )

    def _head_files_at(self, head: bytes | None, path: str) -> list[str]:
        """``path``, and the head's files below it when the head has a directory there."""
        out = [path]
        if path != "/" and head is not None and self._repo.dir_exists_at(head, path):
            node = trees.find_dir(self._repo, self._repo.root(head), path[1:].split("/"))
            if node is not None:
                out += [p for p, _ in trees.walk(self._repo, node, path)]
        elif path == "/" and head is not None:
            out = [p for p, _ in trees.walk(self._repo, self._repo.root(head))]
        return [p for p in out if p != "/" and not is_reserved(p)]

    def _unstorable(self, root: int, path: str) -> str | None:
        """Why the file at ``path`` cannot be content, or ``None`` (absent, storable, or a directory)."""
        if self._is_link(root, path):
            return "a symbolic link"
        try:
            self._disk_state(root, path, self._row(path))
        except Unreadable as e:
            return None if e.reason == "directory" or e.reason.startswith("parent") else e.reason
        except OSError:
            return None
        return None

    def _is_link(self, root: int, path: str) -> bool:
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

    # ------------------------------------------------------------ manifest

    def _config(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM config WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def _row(self, path: str) -> _Row:
        r = self._db.execute("SELECT sha, pending, size, mtime_ns, ino, ctime_ns, blocked FROM files WHERE path=?", (path,)).fetchone()
        return _NO_ROW if r is None else _Row(r[0], r[1], (r[2], r[3], r[4], r[5]), r[6])

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
        """The commit the files were last brought to, seeding the manifest the first time.

        The first time the tree is on, what memrev last knew of the files is
        the adoption commit's files if the store began by adopting this folder
        (they were left on disk then), else nothing.
        """
        synced = self._config("synced")
        if synced is not None:
            try:
                commit = bytes.fromhex(synced) if synced else None
                self._repo.root(commit)  # the store may be older: restored from a backup
                return commit
            except (ValueError, errors.RevisionNotFound) as e:
                self._forget(e)
                return None
        base = adoption_commit(self._repo, self._repo.head(self.branch))
        rows = []
        if base is not None:
            self._refuse_diverged(base)
            rows = [(p, self._entry_sha(e), (-1, -1, -1, -1), 0) for p, e in trees.walk(self._repo, self._repo.root(base))]
        self._record(rows, synced=base)
        return base

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

    def _refuse_diverged(self, base: bytes) -> None:
        """Before the tree is first turned on over a folder adopted at ``base``: refuse, writing
        nothing, when a file changed on disk since the adoption and the head changed it too,
        and the two sides do not merge by the path's declared kind (``WorkTreeDiverged``).

        The stale copy would otherwise be committed over memrev's own commits as an outside
        edit; the ones that merge are merged by ``_commit_outside``."""
        head = self._repo.head(self.branch)
        kinds = merge_kinds(self._repo, head)
        diverged = []
        with open_folder(self.folder) as root:
            for path, old, new in trees.diff(self._repo, self._repo.root(base), self._repo.root(head)):
                if is_reserved(path):
                    continue
                try:
                    theirs = read_text_file(root, path, MAX_FILE_BYTES)[0]
                except (FileNotFoundError, NotADirectoryError):
                    theirs = None
                except (Unreadable, OSError):
                    continue  # left alone and named by the scan
                base_data = None if old is None else self._repo.content(old.oid)
                if theirs == base_data:
                    continue  # the stale copy: the head's version replaces it
                ours = None if new is None else self._repo.content(new.oid)
                if merge_file(base_data, ours, theirs, kinds.kind_of(path)).conflict is not None:
                    diverged.append(path)
        if diverged:
            raise errors.WorkTreeDiverged(
                f"working tree {self.folder}: {len(diverged)} file(s) changed both on disk since the folder was "
                f"adopted and on branch {self.branch} since, and do not merge: {', '.join(diverged[:10])}"
                f"{' ...' if len(diverged) > 10 else ''}; nothing was written. Make each file the version to keep "
                "(or move it aside) and open again",
                tuple(diverged),
            )

    def _merged_outside(self, op: Write | Delete, path: str, synced: bytes | None, head: bytes | None) -> Op | None:
        """An outside edit of a file the head changed too since the folder showed ``synced``:
        the three-way merge by the path's declared kind when it is clean (``None``: the head
        already holds it), else the outside edit as it is (memrev's commit stays in history)."""
        base_entry = self._repo.entry_at(synced, path)
        head_entry = self._repo.entry_at(head, path)
        if base_entry == head_entry or (base_entry is not None and head_entry is not None and base_entry.oid == head_entry.oid):
            return op  # the head did not change the path since the folder showed it
        base_data = None if base_entry is None else self._repo.content(base_entry.oid)
        theirs = op.data if isinstance(op, Write) else None
        if theirs == base_data:
            return op
        ours = None if head_entry is None else self._repo.content(head_entry.oid)
        merged = merge_file(base_data, ours, theirs, merge_kinds(self._repo, head).kind_of(path))
        if merged.conflict is not None:
            return op
        if merged.content == ours:
            return None
        return Delete(path) if merged.content is None else Write(path, merged.content)

    # ------------------------------------------------------------ the reconcile step

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
                if unchanged(self._unreadable.get(path, _NO_ROW.fp), st):
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

    def _settle(self, disk_changed: set[str]) -> None:
        """Commit outside changes among the candidates, then write the head; repeat until stable."""
        synced = self._synced()
        rounds = 0
        while rounds < 100:
            head = self._repo.head(self.branch)
            paths = {p for p, _, _ in trees.diff(self._repo, self._repo.root(synced), self._repo.root(head))}
            paths |= disk_changed
            paths |= {r[0] for r in self._db.execute("SELECT path FROM files WHERE blocked=1 OR pending IS NOT NULL")}
            committed, more = self._commit_outside(sorted(p for p in paths if not is_reserved(p)), head)
            if committed:
                if more:
                    continue  # one piece of many: the rest of the candidates next, not a round lost
                rounds += 1
                disk_changed = set()
                continue  # the head moved: look again from the same synced commit
            self._write_head(sorted(p for p in paths if not is_reserved(p)), head)
            return
        raise errors.ConcurrentUpdate(f"working tree {self.folder}: the files kept changing; will retry")

    def _disk_state(self, root: int, path: str, row: _Row) -> tuple[str | None, tuple[int, int, int, int]]:
        """(content hash or ``None`` if absent, fingerprint); ``Unreadable`` if it cannot be content.

        A directory or a symbolic link at the path, or on the way to it, is no
        file: the path is absent (a file replaced by a directory or a link is
        a removal), and what stands there is left alone.
        """
        segments = path[1:].split("/")
        try:
            parent = open_parent(root, segments[:-1])
        except (FileNotFoundError, NotADirectoryError):
            return None, _NO_ROW.fp
        except OSError as e:
            if e.errno == errno.ELOOP:  # a symbolic link where a directory was
                return None, _NO_ROW.fp
            if isinstance(e, PermissionError):  # not absent: what is there cannot be read
                raise Unreadable(f"cannot be read ({e.strerror})") from None
            raise
        try:
            st = os.stat(segments[-1], dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None, _NO_ROW.fp
        except PermissionError as e:  # a directory that can be listed but not entered
            raise Unreadable(f"cannot be read ({e.strerror})") from None
        finally:
            os.close(parent)
        if stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            return None, _NO_ROW.fp
        if stat.S_ISREG(st.st_mode) and row.sha is not None and unchanged(row.fp, st):
            return row.sha, row.fp
        try:
            data, fst = read_text_file(root, path, MAX_FILE_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return None, (-1, -1, -1, -1)
        return _sha(data), fingerprint(fst)

    def _entry_sha(self, entry) -> str:
        sha = self._shas.get(entry.oid)
        if sha is None:
            sha = _sha(self._repo.content(entry.oid))
            self._shas.put(entry.oid, sha)
        return sha

    def _commit_outside(self, paths: list[str], head: bytes | None) -> tuple[bool, bool]:
        """Commit the candidates the disk changed behind memrev's back, at most one piece of
        ``OUTSIDE_PIECE_BYTES``: (a commit was made, candidates were left for another piece)."""
        ops: list[Op | None] = []
        same: list[tuple[str, str | None, tuple[int, int, int, int], int]] = []
        warned = {p for (p,) in self._db.execute("SELECT DISTINCT path FROM warned")}
        storable: list[tuple[str]] = []  # warned of once, storable now: warned of again if skipped later
        committed: list[tuple[str, str | None, tuple[int, int, int, int], int]] = []  # rows once the commit is made
        held, more = 0, False
        synced = self._synced()
        self._kept = set()
        with open_folder(self.folder) as root:
            for path in paths:
                if held >= OUTSIDE_PIECE_BYTES:
                    more = True
                    break
                row = self._row(path)
                try:
                    disk, fp = self._disk_state(root, path, row)
                except Unreadable as e:
                    self._skip(path, e.reason)
                    if e.reason != "directory" and not e.reason.startswith("parent"):
                        self._kept.add(path)  # its bytes are in no commit: _write_head leaves it be
                    continue
                if disk is None and self._is_link(root, path):
                    self._kept.add(path)  # the user's link: its removal is committed, the link stays
                if path in warned:
                    storable.append((path,))
                entry = self._repo.entry_at(head, path)
                want = None if entry is None else self._entry_sha(entry)
                if disk == want:
                    if row.sha != disk or row.fp != fp or row.pending is not None:
                        same.append((path, disk, fp, 0))
                elif disk not in row.known():
                    op, read_fp = self._outside_op(root, path, disk)
                    if op is not None:  # None: changed again while we looked; the next scan sees it
                        read_sha = _sha(op.data) if isinstance(op, Write) else None
                        merged = self._merged_outside(op, path, synced, head)
                        if merged is not None:
                            ops.append(merged)
                            held += len(merged.data) if isinstance(merged, Write) else 0
                        committed.append((path, read_sha, read_fp, 0))  # what the file holds
        if storable:
            with self._transaction():
                self._db.executemany("DELETE FROM warned WHERE path=?", storable)
        if same:
            self._record(same)
        made = [op for op in ops if op is not None]
        if not made:
            return False, False
        changed = [op.path for op in made]
        message = f"outside edit: {changed[0]}" if len(changed) == 1 else f"outside edit: {len(changed)} paths"
        self._repo.commit(
            self.branch, made, author=OUTSIDE_AUTHOR, message=message, meta={"outside": True, "folder": self.folder}
        )
        # The files hold what was just committed: recorded so the next piece does not read them again
        # (after the commit, never before: a crash in between must leave them outside edits).
        self._record(committed)
        return True, more

    def _outside_op(self, root: int, path: str, disk: str | None) -> tuple[Write | Delete | None, tuple[int, int, int, int]]:
        """The op that commits what is on disk, and the fingerprint of what it read."""
        if disk is None:
            return Delete(path), _NO_ROW.fp
        try:
            data, st = read_text_file(root, path, MAX_FILE_BYTES)
        except (FileNotFoundError, Unreadable):
            return None, _NO_ROW.fp  # changed again while we looked; the next scan sees it
        return Write(path, data), fingerprint(st)

    # ------------------------------------------------------------ writing files

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
                self._remove(root, segments)
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

    def _remove(self, root: int, segments: list[str]) -> None:
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

    def _clear_tmp(self) -> None:
        """Temporary files of a crashed write (we hold the lock: nobody is writing now)."""
        # Listed and unlinked through the descriptor opened with O_NOFOLLOW: never through a link.
        for name in os.listdir(self._tmp_fd):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self._tmp_fd)

    def _skip(self, path: str, reason: str) -> None:
        """A file that cannot be content stays untouched, and is not read again until it changes."""
        with contextlib.suppress(OSError):
            self._unreadable[path] = fingerprint(os.stat(os.path.join(self.folder, path[1:]), follow_symlinks=False))
        if reason != "directory":  # a directory where the head has a file: shown as blocked, not an error
            self._warn_once(path, reason)

    def _warn_once(self, path: str, reason: str) -> None:
        """Log a skipped path once: when first skipped, remembered in ``worktree.db`` across opens."""
        if self._db.execute("INSERT OR IGNORE INTO warned(path, reason) VALUES (?, ?)", (path, reason)).rowcount:
            log.warning("working tree %s: leaving %s alone: %s", self.folder, path, reason)


class _Watcher:
    """A daemon thread that reconciles the folder when it changes (watchdog) or every ``interval`` (polling)."""

    def __init__(self, tree: WorkTree, interval: float) -> None:
        self._tree = tree
        self._interval = interval
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._observer = self._watch()
        self._thread = threading.Thread(target=self._run, name=f"memrev-worktree {tree.folder}", daemon=True)

    def _watch(self):
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:
            return None
        meta = os.path.join(self._tree.folder, WORKTREE_DIR) + os.sep
        wake = self._wake

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return  # reads change nothing
                if event.is_directory and event.event_type == "modified":
                    return  # comes with the event of the file that changed in it
                if os.fsdecode(event.src_path).startswith(meta):
                    return  # memrev's own files, and its renames from .memrev/tmp/ into place
                wake.set()

        # watchdog's inotify emitter warns when a directory is re-created at a watched path
        # (memrev prunes and re-creates directories as files come and go); the watch is
        # simply replaced, so the warning says nothing to the user.
        warnings.filterwarnings("ignore", message=r"Callback with id \S+ already exists for watch", category=RuntimeWarning)
        try:
            observer = Observer()
            observer.schedule(Handler(), self._tree.folder, recursive=True)
            observer.start()
        except Exception:  # noqa: BLE001 - inotify limits and the like: fall back to polling
            return None
        return observer

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        timeout = self._interval if self._observer is None else SAFETY_POLL_SECONDS
        failing: str | None = None
        while not self._stopped.is_set():
            self._wake.wait(timeout)
            # Scan once the folder has been quiet for a moment, so a writer's truncate
            # and write (or an editor's save dance) become one commit, not several.
            for _ in range(QUIET_ROUNDS):
                self._wake.clear()
                if self._stopped.wait(DEBOUNCE_SECONDS):
                    return
                if not self._wake.is_set():
                    break
            try:
                self._tree.reconcile()
            except Exception as e:  # noqa: BLE001 - the folder or database is away for a moment: look again later
                # Named at WARNING when it starts (or changes), not at every round; the watcher goes on.
                level = logging.DEBUG if str(e) == failing else logging.WARNING
                failing = str(e)
                log.log(level, "working tree %s: reconcile failed (will retry): %s", self._tree.folder, e)
            else:
                failing = None

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._observer is not None:
            with contextlib.suppress(Exception):
                self._observer.unschedule_all()  # before stop: no emitter left queueing events
                self._observer.stop()
                self._observer.join(timeout=5)
        self._thread.join(timeout=30)


# ---------------------------------------------------------------- one per folder per process

_OPEN: dict[str, WorkTree] = {}
_OPEN_LOCK = threading.Lock()


def acquire(folder: str, branch: str, durability: str, poll_interval: float) -> WorkTree:
    """The process's ``WorkTree`` for ``folder`` (reconciled at first use); pair with ``release``."""
    key = os.path.realpath(folder)
    with _OPEN_LOCK:
        tree = _OPEN.get(key)
        if tree is None:
            tree = WorkTree(key, branch, durability)
            try:
                tree.reconcile()
            except BaseException:
                tree.close()
                raise
            tree.start_watching(poll_interval)
            _OPEN[key] = tree
        tree.users += 1
        return tree


def release(tree: WorkTree) -> None:
    with _OPEN_LOCK:
        tree.users -= 1
        if tree.users > 0:
            return
        _OPEN.pop(tree.folder, None)
    tree.close()


__all__ = ["OUTSIDE_AUTHOR", "WorkTree", "acquire", "persisted_branch", "release", "set_mode"]
