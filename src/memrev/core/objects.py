"""Immutable, content-addressed objects: blobs, trees and commits.

Every object is named by a 20-byte BLAKE2b digest of a type tag and its
canonical bytes, so an object can never change under its name and ``fsck``
can verify any object on its own.

Blobs name a *representation* of a file's content, not the content alone
(Mercurial's node ids work the same way): ``full`` holds the bytes,
``delta`` holds copy/insert operations against a base blob, and ``append``
holds the bytes added to a base blob. That is what makes an append of k bytes
cost O(k) time to hash and store; the price is that two blobs with equal
content may have different ids, so history code compares content, not ids,
before it reports a change.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import InvalidContent

ID_BYTES = 20

# The largest file content memrev stores or accepts from outside (a bundle).
# Every decompression and delta expansion is bounded by the size an object
# declares, and no object may declare more than this: a small hostile input
# cannot make memrev allocate gigabytes. Agent memory files are kilobytes to
# megabytes; a quarter gigabyte leaves room for logs without inviting bombs.
MAX_BLOB_SIZE = 256 << 20

# The largest commit metadata a new commit may carry, in bytes of UTF-8 (meta:
# its JSON as stored). Every backend would take more, but a bundle refuses a
# commit record over 16 MiB (``memrev.maintenance.bundles``), so a commit made here must
# stay under that to export and import again. An author is a name; a message
# a few lines; meta a few fields. Commits already stored are never refused.
MAX_AUTHOR_BYTES = 1024
MAX_MESSAGE_BYTES = 1 << 20
MAX_META_BYTES = 4 << 20

FULL, DELTA, APPEND = "F", "D", "A"


# One hasher per type tag, already fed the tag: copying it is half the cost of a new
# one (a path's log checks thousands of commits, history thousands of trees).
_TAGGED: dict[bytes, Any] = {}


def digest(tag: bytes, *parts: bytes) -> bytes:
    tagged = _TAGGED.get(tag)
    if tagged is None:
        tagged = _TAGGED.setdefault(tag, hashlib.blake2b(tag, digest_size=ID_BYTES))
    h = tagged.copy()
    for part in parts:
        h.update(part)
    return h.digest()


def blob_id(kind: str, payload: bytes, base: bytes | None = None) -> bytes:
    """``payload`` is the content (full), the encoded ops (delta) or the suffix (append)."""
    if kind == FULL:
        return digest(b"blob F\0", payload)
    assert base is not None
    return digest(b"blob " + kind.encode() + b"\0", base, payload)


# ---------------------------------------------------------------- varints


def put_varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def get_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode one varint; ``ValueError`` when it runs past the end or is longer than 64 bits."""
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or oversized varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


# ---------------------------------------------------------------- trees


@dataclass(frozen=True, slots=True)
class Entry:
    """One name in a directory: a file (``kind == "f"``) or a subdirectory (``"d"``).

    A name may be a file and a directory at once (``/a`` and ``/a/b``), as in
    ag2's stores, so entries are keyed by ``(name, kind)``.
    """

    kind: str
    oid: bytes
    size: int = 0


def encode_leaf(entries: dict[tuple[str, str], Entry]) -> bytes:
    out = bytearray(b"T")
    for (name, kind) in sorted(entries):
        e = entries[(name, kind)]
        raw = name.encode("utf-8")
        put_varint(out, len(raw))
        out += raw
        out += kind.encode()
        out += e.oid
        put_varint(out, e.size)
    return bytes(out)


def encode_split(level: int, buckets: dict[int, bytes]) -> bytes:
    out = bytearray(b"H")
    put_varint(out, level)
    for b in sorted(buckets):
        out.append(b)
        out += buckets[b]
    return bytes(out)


def decode_tree(data: bytes) -> tuple[str, Any]:
    """``("T", {(name, kind): Entry})`` or ``("H", (level, {bucket: id}))``.

    Malformed bytes (truncated, bad UTF-8) raise ``ValueError``; whether the
    tree is also canonical and well-named is :func:`check_tree`'s question.
    """
    if data[:1] == b"T":
        return "T", _decode_leaf(data)[0]
    if data[:1] == b"H":
        return "H", _decode_split(data)
    raise ValueError("not a tree object")


def _decode_leaf(data: bytes) -> tuple[dict[tuple[str, str], Entry], bool]:
    """A leaf's entries, and whether ``encode_leaf`` of them gives ``data`` back
    (given kinds ``f``/``d``, which :func:`check_tree` checks apart).

    Canonical form is decided while decoding instead of by re-encoding (fsck
    checks every tree; the re-encode was a third of its tree time): the bytes
    are consumed exactly, so ``encode_leaf`` would write the same bytes iff
    the keys come strictly increasing (its sort order, no duplicates), every
    varint is minimal (a multi-byte varint does not end in a zero byte) and
    each name re-encodes to its bytes (always: strict UTF-8 decoding is
    one-to-one, it refuses overlong forms and surrogates).
    """
    entries: dict[tuple[str, str], Entry] = {}
    canonical = True
    last: tuple[str, str] | None = None
    end = len(data)
    pos = 1
    try:
        while pos < end:
            n = data[pos]
            if n < 0x80:  # names are short: one byte, no call
                pos += 1
            else:
                n, pos = get_varint(data, pos)
                canonical = canonical and data[pos - 1] != 0
            name = data[pos : pos + n].decode("utf-8")
            pos += n
            key = (name, chr(data[pos]))
            oid = data[pos + 1 : pos + 1 + ID_BYTES]
            if len(oid) != ID_BYTES:
                raise ValueError("malformed tree object: truncated id")
            pos += 1 + ID_BYTES
            size = data[pos]
            if size < 0x80:
                pos += 1
            else:
                size, pos = get_varint(data, pos)
                canonical = canonical and data[pos - 1] != 0
            if last is not None and key <= last:
                canonical = False
            last = key
            entries[key] = Entry(key[1], oid, size)
    except (IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed tree object: {e}") from None
    return entries, canonical


def leaf_get(data: bytes, name: str, kind: str) -> Entry | None:
    """Entry ``(name, kind)`` of a leaf's bytes, found without decoding the others
    (``history`` looks one name up in thousands of nodes). Names are compared as
    UTF-8 bytes, which strict decoding makes the same as comparing the names;
    bytes that run short raise ``ValueError``. Whether the rest of the leaf is
    well formed is ``decode_tree``'s and fsck's question."""
    want, tag = name.encode("utf-8"), ord(kind)
    end = len(data)
    pos = 1
    try:
        while pos < end:
            n = data[pos]
            if n < 0x80:
                pos += 1
            else:
                n, pos = get_varint(data, pos)
            at, pos = pos, pos + n
            this = data[pos]
            oid = data[pos + 1 : pos + 1 + ID_BYTES]
            if len(oid) != ID_BYTES:
                raise ValueError("malformed tree object: truncated id")
            pos += 1 + ID_BYTES
            size = data[pos]
            if size < 0x80:
                pos += 1
            else:
                size, pos = get_varint(data, pos)
            if this == tag and data[at : at + n] == want:
                return Entry(kind, oid, size)
    except IndexError as e:
        raise ValueError(f"malformed tree object: {e}") from None
    return None


def _decode_split(data: bytes) -> tuple[int, dict[int, bytes]]:
    mv = memoryview(data)
    try:
        level, pos = get_varint(mv, 1)
        buckets: dict[int, bytes] = {}
        while pos < len(data):
            buckets[data[pos]] = _exact_id(mv, pos + 1)
            pos += 1 + ID_BYTES
    except IndexError as e:
        raise ValueError(f"malformed tree object: {e}") from None
    return level, buckets


def _exact_id(mv: memoryview, pos: int) -> bytes:
    oid = bytes(mv[pos : pos + ID_BYTES])
    if len(oid) != ID_BYTES:
        raise ValueError("malformed tree object: truncated id")
    return oid


def tree_children(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """The ids a tree names: ``(subtrees, blobs)``, each in stored order.

    gc's walk needs only the ids: skipping names and sizes instead of
    decoding them into entries halves the time per tree (a third of gc's
    time at 100,000 commits). Malformed bytes raise ``ValueError``, as in
    :func:`decode_tree`; names are not checked (gc does not read them).
    """
    subtrees: list[bytes] = []
    blobs: list[bytes] = []
    end = len(data)
    try:
        if data[:1] == b"H":
            pos = get_varint(data, 1)[1]
            while pos < end:
                subtrees.append(data[pos + 1 : pos + 1 + ID_BYTES])
                pos += 1 + ID_BYTES
            last = subtrees[-1:]
        elif data[:1] == b"T":
            pos = 1
            last = []
            while pos < end:
                n = data[pos]
                pos = pos + 1 + n if n < 0x80 else sum(get_varint(data, pos))
                last = subtrees if data[pos] == 0x64 else blobs  # kind "d": a directory
                last.append(data[pos + 1 : pos + 1 + ID_BYTES])
                pos += 1 + ID_BYTES
                pos = pos + 1 if data[pos] < 0x80 else get_varint(data, pos)[1]
            last = last[-1:]
        else:
            raise ValueError("not a tree object")
    except IndexError as e:
        raise ValueError(f"malformed tree object: {e}") from None
    if last and len(last[0]) != ID_BYTES:  # only the last id can end early without an IndexError
        raise ValueError("malformed tree object: truncated id")
    return subtrees, blobs


def check_tree(data: bytes, check_name: Any) -> tuple[str, Any]:
    """Decode a tree from outside and refuse anything ``encode_leaf``/``encode_split``
    would not have written: the bytes must be the canonical encoding of what
    they decode to (sorted, no duplicates, minimal varints), kinds ``f``/``d``,
    directories of size 0, buckets below ``FANOUT``, names accepted by
    ``check_name`` (which raises ``ValueError``). Returns the decoded tree.
    """
    if data[:1] == b"T":
        body, canonical = _decode_leaf(data)
        for (name, k), entry in body.items():
            if k not in ("f", "d"):
                raise ValueError(f"tree entry {name!r} has unknown kind {k!r}")
            if k == "d" and entry.size:
                raise ValueError(f"directory entry {name!r} records a size")
            check_name(name)
        if not canonical:
            raise ValueError("tree object is not in canonical form (unsorted, duplicate or padded entries)")
        return "T", body
    kind, split = decode_tree(data)
    level, buckets = split
    if not buckets or any(b >= SPLIT_FANOUT for b in buckets) or level >= MAX_SPLIT_LEVEL:
        raise ValueError("split tree node has no buckets, a bucket out of range or a level too deep")
    if encode_split(level, buckets) != data:  # split nodes are few: the re-encode is cheap enough
        raise ValueError("tree object is not in canonical form (unsorted, duplicate or padded entries)")
    return kind, split


# Shape limits of hash-split directories (see ``trees``): buckets per node and
# levels a split may go down (a legitimate split stops by level 16).
SPLIT_FANOUT = 16
MAX_SPLIT_LEVEL = 32


def tree_id(data: bytes) -> bytes:
    return digest(b"tree\0", data)


EMPTY_TREE = encode_leaf({})
EMPTY_TREE_ID = tree_id(EMPTY_TREE)


# ---------------------------------------------------------------- commits


@dataclass(frozen=True, slots=True)
class CommitData:
    tree: bytes
    parents: tuple[bytes, ...]
    time_us: int
    author: str
    message: str
    meta: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        """Compact binary: the store keeps one of these per mutation, so bytes count."""
        out = bytearray(b"C")
        out += self.tree
        out.append(len(self.parents))
        for p in self.parents:
            out += p
        put_varint(out, self.time_us)
        for text in (self.author, self.message):
            raw = text.encode("utf-8")
            put_varint(out, len(raw))
            out += raw
        if self.meta:
            out += meta_json(self.meta)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> CommitData:
        """Malformed bytes raise ``ValueError`` (never ``IndexError`` or a JSON error)."""
        if data[:1] != b"C":
            raise ValueError("not a commit object")
        try:
            return cls._decode_body(data)
        except (IndexError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError already
            raise ValueError(f"malformed commit object: {e}") from None

    @classmethod
    def _decode_body(cls, data: bytes) -> CommitData:
        mv = memoryview(data)
        tree = bytes(mv[1 : 1 + ID_BYTES])
        pos = 1 + ID_BYTES
        n = data[pos]
        pos += 1
        parents = tuple(bytes(mv[pos + i * ID_BYTES : pos + (i + 1) * ID_BYTES]) for i in range(n))
        pos += n * ID_BYTES
        if pos > len(data):
            raise ValueError("malformed commit object: truncated parents")
        time_us, pos = get_varint(mv, pos)
        texts = []
        for _ in range(2):
            length, pos = get_varint(mv, pos)
            if pos + length > len(data):
                raise ValueError("malformed commit object: truncated text")
            texts.append(bytes(mv[pos : pos + length]).decode("utf-8"))
            pos += length
        meta = json.loads(bytes(mv[pos:])) if pos < len(data) else {}
        if not isinstance(meta, dict):
            raise ValueError("malformed commit object: meta is not a JSON object")
        return cls(tree=tree, parents=parents, time_us=time_us, author=texts[0], message=texts[1], meta=meta)

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.time_us / 1e6, tz=timezone.utc)


def commit_fields(data: bytes) -> tuple[tuple[str, ...], int, str, str, dict[str, Any]]:
    """``(parent ids in hex, time_us, author, message, meta)`` of a commit record: what
    the history API shows, decoded in one pass without building a ``CommitData``
    (a path's log shows thousands). Exactly ``CommitData.decode``'s answer; a
    record that pass cannot read goes to ``CommitData.decode``, which raises its
    ``ValueError``."""
    try:
        if data[0] != 0x43:  # b"C"
            raise ValueError("not a commit object")
        end = len(data)
        pos = 22 + ID_BYTES * data[21]
        if pos > end:
            raise ValueError("truncated parents")
        parents = tuple(data[at : at + ID_BYTES].hex() for at in range(22, pos, ID_BYTES))
        time_us = shift = 0
        while True:  # get_varint, inline: the time takes 8 bytes
            b = data[pos]
            pos += 1
            time_us |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise ValueError("oversized varint")
        texts = []
        for _ in range(2):
            n = data[pos]
            if n < 0x80:
                pos += 1
            else:
                n, pos = get_varint(data, pos)
            if pos + n > end:
                raise ValueError("truncated text")
            texts.append(data[pos : pos + n].decode("utf-8"))
            pos += n
        meta = json.loads(data[pos:]) if pos < end else {}
        if not isinstance(meta, dict):
            raise ValueError("meta is not a JSON object")
    except (ValueError, IndexError, UnicodeDecodeError):
        c = CommitData.decode(data)  # raises its own ValueError for what it cannot read
        return tuple(p.hex() for p in c.parents), c.time_us, c.author, c.message, c.meta
    return parents, time_us, texts[0], texts[1], meta


_COMMIT_TAGGED = hashlib.blake2b(b"commit\0", digest_size=ID_BYTES)


def commit_id(data: bytes) -> bytes:
    """``digest(b"commit\\0", data)``, without its lookups: a path's log checks thousands."""
    h = _COMMIT_TAGGED.copy()
    h.update(data)
    return h.digest()


def check_commit(data: bytes) -> CommitData:
    """Decode a commit from outside and refuse what ``Repository.commit`` would
    not have written: non-canonical bytes, more than two or repeated parents,
    and metadata that :func:`check_commit_text` refuses (``ValueError``)."""
    c = CommitData.decode(data)
    if c.encode() != data:
        raise ValueError("commit object is not in canonical form")
    if len(c.parents) > 2 or len(set(c.parents)) != len(c.parents):
        raise ValueError("commit has more than two parents or a repeated parent")
    try:  # every log shows the time as a datetime: one that cannot be shown is refused here
        c.time  # noqa: B018 - the conversion is the check
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"commit time {c.time_us} µs is out of the range a date can hold") from None
    check_commit_text(c.author, c.message, c.meta)
    return c


# C0 controls other than tab and newline, DEL, C1 controls, lone surrogates:
# they rewrite a terminal that shows a log. A message may span lines; an
# author is one line.
_MESSAGE_FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_AUTHOR_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_commit_text(author: object, message: object, meta: object) -> None:
    """The one check of commit metadata, for commits made here and commits
    imported from a bundle alike: ``str`` author and message without control
    characters (a message may hold newlines and tabs), ``meta`` a JSON object
    with ``str`` keys and no lone surrogate. ``None`` skips a field. Raises ``InvalidContent``."""
    _checked_meta_bytes(author, message, meta)


def _checked_meta_bytes(author: object, message: object, meta: object) -> bytes:
    """:func:`check_commit_text`; returns ``meta`` as a commit record stores it (``b""`` for none)."""
    for what, text, forbidden in (("author", author, _AUTHOR_FORBIDDEN), ("message", message, _MESSAGE_FORBIDDEN)):
        if text is None:
            continue
        if not isinstance(text, str):
            raise InvalidContent(f"{what} must be str, not {type(text).__name__}")
        bad = forbidden.search(text)
        if bad:
            kind = "a lone surrogate" if "\ud800" <= bad.group() <= "\udfff" else "a control character"
            raise InvalidContent(f"{what} contains {kind} {bad.group()!r}")
    if meta is None:
        return b""
    if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
        raise InvalidContent("meta must be a dict with str keys")
    try:
        text = json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidContent(f"meta must be JSON-serializable: {e}") from None
    try:  # CommitData.encode writes it as UTF-8: a lone surrogate in a key or a value cannot be
        return text.encode("utf-8") if meta else b""
    except UnicodeEncodeError as e:
        raise InvalidContent(f"meta holds a lone surrogate {e.object[e.start:e.end]!r}; it is not storable text") from None


def meta_json(meta: dict[str, Any]) -> bytes:
    """``meta`` as a commit record stores it (``CommitData.encode``)."""
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def check_new_commit_text(author: object, message: object, meta: object) -> None:
    """:func:`check_commit_text`, and the size limits of a commit made here
    (``MAX_AUTHOR_BYTES``, ``MAX_MESSAGE_BYTES``, ``MAX_META_BYTES``); ``None`` skips a field."""
    raw_meta = _checked_meta_bytes(author, message, meta)
    for what, text, limit in (("author", author, MAX_AUTHOR_BYTES), ("message", message, MAX_MESSAGE_BYTES)):
        if isinstance(text, str) and len(text) > limit // 4 and len(text.encode("utf-8")) > limit:
            raise InvalidContent(f"{what} is {len(text.encode('utf-8'))} bytes of UTF-8; at most {limit} are allowed")
    if len(raw_meta) > MAX_META_BYTES:
        raise InvalidContent(f"meta is {len(raw_meta)} bytes of JSON; at most {MAX_META_BYTES} are allowed")
