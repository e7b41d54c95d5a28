"""Ref names and revisions: how a name like ``main~3^2`` becomes a commit.

Refs are ``refs/heads/<branch>``, ``refs/tags/<tag>`` and, for deleted
branches kept for gc's safety window, ``refs/deleted/<name>@<time>-<tip>``.
A revision is a name (``HEAD``, a branch, a tag, a full or abbreviated commit
id) followed by steps (``~``, ``~n``, ``^``, ``^n``), parsed in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .. import errors
from ..backends.base import Backend

HEAD_PREFIX = "refs/heads/"
TAG_PREFIX = "refs/tags/"
DELETED_PREFIX = "refs/deleted/"
# The purge records (``memrev.maintenance.purge``): a line of commits of their own, on no
# branch. Its target is also the store's purge generation: it moves exactly when a purge
# commits, and every handle compares it before trusting its caches (``Reading.resolve``).
PURGES_REF = "refs/purges"

# A revision is a name followed by steps; names (refs, ids) never hold ~ or ^.
_REV_OP = re.compile(r"[~^]")
_REV_STEPS = re.compile(r"(?:[~^][0-9]*)+")
# A run of bare steps, then optionally one numbered step (``~3``, ``^2``); or a trailing bare run.
_REV_TOKEN = re.compile(r"([~^]*)([~^])([0-9]+)|([~^]+)")
# More first-parent steps than any history holds; also bounds int() of the digits.
MAX_REV_STEPS = 1 << 40
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_REF_NAME = re.compile(r"[A-Za-z0-9._@+-]+(/[A-Za-z0-9._@+-]+)*")
# Longer branch and tag names are refused on every backend alike. What is
# stored must fit PostgreSQL's btree rows (~2.7 KB) with room to spare:
# ``refs/heads/<name>``, ``refs/deleted/<name>@<seconds>.<µs>-<tip>[-<n>]``
# (about 50 bytes more), a bundle's ``<ref>-imported``, and the head index's
# (branch, path) key beside a path of ``core.paths.MAX_PATH_BYTES``. Names
# are ASCII (``_REF_NAME``): characters and bytes are one.
MAX_REF_NAME_BYTES = 255
# Control characters and lone surrogates: no ref, path or merge-kind pattern holds one, and PostgreSQL
# refuses NUL in text (UTF-8 encoding fails on a lone surrogate).
UNSTORABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def branch_ref(branch: str) -> str:
    return f"{HEAD_PREFIX}{branch}"


def check_ref_name(name: object) -> None:
    """Branch and tag names: at most ``MAX_REF_NAME_BYTES`` of ``A-Z a-z 0-9 . _ @ + -``
    in ``/``-separated parts, no ``..``, nothing a revision parser reads (``~ ^ :``).
    Raises ``InvalidPath`` before anything is looked up, locked or written."""
    if not isinstance(name, str):
        raise errors.InvalidPath(f"a branch or tag name must be str, not {type(name).__name__}")
    if len(name) > MAX_REF_NAME_BYTES:
        raise errors.InvalidPath(
            f"branch or tag name {shorten(name)!r} is {len(name.encode('utf-8', 'surrogatepass'))} bytes long;"
            f" at most {MAX_REF_NAME_BYTES} are allowed"
        )
    if not _REF_NAME.fullmatch(name) or name == "HEAD" or name.startswith("-") or ".." in name or name.endswith(".lock"):
        raise errors.InvalidPath(f"not a valid branch or tag name: {name!r}")


def deleted_at(ref: str) -> float | None:
    """When a ``refs/deleted/`` ref was made (seconds), or ``None`` if its name says nothing.

    Reads both ``<name>@<seconds>`` (older stores) and
    ``<name>@<seconds>.<µs>-<tip>``.
    """
    stamp = ref.rsplit("@", 1)[-1].split("-", 1)[0]
    return float(stamp) if re.fullmatch(r"[0-9]+(\.[0-9]{1,6})?", stamp) else None


def parse_revision(rev: str) -> tuple[str, list[tuple[str, int]]]:
    """``(name, steps)`` of a revision, in one pass over it.

    Each step is ``("~", n)`` (n first-parent steps; consecutive ones are
    summed, ``^`` and ``^1`` count as one) or ``("^", n)`` (the n-th parent, n >= 2).
    """
    first = _REV_OP.search(rev)
    start = len(rev) if first is None else first.start()
    name, suffix = rev[:start], rev[start:]
    if not name:
        raise errors.RevisionNotFound(f"{shorten(rev)}: not a revision (a branch, tag or commit id comes before ~ or ^)")
    if suffix and not _REV_STEPS.fullmatch(suffix):
        raise errors.RevisionNotFound(f"{shorten(rev)}: not a revision (after ~ or ^ only digits may follow)")
    steps: list[tuple[str, int]] = []
    walk = 0
    for m in _REV_TOKEN.finditer(suffix):  # one match per numbered step, plus a trailing run
        bare, op, digits = m.group(1) or m.group(4) or "", m.group(2), m.group(3)
        walk = min(walk + len(bare), MAX_REV_STEPS + 1)  # each bare ~ or ^ is one first-parent step
        if op is None:
            continue
        n = MAX_REV_STEPS + 1 if len(digits) > 13 else int(digits)
        if op == "~" or n == 1:
            walk = min(walk + n, MAX_REV_STEPS + 1)
        elif n >= 2:
            if walk:
                steps.append(("~", walk))
                walk = 0
            steps.append(("^", n))
        # "^0" is the commit itself: no step
    if walk:
        steps.append(("~", walk))
    return name, steps


def shorten(rev: str) -> str:
    """A revision as an error message shows it: long ones cut in the middle."""
    return rev if len(rev) <= 60 else f"{rev[:40]}...{rev[-12:]}"



class Resolver:
    """Resolves revisions over a backend; ``parents`` and ``known`` come from the
    repository (its verified, cached commit reading)."""

    def __init__(
        self,
        backend: Backend,
        parents: Callable[[bytes], tuple[bytes, ...]],
        known: Callable[[bytes], bool],
        rewritten: Callable[[str], bytes | None] = lambda name: None,
    ) -> None:
        self.backend = backend
        self._parents = parents
        self._known = known
        self._rewritten = rewritten  # an id a purge rewrote -> the commit it is now

    def resolve(self, rev: str, branch: str) -> bytes:
        """The commit a revision names: NAME followed by any of ``~``, ``~n`` (n
        first-parent steps), ``^`` (first parent), ``^n`` (n-th parent; ``^0``
        the commit itself), as in git. Linear in the length of ``rev``: runs of
        first-parent steps are summed and walked with one recursive query."""
        if not isinstance(rev, str) or not rev:
            raise errors.RevisionNotFound(f"not a revision: {rev!r}")
        name, steps = parse_revision(rev)
        oid = self._name(name, branch)
        for kind, n in steps:
            oid = self._step(rev, oid, kind, n)
        return oid

    def _step(self, rev: str, oid: bytes, kind: str, n: int) -> bytes:
        if kind == "~":
            if n > MAX_REV_STEPS:
                raise errors.RevisionNotFound(f"{shorten(rev)}: more first-parent steps than any history holds")
            target = self.backend.first_parent(oid, n)
            if target is None:
                raise errors.RevisionNotFound(f"{shorten(rev)}: history is shorter than {n} first-parent steps")
            return target
        parents = self._parents(oid)
        if n > len(parents):
            raise errors.RevisionNotFound(f"{shorten(rev)}: commit {oid.hex()[:10]} has no parent {n}")
        return parents[n - 1]

    def _name(self, name: str, branch: str) -> bytes:
        if UNSTORABLE.search(name):  # no ref holds one; PostgreSQL would refuse the lookup
            raise errors.RevisionNotFound(f"{shorten(name)!r}: no such commit, branch or tag (a control character or lone surrogate)")
        if len(name) == 40 and _HEX.match(name.lower()):  # a full id: no ref lookups needed
            oid = bytes.fromhex(name)
            if self._known(oid) or self.backend.get_commit(oid) is not None:
                return oid
        candidates = [branch_ref(branch)] if name == "HEAD" else [branch_ref(name), f"refs/tags/{name}", name]
        for ref in candidates:
            target = self.backend.get_ref(ref)
            if target is not None:
                return target
        if name == "HEAD":
            raise errors.RevisionNotFound(f"HEAD: branch {branch!r} has no commits yet")
        low = name.lower()
        if _HEX.match(low):
            if len(low) == 40:
                oid = bytes.fromhex(low)
                if self.backend.get_commit(oid) is not None:
                    return oid
            else:
                prefix = bytes.fromhex(low[: len(low) // 2 * 2])
                found = [c for c in self.backend.commits_with_prefix(prefix, 50) if c.hex().startswith(low)]
                if len(found) == 1:
                    return found[0]
                if len(found) > 1:
                    raise errors.AmbiguousRevision(f"{shorten(name)}: matches {len(found)} commits")
            now = self._rewritten(low)
            if now is not None:
                return now
        if re.fullmatch(r"[0-9a-f]{1,6}", low):
            raise errors.RevisionNotFound(f"{shorten(name)}: no such branch or tag (a commit id prefix needs at least 7 hex digits)")
        raise errors.RevisionNotFound(f"{shorten(name)}: no such commit, branch or tag")
