"""AutoGen ``Memory`` on the commit graph: the named memory (see ``docs/autogen.md``).

``store.memory("user")`` (or ``VersionedMemory(store, "user")``) is a
:class:`VersionedMemory`: a named view on a store and its branch. Every item is
one file in the store's tree::

    <prefix>/<name>/items/000000000001.json     one file per add(), never rewritten
    <prefix>/<name>/last-id                     the last number handed out

``prefix`` defaults to ``/autogen``. Numbers are 12 zero-padded digits, so
names sort in insertion order up to 999,999,999,999 items, and ``last-id``
survives ``clear()`` and ``delete()``, so a number is never handed out twice.

``add`` writes the item and ``last-id`` in one commit; ``clear`` tombstones
every item in one commit; ``delete(item_id)`` tombstones one item. Nothing is
cached: each ``query``/``update_context`` reads the items at the head (or at
``rev``), so the view always agrees with the store, whoever wrote it.

A ``VersionedMemory`` needs only a :class:`memrev.store.Store`. It lives
below ``memrev.autogen`` (the public module, which re-exports every name
here; ``VersionedStore`` itself is ``memrev.versioned_store``'s) and
``memrev.frameworks.tiered``, which both build on it, so neither imports the
other back. What an item file holds (``encode_item``, ``decode_item``) and the
ranking (``bm25_scores``) are ``memrev.frameworks.codec``'s.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from autogen_core import CancellationToken, Component
from autogen_core.memory import (
    Memory,
    MemoryContent,
    MemoryMimeType,
    MemoryQueryResult,
    UpdateContextResult,
)
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import SystemMessage
from pydantic import BaseModel, field_validator

from .. import errors
from ..core.paths import normalize
from ..repo.ops import Delete
from ..store.store import CLOSED, Closed, Store
from ..store.txn import Change
from .codec import (
    FRAMEWORK,
    ITEM_FORMAT,
    PROVENANCE_KEY,
    InvalidMemoryContent,
    MemoryItem,
    MemoryItemError,
    MemoryItemNotFound,
    absolute_location,
    bm25_scores,
    check_memory_room,
    check_name,
    check_token,
    decode_item,
    encode_item,
    lifted_provenance,
    searchable_text,
)
from .items import (
    COUNTER_FILE,
    ID_WIDTH,
    ITEMS_DIR,
    MAX_ID,
    item_name,
    item_paths,
    next_item_id,
    write_text,
)

if TYPE_CHECKING:
    from ..repo.repository import Commit

__all__ = [
    "DEFAULT_MEMORY",
    "DEFAULT_PREFIX",
    "FRAMEWORK",
    "ITEM_FORMAT",
    "PROVENANCE_KEY",
    "InvalidMemoryContent",
    "MemoryItem",
    "MemoryItemError",
    "MemoryItemNotFound",
    "VersionedMemory",
    "VersionedMemoryConfig",
    "bm25_scores",
    "decode_item",
    "encode_item",
    "item_name",
    "lifted_provenance",
]

DEFAULT_MEMORY = "default"
DEFAULT_PREFIX = "/autogen"
# The item codec (``encode_item``, ``decode_item``, ``ITEM_FORMAT``), the
# errors and ``bm25_scores`` live in ``memrev.frameworks.codec``; they are
# imported here so every name of this module stays where it was.
# Merges keep both branches' items: an item added on both sides under the same
# number is renumbered on the merged side, and ``last-id`` merges as a counter.
# memrev declares this layout itself (memrev.core.mergekinds.MEMREV_KINDS), so
# it holds in every process, whether or not this module was imported.


# ------------------------------------------------------------------ config


class VersionedMemoryConfig(BaseModel):
    """What ``dump_component()`` records: enough to reopen the same memory."""

    location: str
    """The store: a folder, ``sqlite:///abs/path.db`` or a database URL (absolute when dumped)."""
    branch: str = "main"
    name: str = DEFAULT_MEMORY
    """The memory's name: a single path segment."""
    prefix: str = DEFAULT_PREFIX
    """Folder holding the named memories."""
    author: str = "memrev"
    """Recorded on the commits the loaded memory makes."""

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        return normalize(value)


# ------------------------------------------------------------------ the named memory


def _ids_text(ids: list[int]) -> str:
    if len(ids) <= 8:
        return ", ".join(map(str, ids))
    return ", ".join(map(str, ids[:4])) + ", ..., " + ", ".join(map(str, ids[-2:]))


class VersionedMemory(Memory, Component[VersionedMemoryConfig]):
    """A named AutoGen memory whose items are files in a ``Store``.

    Behaves like ``autogen_core.memory.ListMemory`` by default (chronological,
    numbered, one ``SystemMessage``), and adds ranked lexical ``query``,
    ``query(rev=...)``, ``delete(item_id)`` and full history.
    """

    component_type = "memory"
    component_version = 1
    component_provider_override = "memrev.autogen.VersionedMemory"
    component_config_schema = VersionedMemoryConfig
    component_description = "A named AutoGen memory whose items are versioned files in a memrev store."

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        name: str = DEFAULT_MEMORY,
        *,
        prefix: str = DEFAULT_PREFIX,
        branch: str | None = None,
        author: str | None = None,
    ) -> None:
        self._name = check_name(name)
        self._prefix = normalize(prefix)
        base = self._prefix.rstrip("/")
        self._path = f"{base}/{self._name}"
        check_memory_room(self._path, self._name)  # before a store is opened or anything written
        if isinstance(store, Store):
            if branch is not None or author is not None:
                raise TypeError("branch and author are set on the store; pass them only with a location")
            self._store, self._owns_store = store, False
        elif isinstance(store, (str, os.PathLike)):
            self._store = Store(store, branch=branch or "main", author=author or "memrev")
            self._owns_store = True
        else:
            raise TypeError(f"store must be a memrev store or a location, not {type(store).__name__}")
        self._items_dir = f"{self._path}/{ITEMS_DIR}"
        self._counter = f"{self._path}/{COUNTER_FILE}"
        self._closed = False
        self._pinned: str | None = None  # a commit id: a read-only view of that revision

    def at(self, rev: str) -> VersionedMemory:
        """This memory as of ``rev``: ``query``/``update_context`` answer from that
        commit, and ``add``/``clear``/``delete`` raise ``ReadOnlyRevision``."""
        view = VersionedMemory(self._store, self._name, prefix=self._prefix)
        view._pinned = self._store.resolve_now(rev)
        return view

    def _writable(self, what: str) -> None:
        if self._pinned is not None:
            raise errors.ReadOnlyRevision(
                f"cannot {what}: memory {self._name!r} is a read-only view of revision {self._pinned[:10]}; "
                f"to run an agent on the memory of that revision, start a branch there: "
                f"(await store.branch(NAME, at={self._pinned!r})).memory({self._name!r})"
            )

    # ------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        return self._name

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def path(self) -> str:
        """The folder holding this memory: ``<prefix>/<name>``."""
        return self._path

    @property
    def store(self) -> Store:
        return self._store

    def item_path(self, item_id: int | str) -> str:
        return f"{self._items_dir}/{item_name(self._parse_id(item_id))}"

    @property
    def branch(self) -> str:
        """The store's branch this memory reads and commits to."""
        return self._store.branch_name

    def __repr__(self) -> str:
        return f"VersionedMemory({self._name!r}, prefix={self._prefix!r}, branch={self.branch!r})"

    # ------------------------------------------------------------ helpers

    def _live(self) -> Store:
        if self._closed:
            raise errors.StoreClosed(f"memory {self._name!r} is closed")
        self._store.repo  # noqa: B018 - raises StoreClosed if the store is closed
        return self._store

    @staticmethod
    def _parse_id(item_id: int | str) -> int:
        if isinstance(item_id, bool) or not isinstance(item_id, (int, str)):
            raise TypeError(f"item id must be an int or a str of digits, not {type(item_id).__name__}")
        if isinstance(item_id, str):
            m = re.fullmatch(rf"([0-9]{{1,{ID_WIDTH}}})(\.json)?", item_id)
            if m is None:
                raise ValueError(f"not a memory item id: {item_id!r}")
            item_id = int(m.group(1))
        if not 1 <= item_id <= MAX_ID:
            raise ValueError(f"memory item ids run from 1 to {MAX_ID}, not {item_id}")
        return item_id

    async def _listing(self, rev: str | None) -> list[tuple[int, str]]:
        """(id, path) of every item, in insertion order (= name order)."""
        return await item_paths(self._live(), self._items_dir, rev)

    async def _next_id(self, store: Store) -> int:
        return await next_item_id(store, self._items_dir, self._counter)

    async def _commit(self, message: str, meta: dict[str, Any], ops: list[Delete]) -> None:
        """Run ``ops`` as one commit (or inside the caller's open transaction)."""
        store = self._store
        if store.in_transaction:  # the caller's transaction makes the commit
            for op in ops:
                await store.delete(op.path)
            return
        async with store.transaction(message=message, meta={"autogen": meta, "framework": FRAMEWORK}):
            for op in ops:
                await store.delete(op.path)

    # ------------------------------------------------------------ Memory

    async def add(  # type: ignore[override]
        self, content: MemoryContent, cancellation_token: CancellationToken | None = None
    ) -> int:
        """Store ``content`` as a new item: one commit. Returns the item id.

        (``Memory.add`` returns nothing; the id is extra, for ``delete``.)
        """
        check_token(cancellation_token)
        self._writable("add")
        text = encode_item(content)  # validate before touching anything
        lifted = lifted_provenance(content.metadata)
        store = self._live()
        mime = content.mime_type.value if isinstance(content.mime_type, MemoryMimeType) else content.mime_type

        async def plan() -> Change:
            # Optimistic: the id is chosen from the branch head read, and the
            # commit is made only if the head has not moved since (another
            # process adding at the same instant); otherwise choose again.
            item_id = await self._next_id(store)
            ops = [write_text(f"{self._items_dir}/{item_name(item_id)}", text), write_text(self._counter, f"{item_id}\n")]
            meta = {"memory": self._name, "op": "add", "items": [item_id]}
            commit_meta = {"framework": FRAMEWORK, **lifted, "autogen": meta}
            return Change(f"memory {self._name!r}: add item {item_id} ({mime})", commit_meta, list(ops), item_id)

        item_id: int = await store.commit_planned(
            plan, give_up=f"memory {self._name!r}: the branch kept moving; item not added"
        )
        return item_id

    async def items(self, *, rev: str | None = None) -> list[MemoryItem]:
        rev = rev if rev is not None else self._pinned
        return await self._items(rev)

    async def _items(self, rev: str | None) -> list[MemoryItem]:
        """Every item with its id and path, in insertion order (as of ``rev``)."""
        store = self._live()
        out = []
        for item_id, path in await self._listing(rev):
            text = await store.read(path, rev=rev)
            if text is not None:
                out.append(MemoryItem(item_id, path, decode_item(text, path)))
        return out

    async def query(
        self,
        query: str | MemoryContent = "",
        cancellation_token: CancellationToken | None = None,
        *,
        k: int | None = None,
        score_threshold: float | None = None,
        rev: str | None = None,
        **kwargs: Any,
    ) -> MemoryQueryResult:
        """All items in insertion order, like ``ListMemory`` (``query`` is ignored) ...

        ... unless ``k`` or ``score_threshold`` is given: then the items that
        share words with ``query``, ranked by BM25 (best first, ties in
        insertion order), at most ``k`` of them, each at least
        ``score_threshold``, with the float ``score`` added to a copy of their
        metadata (as ``ChromaDBVectorMemory`` does). ``rev`` answers as of a
        past revision (a commit id, ``HEAD~3``, a branch or tag).
        """
        check_token(cancellation_token)
        if kwargs:
            raise TypeError(f"query() got unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"k must be a positive int, not {k!r}")
        if score_threshold is not None and (
            isinstance(score_threshold, bool) or not isinstance(score_threshold, (int, float))
        ):
            raise TypeError(f"score_threshold must be a number, not {type(score_threshold).__name__}")
        contents = [item.content for item in await self.items(rev=rev)]
        if k is None and score_threshold is None:
            return MemoryQueryResult(results=contents)
        if isinstance(query, MemoryContent):
            text = searchable_text(query.content)
        elif isinstance(query, str):
            text = query
        else:
            raise TypeError(f"query must be a str or a MemoryContent, not {type(query).__name__}")
        scores = bm25_scores(text, [searchable_text(c.content) for c in contents])
        ranked = sorted(
            (i for i, s in enumerate(scores) if s > 0 and (score_threshold is None or s >= score_threshold)),
            key=lambda i: -scores[i],
        )
        if k is not None:
            ranked = ranked[:k]
        results = []
        for i in ranked:
            c = contents[i]
            metadata = dict(c.metadata or {})
            metadata["score"] = float(scores[i])
            results.append(MemoryContent.model_construct(content=c.content, mime_type=c.mime_type, metadata=metadata))
        return MemoryQueryResult(results=results)

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        """Add one ``SystemMessage`` listing every item, exactly as ``ListMemory`` does."""
        contents = (await self.query()).results
        if not contents:
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        lines = [f"{i}. {str(memory.content)}" for i, memory in enumerate(contents, 1)]
        text = "\nRelevant memory content (in chronological order):\n" + "\n".join(lines) + "\n"
        await model_context.add_message(SystemMessage(content=text))
        return UpdateContextResult(memories=MemoryQueryResult(results=contents))

    async def clear(self) -> None:
        """Tombstone every item in one commit (no commit if there is none).

        The items stay in history; ids keep counting from where they were.
        """
        self._writable("clear")
        listing = await self._listing(None)
        if not listing:
            return
        ids = [i for i, _ in listing]
        noun = "item" if len(ids) == 1 else "items"
        await self._commit(
            f"memory {self._name!r}: clear {len(ids)} {noun} ({_ids_text(ids)})",
            {"memory": self._name, "op": "clear", "count": len(ids), **({"items": ids} if len(ids) <= 1000 else {})},
            [Delete(self._items_dir)],
        )

    async def delete(self, item_id: int | str) -> None:
        """Tombstone one item in one commit. ``MemoryItemNotFound`` if it is not there."""
        self._writable("delete an item")
        n = self._parse_id(item_id)
        store = self._live()
        path = f"{self._items_dir}/{item_name(n)}"
        if await store.read(path) is None:
            raise MemoryItemNotFound(f"memory {self._name!r} has no item {n}")
        await self._commit(
            f"memory {self._name!r}: delete item {n}",
            {"memory": self._name, "op": "delete", "items": [n]},
            [Delete(path)],
        )

    async def log(self, *, limit: int | None = None) -> list[Commit]:
        """The commits that changed this memory, newest first."""
        return await self._live().log(self._path, limit=limit)

    def close(self) -> Closed:  # type: ignore[override]
        """Close the view, and the store if the view opened it. Idempotent.

        Synchronous, and returns an awaitable, so ``await memory.close()``
        (AutoGen) and ``memory.close()`` both work.
        """
        if not self._closed:
            self._closed = True
            if self._owns_store:
                self._store.close()
        return CLOSED

    # ------------------------------------------------------------ Component

    def _to_config(self) -> VersionedMemoryConfig:
        store = self._store
        return VersionedMemoryConfig(
            location=absolute_location(store.location),
            branch=self.branch,
            name=self._name,
            prefix=self._prefix,
            author=store.author,
        )

    @classmethod
    def _from_config(cls, config: VersionedMemoryConfig) -> VersionedMemory:
        """A memory over the same store, with its own store handle (closed by ``close()``)."""
        return cls(config.location, config.name, prefix=config.prefix, branch=config.branch, author=config.author)
