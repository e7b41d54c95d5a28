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
below ``memrev.autogen`` (``VersionedStore``, the public face that also
re-exports every name here) and ``memrev.frameworks.tiered``, which both build on it,
so neither imports the other back.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autogen_core import CancellationToken, Component, Image
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

from .. import errors, provenance
from ..core.paths import check_room, normalize
from ..repo.ops import Delete
from ..store.store import CLOSED, Closed, Store
from .items import (
    COUNTER_FILE,
    ID_WIDTH,
    ITEMS_DIR,
    MAX_ID,
    Op,
    apply_ops,
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
    "InvalidMemoryContent",
    "MemoryItem",
    "MemoryItemError",
    "MemoryItemNotFound",
    "VersionedMemory",
    "VersionedMemoryConfig",
    "lifted_provenance",
]

DEFAULT_MEMORY = "default"
DEFAULT_PREFIX = "/autogen"
ITEM_FORMAT = 1
# Merges keep both branches' items: an item added on both sides under the same
# number is renumbered on the merged side, and ``last-id`` merges as a counter.
# memrev declares this layout itself (memrev.core.mergekinds.MEMREV_KINDS), so
# it holds in every process, whether or not this module was imported.
# RFC 6838 type/subtype (``*`` allowed as a wildcard subtype, as in ``image/*``), optional parameters.
_MIME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)/([A-Za-z0-9*][A-Za-z0-9!#$&^_.+*-]*) *(;[^\x00-\x1f\x7f]*)?$")
_TOKEN = re.compile(r"\w+")


# ------------------------------------------------------------------ errors


class InvalidMemoryContent(errors.InvalidContent, ValueError):
    """A ``MemoryContent`` memrev cannot store exactly: unsupported content type,
    a mime type that does not match the content, or metadata that is not JSON."""


class MemoryItemNotFound(errors.MemrevError, KeyError):
    """``delete(item_id)`` of an item that is not in the memory."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "memory item not found"


class MemoryItemError(errors.MemrevError, ValueError):
    """A file under ``<prefix>/<name>/items/`` that is not a memrev memory item."""


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
        return _check_name(value)

    @field_validator("prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        return normalize(value)


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"memory name must be str, not {type(name).__name__}")
    if not name or "/" in name or name in (".", ".."):
        raise errors.InvalidPath(f"memory name must be one non-empty path segment without '/': {name!r}")
    normalize(name)  # control characters, lone surrogates, more than MAX_PATH_BYTES
    return name


def _check_room(folder: str, name: str, below: str = "") -> None:
    """The memory's longest path (``<folder>/[<below>/]items/<12 digits>.json``) must be one memrev takes."""
    check_room(folder, f"{below}{ITEMS_DIR}/{item_name(MAX_ID)}", f"memory name {name[:40]!r}")


def _absolute_location(location: str) -> str:
    """Folder and ``sqlite://`` locations made absolute, so a dumped config
    reopens the same store from any working directory; URLs kept as given."""
    if "://" not in location:
        return os.path.abspath(location)
    if location.startswith("sqlite://"):
        return "sqlite://" + os.path.abspath(location[len("sqlite://") :])
    return location


# ------------------------------------------------------------------ items: encoding


@dataclass(frozen=True)
class MemoryItem:
    """One item of a memory, as :meth:`VersionedMemory.items` returns it."""

    id: int
    path: str
    content: MemoryContent


def _json_exact(value: Any, where: str) -> None:
    """Refuse anything ``json.loads(json.dumps(value))`` would not give back unchanged."""
    t = type(value)
    if value is None or t in (str, bool, int):
        return
    if t is float:
        if not math.isfinite(value):
            raise InvalidMemoryContent(f"{where} is {value!r}; only finite numbers are JSON")
        return
    if t is list:
        for i, v in enumerate(value):
            _json_exact(v, f"{where}[{i}]")
        return
    if t is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise InvalidMemoryContent(f"{where} has a key {k!r} of type {type(k).__name__}; JSON keys are str")
            _json_exact(v, f"{where}[{k!r}]")
        return
    raise InvalidMemoryContent(
        f"{where} is a {t.__name__}; only JSON values (dict, list, str, int, float, bool, None) round-trip exactly"
    )


def _mime_parts(mime: str) -> tuple[str, str]:
    m = _MIME.fullmatch(mime)
    if m is None:
        raise InvalidMemoryContent(f"mime type {mime!r} is not of the form type/subtype")
    return m.group(1).lower(), m.group(2).lower()


def _is_json(major: str, minor: str) -> bool:
    return major == "application" and (minor == "json" or minor.endswith("+json"))


def _check_mime(kind: str, content: Any, mime: str) -> None:
    major, minor = _mime_parts(mime)
    binary = major in ("image", "audio", "video", "font") or (major, minor) == ("application", "octet-stream")
    if kind == "dict":
        ok = _is_json(major, minor)
        need = "a JSON mime type (MemoryMimeType.JSON, application/json or */*+json)"
    elif kind == "image":
        ok = major == "image"
        need = "an image mime type (MemoryMimeType.IMAGE or image/...)"
    elif kind == "bytes":
        ok = major != "text" and not _is_json(major, minor)
        need = "a binary mime type (MemoryMimeType.BINARY, image/..., application/pdf, ...), not text or JSON"
    else:  # str
        ok = not binary
        need = "a text mime type (MemoryMimeType.TEXT, MARKDOWN, JSON, text/...), not a binary one"
        if ok and _is_json(major, minor):
            try:
                json.loads(content)
            except ValueError:
                raise InvalidMemoryContent(
                    f"str content with mime type {mime!r} must be JSON text; use a dict for a JSON object "
                    "or MemoryMimeType.TEXT for plain text"
                ) from None
    if not ok:
        raise InvalidMemoryContent(f"{kind} content needs {need}; got {mime!r}")


# Provenance an item declares: ``metadata["_meta"]`` (the key LangGraph adapters
# use) holding documented provenance keys; they go on the item's commit, and
# the item keeps its metadata exactly as given.
PROVENANCE_KEY = "_meta"
FRAMEWORK = "autogen"


def lifted_provenance(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The provenance fields in ``metadata["_meta"]`` (documented keys only; other keys stay in the item only)."""
    if not metadata or PROVENANCE_KEY not in metadata:
        return {}
    declared = metadata[PROVENANCE_KEY]
    if not isinstance(declared, dict):
        raise InvalidMemoryContent(f"metadata[{PROVENANCE_KEY!r}] must be a dict, not {type(declared).__name__}")
    try:
        return provenance.check_fields({k: v for k, v in declared.items() if k in provenance.KEYS})
    except errors.InvalidContent as e:
        raise InvalidMemoryContent(f"metadata[{PROVENANCE_KEY!r}]: {e}") from None


def encode_item(item: object) -> str:
    """Validate a ``MemoryContent`` and return the text of its item file.

    Raises :class:`InvalidMemoryContent` (a ``TypeError`` and a ``ValueError``)
    for anything that would not come back exactly as it went in.
    """
    if not isinstance(item, MemoryContent):
        raise InvalidMemoryContent(f"add() takes a MemoryContent, not {type(item).__name__}")
    content, mime, metadata = item.content, item.mime_type, item.metadata
    stored: str | dict[str, Any]
    if isinstance(content, Image):
        kind, stored = "image", content.to_base64()
    elif isinstance(content, str):
        kind, stored = "str", str(content)
    elif isinstance(content, bytes):
        kind, stored = "bytes", base64.b64encode(bytes(content)).decode("ascii")
    elif isinstance(content, dict):
        _json_exact(content, "content")
        kind, stored = "dict", content
    else:
        raise InvalidMemoryContent(
            f"content of type {type(content).__name__} is not supported; use str, bytes, dict or autogen_core.Image"
        )
    if isinstance(mime, MemoryMimeType):
        mime_text, is_enum = mime.value, True
    elif isinstance(mime, str):
        mime_text, is_enum = str(mime), False
    else:
        raise InvalidMemoryContent(f"mime_type must be a MemoryMimeType or a str, not {type(mime).__name__}")
    _check_mime(kind, stored, mime_text)
    if metadata is not None:
        if type(metadata) is not dict:
            raise InvalidMemoryContent(f"metadata must be a dict or None, not {type(metadata).__name__}")
        _json_exact(metadata, "metadata")
    doc = {  # content first: what a person or an LLM reading the file wants to see
        "content": stored,
        "type": kind,
        "mime_type": mime_text,
        "mime_type_enum": is_enum,
        "metadata": metadata,
        "memrev_item": ITEM_FORMAT,
    }
    text = json.dumps(doc, ensure_ascii=False, allow_nan=False, indent=2)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them, escaped
        text = json.dumps(doc, ensure_ascii=True, allow_nan=False, indent=2)
    return text + "\n"


def decode_item(text: str, path: str) -> MemoryContent:
    """The ``MemoryContent`` an item file holds (exactly what was added)."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("memrev_item") != ITEM_FORMAT:
            raise ValueError("not a memrev memory item (format 1)")
        kind, stored = doc["type"], doc["content"]
        if kind == "str" and isinstance(stored, str):
            content: Any = stored
        elif kind == "dict" and isinstance(stored, dict):
            content = stored
        elif kind == "bytes" and isinstance(stored, str):
            content = base64.b64decode(stored.encode("ascii"), validate=True)
        elif kind == "image" and isinstance(stored, str):
            content = Image.from_base64(stored)
        else:
            raise ValueError(f"unknown content type {kind!r}")
        mime_text = doc["mime_type"]
        mime: MemoryMimeType | str = MemoryMimeType(mime_text) if doc.get("mime_type_enum") else mime_text
        metadata = doc.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise ValueError("metadata is not an object")
    except (ValueError, KeyError, TypeError, binascii.Error, OSError) as e:
        raise MemoryItemError(f"{path}: {e}") from None
    # model_construct: the values are already exactly what was validated on add;
    # validating again could coerce (a str mime that equals an enum value stays a str).
    return MemoryContent.model_construct(content=content, mime_type=mime, metadata=metadata)


# ------------------------------------------------------------------ lexical ranking


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


def _searchable_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return json.dumps(content, ensure_ascii=False)
    return ""  # bytes and images have no words


def bm25_scores(query: str, documents: list[str], *, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Okapi BM25 with Lucene's always-positive IDF, ``ln(1 + (N - n + 0.5) / (n + 0.5))``.

    Tokens: casefolded runs of word characters (``\\w+``, so any script).
    Each distinct query term counts once. A memory holds tens to thousands
    of short items, so a plain loop is fast enough and needs no dependency
    (see ``docs/autogen.md`` for why not ``rank-bm25`` or ``bm25s``).
    """
    terms = set(_tokens(query))
    docs = [Counter(_tokens(d)) for d in documents]
    lengths = [sum(d.values()) for d in docs]
    n_docs = len(docs)
    if not terms or not n_docs or not any(lengths):
        return [0.0] * n_docs
    avgdl = sum(lengths) / n_docs
    idf = {}
    for t in terms:
        df = sum(1 for d in docs if t in d)
        idf[t] = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    scores = []
    for d, length in zip(docs, lengths):
        s = 0.0
        for t in terms:
            tf = d.get(t)
            if tf:
                s += idf[t] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))
        scores.append(s)
    return scores


# ------------------------------------------------------------------ the named memory


def _check_token(token: CancellationToken | None) -> None:
    if token is not None and token.is_cancelled():
        raise asyncio.CancelledError("memory operation cancelled")


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
        self._name = _check_name(name)
        self._prefix = normalize(prefix)
        base = self._prefix.rstrip("/")
        self._path = f"{base}/{self._name}"
        _check_room(self._path, self._name)  # before a store is opened or anything written
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
        view._pinned = self._store._resolve_now(rev)
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

    async def _commit(self, message: str, meta: dict[str, Any], ops: Iterable[Op]) -> None:
        """Run ``ops`` as one commit (or inside the caller's open transaction)."""
        store = self._store
        if store.in_transaction:  # the caller's transaction makes the commit
            await apply_ops(store, ops)
            return
        async with store.transaction(message=message, meta={"autogen": meta, "framework": FRAMEWORK}):
            await apply_ops(store, ops)

    # ------------------------------------------------------------ Memory

    async def add(  # type: ignore[override]
        self, content: MemoryContent, cancellation_token: CancellationToken | None = None
    ) -> int:
        """Store ``content`` as a new item: one commit. Returns the item id.

        (``Memory.add`` returns nothing; the id is extra, for ``delete``.)
        """
        _check_token(cancellation_token)
        self._writable("add")
        text = encode_item(content)  # validate before touching anything
        lifted = lifted_provenance(content.metadata)
        store = self._live()
        mime = content.mime_type.value if isinstance(content.mime_type, MemoryMimeType) else content.mime_type
        for _attempt in range(100):
            # Optimistic: the id is chosen from the branch head we read, and the
            # commit is made only if the head has not moved since (another
            # process adding at the same instant); otherwise choose again.
            head = None if store.in_transaction else await store.head()
            item_id = await self._next_id(store)
            ops = [write_text(f"{self._items_dir}/{item_name(item_id)}", text), write_text(self._counter, f"{item_id}\n")]
            message = f"memory {self._name!r}: add item {item_id} ({mime})"
            meta = {"memory": self._name, "op": "add", "items": [item_id]}
            if store.in_transaction:
                await apply_ops(store, ops)
                return item_id
            try:
                commit_meta = {"framework": FRAMEWORK, **lifted, "autogen": meta}
                async with store.transaction(message=message, meta=commit_meta, expect_head=head):
                    await apply_ops(store, ops)
                return item_id
            except errors.ConcurrentUpdate:
                await asyncio.sleep(0)
        raise errors.ConcurrentUpdate(f"memory {self._name!r}: the branch kept moving; item not added")

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
        _check_token(cancellation_token)
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
            text = _searchable_text(query.content)
        elif isinstance(query, str):
            text = query
        else:
            raise TypeError(f"query must be a str or a MemoryContent, not {type(query).__name__}")
        scores = bm25_scores(text, [_searchable_text(c.content) for c in contents])
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
            location=_absolute_location(store.location),
            branch=self.branch,
            name=self._name,
            prefix=self._prefix,
            author=store.author,
        )

    @classmethod
    def _from_config(cls, config: VersionedMemoryConfig) -> VersionedMemory:
        """A memory over the same store, with its own store handle (closed by ``close()``)."""
        return cls(config.location, config.name, prefix=config.prefix, branch=config.branch, author=config.author)
