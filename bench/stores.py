"""Store adapters for the memrev benchmark.

Every adapter exposes the same async surface the workloads use
(``read``, ``write``, ``list``, ``append``, ``read_range``) plus ``close()``
and ``disk_paths()`` (what to measure for "bytes on disk").

The two git peers ("a commit per write") are implemented here on top of the
object-store APIs of dulwich (pure Python) and pygit2 (libgit2):

* write  = new blob + rebuild every tree on the path (root .. parent dir) +
           one commit object whose parent is the current head + update
           ``refs/heads/master``.  Loose objects only, never packed.
* read   = look the path up in the head commit's tree, read the blob.
* list   = read the directory's tree object (the head tree walked down to it),
           names sorted, sub-trees suffixed with ``/``.
* append = read the current blob + write(old + new) (one commit); returns the
           byte offset (old length).  There is no append API in git.
* read_range = read the blob and slice the bytes.

Both repos are bare (no work tree, no reflog) and use the libraries' default
durability: dulwich fsyncs the ref file on every update but not the loose
objects; libgit2 does not fsync at all (GIT_OPT_ENABLE_FSYNC_GITDIR is off).
The head commit id and its root tree id are cached in the handle (as a
long-lived writer would); other trees and blobs are read from the object store.
"""

from __future__ import annotations

import difflib
import os
import time
from pathlib import Path
from typing import Any

GIT_REF = "refs/heads/master"

# Stores that take part in W1..W5 (memrev-full and memrev-worktree take part in W1 only).
# memrev-pg = memrev on PostgreSQL (a fresh database per child run, on the one
# throwaway server bench/run.py starts; see bench/pgserver.py).
ALL_STORES = ["memrev", "memrev-pg", "ag2-memory", "ag2-disk", "ag2-sqlite", "dulwich", "pygit2"]
HISTORY_STORES = ["memrev", "memrev-pg", "dulwich", "pygit2"]
PG_STORES = {"memrev-pg"}


def _split(path: str) -> list[str]:
    return [p for p in path.strip("/").split("/") if p]


# --------------------------------------------------------------------------- dulwich


class DulwichStore:
    """A commit per write with dulwich's object store API (loose objects)."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        from dulwich.repo import Repo

        root = os.fspath(root)
        if create and not os.path.exists(os.path.join(root, "HEAD")):
            os.makedirs(root, exist_ok=True)
            self.repo = Repo.init_bare(root)
        else:
            self.repo = Repo(root)
        self.objects = self.repo.object_store
        self._ref = GIT_REF.encode()
        try:
            self.head: bytes | None = self.repo.refs[self._ref]
        except KeyError:
            self.head = None
        # root tree id of the head commit, cached with the head (set on every commit)
        self._head_tree: bytes | None = self.objects[self.head].tree if self.head is not None else None
        self._n = 0

    # -- helpers
    def _root_tree(self) -> bytes | None:
        return self._head_tree

    def _blob_bytes(self, path: str, tree_id: bytes | None = None) -> bytes | None:
        from dulwich.object_store import tree_lookup_path

        if tree_id is None:
            tree_id = self._root_tree()
            if tree_id is None:
                return None
        try:
            mode, sha = tree_lookup_path(self.objects.__getitem__, tree_id, path.strip("/").encode())
        except KeyError:
            return None
        obj = self.objects[sha]
        if obj.type_name != b"blob":
            return None
        return obj.data

    def _set(self, tree_id: bytes | None, parts: list[bytes], blob_id: bytes) -> bytes:
        from dulwich.objects import Tree

        tree = self.objects[tree_id] if tree_id is not None else Tree()
        name = parts[0]
        if len(parts) == 1:
            tree.add(name, 0o100644, blob_id)
        else:
            sub = None
            if name in tree:
                mode, sha = tree[name]
                if mode == 0o040000:
                    sub = sha
            tree.add(name, 0o040000, self._set(sub, parts[1:], blob_id))
        self.objects.add_object(tree)
        return tree.id

    def _commit_bytes(self, path: str, data: bytes) -> None:
        from dulwich.objects import Blob, Commit

        blob = Blob.from_string(data)
        self.objects.add_object(blob)
        new_tree = self._set(self._root_tree(), [p.encode() for p in _split(path)], blob.id)
        c = Commit()
        c.tree = new_tree
        c.parents = [self.head] if self.head is not None else []
        c.author = c.committer = b"bench <bench@example.invalid>"
        c.author_time = c.commit_time = int(time.time())
        c.author_timezone = c.commit_timezone = 0
        self._n += 1
        c.message = f"write {path}\n".encode()
        self.objects.add_object(c)
        if not self.repo.refs.set_if_equals(self._ref, self.head, c.id):
            raise RuntimeError("ref moved under us")
        self.head = c.id
        self._head_tree = new_tree

    # -- KnowledgeStore-like surface
    async def read(self, path: str) -> str | None:
        b = self._blob_bytes(path)
        return None if b is None else b.decode("utf-8")

    async def write(self, path: str, content: str) -> None:
        self._commit_bytes(path, content.encode("utf-8"))

    async def list(self, path: str = "/") -> list[str]:
        from dulwich.object_store import tree_lookup_path

        tree_id = self._root_tree()
        if tree_id is None:
            return []
        p = path.strip("/")
        if p:
            try:
                mode, tree_id = tree_lookup_path(self.objects.__getitem__, tree_id, p.encode())
            except KeyError:
                return []
            if mode != 0o040000:
                return []
        tree = self.objects[tree_id]
        out = []
        for entry in tree.iteritems():
            name = entry.path.decode()
            out.append(name + "/" if entry.mode == 0o040000 else name)
        return sorted(out)

    async def append(self, path: str, content: str) -> int:
        old = self._blob_bytes(path) or b""
        self._commit_bytes(path, old + content.encode("utf-8"))
        return len(old)

    async def read_range(self, path: str, start: int, end: int | None = None) -> str:
        b = self._blob_bytes(path)
        if b is None:
            return ""
        return b[start:end].decode("utf-8")

    def close(self) -> None:
        self.repo.close()

    # -- history
    def first_parent_ids(self, n: int) -> list[bytes]:
        """[head, head~1, ..., head~n]"""
        ids = [self.head]
        cur = self.head
        for _ in range(n):
            cur = self.objects[cur].parents[0]
            ids.append(cur)
        return ids

    def read_at(self, commit_id: bytes, path: str) -> str | None:
        b = self._blob_bytes(path, self.objects[commit_id].tree)
        return None if b is None else b.decode("utf-8")

    def diff(self, a: bytes, b: bytes) -> str:
        from dulwich.diff_tree import tree_changes

        ta, tb = self.objects[a].tree, self.objects[b].tree
        out = []
        for ch in tree_changes(self.objects, ta, tb):
            old_path = (ch.old.path or ch.new.path).decode()
            new_path = (ch.new.path or ch.old.path).decode()
            old = self.objects[ch.old.sha].data.decode() if ch.old.sha else ""
            new = self.objects[ch.new.sha].data.decode() if ch.new.sha else ""
            out.extend(
                difflib.unified_diff(
                    old.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    "a/" + old_path,
                    "b/" + new_path,
                )
            )
        return "".join(out)


# --------------------------------------------------------------------------- pygit2


class Pygit2Store:
    """A commit per write with pygit2 (libgit2): blob, TreeBuilder per level, commit."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        import pygit2

        self.pygit2 = pygit2
        root = os.fspath(root)
        if create and not os.path.exists(os.path.join(root, "HEAD")):
            self.repo = pygit2.init_repository(root, bare=True)
        else:
            self.repo = pygit2.Repository(root)
        self.sig = pygit2.Signature("bench", "bench@example.invalid")
        try:
            self.head: Any = self.repo.references[GIT_REF].target
        except KeyError:
            self.head = None
        # root tree of the head commit, cached with the head (set on every commit)
        self._head_tree = self.repo[self.head].tree_id if self.head is not None else None
        self._blob_mode = pygit2.GIT_FILEMODE_BLOB
        self._tree_mode = pygit2.GIT_FILEMODE_TREE

    def _root_tree(self):
        return None if self._head_tree is None else self.repo[self._head_tree]

    def _blob_bytes(self, path: str, tree=None) -> bytes | None:
        if tree is None:
            tree = self._root_tree()
            if tree is None:
                return None
        try:
            obj = tree[path.strip("/")]
        except KeyError:
            return None
        if obj.type_str != "blob":
            return None
        return obj.data

    def _set(self, tree, parts: list[str], blob_id):
        tb = self.repo.TreeBuilder(tree) if tree is not None else self.repo.TreeBuilder()
        name = parts[0]
        if len(parts) == 1:
            tb.insert(name, blob_id, self._blob_mode)
        else:
            sub = None
            if tree is not None and name in tree:
                obj = tree[name]
                if obj.type_str == "tree":
                    sub = obj
            tb.insert(name, self._set(sub, parts[1:], blob_id), self._tree_mode)
        return tb.write()

    def _commit_bytes(self, path: str, data: bytes) -> None:
        blob_id = self.repo.create_blob(data)
        tree_id = self._set(self._root_tree(), _split(path), blob_id)
        parents = [self.head] if self.head is not None else []
        self.head = self.repo.create_commit(GIT_REF, self.sig, self.sig, f"write {path}\n", tree_id, parents)
        self._head_tree = tree_id

    async def read(self, path: str) -> str | None:
        b = self._blob_bytes(path)
        return None if b is None else b.decode("utf-8")

    async def write(self, path: str, content: str) -> None:
        self._commit_bytes(path, content.encode("utf-8"))

    async def list(self, path: str = "/") -> list[str]:
        tree = self._root_tree()
        if tree is None:
            return []
        p = path.strip("/")
        if p:
            try:
                tree = tree[p]
            except KeyError:
                return []
            if tree.type_str != "tree":
                return []
        return sorted(e.name + "/" if e.type_str == "tree" else e.name for e in tree)

    async def append(self, path: str, content: str) -> int:
        old = self._blob_bytes(path) or b""
        self._commit_bytes(path, old + content.encode("utf-8"))
        return len(old)

    async def read_range(self, path: str, start: int, end: int | None = None) -> str:
        b = self._blob_bytes(path)
        if b is None:
            return ""
        return b[start:end].decode("utf-8")

    def close(self) -> None:
        self.repo.free()

    # -- history
    def first_parent_ids(self, n: int) -> list:
        ids = [self.head]
        cur = self.repo[self.head]
        for _ in range(n):
            cur = cur.parents[0]
            ids.append(cur.id)
        return ids

    def read_at(self, commit_id, path: str) -> str | None:
        b = self._blob_bytes(path, self.repo[commit_id].tree)
        return None if b is None else b.decode("utf-8")

    def diff(self, a, b) -> str:
        return self.repo.diff(self.repo[a], self.repo[b]).patch or ""


# --------------------------------------------------------------------------- factory


class Handle:
    """A store plus what the harness needs around it."""

    def __init__(self, name: str, store: Any, disk: list[Path], closer, disk_fn=None) -> None:
        self.name = name
        self.store = store
        self._disk = disk
        self._closer = closer
        self._disk_fn = disk_fn
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._closer()

    def disk_paths(self) -> list[Path]:
        return self._disk

    def disk_usage(self) -> tuple[int, int]:
        """(apparent bytes, allocated bytes); PostgreSQL: table+index+TOAST bytes, twice."""
        if self._disk_fn is not None:
            return self._disk_fn()
        return disk_usage(self._disk)


def open_store(name: str, workdir: str | os.PathLike[str], *, create: bool = True) -> Handle:
    """Open (creating if needed) store ``name`` with its data under ``workdir``."""
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    if name in ("memrev", "memrev-full", "memrev-worktree"):
        from memrev import VersionedStore

        folder = wd / "memrev"
        kw = {"memrev-full": {"durability": "full"}, "memrev-worktree": {"worktree": True}}.get(name, {})
        s = VersionedStore(str(folder), **kw)
        return Handle(name, s, [folder], s.close)
    if name == "memrev-pg":
        import pgserver
        from memrev import VersionedStore

        tag = wd.name
        url = pgserver.create_database(tag) if create else pgserver.database_url(tag)
        s = VersionedStore(url)

        def size():
            n = pgserver.relation_bytes(tag)
            return n, n

        return Handle(name, s, [], s.close, disk_fn=size)
    if name == "ag2-memory":
        from ag2.knowledge import MemoryKnowledgeStore

        return Handle(name, MemoryKnowledgeStore(), [], lambda: None)
    if name == "ag2-disk":
        from ag2.knowledge import DiskKnowledgeStore

        root = wd / "disk"
        root.mkdir(exist_ok=True)
        return Handle(name, DiskKnowledgeStore(root), [root], lambda: None)
    if name == "ag2-sqlite":
        from ag2.knowledge import SqliteKnowledgeStore

        db = wd / "kb.sqlite"
        s = SqliteKnowledgeStore(db)
        # the db file plus any journal the run leaves behind
        return Handle(name, s, [db, wd / "kb.sqlite-journal", wd / "kb.sqlite-wal", wd / "kb.sqlite-shm"], s.close)
    if name == "dulwich":
        s = DulwichStore(wd / "dulwich.git", create=create)
        return Handle(name, s, [wd / "dulwich.git"], s.close)
    if name == "pygit2":
        s = Pygit2Store(wd / "pygit2.git", create=create)
        return Handle(name, s, [wd / "pygit2.git"], s.close)
    raise ValueError(f"unknown store {name!r}")


def disk_usage(paths: list[Path]) -> tuple[int, int]:
    """(apparent bytes = sum of st_size, allocated bytes = sum of st_blocks*512)."""
    apparent = allocated = 0
    for p in paths:
        if not os.path.lexists(p):
            continue
        if os.path.isdir(p):
            for dirpath, _dirnames, filenames in os.walk(p):
                for fn in filenames:
                    st = os.lstat(os.path.join(dirpath, fn))
                    apparent += st.st_size
                    allocated += st.st_blocks * 512
        else:
            st = os.lstat(p)
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated
