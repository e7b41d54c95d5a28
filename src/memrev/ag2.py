"""AG2 integration: a ``Plugin`` that records provenance on every commit of a turn.

It serves agents of the ``ag2`` package and of ``autogen.beta`` (the ``autogen`` 0.14
package, the same framework under another import path): each event is judged by
the classes of the package it comes from.

Usage (``docs/provenance.md``)::

    store = memrev.VersionedStore("./journal-state")
    agent = Agent("concierge", ..., knowledge=KnowledgeConfig(store=store),
                  plugins=[memrev.ag2.provenance(store, agent="concierge")])

Facts of ag2 1.2 this is built on:

- the middleware's ``on_turn`` wraps one turn; ``context.stream.id`` is the
  session; tools run in tasks spawned inside the turn, and
  ``on_tool_execution`` wraps each call with its ``ToolCallEvent`` (``name``,
  ``id``). The fields are set in a ``ContextVar`` around ``call_next``;
- the agent's name is only reachable through a private dependency key, so it
  is a plugin argument;
- a plugin given to ``Agent(...)`` is applied before the knowledge
  middleware (aggregation, compaction), so it wraps them and their writes
  carry the turn;
- ``EventLogWriter`` writes ``/log/<stream>.jsonl`` after the middleware
  returned, outside the turn's context: the plugin declares that path layout
  and records each stream's latest turn, and such a write is attributed to it
  (:mod:`memrev.provenance`). Bootstrap writes happen before any turn and
  carry no provenance.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

from ag2 import Middleware, Plugin
from ag2.events import DrainedModelRequest, ModelRequest
from ag2.knowledge import LOG_PREFIX
from ag2.middleware import BaseMiddleware

from . import provenance as prov
from .frameworks.history_tools import make_history_tools

__all__ = ["ProvenanceMiddleware", "event_log_stream", "provenance"]

FRAMEWORK = "ag2"
_LOG_FILE = re.compile(re.escape(LOG_PREFIX) + r"(?P<stream>[^/]+?)(?:\.dropped-\d+)?\.jsonl")


def event_log_stream(path: str) -> str | None:
    """The stream whose ``EventLogWriter`` file ``path`` is (``/log/<stream>.jsonl``, ``.dropped-<n>.jsonl``)."""
    m = _LOG_FILE.fullmatch(path)
    return None if m is None else m.group("stream")


def provenance(store: Any, *, agent: str, history_tools: bool = False) -> Plugin:
    """An ag2 ``Plugin``: every commit ``store`` gets during this agent's turns carries
    ``agent``, ``framework``, ``session``, ``turn`` and, inside a tool call, ``tool`` and ``tool_call_id``.

    ``history_tools=True`` also gives the agent the tools of :mod:`memrev.frameworks.history_tools`.
    """
    if not isinstance(agent, str) or not agent:
        raise TypeError("agent must be a non-empty str (the agent's name)")
    prov.add_stream_locator(store, event_log_stream)
    tools = make_history_tools(store) if history_tools else []
    return Plugin(middleware=[Middleware(ProvenanceMiddleware, store=store, agent=agent)], tools=tools)


# The packages whose agents run this plugin: ``ag2`` and ``autogen.beta`` (the ``autogen`` 0.14
# package) define the same events as distinct classes. An event is judged by the classes of the
# package its own class comes from, never by its content.
_EVENT_PACKAGES = ("autogen.beta", "ag2")


def _request_classes(event: Any) -> tuple[type, type]:
    """(``ModelRequest``, ``DrainedModelRequest``) of the package ``event``'s class belongs to."""
    module = type(event).__module__
    for package in _EVENT_PACKAGES:
        if (module == package or module.startswith(package + ".")) and package in sys.modules:
            events = importlib.import_module(package + ".events")
            return events.ModelRequest, events.DrainedModelRequest
    return ModelRequest, DrainedModelRequest


def _turn_number(history: list[Any], event: Any) -> int:
    """Asks so far in the stream, this one included: the model requests in history, plus this event.

    ``DrainedModelRequest`` re-emits queued input inside a turn; it is not an ask.
    """
    request, drained = _request_classes(event)
    asks = sum(1 for e in history if isinstance(e, request) and not isinstance(e, drained))
    return asks + 1 if isinstance(event, request) else max(asks, 1)


class ProvenanceMiddleware(BaseMiddleware):
    """Per turn (ag2 builds one instance per turn): sets the turn's fields around the turn and each tool call."""

    def __init__(self, event: Any, context: Any, *, store: Any, agent: str) -> None:
        super().__init__(event, context)
        self._store = store
        self._agent = agent
        self._fields: dict[str, Any] = {}

    async def on_turn(self, call_next: Any, event: Any, context: Any) -> Any:
        session = str(context.stream.id)
        history = list(await context.stream.history.get_events())
        self._fields = {"agent": self._agent, "framework": FRAMEWORK, "session": session}
        self._fields["turn"] = _turn_number(history, event)
        prov.remember_turn(self._store, session, self._fields)
        with prov.fields_set(**self._fields):
            return await call_next(event, context)

    async def on_tool_execution(self, call_next: Any, event: Any, context: Any) -> Any:
        with prov.fields_set(**self._fields, tool=event.name, tool_call_id=str(event.id)):
            return await call_next(event, context)
