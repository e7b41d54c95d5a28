"""What purges left behind: their records, and where an id a purge rewrote went.

A purge (``memrev.maintenance.purge``) rewrites history; the commits it
touched get new ids. Its record is a commit on ``refs/purges`` (a line of
commits on no branch) whose tree holds one JSON file per purge,
``/purge-<time in µs>.json``: the reason, who, when, the counts, the kind of
predicate and the old -> new id map (``null``: the commit was dropped, its
changes all purged). Reading the records is the repository's part, so that a
revision naming an old id resolves to its new one (``Reading.resolve``).

The map is read once per purge generation (the target of ``refs/purges``)
and kept: a store purged a few times holds a few maps.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from .. import errors
from ..backends.base import Backend
from ..core import trees
from .revisions import PURGES_REF


class Reading(Protocol):
    """What reading the records needs of the repository (``memrev.repo.reading.Reading``)."""

    backend: Backend

    def root(self, commit: bytes | None) -> bytes: ...
    def content(self, oid: bytes) -> bytes: ...
    def tree(self, oid: bytes) -> tuple[str, Any]: ...


class Resolving(Protocol):
    """What :func:`rewritten` needs of the repository."""

    def fresh(self) -> None: ...
    def purge_map(self) -> PurgeMap: ...

RECORD_PREFIX = "purge-"
# A record larger than this is not read (a damaged or hostile store): resolve says so.
MAX_RECORD_BYTES = 64 << 20


@dataclass(frozen=True)
class Rewritten:
    """An id a purge rewrote: the commit it is now (``None``: nothing of its history was
    left), the record that says so (its file under ``refs/purges``) and that record's
    fields. ``dropped``: every change the commit made was purged, so ``new`` is what its
    parent became."""

    old: str
    new: str | None
    record: str
    reason: str
    time: str
    dropped: bool = False


class PurgeMap:
    """The old -> new ids of every purge a store recorded, followed to the newest id."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self._step: dict[str, tuple[str | None, dict[str, Any]]] = {}
        for record in sorted(records, key=lambda r: r.get("time_us", 0)):
            for old, new in record.get("map", {}).items():
                self._step[old] = (new, record)
        self.records = records

    def __bool__(self) -> bool:
        return bool(self._step)

    def __contains__(self, old: str) -> bool:
        return old in self._step

    def follow(self, old: str) -> Rewritten | None:
        """Where ``old`` (a full hex id) went: through every later purge that rewrote it again."""
        hit = self._step.get(old)
        if hit is None:
            return None
        new, record = hit
        seen = {old}
        while new is not None and new in self._step and new not in seen:
            seen.add(new)
            new = self._step[new][0]
        dropped = old in record.get("dropped", ()) or hit[0] is None
        return Rewritten(old, new, record.get("file", ""), record.get("reason", ""), record.get("time", ""), dropped)

    def changed_on(self, ref: str, old: str) -> set[str] | None:
        """The files the purges that rewrote ``old`` changed at ``ref``'s tip (``None``: too
        many to list, or a record that does not say): what a subscriber of ``ref`` whose
        last seen commit was ``old`` must hear of besides the commits made since."""
        out: set[str] = set()
        seen = set()
        while old in self._step and old not in seen:
            seen.add(old)
            new, record = self._step[old]
            paths = record.get("changed", {}).get(ref, []) if isinstance(record.get("changed"), dict) else None
            if paths is None:
                return None
            out.update(p for p in paths if isinstance(p, str))
            if new is None:
                break
            old = new
        return out

    def with_prefix(self, prefix: str) -> list[str]:
        return [old for old in self._step if old.startswith(prefix)]


def read_records(repo: Reading) -> list[dict[str, Any]]:
    """Every purge record of the store, oldest first (``[]`` when it was never purged)."""
    tip = repo.backend.get_ref(PURGES_REF)
    if tip is None:
        return []
    out = []
    for path, entry in trees.walk(repo, repo.root(tip)):
        name = path.rsplit("/", 1)[-1]
        if not name.startswith(RECORD_PREFIX) or not name.endswith(".json"):
            continue
        if entry.size > MAX_RECORD_BYTES:
            raise errors.IntegrityError(f"purge record {path} is {entry.size} bytes, over {MAX_RECORD_BYTES}")
        try:
            record = json.loads(repo.content(entry.oid))
        except ValueError as e:
            raise errors.IntegrityError(f"purge record {path} is not JSON: {e}") from None
        if not isinstance(record, dict) or not isinstance(record.get("map", {}), dict):
            raise errors.IntegrityError(f"purge record {path} is not a purge record")
        record["file"] = path
        out.append(record)
    return sorted(out, key=lambda r: r.get("time_us", 0))


def rewritten(repo: Resolving, rev: str) -> Rewritten | None:
    """What a purge did to a commit id or a prefix of 7+ hex digits (``None``: no purge rewrote it)."""
    repo.fresh()
    name = rev.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{7,40}", name):
        return None
    known = repo.purge_map()
    olds = [name] if name in known else known.with_prefix(name) if len(name) < 40 else []
    if len(olds) != 1:
        return None
    return known.follow(olds[0])
