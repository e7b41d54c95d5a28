"""History over the repository: branches and tags, merge, revert, restore, blame
(``changes.py``), pickaxe and ``why`` (``pickaxe.py``), the browsing readers
(``browse.py``)."""

from .changes import (
    KINDS_PATH,
    BlameLine,
    Conflict,
    MergeResult,
    blame,
    branches,
    create_branch,
    create_tag,
    declared_kinds,
    delete_branch,
    is_ancestor,
    merge,
    merge_base,
    merge_kinds,
    parse_declarations,
    restore,
    revert,
    tags,
    with_declaration,
)

__all__ = [
    "KINDS_PATH",
    "BlameLine",
    "Conflict",
    "MergeResult",
    "blame",
    "branches",
    "create_branch",
    "create_tag",
    "declared_kinds",
    "delete_branch",
    "is_ancestor",
    "merge",
    "merge_base",
    "merge_kinds",
    "parse_declarations",
    "restore",
    "revert",
    "tags",
    "with_declaration",
]
