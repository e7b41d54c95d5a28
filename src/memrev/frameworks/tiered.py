"""Tiered memory (chat context -> short-term -> long-term), versioned (``docs/autogen.md``).

The tiers of MemoryEnabledAgent, made exact and persistent. Both tiers are
numbered item folders of the memory, in the layout of a ``VersionedMemory``::

    <prefix>/<name>/short-term/items/000000000001.json   add(), and summaries of squeezed-out chat messages
    <prefix>/<name>/long-term/items/000000000001.json    summaries of short-term entries, and explicit saves
    <prefix>/<name>/chat-archive/items/000000000001.json the chat messages a summary replaced, verbatim
    <prefix>/<name>/chat-archive/promoted.json           digests of the chat batches promoted: none twice

**Overflow rule** (both compressions): when a tier holds more than its
capacity ``C``, the newest ``floor(C * keep_ratio)`` entries stay and all
older ones are summarised by ``model_client`` into one entry of the next
tier. Each promotion is one commit whose message says what moved, so
``memrev diff`` of it shows exactly what the summary dropped, and the
originals stay readable at the revision before.

Several processes may use one memory at once: every commit is planned from
the head it lands on (:func:`memrev.frameworks.items.commit_planned`), so no entry
is lost or promoted twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from autogen_core import CancellationToken, Component, ComponentModel
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType, MemoryQueryResult, UpdateContextResult
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import ChatCompletionClient, LLMMessage, SystemMessage, UserMessage
from autogen_core.tools import FunctionTool
from pydantic import BaseModel, Field, field_validator

from .. import errors
from ..core.paths import normalize
from ..repo.ops import Delete
from ..store.store import CLOSED, Closed, Store
from .codec import absolute_location, check_memory_room, check_name, check_token, encode_item
from .items import COUNTER_FILE, ITEMS_DIR, Change, PlannedOp, commit_planned, item_name, next_item_id, write_text
from .memory import DEFAULT_PREFIX, VersionedMemory

if TYPE_CHECKING:
    from ..repo.repository import Commit

__all__ = ["InvalidTierSettings", "TieredMemory", "TieredMemoryConfig"]

SHORT_TERM = "short-term"
LONG_TERM = "long-term"
CHAT_ARCHIVE = "chat-archive"
# Digests of the latest chat batches promoted, kept in the promotion's own commit: a retry
# of a batch whose promotion committed (the caller failed or was cancelled before the
# context was shortened) finds its digest and shortens the context without promoting again.
PROMOTED_FILE = "promoted.json"
PROMOTED_KEPT = 64
DEFAULT_SUMMARY_TIMEOUT = 120.0  # seconds one summary may take before it is given up and retried later
_log = logging.getLogger(__name__)
SUMMARY_INSTRUCTIONS = (
    "Summarise the following memory entries into one short paragraph for your future self. "
    "Keep names, numbers, dates, preferences and decisions; drop small talk."
)


class InvalidTierSettings(errors.MemrevError, ValueError):
    """A capacity, ``keep_ratio`` or ``k`` out of range."""


class _SummaryFailed(Exception):
    """The model client failed to summarise, or took longer than ``summary_timeout``."""


class TieredMemoryConfig(BaseModel):
    """What ``dump_component()`` records: the store, the memory, its model client and its rule."""

    location: str
    branch: str = "main"
    name: str
    prefix: str = DEFAULT_PREFIX
    author: str = "memrev"
    model_client: ComponentModel
    context_capacity: int = Field(default=10, ge=1)
    short_term_capacity: int = Field(default=10, ge=1)
    keep_ratio: float = Field(default=0.8, ge=0.0, le=1.0)
    k: int = Field(default=3, ge=1)
    summary_timeout: float = Field(default=DEFAULT_SUMMARY_TIMEOUT, gt=0)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value)


def kept_count(capacity: int, keep_ratio: float) -> int:
    """``floor(capacity * keep_ratio)``, computed on the decimal the caller wrote.

    In binary floating point ``100 * 0.29`` is ``28.999...``; the ratio as
    written (``Fraction("0.29")``) gives the 29 a person expects.
    """
    return math.floor(capacity * Fraction(repr(keep_ratio)))


def _check_settings(context_capacity: object, short_term_capacity: object, keep_ratio: object, k: object) -> None:
    for label, value in (("context_capacity", context_capacity), ("short_term_capacity", short_term_capacity), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidTierSettings(f"{label} must be a positive int, not {value!r}")
    if isinstance(keep_ratio, bool) or not isinstance(keep_ratio, (int, float)) or not 0 <= keep_ratio <= 1:
        raise InvalidTierSettings(f"keep_ratio must be a number from 0 to 1, not {keep_ratio!r}")


def _entry_text(content: MemoryContent) -> str:
    return str(content.content)


def _message_text(message: LLMMessage) -> str:
    source = getattr(message, "source", None)
    who = type(message).__name__ + (f" ({source})" if source else "")
    return f"{who}: {message.content}"


def _numbered(lines: Sequence[str]) -> str:
    return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))


def _ids_text(ids: Sequence[int]) -> str:
    """``[3]`` -> ``"3"``, ``[1, 2, 3]`` -> ``"1-3"``, ``[1, 4]`` -> ``"1, 4"``."""
    if len(ids) == 1:
        return str(ids[0])
    if list(ids) == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}-{ids[-1]}"
    return ", ".join(map(str, ids))


class TieredMemory(Memory, Component[TieredMemoryConfig]):
    """An AutoGen ``Memory`` with MemoryEnabledAgent's three tiers, persistent and versioned.

    ``add`` appends a short-term entry; ``update_context`` compresses the
    chat context and adds one ``SystemMessage`` with the short-term entries
    and the long-term entries matching the last user message; ``tools()``
    gives the agent ``lookup_from_long_term_memory`` and
    ``save_to_long_term_memory``.
    """

    component_type = "memory"
    component_version = 1
    component_provider_override = "memrev.autogen.TieredMemory"
    component_config_schema = TieredMemoryConfig
    component_description = "Working, short-term and long-term memory as versioned files in a memrev store."

    def __init__(
        self,
        store: Store | str,
        name: str,
        model_client: ChatCompletionClient,
        *,
        context_capacity: int = 10,
        short_term_capacity: int = 10,
        keep_ratio: float = 0.8,
        k: int = 3,
        prefix: str = DEFAULT_PREFIX,
        summary_timeout: float = DEFAULT_SUMMARY_TIMEOUT,
    ) -> None:
        _check_settings(context_capacity, short_term_capacity, keep_ratio, k)
        if type(summary_timeout) not in (int, float) or not 0 < summary_timeout < math.inf:
            raise InvalidTierSettings(f"summary_timeout must be a positive number of seconds, not {summary_timeout!r}")
        self.summary_timeout = float(summary_timeout)
        if not isinstance(model_client, ChatCompletionClient):
            raise TypeError(f"model_client must be an AutoGen ChatCompletionClient, not {type(model_client).__name__}")
        self._name = check_name(name)
        self._prefix = normalize(prefix)
        self._path = f"{self._prefix.rstrip('/')}/{self._name}"
        for tier in (SHORT_TERM, LONG_TERM, CHAT_ARCHIVE):  # before a store is opened or anything written
            check_memory_room(self._path, self._name, f"{tier}/")
        self._owns_store = not isinstance(store, Store)
        self._store: Store = store if isinstance(store, Store) else Store(store)
        self._model_client = model_client
        self.context_capacity, self.short_term_capacity = context_capacity, short_term_capacity
        self.keep_ratio, self.k = keep_ratio, k
        self.short_term = VersionedMemory(self._store, SHORT_TERM, prefix=self._path)
        self.long_term = VersionedMemory(self._store, LONG_TERM, prefix=self._path)
        self._ours: list[SystemMessage] = []  # the memory messages this object put in a context
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def path(self) -> str:
        return self._path

    @property
    def store(self) -> Store:
        return self._store

    def __repr__(self) -> str:
        return f"TieredMemory({self._name!r}, branch={self._store.branch_name!r})"

    # ------------------------------------------------------------ Memory

    async def add(  # type: ignore[override]
        self, content: MemoryContent, cancellation_token: CancellationToken | None = None
    ) -> int:
        """Append a short-term entry (one commit), then apply the overflow rule. Returns its id."""
        check_token(cancellation_token)
        text = encode_item(content)  # refuse before anything is written
        entry = await self._append(SHORT_TERM, text, "add short-term entry {id}", {"op": "add"})
        await self._compress_logged()  # the entry is committed: a failed summary is retried later, not raised
        return entry

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        """Compress the chat context by the overflow rule, then add one memory ``SystemMessage``.

        A summary that fails or takes over ``summary_timeout`` seconds is logged, not raised:
        what it would have promoted stays where it is and the rule applies again next call.
        A chat promotion is recorded in its own commit and never repeated.

        The message lists the short-term entries (chronological) and the top
        ``k`` long-term entries matching the last user message. The memory
        message this object added on an earlier call is replaced, not kept.
        """
        self._live()
        current = await model_context.get_messages()
        messages = [m for m in current if not any(m is o for o in self._ours)]
        changed = len(messages) != len(current)
        if len(messages) > self.context_capacity:
            keep = kept_count(self.context_capacity, self.keep_ratio)
            squeezed, kept = messages[: len(messages) - keep], messages[len(messages) - keep :]
            try:
                await self._promote_chat(squeezed)
            except _SummaryFailed as e:  # nothing committed: the context stays whole and the next call retries
                _log.warning("tiered memory %r: chat messages not promoted, retried on the next call: %s", self._name, e)
            else:
                # Committed (or promoted already): shorten the context before anything else can fail.
                messages, changed = kept, False
                await model_context.clear()
                for message in messages:
                    await model_context.add_message(message)
        await self._compress_logged()  # also retries a compression whose summary failed earlier
        short = [i.content for i in await self.short_term.items()]
        long = (await self.long_term.query(_last_user_text(messages), k=self.k)).results
        if changed:
            await model_context.clear()
            for message in messages:
                await model_context.add_message(message)
        self._ours = []
        if short or long:
            memory_message = SystemMessage(content=_memory_text(short, long))
            await model_context.add_message(memory_message)
            self._ours = [memory_message]
        return UpdateContextResult(memories=MemoryQueryResult(results=short + long))

    async def query(
        self,
        query: str | MemoryContent = "",
        cancellation_token: CancellationToken | None = None,
        *,
        k: int | None = None,
        **kwargs: Any,
    ) -> MemoryQueryResult:
        """Entries of both tiers, short-term first.

        With an empty query: every entry, each tier in chronological order.
        Otherwise the entries sharing words with ``query``, each tier ranked
        by BM25 (``score`` added to a copy of the metadata), at most ``k`` per tier.
        """
        check_token(cancellation_token)
        if kwargs:
            raise TypeError(f"query() got unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        if query == "" and k is None:
            results = [i.content for i in await self.short_term.items()] + [i.content for i in await self.long_term.items()]
            return MemoryQueryResult(results=results)
        ranked = [(await tier.query(query, k=k, score_threshold=0.0)).results for tier in (self.short_term, self.long_term)]
        return MemoryQueryResult(results=ranked[0] + ranked[1])

    async def clear(self) -> None:
        """Tombstone both tiers in one commit (none if both are empty); history keeps every entry."""
        self._live()

        async def plan() -> Change | None:
            counts = {tier.name: len(await tier.items()) for tier in (self.short_term, self.long_term)}
            if not any(counts.values()):
                return None
            return Change(
                f"tiered memory {self._name!r}: clear {counts[SHORT_TERM]} short-term and {counts[LONG_TERM]} long-term entries",
                self._meta({"op": "clear", **counts}),
                [Delete(tier.path + "/" + ITEMS_DIR) for tier in (self.short_term, self.long_term)],
            )

        await commit_planned(self._store, plan, what="clear")

    def close(self) -> Closed:  # type: ignore[override]
        """Close the memory (and the store if it opened it). Idempotent; awaitable."""
        if not self._closed:
            self._closed = True
            if self._owns_store:
                self._store.close()
        return CLOSED

    async def log(self, *, limit: int | None = None) -> list[Commit]:
        """The commits that changed this memory (adds, promotions, saves, clears), newest first."""
        return await self._live().log(self._path, limit=limit)

    # ------------------------------------------------------------ tools

    def tools(self) -> list[FunctionTool]:
        """MemoryEnabledAgent's two tools as AutoGen ``FunctionTool``s, for ``AssistantAgent(tools=...)``."""

        async def lookup_from_long_term_memory(hint: str) -> str:
            results = (await self.long_term.query(hint, k=self.k)).results
            return _numbered([_entry_text(c) for c in results]) if results else "Nothing in long-term memory matches."

        async def save_to_long_term_memory(content: str) -> str:
            entry = await self.save_to_long_term(content)
            return f"Saved to long-term memory as entry {entry}."

        return [
            FunctionTool(lookup_from_long_term_memory, "Search long-term memory for entries matching a hint."),
            FunctionTool(save_to_long_term_memory, "Save a fact to long-term memory, for good."),
        ]

    async def save_to_long_term(self, content: str) -> int:
        """Add a long-term entry directly (what the ``save_to_long_term_memory`` tool does)."""
        if not isinstance(content, str):
            raise errors.InvalidContent(f"content must be str, not {type(content).__name__}")
        entry = MemoryContent(content=content, mime_type=MemoryMimeType.TEXT, metadata={"source": "save_to_long_term_memory"})
        return await self._append(LONG_TERM, encode_item(entry), "save long-term entry {id}", {"op": "save"})

    # ------------------------------------------------------------ the overflow rule

    async def _compress_logged(self) -> None:
        """:meth:`_compress_short_term`; a summary that fails or times out is logged, and the
        overflow rule applies again at the next ``add`` or ``update_context``."""
        try:
            await self._compress_short_term()
        except _SummaryFailed as e:
            _log.warning("tiered memory %r: short-term entries not promoted, retried later: %s", self._name, e)

    async def _compress_short_term(self) -> None:
        """Short-term -> long-term, if the short-term tier holds more than its capacity."""
        summaries: dict[tuple[int, ...], str] = {}  # a retry after a lost race reuses a summary of the same entries

        async def plan() -> Change | None:
            entries = await self.short_term.items()
            if len(entries) <= self.short_term_capacity:
                return None
            moved = entries[: len(entries) - kept_count(self.short_term_capacity, self.keep_ratio)]
            ids = tuple(e.id for e in moved)
            if ids not in summaries:
                summaries[ids] = await self._summarise([_entry_text(e.content) for e in moved])
            summary = MemoryContent(
                content=summaries[ids], mime_type=MemoryMimeType.TEXT,
                metadata={"summary_of": {"tier": SHORT_TERM, "items": list(ids)}},
            )
            target = await next_item_id(self._store, self.long_term.path + "/" + ITEMS_DIR, self.long_term.path + "/" + COUNTER_FILE)
            ops: list[PlannedOp] = [Delete(e.path) for e in moved]
            ops += self._entry_ops(self.long_term, target, encode_item(summary))
            noun = "entry" if len(ids) == 1 else "entries"
            return Change(
                f"tiered memory {self._name!r}: promote short-term {noun} {_ids_text(ids)} to long-term entry {target} (summary)",
                self._meta({"op": "promote", "from": SHORT_TERM, "to": LONG_TERM, "items": list(ids), "entry": target}),
                ops,
            )

        await commit_planned(self._store, plan, what="promotion")

    async def _promote_chat(self, squeezed: list[LLMMessage]) -> None:
        """Chat context -> short-term: one summary entry, and the messages archived verbatim, in one commit.

        The commit also records the batch's digest (``chat-archive/promoted.json``): a batch
        already promoted is not promoted again."""
        archive_text = json.dumps([m.model_dump(mode="json") for m in squeezed], ensure_ascii=False, indent=2) + "\n"
        archive_dir = f"{self._path}/{CHAT_ARCHIVE}"
        digest = hashlib.blake2b(archive_text.encode("utf-8"), digest_size=16).hexdigest()
        promoted_path = f"{archive_dir}/{PROMOTED_FILE}"

        async def promoted() -> list[str]:
            text = await self._store.read(promoted_path)
            try:
                done = json.loads(text) if text else []
            except ValueError:
                return []
            return [d for d in done if isinstance(d, str)] if isinstance(done, list) else []

        if digest in await promoted():
            return
        summary_text = await self._summarise([_message_text(m) for m in squeezed])

        async def plan() -> Change | None:
            done = await promoted()
            if digest in done:  # another caller promoted this batch meanwhile
                return None
            done = [*done, digest][-PROMOTED_KEPT:]
            archived = await next_item_id(self._store, f"{archive_dir}/{ITEMS_DIR}", f"{archive_dir}/{COUNTER_FILE}")
            archive_path = f"{archive_dir}/{ITEMS_DIR}/{item_name(archived)}"
            summary = MemoryContent(
                content=summary_text, mime_type=MemoryMimeType.TEXT,
                metadata={"summary_of": {"tier": "chat", "messages": len(squeezed), "archive": archive_path}},
            )
            target = await next_item_id(self._store, self.short_term.path + "/" + ITEMS_DIR, self.short_term.path + "/" + COUNTER_FILE)
            ops: list[PlannedOp] = [write_text(archive_path, archive_text), write_text(f"{archive_dir}/{COUNTER_FILE}", f"{archived}\n")]
            ops += self._entry_ops(self.short_term, target, encode_item(summary))
            ops.append(write_text(promoted_path, json.dumps(done) + "\n"))
            return Change(
                f"tiered memory {self._name!r}: promote {len(squeezed)} chat messages to short-term entry {target} (summary)",
                self._meta({"op": "promote", "from": "chat", "to": SHORT_TERM, "messages": len(squeezed), "entry": target}),
                ops,
            )

        await commit_planned(self._store, plan, what="promotion")

    async def _summarise(self, lines: list[str]) -> str:
        """One summary by the model client, bounded by ``summary_timeout``; its failure is ``_SummaryFailed``."""
        request: list[LLMMessage] = [SystemMessage(content=SUMMARY_INSTRUCTIONS), UserMessage(content=_numbered(lines), source="memory")]
        try:
            result = await asyncio.wait_for(self._model_client.create(request), self.summary_timeout)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            raise _SummaryFailed(f"the summary took more than {self.summary_timeout:g} s") from None
        except Exception as e:  # the model client's own failure
            raise _SummaryFailed(f"the summary failed: {type(e).__name__}: {e}") from e
        return result.content if isinstance(result.content, str) else str(result.content)

    # ------------------------------------------------------------ helpers

    async def _append(self, tier: str, text: str, message: str, meta: dict[str, Any]) -> int:
        view = self.short_term if tier == SHORT_TERM else self.long_term
        self._live()

        async def plan() -> Change:
            entry = await next_item_id(self._store, view.path + "/" + ITEMS_DIR, view.path + "/" + COUNTER_FILE)
            return Change(
                f"tiered memory {self._name!r}: " + message.format(id=entry),
                self._meta({**meta, "tier": tier, "entry": entry}),
                self._entry_ops(view, entry, text),
                entry,
            )

        return await commit_planned(self._store, plan, what="entry")

    @staticmethod
    def _entry_ops(tier: VersionedMemory, entry: int, text: str) -> list[PlannedOp]:
        return [write_text(tier.item_path(entry), text), write_text(f"{tier.path}/{COUNTER_FILE}", f"{entry}\n")]

    def _meta(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {"framework": "autogen", "autogen": {"memory": self._name, "tiered": True, **fields}}

    def _live(self) -> Store:
        if self._closed:
            raise errors.StoreClosed(f"tiered memory {self._name!r} is closed")
        self._store.repo  # noqa: B018 - raises StoreClosed if the store is closed
        return self._store

    # ------------------------------------------------------------ Component

    def _to_config(self) -> TieredMemoryConfig:
        store = self._store
        return TieredMemoryConfig(
            location=absolute_location(store.location), branch=store.branch_name, name=self._name,
            prefix=self._prefix, author=store.author, model_client=self._model_client.dump_component(),
            context_capacity=self.context_capacity, short_term_capacity=self.short_term_capacity,
            keep_ratio=self.keep_ratio, k=self.k, summary_timeout=self.summary_timeout,
        )

    @classmethod
    def _from_config(cls, config: TieredMemoryConfig) -> TieredMemory:
        """A memory over the same store, with its own store handle (closed by ``close()``)."""
        store = Store(config.location, branch=config.branch, author=config.author)
        memory = cls(
            store, config.name, ChatCompletionClient.load_component(config.model_client),
            context_capacity=config.context_capacity, short_term_capacity=config.short_term_capacity,
            keep_ratio=config.keep_ratio, k=config.k, prefix=config.prefix, summary_timeout=config.summary_timeout,
        )
        memory._owns_store = True
        return memory


def _last_user_text(messages: Sequence[LLMMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            content = message.content
            return content if isinstance(content, str) else " ".join(p for p in content if isinstance(p, str))
    return ""


def _memory_text(short: list[MemoryContent], long: list[MemoryContent]) -> str:
    parts = []
    if short:
        parts.append("Short-term memory (in chronological order):\n" + _numbered([_entry_text(c) for c in short]))
    if long:
        parts.append("Long-term memory matching the last user message:\n" + _numbered([_entry_text(c) for c in long]))
    return "\n" + "\n\n".join(parts) + "\n"
