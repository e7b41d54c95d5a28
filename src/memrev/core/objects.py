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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

ID_BYTES = 20
ID_HEX = ID_BYTES * 2

FULL, DELTA, APPEND = "F", "D", "A"


def digest(tag: bytes, *parts: bytes) -> bytes:
    h = hashlib.blake2b(tag, digest_size=ID_BYTES)
    for part in parts:
        h.update(part)
    return h.digest()


def hexid(oid: bytes) -> str:
    return oid.hex()


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
    shift = result = 0
    while True:
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
    """``("T", {(name, kind): Entry})`` or ``("H", (level, {bucket: id}))``."""
    mv = memoryview(data)
    if data[:1] == b"T":
        entries: dict[tuple[str, str], Entry] = {}
        pos = 1
        while pos < len(data):
            n, pos = get_varint(mv, pos)
            name = bytes(mv[pos : pos + n]).decode("utf-8")
            pos += n
            kind = chr(data[pos])
            oid = bytes(mv[pos + 1 : pos + 1 + ID_BYTES])
            size, pos = get_varint(mv, pos + 1 + ID_BYTES)
            entries[(name, kind)] = Entry(kind, oid, size)
        return "T", entries
    if data[:1] == b"H":
        level, pos = get_varint(mv, 1)
        buckets: dict[int, bytes] = {}
        while pos < len(data):
            buckets[data[pos]] = bytes(mv[pos + 1 : pos + 1 + ID_BYTES])
            pos += 1 + ID_BYTES
        return "H", (level, buckets)
    raise ValueError("not a tree object")


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
            out += json.dumps(self.meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> CommitData:
        if data[:1] != b"C":
            raise ValueError("not a commit object")
        mv = memoryview(data)
        tree = bytes(mv[1 : 1 + ID_BYTES])
        pos = 1 + ID_BYTES
        n = data[pos]
        pos += 1
        parents = tuple(bytes(mv[pos + i * ID_BYTES : pos + (i + 1) * ID_BYTES]) for i in range(n))
        pos += n * ID_BYTES
        time_us, pos = get_varint(mv, pos)
        texts = []
        for _ in range(2):
            length, pos = get_varint(mv, pos)
            texts.append(bytes(mv[pos : pos + length]).decode("utf-8"))
            pos += length
        meta = json.loads(bytes(mv[pos:])) if pos < len(data) else {}
        return cls(tree=tree, parents=parents, time_us=time_us, author=texts[0], message=texts[1], meta=meta)

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.time_us / 1e6, tz=timezone.utc)


def commit_id(data: bytes) -> bytes:
    return digest(b"commit\0", data)
