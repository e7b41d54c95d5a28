"""The purge receipt: look for purged strings everywhere the store keeps bytes.

Two scans, both bounded in memory:

- **objects**: every blob rebuilt (bases first, so a version costs its own
  size), every commit's author, message and ``meta``, every tree node's bytes
  (file names), every ref name and derived-index path;
- **files**: every byte of every file the store owns (SQLite's database,
  ``-wal``, ``-shm``; a working tree's ``.memrev/`` and its plain files), read
  in chunks, for the string as UTF-8 and inside every zstd frame found there
  (decompressed, up to the size the frame declares, at most ``MAX_FRAME``).
  A compressed payload larger than a database page is split over overflow
  pages in the file, so only frames within a page decompress from the raw
  bytes; a live one is covered by the object scan, a dead one by
  ``VACUUM`` having rebuilt the file without it.

A paths-only purge has no string to look for: its check is that no commit's
change rows name a matching path and that no ref's tree does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Protocol

import zstandard

from .. import errors
from ..core.objects import CommitData
from ..repo.repository import Repository


class Predicate(Protocol):
    """What the scan looks for (``memrev.maintenance.purge.Predicate``)."""

    patterns: tuple[str, ...]
    needles: tuple[bytes, ...]

    def path(self, path: str) -> bool: ...

CHUNK = 4 << 20
MAX_FRAME = 64 << 20
_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_FOUND = 100  # places reported; the verdict counts them all


def scan(repo: Repository, pred: Predicate, *, files: Iterable[str] = ()) -> list[str]:
    """Where the purged content still is (``[]``: nowhere). Strings: the object and file
    scans; paths: the change index and the refs' trees."""
    found: list[str] = []
    if pred.patterns:
        found += _paths_left(repo, pred)
    if pred.needles:
        found += scan_objects(repo, pred.needles)
        for path in owned_files(repo.backend.storage_files(), files):
            found += scan_file(path, pred.needles)
    return found[:MAX_FOUND] + ([f"... and {len(found) - MAX_FOUND} more"] if len(found) > MAX_FOUND else [])


def owned_files(storage: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """The files to read byte by byte: the backend's, those given, and, for a store kept in
    a working tree's ``.memrev/``, every regular file of that folder (``.memrev/`` itself
    and the plain files, which hold the head's content whether or not this handle has the
    working tree on). Links are not followed."""
    out = dict.fromkeys([*storage, *extra])
    for f in list(out):
        parent = os.path.dirname(os.path.abspath(f))
        if os.path.basename(parent) == ".memrev":
            for top, dirs, names in os.walk(os.path.dirname(parent)):
                dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
                for name in names:
                    p = os.path.join(top, name)
                    if not os.path.islink(p) and os.path.isfile(p):
                        out.setdefault(p)
            break
    return list(out)


def _paths_left(repo: Repository, pred: Predicate) -> list[str]:
    out = []
    for path, seq, *_links in repo.backend.iter_changes():  # rows are (path, seq, prev, prev2)
        if not path.endswith("/") and pred.path(path):
            out.append(f"change index: {path} at commit #{seq}")
            break
    return out


def scan_objects(repo: Repository, needles: Iterable[bytes]) -> list[str]:
    """Every object memrev can decode, for each needle."""
    needles = tuple(needles)
    out: list[str] = []

    def look(data: bytes, where: str) -> None:
        if any(n in data for n in needles):
            out.append(where)

    for oid, data in _blob_contents(repo):
        look(data, f"blob {oid.hex()}")
    for _seq, oid, data in repo.backend.iter_commits():
        try:
            c = CommitData.decode(data)
        except ValueError:
            look(data, f"commit {oid.hex()} (undecodable)")
            continue
        look(data, f"commit {oid.hex()}")
        look(f"{c.author}\n{c.message}\n{c.meta!r}".encode("utf-8", "surrogatepass"), f"commit {oid.hex()} (decoded)")
    for oid, data in repo.backend.iter_trees():
        look(data, f"tree {oid.hex()}")
    for name in repo.backend.list_refs(""):
        look(name.encode(), f"ref {name}")
    for path, *_rest in repo.backend.iter_changes():
        look(path.encode("utf-8", "surrogatepass"), f"change index path {path!r}")
    return out


def _blob_contents(repo: Repository) -> Iterator[tuple[bytes, bytes]]:
    """``(id, content)`` of every stored blob, each rebuilt on its base's content when that
    is still cached (bases come first where the backend stores them in order)."""
    blobs = repo.blobs
    for row in repo.backend.iter_blobs():
        base = None if row.base is None else blobs.cached(row.base)
        try:
            data = blobs.content_on(row, base) if (row.base is None or base is not None) else blobs.content(row.id)
        except errors.IntegrityError as e:
            raise errors.IntegrityError(f"cannot verify the purge: {e} (run memrev fsck)") from None
        yield row.id, data


def scan_file(path: str, needles: Iterable[bytes]) -> list[str]:
    """Places in one file (raw bytes, and inside zstd frames) that hold a needle."""
    needles = tuple(needles)
    if not needles or not os.path.isfile(path):
        return []
    keep = max(len(n) for n in needles) - 1
    out: list[str] = []
    name = os.path.basename(path)
    with open(path, "rb") as fh:
        offset = 0  # file offset of chunk[0]
        tail = b""
        while True:
            block = fh.read(CHUNK)
            if not block:
                break
            chunk = tail + block
            for n in needles:
                at = chunk.find(n)
                if at >= 0:
                    out.append(f"file {name} at byte {offset + at}")
            for at in _frames(chunk, len(tail)):
                if _frame_holds(fh, offset + at, needles):
                    out.append(f"file {name}: zstd frame at byte {offset + at}")
            tail = chunk[-keep:] if keep else b""
            offset += len(chunk) - len(tail)
    return out


def _frames(chunk: bytes, skip: int) -> Iterator[int]:
    """Offsets of zstd frame magic in ``chunk`` not already seen (before ``skip``)."""
    at = chunk.find(_MAGIC, max(0, skip - len(_MAGIC) + 1))
    while at >= 0:
        yield at
        at = chunk.find(_MAGIC, at + 1)


def _frame_holds(fh, at: int, needles: tuple[bytes, ...]) -> bool:
    """Whether the frame starting at file offset ``at`` decompresses to bytes holding a needle.
    Bounded: the frame must declare its size (memrev's do), at most ``MAX_FRAME``."""
    here = fh.tell()
    try:
        fh.seek(at)
        head = fh.read(18)
        try:
            size = zstandard.frame_content_size(head)
        except zstandard.ZstdError:
            return False
        if size < 0 or size > MAX_FRAME:
            return False
        fh.seek(at)
        raw = fh.read(size + 1024)  # a frame is never much larger than what it holds
        try:
            data = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        except zstandard.ZstdError:
            return False
        return any(n in data[:size] for n in needles)
    finally:
        fh.seek(here)
