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
- A purge (``Store.purge``) never leaves purged bytes in the files nor lets
  them come back as outside edits. The purging handle's tree holds the lock
  across the purge (``purging``: outside edits committed first, so they are
  purged too) and rewrites every file once it committed (``follow_purge``);
  ``for_purge`` gives a handle that keeps no tree the folder's, when it is on.
  Any other tree (another process's, a later open after a purge by a handle
  with no tree) finds its synced commit gone, named by the purge's record:
  it takes the new id as synced, and every file still as the manifest recorded
  it is memrev's, rewritten to the head (``Manifest._synced_state``). Every
  entry point first drops the repository's caches if a purge committed
  (``Reading.fresh``).

One ``WorkTree`` per folder per process; it has its own database connection
and a watcher thread (watchdog events if installed, else polling) that turns
outside edits into commits while any handle has the store open.

This module holds the ``WorkTree`` class's entry points (reconcile, sync, the
pre-check before a commit), its watcher and the one-per-folder registry; the
class's parts live beside it, each a module of ``memrev.folders``:

- ``worktree_safety``: the lock and the safety checks (``.memrev/`` and its
  ``tmp/`` opened by descriptor, symbolic links never followed or replaced);
- ``worktree_db``: the bookkeeping database (the mode, the manifest, the
  ``warned`` table; a damaged file moved aside) and ``Manifest``;
- ``worktree_scan``: outside edits found and committed in pieces (``Scan``);
- ``worktree_write``: the head's files written out (``WriteOut``);
- ``worktree_merge``: the divergence check and the merge by kind.

The public names this module defined before the split (``OUTSIDE_AUTHOR``,
``OUTSIDE_PIECE_BYTES``, ``CONFIG_FILE``, ``ABSENT``, ``config_path``,
``persisted_branch``, ``set_mode`` ...) and ``MAX_FILE_BYTES`` are still
importable from it; its private helpers are now public names of their parts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from .. import errors
from ..backends import STORE_FILE, WORKTREE_DIR, folder_store_file, is_url, open_backend
from ..core import trees
from ..repo.cache import LRU
from ..repo.repository import Repository
from .adopt import MAX_FILE_BYTES as MAX_FILE_BYTES
from .adopt import in_folder, open_folder
from .worktree_db import ABSENT as ABSENT
from .worktree_db import CONFIG_FILE, connect, persisted_branch, set_mode
from .worktree_db import config_path as config_path
from .worktree_safety import clear_tmp, locked, open_lock, own_dirs
from .worktree_scan import OUTSIDE_AUTHOR, Scan
from .worktree_scan import OUTSIDE_PIECE_BYTES as OUTSIDE_PIECE_BYTES
from .worktree_write import WriteOut

# ``X as X`` above: names this module had before its parts moved out, unused here, importable from here.

log = logging.getLogger("memrev")

# With watchdog, events wake the watcher; this slower poll is the safety net for missed events.
SAFETY_POLL_SECONDS = 30.0
DEBOUNCE_SECONDS = 0.1
QUIET_ROUNDS = 20  # a folder that never goes quiet is still scanned every 2 s


class WorkTree(Scan, WriteOut):
    """The plain files of one folder, kept equal to one branch's head (see the module docstring)."""

    def __init__(self, folder: str, branch: str, durability: str) -> None:
        self.folder = os.path.realpath(folder)
        self.branch = branch
        self._durability = durability
        meta = Path(self.folder) / WORKTREE_DIR
        self._tmp_fd = own_dirs(self.folder)  # checked before anything opens a path under .memrev/
        self._tmp = meta / "tmp"
        self._repo = Repository(open_backend(self.folder, durability=durability, worktree=True))
        self._db = connect(meta / CONFIG_FILE, check=True)
        self._db.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
        self._mutex = threading.Lock()
        self._lock_fd = open_lock(meta)
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

    # ------------------------------------------------------------ entry points

    def reconcile(self) -> None:
        """Scan the whole folder: commit outside changes, then bring every file to the head.

        Run at open (which also finishes or undoes a crashed process's journaled
        intents) and by the watcher.
        """
        with locked(self._mutex, self._lock_fd):
            self._repo.fresh()  # a purge by another handle since: its caches are dropped
            clear_tmp(self._tmp_fd)
            self._synced()  # seed the manifest first, so the scan compares against it
            self._settle(self._changed_on_disk())

    def sync(self) -> None:
        """After a commit through memrev: bring the files the head changed up to date.

        Costs what the commit changed, not what the folder holds; an outside
        edit to one of those files not yet seen is committed first, never overwritten.
        """
        with locked(self._mutex, self._lock_fd):
            self._repo.fresh()
            self._settle(set())

    def refuse_unstorable(self, paths: Iterable[str]) -> None:
        """Before a commit that writes, appends to or removes ``paths`` (a directory: the head's
        files under it): raise ``UnstorableFileInTheWay`` if the folder holds, at any of them, a
        file memrev could not store (binary, a symbolic link, too big), whose bytes that commit's
        write-out would destroy. A directory in the way is not refused (the path is shown blocked).
        Reads only (no folder lock); a file put there after the check is still never replaced (_write_head)."""
        with self._mutex:
            self._repo.fresh()
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

    # ------------------------------------------------------------ purge

    @contextlib.contextmanager
    def purging(self) -> Iterator[None]:
        """Hold the folder (this process's threads and other processes) for the span of a
        purge: no reconcile may run between the purge's commit and ``follow_purge``, or it
        would take the files still holding purged bytes for outside edits.

        Under the lock, before the purge, the folder is reconciled: an outside edit the
        watcher has not seen yet becomes history first (and is purged with the rest), not
        overwritten by ``follow_purge``. A reconcile that fails is logged; the purge goes on."""
        with locked(self._mutex, self._lock_fd):
            try:
                self._repo.fresh()
                clear_tmp(self._tmp_fd)
                self._settle(self._changed_on_disk())
            except Exception as e:  # noqa: BLE001 - the purge is what was asked for; its write-out still follows
                log.warning("working tree %s: not reconciled before the purge: %s", self.folder, e)
            yield

    def follow_purge(self) -> None:
        """Inside ``purging()``, once the purge committed: every file the manifest or the new
        head names is brought to the new head (a purged path's file removed, a redacted one
        rewritten), and the manifest records the new head as synced."""
        self._repo.fresh()
        self._shas.clear()
        head = self._repo.head(self.branch)
        paths = {row[0] for row in self._db.execute("SELECT path FROM files")}
        if head is not None:
            paths |= {p for p, _ in trees.walk(self._repo, self._repo.root(head))}
        self._write_head(sorted(p for p in paths if in_folder(p)), head)

    def owned_files(self) -> list[str]:
        """Every regular file of the folder, ``.memrev/`` included (a purge's scan reads them
        all); links are not followed."""
        out = []
        for top, dirs, files in os.walk(self.folder):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
            out += [os.path.join(top, f) for f in files if os.path.isfile(os.path.join(top, f)) and not os.path.islink(os.path.join(top, f))]
        return out

    def _head_files_at(self, head: bytes | None, path: str) -> list[str]:
        """``path``, and the head's files below it when the head has a directory there."""
        out = [path]
        if path != "/" and head is not None and self._repo.dir_exists_at(head, path):
            node = trees.find_dir(self._repo, self._repo.root(head), path[1:].split("/"))
            if node is not None:
                out += [p for p, _ in trees.walk(self._repo, node, path)]
        elif path == "/" and head is not None:
            out = [p for p, _ in trees.walk(self._repo, self._repo.root(head))]
        return [p for p in out if p != "/" and in_folder(p)]

    # ------------------------------------------------------------ the reconcile step

    def _settle(self, disk_changed: set[str]) -> None:
        """Commit outside changes among the candidates, then write the head; repeat until stable.

        After a purge by another handle (the synced commit followed through its record,
        ``Manifest._synced_state``), every file of the manifest is a candidate: the ones still
        as recorded are memrev's and rewritten to the head, the others are outside edits."""
        synced, followed = self._synced_state()
        follow: set[str] = set()
        if followed:
            follow = {r[0] for r in self._db.execute("SELECT path FROM files")}
            log.info(
                "working tree %s: a purge rewrote the commit its files showed; bringing them to %s (%d files known)",
                self.folder, "no commit" if synced is None else synced.hex()[:12], len(follow),
            )
        rounds = 0
        while rounds < 100:
            head = self._repo.head(self.branch)
            paths = {p for p, _, _ in trees.diff(self._repo, self._repo.root(synced), self._repo.root(head))}
            paths |= disk_changed | follow
            paths |= {r[0] for r in self._db.execute("SELECT path FROM files WHERE blocked=1 OR pending IS NOT NULL")}
            committed, more = self._commit_outside(sorted(p for p in paths if in_folder(p)), head)
            if committed:
                if more:
                    continue  # one piece of many: the rest of the candidates next, not a round lost
                rounds += 1
                disk_changed = set()
                continue  # the head moved: look again from the same synced commit
            self._write_head(sorted(p for p in paths if in_folder(p)), head)
            return
        raise errors.ConcurrentUpdate(f"working tree {self.folder}: the files kept changing; will retry")


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


def folder_of(location: str | os.PathLike[str]) -> str | None:
    """The folder whose working tree keeps the store at ``location`` (the folder itself, or
    its store file ``.memrev/memrev.db`` / ``memrev.db``), ``None`` when it has none."""
    location = os.fspath(location)
    if is_url(location):
        return None
    path = Path(location)
    if path.is_dir():
        return os.path.realpath(path) if config_path(path).exists() else None
    for folder in (path.parent.parent, path.parent):
        if path.name == STORE_FILE and config_path(folder).exists():
            with contextlib.suppress(OSError):
                if os.path.samefile(folder_store_file(folder), path):
                    return os.path.realpath(folder)
    return None


@contextlib.contextmanager
def for_purge(location: str | os.PathLike[str], durability: str, own: WorkTree | None = None) -> Iterator[WorkTree | None]:
    """The working tree a purge through a handle on ``location`` must hold and follow
    (``purging``, ``follow_purge``, ``owned_files``): the handle's own; else, when the folder's
    working tree is on, this process's (a handle opened without it, or on the store file) or
    one opened for the purge, without a watcher, closed after. ``None``: the folder has no
    working tree on, or the location is no folder's."""
    if own is not None:
        yield own
        return
    folder = folder_of(location)
    branch = None if folder is None else persisted_branch(folder)
    if folder is None or branch is None:
        yield None
        return
    with _OPEN_LOCK:
        tree = _OPEN.get(folder)
        if tree is not None:
            tree.users += 1
    if tree is not None:
        try:
            yield tree
        finally:
            release(tree)
        return
    tree = WorkTree(folder, branch, durability)
    try:
        yield tree
    finally:
        tree.close()


__all__ = ["OUTSIDE_AUTHOR", "WorkTree", "acquire", "folder_of", "for_purge", "persisted_branch", "release", "set_mode"]
