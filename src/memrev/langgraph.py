"""``MemrevStore``: LangGraph's long-term memory (a ``BaseStore``) as files of a memrev store.

Every item is a file of the same tree AG2 files and AutoGen items live in,
``/langgraph/<label>/.../<label>/<key>.json``, holding the value as canonical JSON
(sorted keys, indented: an unchanged ``put`` is no new version, a diff is readable).
One ``batch`` is one commit; a delete is a tombstone; ``created_at`` and
``updated_at`` are commit times, read from history. See ``docs/langgraph.md``.

Names: each label and the key are percent-escaped (``urllib.parse.quote`` with no
safe characters, ``.`` escaped too, the empty key as a lone ``%``), so any string
round-trips, a folder name never contains ``.`` and an item file always ends in
``.json``: two namespaces never share a file, and a label never reads as a key.

Reads go through a view of the folders already read, valid at one commit and moved
to a newer head by one ``diff`` of what changed: a search of a 10,000-item
namespace filters values in memory instead of reading 10,000 files (a first read
of a folder is one ``tree`` and one ``read_many``). TTL expiries and embeddings
are sidecar files (``/langgraph-ttl/...``, ``/langgraph-vectors/...``) changed in
the same commits, so an item's own history holds only its values.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from . import errors
from .frameworks.codec import bm25_scores
from .frameworks.langgraph_items import (
    ROOT,
    SUFFIX,
    TTL_ROOT,
    VECTOR_ROOT,
    Stored,
    View,
    cosine,
    encode_value,
    escape,
    folder_of,
    item_path,
    json_object,
    namespace_matches,
    namespace_of,
    predicate,
    sidecar,
    split_item,
    unescape,
)
from .frameworks.sync_bridge import SyncBridge
from .repo.ops import Delete, Write
from .store.store import Store

__all__ = ["ROOT", "MemrevStore", "escape", "item_path", "unescape"]

def _check_op(op: Op) -> None:
    validate_op_namespace(op)
    if isinstance(op, (GetOp, PutOp)):
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if not isinstance(op.key, str):
            raise errors.InvalidArgument(f"an item's key is a str, not {type(op.key).__name__}")
    if isinstance(op, PutOp) and op.namespace[0] == "langgraph":
        raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {op.namespace}')



class MemrevStore(BaseStore):
    """LangGraph's ``BaseStore`` on a memrev :class:`~memrev.store.Store` (any branch, any backend).

    ``index``: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``) for
    ranking ``search(query=...)`` by cosine similarity; without it a query ranks by
    BM25 over the value's text. ``ttl``: LangGraph's ``TTLConfig``. ``clock``: the
    time TTLs are measured on (a test passes its own). The store handle stays the
    caller's: ``close()`` stops this adapter's threads, not the store.
    """

    supports_ttl = True

    def __init__(
        self,
        store: Store,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Callable[[], datetime] | None = None,
        rev: str | None = None,
    ) -> None:
        self.store = store
        self.index_config = dict(index) if index else None
        self.embeddings = ensure_embeddings(index.get("embed")) if index else None
        self._fields = [(p, tokenize_path(p) if p != "$" else p) for p in ((index or {}).get("fields") or ["$"])]
        self.ttl_config = ttl
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._rev = rev
        self._bridge = SyncBridge(type(self).__name__)
        self._view = View()
        self._lock = threading.Lock()
        self._sweeper: tuple[threading.Thread, threading.Event] | None = None

    # ------------------------------------------------------------ the contract

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return self._bridge.run(lambda: self._abatch(ops), "batch")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._bridge.note_loop()
        return await self._abatch(list(ops))

    async def _abatch(self, ops: list[Op]) -> list[Result]:
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise ValueError(f"Unknown operation type: {type(op)}")
            _check_op(op)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
        paths = {k: item_path(*k) for k in puts}  # every path checked before anything is read or written
        if puts and self._rev is not None:
            raise errors.ReadOnlyRevision(f"this MemrevStore reads revision {self._rev}; it cannot put")
        head = await self._sync_view()
        results: list[Result] = []
        refreshed: list[str] = []
        for op in ops:
            if isinstance(op, GetOp):
                try:
                    path = item_path(op.namespace, op.key)
                except errors.InvalidArgument:  # too long to be stored: never put, so absent
                    results.append(None)
                    continue
                stored = await self._get(head, path)
                results.append(None if stored is None else self._item(op.namespace, op.key, stored))
                if stored is not None and op.refresh_ttl:
                    refreshed.append(path)
            elif isinstance(op, SearchOp):
                found = await self._search(head, op)
                results.append(found)
                if op.refresh_ttl:
                    refreshed += [item_path(i.namespace, i.key) for i in found]
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(head, op))
            else:
                results.append(None)
        if puts or refreshed:
            await self._write(head, puts, paths, refreshed)
        return results

    # ------------------------------------------------------------ reading

    def _now(self) -> datetime:
        return self._clock()

    def _live(self, stored: Stored | None) -> Stored | None:
        if stored is not None and stored.expires is not None and stored.expires <= self._now():
            return None
        return stored

    def _item(self, namespace: Sequence[str], key: str, stored: Stored) -> Item:
        return Item(
            value=json.loads(json.dumps(stored.value)), key=key, namespace=tuple(namespace),
            created_at=stored.created, updated_at=stored.updated,
        )

    async def _get(self, head: str | None, path: str) -> Stored | None:
        view = self._view
        folder = path.rpartition("/")[0]
        if view.head != head or (path not in view.items and folder not in view.folders):
            await self._folder(head, folder)  # a namespace is read whole, once: its other items come next
            view = self._view
        if view.head == head and (path in view.items or folder in view.folders):
            return self._live(view.items.get(path))
        return self._live((await self._load(head, [path])).get(path))

    async def _sync_view(self) -> str | None:
        """The commit reads are at (``rev``, else the head), the view moved there."""
        head = self._rev or await self.store.head()
        view = self._view
        if head == view.head:
            return head
        old = view.head
        fresh = View(head)
        if old is not None and head is not None and view.items:
            try:
                changes = await self.store.diff(old, head, [ROOT, TTL_ROOT, VECTOR_ROOT])
            except errors.RevisionNotFound:  # a purge rewrote the old commit: read afresh
                changes = None
            if changes is not None:
                fresh = await self._moved(view, head, changes)
        with self._lock:
            if self._view.head == old:
                self._view = fresh
        return head

    async def _moved(self, view: View, head: str, changes: list[Any]) -> View:
        """``view`` at ``head``: the paths ``changes`` name read again, the rest kept."""
        fresh = View(head, dict(view.items), {f: dict(paths) for f, paths in view.folders.items()}, dict(view.trees), dict(view.listings))
        dirty: set[str] = set()
        values: set[str] = set()  # the dirty paths whose item file itself changed (not only a sidecar)
        for change in changes:
            path = change.path
            for root in (TTL_ROOT, VECTOR_ROOT):
                if path.startswith(root + "/"):
                    path = ROOT + path[len(root) :]
            if not path.endswith(SUFFIX):
                continue
            if path in view.items or path.rpartition("/")[0] in view.folders:
                dirty.add(path)
                if path == change.path:
                    values.add(path)
            if change.status != "modified" and path == change.path:
                fresh.trees, fresh.listings = {}, {}
        if not dirty:
            return fresh
        tip = await self.store.show(head)
        single = tip.parents == (view.head,)
        times = None if single else await self._times(sorted(dirty), head)
        loaded = await self._read(head, sorted(dirty), times or {p: (tip.time, tip.time) for p in dirty})
        for path in sorted(dirty):
            stored, before = loaded.get(path), view.items.get(path)
            folder = path.rpartition("/")[0]
            if stored is not None and single and before is not None:
                stored.created = before.created
                if path not in values:
                    stored.updated = before.updated
            fresh.items[path] = stored
            if folder in fresh.folders:
                if stored is None:
                    fresh.folders[folder].pop(path, None)
                else:
                    fresh.folders[folder].setdefault(path, None)
        return fresh

    async def _load(self, head: str | None, paths: list[str]) -> dict[str, Stored | None]:
        """``paths`` read at ``head`` with their times, and kept in the view if it is still there."""
        if head is None:
            return {p: None for p in paths}
        loaded = await self._read(head, paths, await self._times(paths, head))
        with self._lock:
            if self._view.head == head:
                self._view.items.update(loaded)
        return loaded

    async def _read(
        self, head: str, paths: list[str], times: dict[str, tuple[datetime, datetime]]
    ) -> dict[str, Stored | None]:
        sidecars = await self._sidecars(head, paths, TTL_ROOT, VECTOR_ROOT)
        texts = await self.store.read_many(list(paths) + sorted(sidecars), rev=head)
        out: dict[str, Stored | None] = {}
        for path in paths:
            text = texts[path]
            if text is None or path not in times:
                out[path] = None
                continue
            created, updated = times[path]
            stored = Stored(json_object(text, path), created, updated)
            ttl = texts.get(sidecar(path, TTL_ROOT))
            if ttl is not None:
                meta = json_object(ttl, sidecar(path, TTL_ROOT))
                stored.expires, stored.ttl = datetime.fromisoformat(meta["expires_at"]), float(meta["ttl"])
            vec = texts.get(sidecar(path, VECTOR_ROOT))
            if vec is not None:
                meta = json_object(vec, sidecar(path, VECTOR_ROOT))
                stored.vectors, stored.vector_of = meta["vectors"], meta["of"]
            out[path] = stored
        return out

    async def _sidecars(self, head: str | None, paths: Iterable[str], *roots: str) -> set[str]:
        """Which of ``paths``' sidecars under ``roots`` exist at ``head``: one ``tree`` per folder,
        cheap where there are none (most stores hold no TTLs), so absent ones are never read."""
        folders = {p.rpartition("/")[0] for p in paths}
        found: set[str] = set()
        for folder in folders:
            for root in roots:
                entries = await self.store.tree(sidecar(folder, root), rev=head) if head is not None else None
                found.update(e.path for e in entries or [] if e.kind == "file")
        return found

    async def _times(self, paths: list[str], head: str) -> dict[str, tuple[datetime, datetime]]:
        """``(created, updated)`` of each path from history: the commit times of its first version
        since it was last deleted and of its last change, on the line of ``head``. Paths changed
        once in their folder's log need nothing more; the others walk their own history."""
        folders: dict[str, set[str]] = {}
        for p in paths:
            folders.setdefault(p.rpartition("/")[0], set()).add(p)
        touches: dict[str, list[datetime]] = {p: [] for p in paths}
        for folder, members in folders.items():
            commits = await self.store.log(folder, rev=head) if len(members) > 1 else await self.store.log(next(iter(members)), rev=head)
            for c in commits:
                for p in c.paths:
                    if p in members:
                        touches[p].append(c.time)
        out: dict[str, tuple[datetime, datetime]] = {}
        for p, seen in touches.items():
            if len(seen) == 1:
                out[p] = (seen[0], seen[0])
            elif seen:
                out[p] = await self._walk(p, head)
        return out

    async def _walk(self, path: str, head: str) -> tuple[datetime, datetime]:
        line = {c.id for c in await self.store.log(path, rev=head)}
        versions = [(c, size) for c, size in await self.store.history(path) if c.id in line]
        created = updated = versions[0][0].time
        for c, size in versions:
            if size is None:
                break
            created = c.time
        return created, updated

    async def _folders_under(self, head: str | None, folder: str) -> list[str]:
        """The namespace folders at or below ``folder`` that hold items."""
        view = self._view
        if view.head == head and folder in view.trees:
            return view.trees[folder]
        entries = await self.store.tree(folder, rev=head, depth=255) if head is not None else None
        listings: dict[str, list[str]] = {}
        for e in entries or []:
            if e.kind == "file" and e.path.endswith(SUFFIX):
                listings.setdefault(e.path.rpartition("/")[0], []).append(e.path)
        found = sorted(listings, key=namespace_of)
        with self._lock:
            if self._view.head == head:
                self._view.trees[folder] = found
                self._view.listings.update(listings)
        return found

    async def _folder(self, head: str | None, folder: str) -> Iterable[tuple[str, Stored]]:
        view = self._view
        if view.head != head or folder not in view.folders:
            paths = view.listings.get(folder) if view.head == head else None
            if paths is None:
                entries = await self.store.tree(folder, rev=head, depth=1) if head is not None else None
                paths = [e.path for e in entries or [] if e.kind == "file" and e.path.endswith(SUFFIX)]
            loaded = await self._read(head, paths, await self._times(paths, head)) if head is not None else {}
            order = sorted((p for p in paths if loaded.get(p) is not None), key=lambda p: (loaded[p].created, p))  # type: ignore[union-attr]
            with self._lock:
                if self._view.head == head:
                    self._view.items.update(loaded)
                    self._view.folders[folder] = dict.fromkeys(order)
            return [(p, loaded[p]) for p in order]  # type: ignore[misc]
        items = view.items
        return ((p, s) for p in view.folders[folder] if (s := items.get(p)) is not None)  # a page may stop early

    async def _search(self, head: str | None, op: SearchOp) -> list[SearchItem]:
        top = folder_of(op.namespace_prefix)
        candidates: list[tuple[str, Stored]] = []
        # Without a query the order is the folders' and theirs: the page is the first matches.
        stop = op.offset + op.limit if not op.query and min(op.offset, op.limit) >= 0 else None
        now, wanted = self._now(), predicate(op.filter)
        for folder in await self._folders_under(head, top):
            for path, stored in await self._folder(head, folder):
                if (stored.expires is None or stored.expires > now) and wanted(stored.value):
                    candidates.append((path, stored))
                    if len(candidates) == stop:
                        break
            if len(candidates) == stop:
                break
        scores: list[float | None] = [None] * len(candidates)
        if op.query and self.embeddings is not None:
            query = await self.embeddings.aembed_query(op.query)
            scored = [max((cosine(query, v) for v in (s.vectors or {}).values()), default=None) for _, s in candidates]
            ranked = sorted(range(len(candidates)), key=lambda i: (scored[i] is None, -(scored[i] or 0.0)))
            candidates, scores = [candidates[i] for i in ranked], [scored[i] for i in ranked]
        elif op.query:
            bm25 = bm25_scores(op.query, [json.dumps(s.value, ensure_ascii=False) for _, s in candidates])
            ranked = sorted(range(len(candidates)), key=lambda i: -bm25[i])
            candidates, scores = [candidates[i] for i in ranked], [bm25[i] for i in ranked]
        page = slice(op.offset, op.offset + op.limit)
        out = []
        for (path, stored), score in zip(candidates[page], scores[page]):
            folder, key = split_item(path)
            item = self._item(namespace_of(folder), key, stored)
            out.append(SearchItem(item.namespace, key, item.value, item.created_at, item.updated_at, score))
        return out

    async def _list_namespaces(self, head: str | None, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = []
        for folder in await self._folders_under(head, ROOT):
            if any(self._live(s) is not None for _, s in await self._folder(head, folder)):
                namespaces.append(namespace_of(folder))
        namespaces = [ns for ns in namespaces if all(namespace_matches(c, ns) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        else:
            namespaces = sorted(namespaces)
        return namespaces[op.offset : op.offset + op.limit]

    # ------------------------------------------------------------ writing

    async def _write(
        self,
        head: str | None,
        puts: dict[tuple[tuple[str, ...], str], PutOp],
        paths: dict[tuple[tuple[str, ...], str], str],
        refreshed: list[str],
    ) -> None:
        """One commit: the puts (last one per item wins), deletes, and TTL refreshes of what was read."""
        ops: list[Write | Delete] = []
        now = self._now()
        texts: dict[str, str | None] = {}  # what each put leaves at its path
        sidecars = await self._sidecars(head, paths.values(), TTL_ROOT, VECTOR_ROOT)  # only these need deleting
        for k, op in puts.items():
            path = paths[k]
            if op.value is None:
                texts[path] = None
                ops += [Delete(path)] + [Delete(side) for root in (TTL_ROOT, VECTOR_ROOT) if (side := sidecar(path, root)) in sidecars]
                continue
            texts[path] = encode_value(op.value)
            ops.append(Write(path, texts[path].encode("utf-8")))  # type: ignore[union-attr]
            if op.ttl is not None:
                ops.append(self._ttl_write(path, op.ttl, now))
            elif sidecar(path, TTL_ROOT) in sidecars:
                ops.append(Delete(sidecar(path, TTL_ROOT)))
        ops += await self._vector_ops(head, puts, paths)
        written, refreshes = set(paths.values()), list[Write | Delete]()
        for path in dict.fromkeys(refreshed):
            stored = self._view.items.get(path) if self._view.head == head else None
            if stored is not None and stored.ttl is not None and path not in written:
                if stored.expires is None or now + timedelta(minutes=stored.ttl) - stored.expires >= timedelta(seconds=1):
                    refreshes.append(self._ttl_write(path, stored.ttl, now))
        if ops or refreshes:
            done = await self.store.commit_ops(ops + refreshes, message=self._message(puts, len(refreshes)))
            ttls = {paths[k]: op.ttl for k, op in puts.items() if op.value is not None}
            refreshed_ttls = {ROOT + w.path[len(TTL_ROOT) :]: w for w in refreshes}
            await self._follow(head, done.id, texts, ttls, refreshed_ttls, now)

    async def _follow(
        self,
        before: str | None,
        commit: str | None,
        texts: dict[str, str | None],
        ttls: dict[str, float | None],
        refreshed: dict[str, Write | Delete],
        now: datetime,
    ) -> None:
        """Move the view over this adapter's own commit from what it wrote, reading back nothing
        but the commit's time (one ``show``); another writer's commit in between, or an index's
        vectors, leave it to the next read's diff."""
        view = self._view
        if commit is None or view.head != before or self.embeddings is not None:
            return
        tip = await self.store.show(commit)
        if tip.parents != ((before,) if before is not None else ()):
            return
        fresh = View(commit, dict(view.items), {f: dict(p) for f, p in view.folders.items()}, dict(view.trees), dict(view.listings))
        for path, text in texts.items():
            folder = path.rpartition("/")[0]
            old = view.items.get(path)
            if path not in view.items and folder not in view.folders:
                fresh.trees, fresh.listings = {}, {}  # unknown before: it may be a new namespace's first item
                continue
            if (old is None) != (text is None):
                fresh.trees, fresh.listings = {}, {}
            if text is None:
                fresh.items[path] = None
                fresh.folders.get(folder, {}).pop(path, None)
                continue
            same = old is not None and encode_value(old.value) == text
            ttl = ttls.get(path)
            fresh.items[path] = Stored(
                json.loads(text), old.created if old is not None else tip.time, old.updated if same and old else tip.time,
                None if ttl is None else now + timedelta(minutes=float(ttl)), None if ttl is None else float(ttl),
            )
            if folder in fresh.folders:
                fresh.folders[folder].setdefault(path, None)
        for path in refreshed:
            old = fresh.items.get(path)
            if old is not None and old.ttl is not None:
                fresh.items[path] = Stored(old.value, old.created, old.updated, now + timedelta(minutes=old.ttl), old.ttl)
        with self._lock:
            if self._view.head == before:
                self._view = fresh

    def _ttl_write(self, path: str, ttl: float, now: datetime) -> Write:
        expires = now + timedelta(minutes=float(ttl))
        text = json.dumps({"expires_at": expires.isoformat(), "ttl": float(ttl)}, sort_keys=True)
        return Write(sidecar(path, TTL_ROOT), text.encode("utf-8"))

    @staticmethod
    def _message(puts: dict[tuple[tuple[str, ...], str], PutOp], refreshed: int) -> str:
        written = sum(op.value is not None for op in puts.values())
        deleted = len(puts) - written
        parts = [f"{n} {what}" for n, what in ((written, "put"), (deleted, "deleted"), (refreshed, "ttl refreshed")) if n]
        return "langgraph: " + ", ".join(parts or ["nothing"])

    async def _vector_ops(
        self, head: str | None, puts: dict[tuple[tuple[str, ...], str], PutOp], paths: dict[tuple[tuple[str, ...], str], str]
    ) -> list[Write | Delete]:
        """The embeddings of the puts the index covers, computed only for texts not stored already."""
        if self.embeddings is None:
            return []
        ops: list[Write | Delete] = []
        todo: list[tuple[str, str, list[tuple[str, str]]]] = []  # path, digest, (field, text)
        before = await self._load(head, [p for k, p in paths.items() if puts[k].value is not None])
        for k, op in puts.items():
            path = paths[k]
            if op.value is None:
                continue
            if op.index is False:
                ops.append(Delete(sidecar(path, VECTOR_ROOT)))
                continue
            fields = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
            texts = []
            for name, tokens in fields:
                found = get_text_at_path(op.value, tokens)
                texts += [(f"{name}.{i}" if len(found) > 1 else name, t) for i, t in enumerate(found)]
            digest = hashlib.blake2b(json.dumps(texts, ensure_ascii=False).encode("utf-8"), digest_size=16).hexdigest()
            old = before.get(path)
            if old is not None and old.vector_of == digest:
                continue
            todo.append((path, digest, texts))
        flat = [t for _, _, texts in todo for _, t in texts]
        vectors = await self.embeddings.aembed_documents(flat) if flat else []
        at = 0
        for path, digest, texts in todo:
            mine = {name: list(map(float, vectors[at + i])) for i, (name, _) in enumerate(texts)}
            at += len(texts)
            text = json.dumps({"of": digest, "vectors": mine}, sort_keys=True)
            ops.append(Write(sidecar(path, VECTOR_ROOT), text.encode("utf-8")))
        return ops

    # ------------------------------------------------------------ TTL

    async def asweep_ttl(self) -> int:
        """Delete every expired item (with its sidecars) in one commit; returns how many."""
        if self._rev is not None:
            raise errors.ReadOnlyRevision(f"this MemrevStore reads revision {self._rev}; it cannot sweep")
        head = await self._sync_view()
        entries = await self.store.tree(TTL_ROOT, rev=head, depth=255) if head is not None else None
        sidecars = [e.path for e in entries or [] if e.kind == "file"]
        texts = await self.store.read_many(sidecars, rev=head) if sidecars else {}
        now, ops = self._now(), []
        for side, text in texts.items():
            if text is not None and datetime.fromisoformat(json_object(text, side)["expires_at"]) <= now:
                path = ROOT + side[len(TTL_ROOT) :]
                ops += [Delete(path), Delete(side), Delete(sidecar(path, VECTOR_ROOT))]
        if ops:
            await self.store.commit_ops(ops, message=f"langgraph: ttl sweep, {len(ops) // 3} expired")
        return len(ops) // 3

    def sweep_ttl(self) -> int:
        return self._bridge.run(self.asweep_ttl, "sweep_ttl")

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep every ``sweep_interval_minutes`` (default the TTL config's, else 5) in a daemon thread."""
        if self._sweeper is not None:
            return
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(float(minutes) * 60):
                try:
                    self.sweep_ttl()
                except errors.MemrevError:
                    pass  # the next sweep tries again; nothing half-done: a sweep is one commit

        thread = threading.Thread(target=loop, name="memrev-ttl-sweeper", daemon=True)
        self._sweeper = (thread, stop)
        thread.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        if self._sweeper is None:
            return True
        thread, stop = self._sweeper
        stop.set()
        thread.join(timeout)
        self._sweeper = None
        return not thread.is_alive()

    # ------------------------------------------------------------ history, beyond the contract

    async def ahistory(self, namespace: tuple[str, ...], key: str) -> list[dict[str, Any]]:
        """Every version of the item, newest first: ``rev``, ``time``, ``author``, ``message``,
        ``meta`` (provenance) and ``value`` (``None``: deleted there)."""
        path = item_path(namespace, key)
        versions = await self.store.history(path)
        texts = [await self.store.read_many([path], rev=c.id) if size is not None else {path: None} for c, size in versions]
        return [
            {"rev": c.id, "time": c.time, "author": c.author, "message": c.message, "meta": c.meta,
             "value": None if t[path] is None else json_object(t[path], path)}
            for (c, _), t in zip(versions, texts)
        ]

    def history(self, namespace: tuple[str, ...], key: str) -> list[dict[str, Any]]:
        return self._bridge.run(lambda: self.ahistory(namespace, key), "history")

    def at(self, rev: str) -> MemrevStore:
        """A read-only ``BaseStore`` as of revision ``rev`` (a put raises ``ReadOnlyRevision``)."""
        return MemrevStore(self.store, index=self.index_config, ttl=self.ttl_config, clock=self._clock, rev=self.store.resolve_now(rev))  # type: ignore[arg-type]

    async def abranch(self, name: str, *, at: str = "HEAD") -> MemrevStore:
        """A ``MemrevStore`` on the new branch ``name`` of the same store, made at ``at``."""
        handle = await self.store.branch(name, at=at)
        return MemrevStore(handle, index=self.index_config, ttl=self.ttl_config, clock=self._clock)  # type: ignore[arg-type]

    def branch(self, name: str, *, at: str = "HEAD") -> MemrevStore:
        return self._bridge.run(lambda: self.abranch(name, at=at), "branch")

    async def adiff(self, namespace: tuple[str, ...], key: str, a: str | None, b: str = "HEAD") -> str:
        """The item's change from revision ``a`` to ``b`` as a unified diff of its JSON (``""``: none)."""
        changes = await self.store.diff(a, b, item_path(namespace, key))
        return "".join(c.diff for c in changes)

    def diff(self, namespace: tuple[str, ...], key: str, a: str | None, b: str = "HEAD") -> str:
        return self._bridge.run(lambda: self.adiff(namespace, key, a, b), "diff")

    def close(self) -> None:
        """Stop the TTL sweeper and the bridge's thread; the memrev store stays open (it is the caller's)."""
        self.stop_ttl_sweeper()
        self._bridge.close()
