"""History over the repository, as free functions of a ``Repository`` (in the manner
of dulwich's porcelain): ``refs.py`` (branches, tags, ancestry), ``kinds.py``
(declared merge kinds), ``merge.py`` (merge, revert, restore), ``blame.py``,
``pickaxe.py`` (``log -S/-G`` and ``why``), ``browse.py`` (the readers behind the
viewer's and the CLI's history pages). Each ends in at most one commit."""

from .blame import BlameLine, blame
from .kinds import KINDS_PATH, declared_kinds, merge_kinds, parse_declarations, with_declaration
from .merge import Conflict, MergeResult, merge, restore, revert
from .refs import branches, create_branch, create_tag, delete_branch, is_ancestor, merge_base, tags

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
