"""Declared merge kinds: which paths merge as text, as a collection of numbered
items, or as one side's version (``docs/design.md``, "Merge kinds")."""

from __future__ import annotations

import json

from .. import errors
from ..core.mergekinds import MergeKinds, check_kind, compile_pattern
from ..core.paths import MERGE_KINDS_PATH
from ..repo.repository import Repository

# Where a branch keeps its merge-kind declarations: a file in its own tree, as
# git keeps merge attributes in .gitattributes, so they are versioned, travel
# in bundles, and every handle, process and the CLI reads the same ones.
KINDS_PATH = MERGE_KINDS_PATH  # one of core.paths.OWN_FILES: hidden from the agent's listings


def declared_kinds(repo: Repository, commit: bytes | None) -> list[tuple[str, str]]:
    """The (pattern, kind) declarations at ``commit``, first match first."""
    entry = repo.entry_at(commit, KINDS_PATH)
    return parse_declarations(None if entry is None else repo.content(entry.oid))


def parse_declarations(data: bytes | None) -> list[tuple[str, str]]:
    """The (pattern, kind) pairs of a declarations file (``None``: there is none)."""
    if data is None:
        return []
    try:
        table = json.loads(data)
    except ValueError as e:  # not UTF-8, not JSON
        raise errors.InvalidMergeKind(f"{KINDS_PATH} is not a valid merge-kind table: {e}") from None
    if not isinstance(table, dict):
        raise errors.InvalidMergeKind(f"{KINDS_PATH} is not a valid merge-kind table: not a JSON object")
    try:
        for pattern, kind in table.items():
            compile_pattern(pattern)
            check_kind(kind)
    except errors.InvalidMergeKind as e:
        raise errors.InvalidMergeKind(f"{KINDS_PATH} is not a valid merge-kind table: {e}") from None
    return list(table.items())


def merge_kinds(repo: Repository, commit: bytes | None) -> MergeKinds:
    """The table a merge onto ``commit`` uses: its declarations, the store defaults, memrev's own."""
    return MergeKinds.for_store(declared_kinds(repo, commit))


def with_declaration(declared: list[tuple[str, str]], pattern: str, kind: str) -> str:
    """The declarations file with ``pattern`` declared ``kind``, first (it wins over older ones)."""
    compile_pattern(pattern)
    check_kind(kind)
    table = {pattern: kind, **{p: k for p, k in declared if p != pattern}}
    return json.dumps(table, indent=2) + "\n"
