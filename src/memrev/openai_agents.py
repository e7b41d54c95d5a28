"""An OpenAI Agents SDK ``Session`` on the commit graph (see ``docs/openai_agents.md``).

``store.session("chat-42")`` returns a :class:`VersionedSession`: it keeps
the conversation history ``Runner.run(agent, prompt, session=session)``
reads and appends, and behaves exactly like the SDK's ``SQLiteSession``
(the tests compare the two call by call). Every item is one file::

    /openai-agents/sessions/<session id>/items/000000000001.json   one per item, never rewritten
    /openai-agents/sessions/<session id>/last-id                   the last number handed out

so ``memrev log`` and ``memrev blame`` of an item path resolve to one
message or tool call. ``add_items`` of several items is one commit;
``pop_item`` and ``clear_session`` are commits that tombstone items, so a
cleared conversation is still readable at an earlier revision.

Beyond the protocol: :meth:`VersionedSession.at` (read-only, as of a
revision), :meth:`VersionedSession.branch` (fork the conversation and run
the agent on the fork) and :meth:`VersionedSession.log`.

:class:`ProvenanceRunHooks` / :class:`ProvenanceAgentHooks` (off unless
passed to ``Runner.run(hooks=...)`` or ``Agent(hooks=...)``) record which
agent ran which tool and what it returned on the commit that stores the
tool's output item.

Only this module imports the ``openai-agents`` package (extra
``memrev[openai-agents]``); ``memrev`` itself does not need it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from agents import AgentHooks, RunHooks
from agents.memory import SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

from . import errors
from .core.paths import check_room, normalize
from .frameworks.items import (
    COUNTER_FILE,
    ITEMS_DIR,
    MAX_ID,
    Change,
    PlannedOp,
    commit_planned,
    item_name,
    item_paths,
    next_item_id,
    write_text,
)
from .repo.ops import Delete

if TYPE_CHECKING:
    from .repo.repository import Commit
    from .store.store import Store

__all__ = [
    "DEFAULT_SESSIONS_PREFIX",
    "InvalidSessionItem",
    "ProvenanceAgentHooks",
    "ProvenanceRunHooks",
    "VersionedSession",
    "session_folder_name",
]

DEFAULT_SESSIONS_PREFIX = "/openai-agents/sessions"
FRAMEWORK = "openai-agents"
MAX_TOOL_OUTPUT_IN_META = 2000
"""Characters of a tool's output copied into commit meta (the whole output is in the item file)."""
MAX_TOOL_CALLS_META_BYTES = 1 << 20
"""Bytes of JSON of the ``tool_calls`` records one commit's meta carries; the rest are counted
(``tool_calls_count``), so meta stays within ``memrev.core.objects.MAX_META_BYTES``."""
MAX_IDS_IN_META = 1000
"""Item ids a commit's ``openai_agents.items`` lists; a larger call records ``count``, ``first`` and ``last``."""


class InvalidSessionItem(errors.InvalidContent):
    """An item ``add_items`` cannot store: not JSON-serializable (a ``TypeError``, as with ``SQLiteSession``)."""


def session_folder_name(session_id: object) -> str:
    """The one path segment a session id is stored under, injective and readable.

    Letters, digits and ``_.-~@:+,=`` stay as they are; anything else
    (``/``, ``%``, spaces, control characters, non-ASCII) is percent-encoded
    as UTF-8. A leading ``.`` is encoded too (``.`` and ``..`` are not
    names), and the empty id, which ``SQLiteSession`` accepts, is ``%``
    (percent-encoding never yields a lone ``%``).
    """
    if not isinstance(session_id, str):
        raise errors.InvalidPath(f"session_id must be str, not {type(session_id).__name__}")
    try:
        name = quote(session_id, safe="@:+,=~", errors="strict")
    except UnicodeEncodeError:
        raise errors.InvalidPath(f"session_id {session_id!r} is not valid Unicode text") from None
    if not name:
        return "%"
    if name.startswith("."):
        name = "%2E" + name[1:]
    return name


def _encode_item(item: object) -> str:
    """The file text of one item: the item's own JSON, pretty-printed for ``memrev cat``.

    ``json.loads`` of it gives exactly what ``SQLiteSession`` gives back for
    ``json.dumps(item)`` (tuples become lists, int keys become str keys).
    """
    try:
        text = json.dumps(item, ensure_ascii=False, indent=2)
    except (TypeError, ValueError) as e:
        raise InvalidSessionItem(f"session items must be JSON-serializable: {e}") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them, escaped
        text = json.dumps(item, ensure_ascii=True, indent=2)
    return text + "\n"


def _decode_item(text: str | None) -> tuple[bool, Any]:
    """(True, item), or (False, None) for a file that is not JSON (skipped, as ``SQLiteSession`` skips bad rows)."""
    if text is None:
        return False, None
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def _ids_meta(ids: list[int]) -> dict[str, Any]:
    """The item ids of a commit, for its meta: listed up to ``MAX_IDS_IN_META``, else their range."""
    if len(ids) <= MAX_IDS_IN_META:
        return {"items": ids}
    return {"count": len(ids), "first": ids[0], "last": ids[-1]}


def _ids_text(ids: list[int]) -> str:
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"


def _check_limit(limit: object) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise errors.InvalidContent(f"limit must be an int or None, not {type(limit).__name__}")


class VersionedSession:
    """An OpenAI Agents SDK ``Session`` whose items are versioned files in a memrev store.

    Implements the SDK's ``Session`` protocol (``isinstance(s, agents.memory.Session)``
    holds) with ``SQLiteSession``'s exact semantics, including
    ``session_settings.limit`` and ``get_items(limit=0)`` (nothing) or a
    negative limit (everything).
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        store: Store,
        session_id: str,
        *,
        prefix: str = DEFAULT_SESSIONS_PREFIX,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self._store = store
        self._prefix = normalize(prefix)
        self._path = f"{self._prefix.rstrip('/')}/{session_folder_name(session_id)}"
        # before anything is read or written: every item's path must be one memrev takes
        check_room(self._path, f"{ITEMS_DIR}/{item_name(MAX_ID)}", f"session_id {session_id[:40]!r}")
        self._items_dir = f"{self._path}/{ITEMS_DIR}"
        self._counter = f"{self._path}/{COUNTER_FILE}"
        self._pinned: str | None = None  # a commit id: read-only, as of that revision
        self._owns_store = False
        self._closed = False
        self._tool_calls: dict[str, dict[str, Any]] = {}  # call_id -> provenance, filled by the hooks

    # ------------------------------------------------------------ properties

    @property
    def store(self) -> Store:
        return self._store

    @property
    def path(self) -> str:
        """The folder holding this session's items."""
        return self._path

    @property
    def revision(self) -> str | None:
        """The commit a read-only view (``at``) answers from; ``None`` for the live session."""
        return self._pinned

    def __repr__(self) -> str:
        at = f", at={self._pinned[:10]!r}" if self._pinned else ""
        return f"VersionedSession({self.session_id!r}, branch={self._store.branch_name!r}{at})"

    # ------------------------------------------------------------ the Session protocol

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history in chronological order; with a limit, the latest ``limit`` items."""
        self._check_open()
        _check_limit(limit)
        n = resolve_session_limit(limit, self.session_settings)
        _check_limit(n)
        if n == 0:
            return []
        rev = await self._read_revision()
        if rev is None and not self._store.in_transaction:
            return []  # a branch with no commits yet
        paths = [p for _, p in await item_paths(self._store, self._items_dir, rev)]
        wanted = len(paths) if n is None or n < 0 else n  # negative: everything, as SQLite's LIMIT -1
        items: list[Any] = []
        for path in reversed(paths):  # newest first, so a limit reads only what it returns
            ok, item = _decode_item(await self._store.read(path, rev=rev))
            if ok:
                items.append(item)
                if len(items) == wanted:
                    break
        items.reverse()
        return items

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in one commit (none for an empty list)."""
        self._check_open()
        self._writable("add items")
        if not items:
            return
        texts = [_encode_item(item) for item in items]  # refuse before anything is written
        meta = _provenance_meta(self._store, self.session_id, self._claim_tool_calls(items))

        async def plan() -> Change:
            first = await next_item_id(self._store, self._items_dir, self._counter)
            ids = list(range(first, first + len(texts)))
            ops: list[PlannedOp] = [write_text(f"{self._items_dir}/{item_name(i)}", t) for i, t in zip(ids, texts, strict=True)]
            ops.append(write_text(self._counter, f"{ids[-1]}\n"))
            noun = "item" if len(ids) == 1 else "items"
            return Change(
                f"session {self.session_id!r}: add {len(ids)} {noun} ({_ids_text(ids)})",
                {**meta, "openai_agents": {"session": self.session_id, "op": "add", **_ids_meta(ids)}},
                ops,
            )

        await commit_planned(self._store, plan, what="add_items")

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (a tombstone commit); ``None`` if there is none."""
        self._check_open()
        self._writable("pop an item")

        async def plan() -> Change | None:
            dropped = []  # files that are not JSON are dropped on the way, as SQLiteSession does
            for item_id, path in reversed(await item_paths(self._store, self._items_dir, None)):
                ok, item = _decode_item(await self._store.read(path))
                dropped.append((item_id, path))
                if ok:
                    return self._pop_change(dropped, item)
            return self._pop_change(dropped, None) if dropped else None

        return await commit_planned(self._store, plan, what="pop_item")

    def _pop_change(self, dropped: list[tuple[int, str]], item: Any) -> Change:
        ids = sorted(i for i, _ in dropped)
        return Change(
            f"session {self.session_id!r}: pop item {ids[-1]}",
            {**_provenance_meta(self._store, self.session_id, []),
             "openai_agents": {"session": self.session_id, "op": "pop", "items": ids}},
            [Delete(p) for _, p in dropped],
            item,
        )

    async def clear_session(self) -> None:
        """Tombstone every item in one commit (none if the session is empty); history keeps them."""
        self._check_open()
        self._writable("clear the session")

        async def plan() -> Change | None:
            ids = [i for i, _ in await item_paths(self._store, self._items_dir, None)]
            if not ids:
                return None
            noun = "item" if len(ids) == 1 else "items"
            return Change(
                f"session {self.session_id!r}: clear {len(ids)} {noun} ({_ids_text(ids)})",
                {**_provenance_meta(self._store, self.session_id, []),
                 "openai_agents": {"session": self.session_id, "op": "clear", "count": len(ids)}},
                [Delete(self._items_dir)],
            )

        await commit_planned(self._store, plan, what="clear_session")

    def close(self) -> None:
        """Close the session (and the store handle if ``branch()`` opened it). Idempotent."""
        if not self._closed:
            self._closed = True
            if self._owns_store:
                self._store.close()

    # ------------------------------------------------------------ beyond the protocol

    def at(self, rev: str) -> VersionedSession:
        """This session as of ``rev`` (id, prefix, ``HEAD~2``, branch, tag): reads only.

        ``get_items`` answers from that commit; ``add_items``, ``pop_item`` and
        ``clear_session`` raise ``ReadOnlyRevision``.
        """
        view = self._sibling(self._store)
        view._pinned = self._store.at(rev).commit
        return view

    async def branch(self, name: str, *, at: str | None = None) -> VersionedSession:
        """Create branch ``name`` (at ``at``, default this session's revision or head)
        and return this session on it: run the agent on the fork, the original stays."""
        fork = await self._store.branch(name, at=at or self._pinned or "HEAD")
        session = self._sibling(fork)
        session._owns_store = True
        return session

    async def log(self, *, limit: int | None = None) -> list[Commit]:
        """The commits that changed this session, newest first."""
        self._check_open()
        return await self._store.log(self._path, limit=limit, rev=self._pinned)

    def provenance_hooks(self) -> ProvenanceRunHooks:
        """``RunHooks`` for ``Runner.run(..., hooks=...)`` recording tool provenance on this session."""
        return ProvenanceRunHooks(self)

    # ------------------------------------------------------------ helpers

    def _sibling(self, store: Store) -> VersionedSession:
        return VersionedSession(
            store, self.session_id, prefix=self._prefix, session_settings=self.session_settings
        )

    async def _read_revision(self) -> str | None:
        """What reads answer from: the pinned commit, the caller's open transaction (``None``), or the head,
        fixed once so a call reads one consistent state while other writers commit."""
        if self._pinned is not None:
            return self._pinned
        return None if self._store.in_transaction else await self._store.head()

    def _check_open(self) -> None:
        if self._closed:
            raise errors.StoreClosed(f"session {self.session_id!r} is closed")

    def _writable(self, what: str) -> None:
        if self._pinned is not None:
            raise errors.ReadOnlyRevision(
                f"cannot {what}: session {self.session_id!r} is a read-only view of revision {self._pinned[:10]}; "
                f"to run an agent on the session of that revision, fork a branch there: await session.branch(NAME)"
            )

    def _claim_tool_calls(self, items: Iterable[Any]) -> list[dict[str, Any]]:
        """The recorded tool calls whose output items are among ``items`` (taken off the pending list)."""
        out = []
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                record = self._tool_calls.pop(str(item.get("call_id")), None)
                if record is not None:
                    out.append(record)
        return out


# ------------------------------------------------------------------ provenance


def _provenance_meta(store: Store, session_id: str, tool_calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Provenance fields (``docs/provenance.md`` keys) for a session commit.

    The one place that decides them, so it can move to ``store.provenance``
    when that lands: ``framework`` and ``session`` always; ``agent``,
    ``tool``, ``tool_call_id`` and ``tool_output`` when the commit stores the
    output of exactly one recorded tool call; ``tool_calls`` (a list of those
    records) when it stores several.
    """
    meta: dict[str, Any] = {"framework": FRAMEWORK, "session": session_id}
    if len(tool_calls) == 1:
        meta.update(tool_calls[0])
    elif tool_calls:
        kept, size = [], 0
        for record in tool_calls:
            size += len(json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            if size > MAX_TOOL_CALLS_META_BYTES:
                break
            kept.append(record)
        meta["tool_calls"] = kept
        if len(kept) < len(tool_calls):
            meta["tool_calls_count"] = len(tool_calls)
        agents = {c["agent"] for c in tool_calls}
        if len(agents) == 1:
            meta["agent"] = agents.pop()
    return meta


def _tool_record(context: Any, agent: Any, tool: Any, result: object) -> tuple[str | None, dict[str, Any]]:
    output = result if isinstance(result, str) else str(result)
    record: dict[str, Any] = {
        "agent": str(getattr(agent, "name", agent)),
        "tool": str(getattr(tool, "name", tool)),
        "tool_call_id": getattr(context, "tool_call_id", None),
        "tool_output": output[:MAX_TOOL_OUTPUT_IN_META],
    }
    if len(output) > MAX_TOOL_OUTPUT_IN_META:
        record["tool_output_truncated"] = True
    return record["tool_call_id"], record


class _ToolProvenance:
    """Records each finished tool call on the session, keyed by its call id.

    The SDK runs hooks and tool bodies in tasks of their own, so a hook
    cannot set task-local context that the tool's writes would see. The
    call id links them instead: when ``add_items`` stores the
    ``function_call_output`` item with that call id, the commit carries the
    agent, the tool's name, the call id and the tool's output.
    """

    def __init__(self, session: VersionedSession) -> None:
        self.session = session

    def _record(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        call_id, record = _tool_record(context, agent, tool, result)
        if call_id is not None:
            self.session._tool_calls[str(call_id)] = record


class ProvenanceRunHooks(_ToolProvenance, RunHooks):
    """``Runner.run(agent, prompt, session=s, hooks=ProvenanceRunHooks(s))``: every agent's tool calls."""

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        self._record(context, agent, tool, result)


class ProvenanceAgentHooks(_ToolProvenance, AgentHooks):
    """``Agent(..., hooks=ProvenanceAgentHooks(s))``: the tool calls of that one agent."""

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        self._record(context, agent, tool, result)
