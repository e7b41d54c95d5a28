"""What every part of the repository reads: trees, commit records and blob contents
(each checked against its id), a path at a commit, a directory's listing, the
commit log, and the caches that keep those reads cheap (bounded by size)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from .. import errors
from ..backends.base import Backend
from ..core import trees
from ..core.objects import EMPTY_TREE, EMPTY_TREE_ID, ID_BYTES, CommitData, Entry, commit_id, decode_tree, tree_id
from ..core.paths import is_directory_key, is_under, split
from .blobs import BlobStore
from .cache import LRU, Budget
from .model import Commit, FileChange, decode_commit, file_change
from .purged import PurgeMap, read_records
from .revisions import PURGES_REF, Resolver, branch_ref

__all__ = ["Ancestry", "Reading"]


# Caches are bounded by their size in memory, not by count, and together by one budget
# (``CACHE_BYTES``): 50,000 decoded tree nodes (the old bound) of a store with
# thousand-file directories held ~160 MB, 50,000 commits ~27 MB; and with a budget of
# its own each (16 MB for trees, commits and contents, 50,000 Commit objects, 100,000
# blob rows), a process that made 30,000 commits had grown by 74 MB and was still
# growing. Each cache may use up to its cap while the others are idle (a walk of
# history borrows what a burst of commits does not need); past ``CACHE_BYTES`` in all,
# the one fullest for its cap gives way. The weights are measured (tracemalloc, CPython
# 3.12), so what is accounted is about what is held.
CACHE_BYTES = 10 << 20
TREE_CACHE_BYTES = 4 << 20
COMMIT_CACHE_BYTES = 3 << 20  # ~5,000 commits of short messages
INFO_CACHE_BYTES = 4 << 20  # ~5,000 Commit objects as a path's log builds them
LISTING_CACHE_BYTES = 1 << 20
TREE_BYTES_CACHE_BYTES = 2 << 20  # ~7,000 small nodes as stored
CONTENT_CACHE_BYTES = 4 << 20
BLOB_ROW_CACHE_BYTES = 1 << 20  # ~2,600 rows: what the next version of a recent file needs
FOLDER_SEQ_CACHE_BYTES = 512 << 10  # ~1,400 notes: the next commit on top reads those of one
LOGGED_CACHE_BYTES = 256 << 10


def decoded_tree_bytes(node: tuple[str, Any]) -> int:
    """About what a decoded node holds in memory (measured: a leaf ~250 B + ~280 B per
    entry, a split node ~300 B + ~80 B per bucket)."""
    kind, body = node
    return 250 + (280 * len(body) if kind == "T" else 80 * len(body[1]))


def _commit_bytes(hit: tuple[int, CommitData]) -> int:
    """About what a cached (number, decoded commit) holds (measured: ~490 B with a short message)."""
    c = hit[1]
    return 450 + len(c.message) + len(c.author) + 100 * len(c.meta) + 60 * len(c.parents)


def _info_bytes(c: Commit) -> int:
    """About what a ``Commit`` holds once decoded (measured: ~200 B undecoded with its
    record, ~400 B more decoded with a short message; ~110 B a path)."""
    stored = c.stored_record()
    return 650 + 2 * (len(stored[1]) if stored is not None else len(c.message)) + 110 * _path_count(c)


def _path_count(c: Commit) -> int:
    # Counted without decoding: a path's log builds thousands of Commits undecoded.
    fields = c._fields
    changed = c._changed if fields is None else fields[5]
    return 1 if changed is None or isinstance(changed, str) else len(changed)  # type: ignore[arg-type]


def _stored_bytes(data: bytes) -> int:
    return 40 + len(data)


def _names_bytes(names: list[str]) -> int:
    return 64 + sum(60 + len(n) for n in names)


def _folder_seq_bytes(seq: int) -> int:
    """A note ``(key, commit id) -> number``: the key's tuple, path and id (~150 B + the path)."""
    return 200


def _flag_bytes(flag: bool) -> int:
    return 100  # the path is held by whoever asked for its log too


class Reading:
    """The repository's reads and caches; ``Repository`` adds the commit engine
    (``commit.py``) and the per-path history (``pathlog.py``) on top."""

    def __init__(self, backend: Backend, *, cache_bytes: int | None = None) -> None:
        self.backend = backend
        # One budget for all of them; a larger content cache asked for (fsck) widens it.
        self.caches = Budget(CACHE_BYTES + max(0, (cache_bytes or 0) - CONTENT_CACHE_BYTES))
        shared = self.caches
        self.blobs = BlobStore(
            backend, cache_bytes=CONTENT_CACHE_BYTES if cache_bytes is None else cache_bytes,
            row_bytes=BLOB_ROW_CACHE_BYTES, shared=shared,
        )
        self._trees = LRU(TREE_CACHE_BYTES, weigh=decoded_tree_bytes, shared=shared)
        self._commits = LRU(COMMIT_CACHE_BYTES, weigh=_commit_bytes, shared=shared)
        # sorted names of a directory node, by node id
        self._listings = LRU(LISTING_CACHE_BYTES, weigh=_names_bytes, shared=shared)
        # hash-checked nodes as stored (history)
        self._tree_bytes = LRU(TREE_BYTES_CACHE_BYTES, weigh=_stored_bytes, shared=shared)
        self._infos = LRU(INFO_CACHE_BYTES, weigh=_info_bytes, shared=shared)  # Commit (as the history API returns it) by commit id
        # paths whose whole log was built (its commits are in _infos)
        self._logged = LRU(LOGGED_CACHE_BYTES, weigh=_flag_bytes, shared=shared)
        # (path or directory key, commit id) -> the last change of that key on the commit's
        # line: noted by the commit that made it, so the next commit on top skips the read.
        self._folder_seqs = LRU(FOLDER_SEQ_CACHE_BYTES, weigh=_folder_seq_bytes, shared=shared)
        self._folders_fresh = False  # every commit has its directory keys (see directory_keys_stale)
        self._new_trees: list[tuple[bytes, bytes]] | None = None  # collected by _update_tree
        # In a group whose commit numbers come only with COMMIT (commit_group on a network
        # backend): the records of its commits so far, which the next request builds on.
        self._unsettled: dict[bytes, CommitData] | None = None
        self._revisions = Resolver(
            backend, lambda oid: self.commit_data(oid)[1].parents, lambda oid: self._commits.get(oid) is not None, self._rewritten
        )
        # The purge generation these caches were filled under (the target of refs/purges),
        # and the purge records' id map read under it. _UNSEEN: not compared yet.
        self._purge_gen: object = _UNSEEN
        self._purge_map: PurgeMap | None = None

    def forget(self) -> None:
        """Drop every cache (after gc removed objects they may hold)."""
        self.blobs.forget()
        for cache in (self._trees, self._commits, self._listings, self._infos, self._logged, self._folder_seqs, self._tree_bytes):
            cache.clear()

    def fresh(self) -> None:
        """Drop every cache if a purge committed since they were filled (by any handle, in any
        process): a read naming an old commit by id could meet an object the purge removed,
        and the commits a purge restacked have new numbers. One primary-key read of
        ``refs/purges``; every ``resolve`` calls it first, and ``head`` reads it with the
        branch."""
        self._saw_generation(self.backend.get_ref(PURGES_REF))

    def _saw_generation(self, gen: bytes | None) -> None:
        if gen != self._purge_gen:
            self.forget()
            self._purge_gen = gen
            self._purge_map = None

    def purge_map(self) -> PurgeMap:
        """The purge records' old -> new ids (read once per purge generation)."""
        if self._purge_map is None:
            self._purge_map = PurgeMap(read_records(self))
        return self._purge_map

    def _rewritten(self, name: str) -> bytes | None:
        """The commit an id (or a prefix of 7+ hex digits) a purge rewrote is now; ``None``
        when no purge rewrote it. A commit a purge dropped is ``RevisionNotFound`` saying so."""
        known = self.purge_map()
        if not known:
            return None
        olds = [name] if len(name) == 40 and name in known else known.with_prefix(name) if len(name) < 40 else []
        if len(olds) > 1:
            raise errors.AmbiguousRevision(f"{name}: matches {len(olds)} commits that a purge rewrote")
        hit = known.follow(olds[0]) if olds else None
        if hit is None:
            return None
        if hit.new is None:
            raise errors.RevisionNotFound(
                f"commit {hit.old[:12]} was removed by a purge ({hit.time}: {hit.reason}): every change it made was purged"
            )
        return bytes.fromhex(hit.new)

    def tree(self, oid: bytes) -> tuple[str, Any]:
        node = self._trees.get(oid)
        if node is None:
            data: bytes | None = EMPTY_TREE if oid == EMPTY_TREE_ID else self._tree_bytes.get(oid)  # checked when history read it
            if data is None:
                data = self.backend.get_tree(oid)
                if data is None:
                    raise errors.IntegrityError(f"tree {oid.hex()} is missing")
                if tree_id(data) != oid:
                    raise errors.IntegrityError(f"tree {oid.hex()} does not match its hash")
            try:
                node = decode_tree(data)
            except ValueError as e:
                raise errors.IntegrityError(f"tree {oid.hex()}: {e}") from None
            self._trees.put(oid, node)
        return node

    def tree_bytes(self, oids: Iterable[bytes]) -> dict[bytes, bytes]:
        """``{id: bytes}`` of tree nodes, each checked against its hash; those not cached
        are read in one batch (``trees.lookup_many`` asks for a level of nodes at once).
        The bytes are cached as stored, not decoded: ``history`` looks one name up in
        each node of thousands, which costs less than decoding them, and bytes are a
        tenth of a decoded node's memory (and nothing for the garbage collector)."""
        out: dict[bytes, bytes] = {EMPTY_TREE_ID: EMPTY_TREE}
        cached = self._tree_bytes
        wanted = []
        for oid in oids:
            if oid not in out:
                data = cached.get(oid)
                if data is None:
                    wanted.append(oid)
                out[oid] = data
        got = self.backend.get_trees(wanted) if wanted else {}
        for oid in wanted:
            data = got.get(oid)
            if data is None:
                raise errors.IntegrityError(f"tree {oid.hex()} is missing")
            if tree_id(data) != oid:
                raise errors.IntegrityError(f"tree {oid.hex()} does not match its hash")
            cached.put(oid, data)
            out[oid] = data
        return out

    def commit_data(self, oid: bytes) -> tuple[int, CommitData]:
        hit = self._commits.get(oid)
        if hit is None:
            row = self._stored_commit(oid) or self.backend.get_commit(oid)
            if row is None:
                raise errors.RevisionNotFound(f"commit {oid.hex()} does not exist")
            seq, data = row
            if commit_id(data) != oid:
                raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
            hit = (seq, decode_commit(oid, data))
            self._commits.put(oid, hit)
        return hit

    def _stored_commit(self, oid: bytes) -> tuple[int, bytes] | None:
        """The record a path's log kept undecoded (``Commit.from_record``): what follows
        a log (``history``, filters) decodes it instead of reading it again."""
        info = self._infos.get(oid)
        return None if info is None else info.stored_record()

    def content(self, oid: bytes) -> bytes:
        """The bytes of a blob (see :class:`~memrev.repo.blobs.BlobStore`)."""
        return self.blobs.content(oid)

    def content_range(self, oid: bytes, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a blob, reading only the append pieces needed."""
        return self.blobs.content_range(oid, start, end)

    def head(self, branch: str) -> bytes | None:
        """The branch's head, read with the purge generation (one statement): a purge
        stores the commits made after the first one it rewrote again, with new numbers, so
        a handle's cached numbers are dropped before it reads at any head after one."""
        ref = branch_ref(branch)
        found = self.backend.get_refs((ref, PURGES_REF))
        self._saw_generation(found.get(PURGES_REF))
        return found.get(ref)

    def root(self, commit: bytes | None) -> bytes:
        return EMPTY_TREE_ID if commit is None else self.commit_data(commit)[1].tree

    def entry_at(self, commit: bytes | None, path: str) -> Entry | None:
        return trees.lookup(self, self.root(commit), split(path))

    def list_at(self, commit: bytes | None, path: str) -> list[str]:
        node = trees.find_dir(self, self.root(commit), split(path))
        if node is None:
            return []
        names = self._listings.get(node)
        if names is None:
            names = trees.list_dir(self, node)
            self._listings.put(node, names)
        return list(names)

    # Roots walked together by ``entries_at``: bounds the node bytes one batch holds.
    _ROOTS_AT_ONCE = 1000

    def entries_at(self, commits: list[Commit], path: str) -> list[Entry | None]:
        """The entry of ``path`` at each of ``commits`` (``history``): the trees of a
        thousand commits are read a level at a time, one batch per level, each node
        searched without being decoded, and the root of a commit a path's log kept
        undecoded is taken from its record."""
        roots = [self._root_of(c) for c in commits]
        segments = split(path)
        out: list[Entry | None] = []
        try:
            for i in range(0, len(roots), self._ROOTS_AT_ONCE):
                out += trees.lookup_many(self, roots[i : i + self._ROOTS_AT_ONCE], segments)
        except ValueError as e:  # a node whose bytes (matching its hash) do not read as a tree
            raise errors.IntegrityError(str(e)) from None
        return out

    def _root_of(self, c: Commit) -> bytes:
        stored = c.stored_record()
        if stored is None:
            return self.root(bytes.fromhex(c.id))
        return stored[1][1 : 1 + ID_BYTES]  # the record starts with b"C" and the root tree id

    def dir_exists_at(self, commit: bytes | None, path: str) -> bool:
        return path == "/" and commit is not None or (
            path != "/" and trees.find_dir(self, self.root(commit), split(path)) is not None
        )

    def resolve(self, rev: str, branch: str) -> bytes:
        """The commit a revision names (see :mod:`memrev.repo.revisions`); an id a purge
        rewrote names the commit it became."""
        self.fresh()
        return self._revisions.resolve(rev, branch)

    def commit_info(self, oid: bytes) -> Commit:
        return self.commit_infos([oid])[0]

    def commit_infos(self, oids: list[bytes]) -> list[Commit]:
        """Commits with the paths each changed, from the change index in one query.

        A commit and its change rows never change once written (gc and reindex
        drop every cache), so each ``Commit`` is built once and kept: a log
        read again costs its walk, not one decode per commit.
        """
        # The answer is built from what was found and built here, not read back from the
        # cache: a log of more commits than it holds would evict its own first ones.
        found = {o: self._infos.get(o) for o in oids}
        missing = [o for o, info in found.items() if info is None]
        if missing:
            seqs = [self.commit_data(o)[0] for o in missing]
            paths = self.backend.paths_at(seqs)
            for o, seq in zip(missing, seqs, strict=True):
                info = found[o] = self._info(o, paths.get(seq, ()))
                self._infos.put(o, info)
        return [found[o] for o in oids]

    def _info(self, oid: bytes, paths: Iterable[str]) -> Commit:
        _, c = self.commit_data(oid)
        return Commit(
            id=oid.hex(),
            parents=tuple(p.hex() for p in c.parents),
            time=c.time,
            author=c.author,
            message=c.message,
            meta=dict(c.meta),
            paths=tuple(sorted(p for p in paths if not is_directory_key(p))),
        )

    def log(self, start: bytes, limit: int | None = None) -> list[Commit]:
        """Commits reachable from ``start``, newest first (by commit order)."""
        return self.log_page([start], limit)[0]

    def log_page(self, frontier: list[bytes], limit: int | None = None) -> tuple[list[Commit], list[bytes]]:
        """Commits reachable from ``frontier``, newest first, and the frontier to continue from.

        Commit numbers are topological, so once a commit is taken every commit
        still to come is older than it: the returned frontier alone (a few ids,
        one per open line of history) resumes the walk exactly where it stopped.
        """
        order: list[bytes] = []
        pending: dict[bytes, int] = {oid: self.commit_data(oid)[0] for oid in frontier}
        while pending and (limit is None or len(order) < limit):
            oid = max(pending, key=pending.__getitem__)
            del pending[oid]
            order.append(oid)
            for p in self.commit_data(oid)[1].parents:
                pending.setdefault(p, self.commit_data(p)[0])
        return self.commit_infos(order), sorted(pending, key=pending.__getitem__, reverse=True)

    def commits_at(self, seqs: list[int]) -> list[Commit]:
        """The commits numbered ``seqs``, in that order, read in one batch."""
        ids = self.commit_ids_at(seqs)
        return self.commit_infos([ids[seq] for seq in seqs])

    def commit_ids_at(self, seqs: list[int]) -> dict[int, bytes]:
        """``{number: id}`` of the commits numbered ``seqs``, read in one batch; each
        record is hash-checked, decoded and cached for ``commit_data``."""
        ids: dict[int, bytes] = {}
        for seq, oid, data in self.backend.commits_at(seqs):
            if self._commits.get(oid) is None:
                if commit_id(data) != oid:
                    raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
                self._commits.put(oid, (seq, decode_commit(oid, data)))
            ids[seq] = oid
        missing = next((seq for seq in seqs if seq not in ids), None)
        if missing is not None:
            raise errors.IntegrityError(f"change index names missing commit #{missing}")
        return ids

    def last_change(self, path: str, commit: bytes) -> int | None:
        """The commit that last changed ``path`` as seen from ``commit``.

        A commit without a change row for ``path`` has the same file as its
        first parent (change rows are relative to the first parent), so this
        is the first commit on ``commit``'s first-parent line that changed the
        path — git's history simplification. Candidates come from the
        per-path index, newest first; one made elsewhere is skipped. Commit
        numbers are topological, so the first candidate on the line wins.
        """
        seq = self.commit_data(commit)[0]
        ancestry = Ancestry(self, commit, first_parent=True)
        candidate = self.backend.change_before(path, seq)
        while candidate is not None:
            row = self.backend.commit_at(candidate)
            if row is not None and ancestry.contains(row[0], candidate):
                return candidate
            candidate = self.backend.change_before(path, candidate - 1)
        return None

    def is_ancestor(self, a: bytes, b: bytes) -> bool:
        """True when ``a`` is ``b`` or in its history."""
        return Ancestry(self, b).contains(a, self.commit_data(a)[0])

    def diff(self, a: bytes | None, b: bytes | None, path: str | None = None) -> list[FileChange]:
        out: list[FileChange] = []
        for p, old, new in trees.diff(self, self.root(a), self.root(b)):
            if path is not None and not is_under(p, path):
                continue
            old_bytes = self.content(old.oid) if old else None
            new_bytes = self.content(new.oid) if new else None
            if old_bytes == new_bytes:
                continue
            out.append(file_change(p, old_bytes, new_bytes))
        return sorted(out, key=lambda c: c.path)


_UNSEEN = object()


class Ancestry:
    """Membership in one commit's history, walked lazily newest first and only
    as deep as the oldest question asked (commit numbers are topological)."""

    def __init__(self, repo: Reading, tip: bytes, *, first_parent: bool = False) -> None:
        self._repo = repo
        self._first_parent = first_parent
        self._seen: set[bytes] = set()
        self._heap: list[tuple[int, bytes]] = [(-repo.commit_data(tip)[0], tip)]

    def contains(self, oid: bytes, seq: int) -> bool:
        while self._heap and -self._heap[0][0] >= seq:
            _, c = heapq.heappop(self._heap)
            if c in self._seen:
                continue
            self._seen.add(c)
            parents = self._repo.commit_data(c)[1].parents
            for p in parents[:1] if self._first_parent else parents:
                if p not in self._seen:
                    heapq.heappush(self._heap, (-self._repo.commit_data(p)[0], p))
        return oid in self._seen
