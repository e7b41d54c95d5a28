"""What a memory item is on disk, and how items are ranked: the codec of ``memrev.autogen``.

An item file holds one ``MemoryContent`` as JSON (``encode_item`` /
``decode_item``), exactly as it was added: content, mime type (and whether it
was a ``MemoryMimeType``), metadata. ``bm25_scores`` ranks items for
``query(k=...)``. Also here: the checks the named and the tiered memory share
(a memory's name, its room for the longest item path, a cancelled token, a
config's location). Every public name is re-exported by ``memrev.autogen``.
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
from dataclasses import dataclass
from typing import Any

from autogen_core import CancellationToken, Image
from autogen_core.memory import MemoryContent, MemoryMimeType

from .. import errors, provenance
from ..core.paths import check_room, normalize
from .items import ITEMS_DIR, MAX_ID, item_name

ITEM_FORMAT = 1
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


# ------------------------------------------------------------------ checks the memories share


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"memory name must be str, not {type(name).__name__}")
    if not name or "/" in name or name in (".", ".."):
        raise errors.InvalidPath(f"memory name must be one non-empty path segment without '/': {name!r}")
    normalize(name)  # control characters, lone surrogates, more than MAX_PATH_BYTES
    return name


def check_memory_room(folder: str, name: str, below: str = "") -> None:
    """The memory's longest path (``<folder>/[<below>/]items/<12 digits>.json``) must be one memrev takes."""
    check_room(folder, f"{below}{ITEMS_DIR}/{item_name(MAX_ID)}", f"memory name {name[:40]!r}")


def absolute_location(location: str) -> str:
    """Folder and ``sqlite://`` locations made absolute, so a dumped config
    reopens the same store from any working directory; URLs kept as given."""
    if "://" not in location:
        return os.path.abspath(location)
    if location.startswith("sqlite://"):
        return "sqlite://" + os.path.abspath(location[len("sqlite://") :])
    return location


def check_token(token: CancellationToken | None) -> None:
    if token is not None and token.is_cancelled():
        raise asyncio.CancelledError("memory operation cancelled")


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


def searchable_text(content: Any) -> str:
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
