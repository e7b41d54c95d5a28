"""Path rules: ag2's normalization plus the validation ag2 leaves out.

Normalization is exactly ``ag2.knowledge.base._normalize`` (leading ``/``,
``//`` collapsed, trailing ``/`` stripped), so every path means what it means
in ag2's stores. On top of that memrev refuses what a versioned store must
never record: control characters (they make log and diff output lie) and
``..`` segments (they mean traversal everywhere else).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import InvalidPath

# C0 and C1 control characters, DEL, and lone surrogates (not encodable as UTF-8).
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")

ROOT = "/"
# Deeper paths are refused: tree code recurses per segment, and no agent
# store nests 255 directories.
MAX_SEGMENTS = 255
# Longer paths are refused on every backend alike (a PostgreSQL index row
# holds ~2.7 KB; a path is a name, not content).
MAX_PATH_BYTES = 1024

# memrev's own stored files: content of the branch (versioned, in bundles, in
# log and diff) that is not the agent's memory, so the KnowledgeStore view
# (``list``, ``exists`` of a folder, the tools built on them) leaves them out,
# as ``/.memrev`` (never stored at all) is left out of a folder's scan.
MERGE_KINDS_PATH = "/.memrev-merge-kinds.json"
OWN_FILES = frozenset({MERGE_KINDS_PATH})


def is_own(path: str) -> bool:
    """True for a file memrev keeps in a branch for itself (the merge-kind declarations)."""
    return path in OWN_FILES


def normalize(path: object) -> str:
    if not isinstance(path, str):
        raise InvalidPath(f"path must be str, not {type(path).__name__}")
    bad = _FORBIDDEN.search(path)
    if bad:
        raise InvalidPath(f"path contains a control character or lone surrogate {bad.group()!r}: {path!r}")
    if not path.startswith("/"):
        path = "/" + path
    while "//" in path:
        path = path.replace("//", "/")
    if path != "/" and path.endswith("/"):
        path = path.rstrip("/")
    segments = path.split("/")
    if ".." in segments:
        # ag2's DiskKnowledgeStore says "Path traversal blocked: <path>"; callers match on it.
        raise InvalidPath(f"Path traversal blocked: {path} (a '..' segment)")
    if len(segments) - 1 > MAX_SEGMENTS:
        raise InvalidPath(f"path has {len(segments) - 1} segments; at most {MAX_SEGMENTS} are allowed")
    if len(path) > MAX_PATH_BYTES // 4 and len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise InvalidPath(f"path is longer than {MAX_PATH_BYTES} bytes of UTF-8")
    return path


def check_room(folder: str, deepest: str, what: str) -> None:
    """Refuse (``InvalidPath``) a layout whose longest path, ``folder/deepest``,
    memrev would refuse: an adapter checks its name when it is given, before
    anything is written, instead of failing on the first file it writes."""
    path = f"{folder.rstrip('/')}/{deepest}"
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise InvalidPath(
            f"{what} is too long: its files' paths ({path[:40]}...{path[-30:]}) would be {size} bytes of UTF-8;"
            f" at most {MAX_PATH_BYTES} are allowed"
        )
    normalize(path)


def split(path: str) -> list[str]:
    """Segments of a normalized path; ``[]`` for the root."""
    return [] if path == ROOT else path[1:].split("/")


def is_under(path: str, prefix: str) -> bool:
    """True when ``path`` is ``prefix`` or lies below it (ag2's on_change rule)."""
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def ancestors(path: str) -> list[str]:
    """The directories above a path, nearest first: ``/a/b/c`` -> ``/a/b``, ``/a``, ``/``."""
    out = []
    while (cut := path.rfind("/")) > 0:
        path = path[:cut]
        out.append(path)
    return out if path == ROOT else [*out, ROOT]


def directory_keys(paths: Iterable[str]) -> set[str]:
    """The directory keys of the change index for files that changed: every
    directory above each path but the root, spelled with a trailing ``/``
    (``/a/b/c`` -> ``/a/b/``, ``/a/``). A normalized path never ends in ``/``,
    so a directory's key never names a file."""
    keys: set[str] = set()
    for path in paths:
        cut = path.rfind("/")
        while cut > 0:
            key = path[: cut + 1]
            if key in keys:
                break  # its ancestors are in already
            keys.add(key)
            cut = path.rfind("/", 0, cut)
    return keys


def is_directory_key(key: str) -> bool:
    return key.endswith("/")
