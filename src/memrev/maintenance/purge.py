"""Purge: erase content from every revision, every ref and every byte the store keeps.

``purge(repo, paths=..., text=..., reason=...)`` rewrites history in one
exclusive write transaction, like gc's:

1. Every commit reachable from any ref (branches, tags, deleted branches;
   not the purge records' own ``refs/purges``) is visited oldest first. Its
   tree is replayed from its first parent's rewritten tree and its own diff:
   a file whose path matches a pattern is left out; a version holding one of
   the strings is stored again with each occurrence replaced by ``[purged]``
   (against its base's rewritten version, as a write would store it); a
   version built on a rewritten or removed base is stored again too, so no
   surviving delta or append piece needs a purged object. Author, message and
   ``meta`` values (provenance) get the same replacement.
2. A commit whose rewritten tree equals its rewritten parent's, though it
   changed something before, is dropped (its children are re-parented onto
   its parent); one left equal is kept with its id; every other gets a new
   id. Refs move to the rewritten commits (a ref with nothing left is
   deleted).
3. The record (reason, author, time, counts, the kind of predicate, the path
   patterns, the old -> new id map; never a purged string or a hash of one) is
   one commit on ``refs/purges`` (``memrev.repo.purged`` reads it).
4. Everything no ref reaches is deleted and the derived indexes are rebuilt.

Then, outside the transaction, the backend reclaims the freed bytes
(``Backend.reclaim``: SQLite ``VACUUM`` + ``wal_checkpoint(TRUNCATE)``,
PostgreSQL ``VACUUM FULL``), and the verification scan
(``memrev.maintenance.purge_scan``) looks for the strings in every object and
every byte of the store's files. ``kill -9`` anywhere leaves the store wholly
before or wholly after step 4's commit; running the same purge again finds
nothing to rewrite and does the reclaiming and the scan.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from .. import errors
from ..core import trees
from ..core.mergekinds import compile_pattern
from ..core.objects import EMPTY_TREE_ID, CommitData, Entry, check_new_commit_text, commit_id
from ..core.paths import split
from ..errors import InvalidArgument
from ..repo import indexes
from ..repo.blobs import Version
from ..repo.purged import RECORD_PREFIX
from ..repo.purged import Rewritten as Rewritten
from ..repo.purged import rewritten as rewritten  # moved there: ``memrev show`` asks it without loading purge
from ..repo.repository import Repository
from ..repo.revisions import PURGES_REF
from . import gc as gc_mod
from . import purge_scan

log = logging.getLogger("memrev")

MARKER = "[purged]"
MAX_STRINGS = 1000
MAX_STRING_BYTES = 64 << 10
MAX_PATTERNS = 1000
MAX_REASON_CHARS = 2000
MAX_CHANGED_PATHS = 10_000  # per ref, in the record: past it subscribers hear "everything changed"


@dataclass(frozen=True)
class PurgeReport:
    """What a purge did (or, with ``dry_run``, would do).

    ``id_map`` maps every rewritten commit's old id to its new one; a dropped commit
    (every change it made was purged) to its rewritten parent (``None``: it had none),
    and ``dropped`` lists those; ``refs_moved`` each ref that moved to
    its new target (``None``: deleted, nothing was left on it), ``paths_changed`` the
    files that differ between each moved ref's old and new tip (``None``: more than
    ``MAX_CHANGED_PATHS``), which ``on_change`` subscribers hear of. ``versions_removed``
    counts the versions of matching paths left out, ``versions_redacted`` the
    versions stored again with the strings replaced, ``bytes_purged`` their sizes.
    ``bytes_before``/``bytes_after`` are the store's size where it is kept.
    ``verified`` is the scan's verdict; ``found`` where it still found something.
    """

    dry_run: bool
    kind: tuple[str, ...]
    patterns: tuple[str, ...]
    strings: int
    commits_rewritten: int
    commits_dropped: int
    versions_removed: int
    versions_redacted: int
    bytes_purged: int
    refs_moved: dict[str, str | None]
    id_map: dict[str, str | None]
    paths_changed: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    record: str | None = None
    bytes_before: int = 0
    bytes_after: int = 0
    verified: bool = False
    found: tuple[str, ...] = field(default=())

    @property
    def bytes_reclaimed(self) -> int:
        return max(0, self.bytes_before - self.bytes_after)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (what ``memrev purge --json`` prints)."""
        out = asdict(self)
        out["kind"] = list(self.kind)
        out["patterns"] = list(self.patterns)
        out["found"] = list(self.found)
        out["dropped"] = list(self.dropped)
        out["bytes_reclaimed"] = self.bytes_reclaimed
        return out


class Predicate:
    """What a purge removes: paths matching patterns (``declare_kind``'s syntax, matched
    against whole file paths and the folders they are in) and occurrences of exact
    strings (UTF-8, case-sensitive)."""

    def __init__(self, paths: Iterable[str] | str | None, text: Iterable[str] | str | None) -> None:
        self.patterns = tuple(_listed(paths, "paths"))
        self.strings = tuple(_listed(text, "text"))
        if not self.patterns and not self.strings:
            raise InvalidArgument("purge needs paths=[...] or text=[...] (or both); nothing was purged")
        if len(self.patterns) > MAX_PATTERNS or len(self.strings) > MAX_STRINGS:
            raise InvalidArgument(f"at most {MAX_PATTERNS} path patterns and {MAX_STRINGS} strings per purge")
        self._paths = []
        for p in self.patterns:
            try:
                self._paths.append(compile_pattern(p))
            except errors.InvalidMergeKind as e:
                raise InvalidArgument(f"purge path pattern {p!r}: {e}") from None
        for s in self.strings:
            _check_string(s)
        self.needles = tuple(s.encode("utf-8") for s in self.strings)
        self.longest = max((len(n) for n in self.needles), default=0)
        alternation = b"|".join(re.escape(n) for n in sorted(set(self.needles), key=len, reverse=True))
        self._bytes = re.compile(alternation) if self.needles else None
        self._text = re.compile("|".join(re.escape(s) for s in sorted(set(self.strings), key=len, reverse=True))) if self.strings else None
        self.kind = tuple(k for k, on in (("paths", self.patterns), ("text", self.strings)) if on)

    def path(self, path: str) -> bool:
        """Whether a file path is purged: a pattern matches it, or one of the folders it is
        in (``/users/sam`` purges ``/users/sam/notes.md``)."""
        if not self._paths:
            return False
        at = len(path)
        while at > 0:
            here = path[:at]
            if any(rx.fullmatch(here) for rx in self._paths):
                return True
            at = path.rfind("/", 0, at)
        return False

    def found(self, data: bytes) -> bool:
        return self._bytes is not None and self._bytes.search(data) is not None

    def redact(self, data: bytes) -> bytes:
        return data if self._bytes is None else self._bytes.sub(MARKER.encode(), data)

    def redact_text(self, text: str) -> str:
        return text if self._text is None else self._text.sub(MARKER, text)

    def redact_json(self, value: Any) -> Any:
        """``meta`` with every string in it (values and keys) redacted."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, list):
            return [self.redact_json(v) for v in value]
        if isinstance(value, dict):
            return {self.redact_text(k): self.redact_json(v) for k, v in value.items()}
        return value


def _listed(value: Iterable[str] | str | None, what: str) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    for item in items:
        if not isinstance(item, str):
            raise InvalidArgument(f"purge {what} must be strings, not {type(item).__name__}")
    return items


def _check_string(s: str) -> None:
    """A string to purge: non-empty text that the marker cannot bring back. A string inside
    ``[purged]``, or overlapping its start or end (``d]``, ``[p...``), would be found again
    in the redacted text, so the purge could never be verified."""
    if not s:
        raise InvalidArgument("an empty string cannot be purged")
    try:
        raw = s.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("a string to purge holds a lone surrogate; no stored text can hold it") from None
    if len(raw) > MAX_STRING_BYTES:
        raise InvalidArgument(f"a string to purge is {len(raw)} bytes; at most {MAX_STRING_BYTES}")
    if s in MARKER or any(MARKER.endswith(s[:i]) or MARKER.startswith(s[-i:]) for i in range(1, min(len(s), len(MARKER)))):
        raise InvalidArgument(f"{s!r} overlaps the marker {MARKER!r} that replaces purged text; purge a longer string")


def check_reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidArgument("purge needs a reason (who asked, why): it is kept in the purge record")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidArgument(f"a purge reason is at most {MAX_REASON_CHARS} characters")
    return reason.strip()


class _DryRun(Exception):
    """Rolls the transaction back after a dry run computed what it would do."""


class _Rewrite:
    """One pass over history: old commit -> new commit, old root -> new root, old blob -> new version."""

    def __init__(self, repo: Repository, pred: Predicate, progress: gc_mod.Progress | None) -> None:
        self.repo = repo
        self.pred = pred
        self.progress = progress
        self.commits: dict[bytes, bytes | None] = {}
        self.roots: dict[bytes, bytes] = {EMPTY_TREE_ID: EMPTY_TREE_ID}
        self.blobs: dict[bytes, Version] = {}
        self.erased: set[bytes] = set()  # blobs only purged paths name: none of them may stay a base
        self.removed: set[tuple[str, bytes]] = set()  # (path, blob) versions left out
        self.redacted: set[bytes] = set()
        self.bytes_purged = 0
        self.rewritten = 0
        self.dropped = 0
        self.dropped_ids: list[bytes] = []

    def run(self, refs: dict[str, bytes]) -> dict[str, bytes | None]:
        seqs, _roots = gc_mod.reachable_commits(self.repo, refs.values(), self.progress)
        order = sorted(seqs, key=seqs.__getitem__)
        if self.pred.patterns:
            self.erased = self._only_purged(order)
        for n, oid in enumerate(order, 1):
            self._commit(oid)
            gc_mod.tick(self.progress, "commits rewritten", n)
        return {name: self.commits[target] for name, target in refs.items() if self.commits[target] != target}

    def _only_purged(self, order: list[bytes]) -> set[bytes]:
        purged: set[bytes] = set()
        kept: set[bytes] = set()
        seen_roots: set[bytes] = set()
        for oid in order:
            c = self.repo.commit_data(oid)[1]
            if c.tree in seen_roots:
                continue
            seen_roots.add(c.tree)
            base = self.repo.root(c.parents[0]) if c.parents else EMPTY_TREE_ID
            for path, _old, new in trees.diff(self.repo, base, c.tree):
                if new is not None:
                    (purged if self.pred.path(path) else kept).add(new.oid)
        return purged - kept

    def _commit(self, oid: bytes) -> None:
        c = self.repo.commit_data(oid)[1]
        first = c.parents[0] if c.parents else None
        old_base = self.repo.root(first) if first is not None else EMPTY_TREE_ID
        new_root = self._root(c.tree, old_base)
        parents: list[bytes] = []
        for p in c.parents:
            mapped = self.commits[p]
            if mapped is not None and mapped not in parents:
                parents.append(mapped)
        changed_before = c.tree != old_base or len(c.parents) > 1
        parent_root = self.repo.root(parents[0]) if parents else EMPTY_TREE_ID
        if changed_before and len(parents) <= 1 and new_root == parent_root:
            self.commits[oid] = parents[0] if parents else None  # nothing of it is left
            self.dropped += 1
            self.dropped_ids.append(oid)
            return
        new = CommitData(
            new_root, tuple(parents), c.time_us, self.pred.redact_text(c.author), self.pred.redact_text(c.message),
            self.pred.redact_json(c.meta),
        )
        if new == c:
            self.commits[oid] = oid
            if self.rewritten or self.dropped:
                # made after a commit this purge stored again: stored again too (the same
                # record, a new number), so commit numbers keep the order commits were made in
                self.repo.backend.restack_commit(oid)
            return
        data = new.encode()
        nid = commit_id(data)
        if self.repo.backend.get_commit(nid) is None:
            self.repo.backend.put_commit(nid, parents[0] if parents else None, data)
        self.commits[oid] = nid
        self.rewritten += 1

    def _root(self, old_root: bytes, old_base: bytes) -> bytes:
        """The rewritten tree of ``old_root``: its first parent's rewritten tree with its own diff replayed."""
        known = self.roots.get(old_root)
        if known is not None:
            return known
        changes: dict[tuple[str, ...], Entry | None] = {}
        for path, _old, new in trees.diff(self.repo, old_base, old_root):
            segs = tuple(split(path))
            if new is None:
                changes[segs] = None
            elif self.pred.path(path):
                changes[segs] = None
                if (path, new.oid) not in self.removed:
                    self.removed.add((path, new.oid))
                    self.bytes_purged += new.size
            else:
                v = self._blob(new.oid)
                changes[segs] = Entry("f", v.blob, v.size)
        base = self.roots[old_base]
        new_root = trees.update_files(self.repo, base, changes) if changes else base
        self.roots[old_root] = new_root
        return new_root

    def _blob(self, oid: bytes) -> Version:
        """The rewritten version of a blob, its bases first (iteratively: append runs are long)."""
        done = self.blobs.get(oid)
        if done is not None:
            return done
        stack = [oid]
        while stack:
            top = stack[-1]
            row = self.repo.blobs.row(top)
            if row.base is not None and row.base not in self.blobs and row.base not in self.erased:
                stack.append(row.base)
                continue
            stack.pop()
            if top not in self.blobs:
                self.blobs[top] = self._version(top)
        return self.blobs[oid]

    def _version(self, oid: bytes) -> Version:
        blobs = self.repo.blobs
        row = blobs.backend.get_blob(oid)
        if row is None:
            raise errors.IntegrityError(f"blob {oid.hex()} is missing")
        base = row.base
        if not self.pred.strings and (base is None or (base not in self.erased and self.blobs[base].blob == base)):
            return Version(oid, row.size)  # paths only: a version on a kept base is kept as it is
        below = None if base is None else blobs.cached(base)
        if base is not None and below is None:
            below = blobs.content(base)
        data = blobs.content_on(row, below)
        hit = self.pred.found(data)
        if base is None or base in self.erased:
            if not hit and base is None:
                return Version(oid, row.size)
            new = self.pred.redact(data) if hit else data
            self._count(oid, row.size, hit)
            return blobs.store_full(new)
        new_base = self.blobs[base]
        if not hit and new_base.blob == base:
            return Version(oid, row.size)
        self._count(oid, row.size, hit)
        stored = blobs.store_version(new_base, self.pred.redact(data) if hit else data)
        return new_base if stored is None else stored

    def _count(self, oid: bytes, size: int, hit: bool) -> None:
        if hit and oid not in self.redacted:
            self.redacted.add(oid)
            self.bytes_purged += size


def purge(
    repo: Repository,
    *,
    paths: Iterable[str] | str | None = None,
    text: Iterable[str] | str | None = None,
    reason: str,
    author: str,
    dry_run: bool = False,
    files: Callable[[], Iterable[str]] = lambda: (),
    progress: gc_mod.Progress | None = None,
    after_commit: Callable[[], None] | None = None,
) -> PurgeReport:
    """Rewrite history without what ``paths``/``text`` match, erase it, and verify (module docstring).

    ``files`` names more files the store owns whose bytes the scan reads (a working
    tree's); ``after_commit`` runs once the rewrite committed and before the bytes are
    reclaimed and scanned (a working tree rewrites its files). Bad arguments raise
    ``InvalidArgument`` before anything is locked.
    """
    pred = Predicate(paths, text)
    reason = check_reason(reason)
    check_new_commit_text(author, f"purge: {reason}", {})
    before = repo.backend.storage_bytes()
    rw = _Rewrite(repo, pred, progress)
    moved: dict[str, bytes | None] = {}
    changed: dict[str, list[str] | None] = {}
    record: bytes | None = None
    if not dry_run:
        repo.backend.secure_delete(True)
    try:
        with repo.backend.write(exclusive=True):
            refs = {name: t for name, t in repo.backend.list_refs("refs/").items() if name != PURGES_REF}
            moved = rw.run(refs)
            changed = _tips_changed(repo, refs, moved, pred)
            if dry_run:
                raise _DryRun
            for name, new in moved.items():
                if new is None:
                    repo.backend.delete_ref(name)
                elif not repo.backend.set_ref_if_equals(name, refs[name], new):
                    raise errors.ConcurrentUpdate(f"{name} moved during a purge holding the write lock")
            if moved or rw.rewritten or rw.dropped:
                record = _record(repo, pred, reason, author, rw, moved, changed)
            repo.forget()  # restacked commits have new numbers: nothing cached may say otherwise
            tips = list(repo.backend.list_refs("refs/").values())
            commits, tree_ids, blob_ids = gc_mod.reachable(repo, tips, progress)
            gone = sum(repo.backend.delete_unreachable(t, keep) for t, keep in (("commits", commits), ("trees", tree_ids), ("blobs", blob_ids)))
            if record is not None or gone:
                indexes.rebuild(repo)
    except _DryRun:
        pass
    finally:
        repo.forget()
        if not dry_run:
            repo.backend.secure_delete(False)
    found: list[str] = []
    if not dry_run:
        if after_commit is not None:
            try:
                after_commit()
            except Exception as e:  # noqa: BLE001 - the rewrite stands; the scan below names the files left
                log.warning("purge: the working tree's files were not all rewritten yet (%s); the verification says which", e)
        repo.backend.reclaim()
        found = purge_scan.scan(repo, pred, files=list(files()))
    return PurgeReport(
        dry_run=dry_run,
        kind=pred.kind,
        patterns=tuple(pred.redact_text(p) for p in pred.patterns),
        strings=len(pred.strings),
        commits_rewritten=rw.rewritten,
        commits_dropped=rw.dropped,
        versions_removed=len(rw.removed),
        versions_redacted=len(rw.redacted),
        bytes_purged=rw.bytes_purged,
        refs_moved={name: None if new is None else new.hex() for name, new in sorted(moved.items())},
        paths_changed={name: None if paths is None else tuple(paths) for name, paths in sorted(changed.items())},
        id_map={old.hex(): None if new is None else new.hex() for old, new in rw.commits.items() if new != old},
        dropped=tuple(sorted(oid.hex() for oid in rw.dropped_ids)),
        record=None if record is None else record.hex(),
        bytes_before=before,
        bytes_after=before if dry_run else repo.backend.storage_bytes(),
        verified=not dry_run and not found,
        found=tuple(found),
    )


def _tips_changed(
    repo: Repository, refs: dict[str, bytes], moved: dict[str, bytes | None], pred: Predicate
) -> dict[str, list[str] | None]:
    """The files that differ between each moved ref's old tip and its new one (read before
    the old objects are deleted), at most ``MAX_CHANGED_PATHS`` per ref. A path holding a
    purged string is listed with it redacted (the record and the report hold none):
    a subscriber to its folder still hears of it."""
    out: dict[str, list[str] | None] = {}
    for name, new in moved.items():
        paths: list[str] = []
        for path, _old, _new in trees.diff(repo, repo.root(refs[name]), repo.root(new)):
            paths.append(pred.redact_text(path))
            if len(paths) > MAX_CHANGED_PATHS:
                break
        out[name] = None if len(paths) > MAX_CHANGED_PATHS else paths
    return out


def _record(
    repo: Repository, pred: Predicate, reason: str, author: str, rw: _Rewrite, moved: dict[str, bytes | None],
    changed: dict[str, list[str] | None],
) -> bytes:
    """One commit on ``refs/purges`` holding this purge's record file."""
    now_us = time.time_ns() // 1000
    when = datetime.fromtimestamp(now_us / 1e6, tz=timezone.utc).isoformat(timespec="seconds")
    counts = {
        "commits_rewritten": rw.rewritten,
        "commits_dropped": rw.dropped,
        "versions_removed": len(rw.removed),
        "versions_redacted": len(rw.redacted),
        "refs_moved": len(moved),
    }
    record = {
        "reason": pred.redact_text(reason),
        "author": pred.redact_text(author),
        "time": when,
        "time_us": now_us,
        "kind": list(pred.kind),
        "paths": [pred.redact_text(p) for p in pred.patterns],
        "strings": len(pred.strings),
        "counts": counts,
        # ref names are names, not content (a branch named after a purged string keeps its
        # name, and the scan reports it), but the record does not repeat one
        "refs": {pred.redact_text(name): None if new is None else new.hex() for name, new in sorted(moved.items())},
        "changed": {pred.redact_text(name): paths for name, paths in changed.items()},
        "map": {old.hex(): None if new is None else new.hex() for old, new in rw.commits.items() if new != old},
        "dropped": sorted(oid.hex() for oid in rw.dropped_ids),
    }
    data = json.dumps(record, sort_keys=True, indent=1).encode()
    previous = repo.backend.get_ref(PURGES_REF)
    version = repo.blobs.store_full(data)
    name = f"{RECORD_PREFIX}{now_us}.json"
    root = trees.update_files(repo, repo.root(previous), {(name,): Entry("f", version.blob, version.size)})
    meta = {"purge": {"kind": list(pred.kind), "strings": len(pred.strings), **counts}}
    commit = CommitData(root, (previous,) if previous else (), now_us, pred.redact_text(author), f"purge: {record['reason']}", meta)
    raw = commit.encode()
    oid = commit_id(raw)
    repo.backend.put_commit(oid, previous, raw)
    if not repo.backend.set_ref_if_equals(PURGES_REF, previous, oid):
        raise errors.ConcurrentUpdate("refs/purges moved during a purge holding the write lock")
    return oid
