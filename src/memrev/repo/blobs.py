"""Blob storage: how each version of a file is represented and read back.

A version is stored whole (``FULL``), as a delta against the version before
it (``DELTA``), or, when it only grows, as the bytes it adds to its base
(``APPEND``, one piece of an append run). Every representation's payload is
packed (zstd, or raw when that is smaller). Reading rebuilds a version from at
most ``MAX_DEPTH`` representations, iteratively, checking every hash on the
way, so damage is an ``IntegrityError`` and never a crash or a huge allocation.

``BlobStore`` is the one owner of this logic: the repository stores versions
through it, and bundles, fsck and gc read representations through it.
"""

from __future__ import annotations

from typing import NamedTuple

import zstandard

from .. import errors
from ..backends.base import Backend, BlobRow
from ..core import delta
from ..core.objects import APPEND, DELTA, FULL, MAX_BLOB_SIZE, blob_id
from .cache import LRU, Budget

# A blob is rebuilt from at most this many stored representations; past it
# the next version is stored whole. Bounds the cost of reading any revision.
MAX_DEPTH = 32
# Of the versions a read rebuilds on the way up its chain, the cache keeps the one asked
# for, the one below it (what a walk of history newest first asks for next) and those at
# a depth divisible by CHECKPOINT, which the other versions of the chain share: keeping
# every one (up to 32 per read) filled the content cache with versions nobody asked for,
# and a warm read of 200 old revisions missed it (13x slower than with all cached in
# 16 MB) where, so, they fit in 4 MB.
CHECKPOINT = 8
# Below this size a delta is not worth its bookkeeping.
MIN_DELTA_SIZE = 128
_MAX_PAYLOAD = 1 << 32  # no representation is larger; a frame saying so is damaged


class Version(NamedTuple):
    """One stored version of a file: its blob and its size in bytes."""

    blob: bytes
    size: int


class Packer:
    """zstd per representation; tiny payloads stay raw (a frame costs more than it saves)."""

    def __init__(self) -> None:
        self._c = zstandard.ZstdCompressor(level=3)
        self._d = zstandard.ZstdDecompressor()

    def pack(self, raw: bytes) -> bytes:
        if len(raw) >= 96:
            z = self._c.compress(raw)
            if len(z) < len(raw):
                return b"z" + z
        return b"r" + raw

    def unpack(self, data: bytes, limit: int = _MAX_PAYLOAD) -> bytes:
        """The raw payload, at most ``limit`` bytes (what its blob row declares);
        damage is an ``IntegrityError``, never a zstd error or a huge allocation."""
        if data[:1] == b"r":
            return data[1:]
        if data[:1] == b"z":
            try:
                size = zstandard.frame_content_size(data[1:])
                if size < 0 or size > limit:
                    raise errors.IntegrityError("payload frame declares an impossible size")
                return self._d.decompress(data[1:], max_output_size=size)
            except zstandard.ZstdError as e:
                raise errors.IntegrityError(f"payload does not decompress: {e}") from None
        raise errors.IntegrityError("unknown payload encoding")


class BlobStore:
    """Versions of files over one backend, with caches of rebuilt content and row metadata."""

    def __init__(
        self, backend: Backend, *, cache_bytes: int = 4 << 20, row_bytes: int = 1 << 20, shared: Budget | None = None
    ) -> None:
        self.backend = backend
        self.packer = Packer()
        # Weighed by bytes (a bytes object: 33 B + its length; a row: ~220 B with its
        # ids), not counted: 100,000 rows were ~30 MB. ``shared``: the repository's budget.
        self._content = LRU(cache_bytes, weigh=_content_bytes, shared=shared)
        self._rows = LRU(row_bytes, weigh=_row_bytes, shared=shared)

    def forget(self) -> None:
        """Drop the caches (after gc removed objects they may hold)."""
        self._content.clear()
        self._rows.clear()

    def rolled_back(self) -> None:
        """A write transaction (or savepoint) was undone: the rows it stored are gone,
        and ``store_append`` must not take one of them for stored."""
        self._rows.clear()

    def row(self, oid: bytes) -> BlobRow:
        row = self._rows.get(oid)
        if row is None:
            row = self.backend.get_blob(oid)
            if row is None:
                raise errors.IntegrityError(f"blob {oid.hex()} is missing")
            self._remember(row)
        return row

    def _remember(self, row: BlobRow) -> None:
        # Representation metadata without the payload: what appends and deltas
        # need to know about their base (kind, run, size, depth).
        self._rows.put(row.id, BlobRow(row.id, row.kind, row.base, row.lineage, row.start, row.size, row.depth, b""))

    def put(self, row: BlobRow) -> None:
        self.backend.put_blob(row)
        self._remember(row)

    def payload(self, row: BlobRow) -> bytes:
        if row.kind not in (FULL, DELTA, APPEND) or (row.kind == FULL) != (row.base is None):
            raise errors.IntegrityError(f"blob {row.id.hex()} has an invalid kind or base")
        try:
            raw = self.packer.unpack(row.data, _payload_limit(row))
        except errors.IntegrityError as e:
            raise errors.IntegrityError(f"blob {row.id.hex()}: {e}") from None
        if blob_id(row.kind, raw, row.base) != row.id:
            raise errors.IntegrityError(f"blob {row.id.hex()} does not match its hash")
        return raw

    def content(self, oid: bytes) -> bytes:
        """The bytes of a blob, rebuilt from at most ``MAX_DEPTH`` representations.

        Iterative: the chain of bases is collected first (down to a full or
        cached version; a run of deltas in one query, ``backend.blob_chain``),
        then applied upwards, so a damaged or hostile chain is an
        ``IntegrityError``, never a ``RecursionError``.
        """
        data: bytes | None = self._content.get(oid)
        if data is not None:
            return data
        chain: list[BlobRow] = []
        below = oid
        fetched: list[BlobRow] = []  # rows of the delta chain below, read in one query
        while data is None:
            if len(chain) > MAX_DEPTH:
                raise errors.IntegrityError(f"blob {oid.hex()} is rebuilt from more than {MAX_DEPTH} bases")
            if not fetched:
                fetched = self.backend.blob_chain(below, MAX_DEPTH + 1 - len(chain))[::-1]
            row = fetched.pop() if fetched else None
            if row is None or row.id != below:
                raise errors.IntegrityError(f"blob {below.hex()} is missing")
            if row.size > MAX_BLOB_SIZE:  # refused before anything is expanded
                raise errors.IntegrityError(f"blob {below.hex()} declares {row.size} bytes, over the limit of {MAX_BLOB_SIZE}")
            chain.append(row)
            if row.kind == FULL:
                break
            under = row.base if row.kind == DELTA else self.row(_lineage(row)).base
            if under is None:
                raise errors.IntegrityError(f"blob {row.id.hex()} has an invalid kind or base")
            below = under
            data = self._content.get(below)
        for i in range(len(chain) - 1, -1, -1):  # chain[0] is the version asked for, chain[1] its base
            row = chain[i]
            data = self._rebuild(row, data, keep=i < 2 or row.depth % CHECKPOINT == 0)
        assert data is not None  # the loop above ends on a full or cached version
        return data

    def _rebuild(self, row: BlobRow, below: bytes | None, keep: bool = True) -> bytes:
        """One version from the content of what it is built on (``None`` for a full blob);
        cached when ``keep``."""
        if row.kind == FULL:
            data = self.payload(row)
        elif below is None:  # a delta or append with nothing under it: the chain is damaged
            raise errors.IntegrityError(f"blob {row.id.hex()} has an invalid kind or base")
        elif row.kind == DELTA:
            try:
                data = delta.apply(below, self.payload(row), row.size)
            except ValueError as e:
                raise errors.IntegrityError(f"blob {row.id.hex()}: {e}") from None
        else:
            first = self.row(_lineage(row))
            pieces = self.backend.lineage_pieces(_lineage(row), first.start, row.size)
            data = below + b"".join(self._chain(first.base, pieces, row.id))
        if len(data) != row.size:
            raise errors.IntegrityError(f"blob {row.id.hex()} has the wrong size")
        if keep:
            self._content.put(row.id, data)
        return data

    def content_on(self, row: BlobRow, base_content: bytes | None) -> bytes:
        """The content of ``row`` from the content of its base (``row.base``; ``None`` for a
        full blob), cached: a walk of every version in base-first order (a purge, its
        verification) rebuilds each in time linear in its size, where ``content`` of each
        piece of an append run would read the run from its start."""
        if row.kind == APPEND and base_content is not None:
            if row.size > MAX_BLOB_SIZE:
                raise errors.IntegrityError(f"blob {row.id.hex()} declares {row.size} bytes, over the limit of {MAX_BLOB_SIZE}")
            data = base_content + self.payload(row)
            if len(data) != row.size:
                raise errors.IntegrityError(f"blob {row.id.hex()} has the wrong size")
            self._content.put(row.id, data)
            return data
        if row.kind == DELTA and base_content is not None:
            return self._rebuild(row, base_content)
        return self.content(row.id)

    def cached(self, oid: bytes) -> bytes | None:
        """The content of a blob if it is in the cache (nothing is read)."""
        return self._content.get(oid)

    def content_range(self, oid: bytes, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a blob; for an append run, reads only the pieces needed.

        Walks down the runs below (iteratively, at most ``MAX_DEPTH`` of them),
        collecting the part of the range each run holds, top run first.
        """
        row = self.row(oid)
        end = min(end, row.size)
        parts: list[bytes] = []
        for _ in range(MAX_DEPTH + 1):
            if start >= end:
                return b"".join(reversed(parts))
            if row.kind != APPEND or self._content.get(row.id) is not None:
                parts.append(self.content(row.id)[start:end])
                return b"".join(reversed(parts))
            first = self.row(_lineage(row))
            lo = max(start, first.start)
            if lo < end:
                parts.append(self._run_range(row, lo, end))
                end = lo
            if first.base is None:
                raise errors.IntegrityError(f"blob {first.id.hex()} has an invalid kind or base")
            row = self.row(first.base)
        raise errors.IntegrityError(f"blob {oid.hex()} is rebuilt from more than {MAX_DEPTH} bases")

    def _run_range(self, row: BlobRow, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` held by the pieces of ``row``'s append run."""
        pieces = self.backend.lineage_pieces(_lineage(row), start, end)
        if not pieces or pieces[-1].size < end:
            raise errors.IntegrityError(f"blob {row.id.hex()}: its append run ends early")
        parts = []
        for piece, raw in zip(pieces, self._chain(pieces[0].base, pieces, None), strict=True):
            lo, hi = max(start, piece.start), min(end, piece.start + len(raw))
            parts.append(raw[lo - piece.start : hi - piece.start])
        return b"".join(parts)

    def _chain(self, base: bytes | None, pieces: list[BlobRow], last: bytes | None) -> list[bytes]:
        """Payloads of consecutive append pieces, checked as a hash chain.

        Each piece's id covers its base (the piece before it), so a piece out
        of place — a damaged ``start`` column, a foreign row — breaks the
        chain and is reported instead of being read as content.
        """
        out = []
        expect, at = base, pieces[0].start if pieces else 0
        for piece in pieces:
            raw = self.payload(piece)
            if piece.base != expect or piece.start != at or piece.size != at + len(raw):
                raise errors.IntegrityError(f"blob {piece.id.hex()} is out of place in its append run")
            out.append(raw)
            expect, at = piece.id, piece.size
        if last is not None and expect != last:
            raise errors.IntegrityError(f"blob {last.hex()}: its append run does not lead to it")
        return out

    def store_full(self, data: bytes) -> Version:
        check_blob_size(len(data))
        oid = blob_id(FULL, data)
        self.put(BlobRow(oid, FULL, None, None, 0, len(data), 0, self.packer.pack(data)))
        self._content.put(oid, data)
        return Version(oid, len(data))

    def store_append(self, base_oid: bytes, suffix: bytes) -> Version:
        base = self.row(base_oid)
        check_blob_size(base.size + len(suffix))
        oid = blob_id(APPEND, suffix, base_oid)
        # Asked of the store inside this transaction, never of the row cache: another
        # handle's gc may have collected a piece this one read or wrote. One question
        # (one round trip on PostgreSQL): is the piece there, is the run's tip taken.
        same, taken = self.backend.append_probe(oid, _lineage(base) if base.kind == APPEND else None, base.size)
        if same is not None:
            # Another branch appended the same bytes to the same base: that piece is this
            # one (ids name base and bytes), with its run and position. Recording it again
            # under a new run would leave the run this branch extends next without it.
            return Version(oid, same.size)
        if base.kind == APPEND and not taken:
            lineage, depth = base.lineage, base.depth  # base is the tip of its run: extend it
        else:
            lineage, depth = None, base.depth + 1  # start a new run on top of base
        if depth > MAX_DEPTH:
            return self.store_full(self.content(base_oid) + suffix)
        lineage = lineage or oid
        self.put(
            BlobRow(oid, APPEND, base_oid, lineage, base.size, base.size + len(suffix), depth, self.packer.pack(suffix))
        )
        return Version(oid, base.size + len(suffix))

    def store_version(self, old: Version | None, data: bytes) -> Version | None:
        """Store ``data`` as the next version after ``old``; ``None`` if unchanged."""
        check_blob_size(len(data))
        if old is None or old.blob is None:
            return self.store_full(data)
        previous = self.content(old.blob)
        if data == previous:
            return None
        if previous and data.startswith(previous):
            row = self.store_append(old.blob, data[len(previous) :])
            self._content.put(row.blob, data)  # the caller holds it anyway; the next rewrite starts here
            return row
        base = self.row(old.blob)
        if base.depth < MAX_DEPTH and len(data) >= MIN_DELTA_SIZE:
            ops = delta.encode(delta.compute(previous, data))
            if len(ops) < len(data) // 2:
                oid = blob_id(DELTA, ops, old.blob)
                self.put(
                    BlobRow(oid, DELTA, old.blob, None, 0, len(data), base.depth + 1, self.packer.pack(ops))
                )
                self._content.put(oid, data)
                return Version(oid, len(data))
        return self.store_full(data)


def _content_bytes(data: bytes) -> int:
    return 33 + len(data)


def _row_bytes(row: BlobRow) -> int:
    return 220


def check_blob_size(size: int) -> None:
    if size > MAX_BLOB_SIZE:
        raise errors.InvalidContent(f"content of {size} bytes is over the limit of {MAX_BLOB_SIZE} bytes per file")


def _payload_limit(row: BlobRow) -> int:
    """The most bytes a representation's payload can hold, from what its row declares:
    a full blob its size, an append piece the bytes it adds, a delta (stored only
    when smaller than half its version) its version's size plus a little."""
    if row.kind == FULL:
        return row.size
    if row.kind == APPEND:
        return max(0, row.size - row.start)
    return row.size + 64


def _lineage(row: BlobRow) -> bytes:
    """The run an append blob belongs to; a row without one is damaged, not a crash."""
    if row.lineage is None:
        raise errors.IntegrityError(f"blob {row.id.hex()} is an append with no run")
    return row.lineage
