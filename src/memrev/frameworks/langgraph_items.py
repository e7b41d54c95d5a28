"""The item files of the LangGraph store (``memrev.langgraph``) and how it reads them.

Pure functions and records, no LangGraph import: item paths (each label and key
percent-escaped, ``.`` too, the empty key a lone ``%``, so any string round-trips,
a folder name never contains ``.`` and an item file always ends in ``.json``: two
namespaces never share a file), the canonical JSON of a value, the search filters
as LangGraph's ``InMemoryStore`` evaluates them, and the records of the adapter's
view (``Stored``: one item at a commit; ``View``: what was read, valid at one commit).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote

from .. import errors
from ..core.paths import MAX_PATH_BYTES

__all__ = [
    "ROOT", "SUFFIX", "TTL_ROOT", "VECTOR_ROOT", "Stored", "View", "cosine", "encode_value", "escape",
    "folder_of", "item_path", "json_object", "matches", "namespace_matches", "namespace_of", "predicate",
    "sidecar", "split_item", "unescape",
]

ROOT = "/langgraph"
TTL_ROOT = "/langgraph-ttl"
VECTOR_ROOT = "/langgraph-vectors"
SUFFIX = ".json"


# ------------------------------------------------------------------ names


def escape(label: str) -> str:
    """A label or key as one path segment: percent-escaped UTF-8, ``.`` too; ``""`` is ``%``."""
    if label == "":
        return "%"
    return quote(label, safe="", errors="surrogatepass").replace(".", "%2E")


def unescape(name: str) -> str:
    return "" if name == "%" else unquote(name, errors="surrogatepass")


def folder_of(namespace: Sequence[str], root: str = ROOT) -> str:
    return "/".join([root, *(escape(label) for label in namespace)])


def item_path(namespace: Sequence[str], key: str, root: str = ROOT) -> str:
    """The file of ``(namespace, key)``; ``InvalidArgument`` when it would pass memrev's path limit."""
    path = f"{folder_of(namespace, root)}/{escape(key)}{SUFFIX}"
    if len(path.encode("utf-8")) > MAX_PATH_BYTES - 32:  # room for the sidecar roots
        raise errors.InvalidArgument(
            f"namespace and key escape to {len(path.encode('utf-8'))} bytes of path; at most {MAX_PATH_BYTES - 32} fit"
        )
    return path


def namespace_of(folder: str) -> tuple[str, ...]:
    rel = folder[len(ROOT) + 1 :]
    return tuple(unescape(name) for name in rel.split("/")) if rel else ()


def split_item(path: str) -> tuple[str, str]:
    folder, _, name = path.rpartition("/")
    return folder, unescape(name[: -len(SUFFIX)])


def sidecar(path: str, root: str) -> str:
    return root + path[len(ROOT) :]


def encode_value(value: object) -> str:
    """The canonical text of an item's value (``InvalidContent`` for what JSON cannot hold)."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise errors.InvalidContent(f"an item's value is a dict with str keys, not {type(value).__name__}")
    try:
        return json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise errors.InvalidContent(f"an item's value is not JSON: {e}") from None


# ------------------------------------------------------------------ filters, as InMemoryStore evaluates them


def compare(item_value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(operator_holds(item_value, op, v) for op, v in wanted.items())
        if not isinstance(item_value, dict):
            return False
        return all(compare(item_value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple))
            and len(item_value) == len(wanted)
            and all(compare(a, b) for a, b in zip(item_value, wanted))
        )
    return bool(item_value == wanted)


def operator_holds(value: Any, op: str, wanted: Any) -> bool:
    if op == "$eq":
        return bool(value == wanted)
    if op == "$ne":
        return bool(value != wanted)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        a, b = float(value), float(wanted)
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"Unsupported operator: {op}")


def matches(filter: dict[str, Any] | None, value: dict[str, Any]) -> bool:
    return not filter or all(compare(value.get(k), v) for k, v in filter.items())


def predicate(filter: dict[str, Any] | None) -> Callable[[dict[str, Any]], bool]:
    """``matches`` for one filter, with the common case (top-level keys equal to scalars)
    made a plain comparison: a search tests every item of a namespace against it."""
    if not filter:
        return lambda value: True
    pairs = list(filter.items())
    if any(isinstance(wanted, (dict, list, tuple)) for _, wanted in pairs):
        return lambda value: matches(filter, value)
    if len(pairs) == 1:
        (key, wanted), = pairs
        return lambda value: bool(value.get(key) == wanted)
    return lambda value: all(value.get(k) == w for k, w in pairs)


def namespace_matches(cond: Any, ns: tuple[str, ...]) -> bool:
    if len(ns) < len(cond.path):
        return False
    pairs = zip(ns, cond.path) if cond.match_type == "prefix" else zip(reversed(ns), reversed(cond.path))
    if cond.match_type not in ("prefix", "suffix"):
        raise ValueError(f"Unsupported match type: {cond.match_type}")
    return all(p == "*" or k == p for k, p in pairs)


def cosine(query: Sequence[float], vector: Sequence[float]) -> float:
    dot = sum(a * b for a, b in zip(query, vector))
    norms = math.sqrt(sum(a * a for a in query)) * math.sqrt(sum(b * b for b in vector))
    return dot / norms if norms else 0.0


# ------------------------------------------------------------------ the view


@dataclass
class Stored:
    """One item as of the view's commit (its value is never handed out: items get a copy)."""

    value: dict[str, Any]
    created: datetime
    updated: datetime
    expires: datetime | None = None
    ttl: float | None = None
    vectors: dict[str, list[float]] | None = None
    vector_of: str | None = None


@dataclass
class View:
    head: str | None = None
    items: dict[str, Stored | None] = field(default_factory=dict)  # by path; None: known absent
    folders: dict[str, dict[str, None]] = field(default_factory=dict)  # fully read folders: their item paths, in order
    trees: dict[str, list[str]] = field(default_factory=dict)  # a folder: the namespace folders below it (with items)
    listings: dict[str, list[str]] = field(default_factory=dict)  # a namespace folder: its item paths, as listed


def json_object(text: str | None, path: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "")
    except ValueError:
        raise errors.InvalidContent(f"{path} is not an item's JSON") from None
    if not isinstance(value, dict):
        raise errors.InvalidContent(f"{path} holds no JSON object")
    return value


