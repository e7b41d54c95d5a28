"""Provenance: who made a commit, in which session and turn, through which tool.

The record is plain data in commit ``meta`` under documented keys (absent
when unknown): ``agent``, ``framework``, ``session``, ``turn``, ``tool``,
``tool_call_id``, ``source``. See ``docs/provenance.md``.

Fields come from task-local context (a ``ContextVar``) that framework hooks
set (``store.provenance(...)``, the ag2 plugin, the AutoGen ``_meta``
metadata), never from guessing at content. Two concurrent tasks each see
their own fields.

One case a ``ContextVar`` cannot cover: ag2's ``EventLogWriter`` writes
``/log/<stream>.jsonl`` after the turn's middleware has returned, in a
context the turn never touched. For that the framework adapter registers,
per store, which stream a path belongs to and the stream's latest turn; a
commit made with no task-local fields is attributed through that map.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from . import errors

# The documented keys, in the order they are shown.
KEYS = ("agent", "framework", "session", "turn", "tool", "tool_call_id", "source")
_INT_KEYS = frozenset({"turn"})
# A field names something (an agent, a session, a tool): longer text is refused, so that
# the fields together stay a small part of a commit's meta (``core.objects.MAX_META_BYTES``).
MAX_FIELD_BYTES = 64 << 10
# A turn counts asks: a 64-bit signed int, as every backend and JSON reader holds exactly
# (a huge int passed the type check, then failed the commit with a bare ``ValueError``).
MAX_TURN = (1 << 63) - 1

# Read-only mappings: a value set by one task can be seen, never changed, by the tasks it starts.
_current: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "memrev_provenance", default=MappingProxyType({})
)


def check_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Validated provenance fields, ``None`` values dropped; unknown keys or wrong types raise ``InvalidContent``."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if not isinstance(key, str) or key not in KEYS:
            raise errors.InvalidContent(f"unknown provenance field {key!r}; known: {', '.join(KEYS)}")
        if value is None:
            continue
        if key in _INT_KEYS:
            if type(value) is not int or not 1 <= value <= MAX_TURN:
                shown = f"an int of {value.bit_length()} bits" if type(value) is int and value > MAX_TURN else repr(value)[:80]
                raise errors.InvalidContent(f"provenance field {key!r} must be an int from 1 to {MAX_TURN}, not {shown}")
        elif type(value) is not str:  # a subclass could encode differently from what is checked
            raise errors.InvalidContent(f"provenance field {key!r} must be str, not {type(value).__name__}")
        else:  # stored as UTF-8 in the commit's meta
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise errors.InvalidContent(f"provenance field {key!r} holds a lone surrogate: {value[:80]!r}") from None
            if size > MAX_FIELD_BYTES:
                raise errors.InvalidContent(f"provenance field {key!r} is {size} bytes; at most {MAX_FIELD_BYTES} are allowed")
        out[key] = value
    return out


def current() -> dict[str, Any]:
    """The provenance fields in effect for this task."""
    return dict(_current.get())


def of(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The provenance record held in a commit's ``meta`` (documented keys only)."""
    return {k: meta[k] for k in KEYS if k in meta}


@contextlib.contextmanager
def fields_set(**fields: Any) -> Any:
    """Synchronous form of :func:`provenance`, for hooks that wrap a call (middleware)."""
    token = _current.set(MappingProxyType({**_current.get(), **check_fields(fields)}))
    try:
        yield
    finally:
        _current.reset(token)


@contextlib.asynccontextmanager
async def provenance(**fields: Any) -> AsyncIterator[dict[str, Any]]:
    """Every commit made by this task inside carries ``fields`` (inner values win over outer ones)."""
    with fields_set(**fields):
        yield current()


# ---------------------------------------------------------------- late attribution

_STREAMS_KEPT = 4096  # per store: the latest turns remembered for late writes


class _StreamTurns:
    """Per store: the latest turn of each recent stream, and how to tell a path's stream."""

    def __init__(self) -> None:
        self.turns: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.locators: list[Callable[[str], str | None]] = []


_late: weakref.WeakKeyDictionary[object, _StreamTurns] = weakref.WeakKeyDictionary()


def add_stream_locator(store: object, locate: Callable[[str], str | None]) -> None:
    """Declare a path layout: ``locate(path)`` names the stream a path belongs to, or ``None``."""
    late = _late.setdefault(store, _StreamTurns())
    if locate not in late.locators:
        late.locators.append(locate)


def remember_turn(store: object, stream: str, fields: Mapping[str, Any]) -> None:
    """Record ``fields`` as the latest turn of ``stream`` (for writes made after the turn returned)."""
    late = _late.setdefault(store, _StreamTurns())
    late.turns[stream] = dict(fields)
    late.turns.move_to_end(stream)
    while len(late.turns) > _STREAMS_KEPT:
        late.turns.popitem(last=False)


def _late_fields(store: object, paths: Iterable[str]) -> dict[str, Any]:
    late = _late.get(store)
    if late is None or not late.locators:
        return {}
    for path in paths:
        for locate in late.locators:
            stream = locate(path)
            if stream is not None and stream in late.turns:
                return dict(late.turns[stream])
    return {}


def commit_meta(store: object, paths: Iterable[str], meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The meta a commit gets: task-local fields (or the late attribution), then explicit ``meta`` over them.

    Called in the task that asked for the commit, before any hop to another
    thread or task, since the fields are task-local.
    """
    fields = current() or _late_fields(store, paths)
    if not fields:
        return None if meta is None else dict(meta)
    return {**fields, **(meta or {})}
