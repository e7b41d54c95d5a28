"""Free functions over directory trees: look up, list, update, walk, diff.

A directory is one tree object while it is small (a sorted leaf). Past
``LEAF_MAX`` entries it becomes a hash-split node (a HAMT level) whose
buckets hold the entries by a byte of the name's hash, so a commit that
touches one path rewrites a few small nodes whether the directory holds ten
names or a million.

``src`` is anything with ``tree(oid) -> decoded`` and ``put_tree(data, node) -> oid``
(the repository, with its cache). ``node`` is the decoded form of ``data``, exactly as
``decode_tree`` would give it back (entries in stored order): a commit caches the
nodes it writes without decoding what it just encoded (two decodes a W1 commit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, Protocol

from ..errors import InvalidPath, MemrevError
from .objects import EMPTY_TREE_ID, SPLIT_FANOUT, Entry, decode_tree, encode_leaf, encode_split, leaf_get
from .paths import MAX_PATH_BYTES, MAX_SEGMENTS, normalize

LEAF_MAX = 32
LEAF_BYTES = 900  # a leaf over this splits too: small rows stay inside SQLite's B-tree pages
FANOUT = SPLIT_FANOUT

Key = tuple[str, str]  # (name, kind)


class TreeReader(Protocol):
    def tree(self, oid: bytes) -> tuple[str, Any]: ...


class TreeSource(TreeReader, Protocol):
    def put_tree(self, data: bytes, node: tuple[str, Any] | None = None) -> bytes: ...


def _leaf_node(entries: dict[Key, Entry]) -> tuple[str, Any]:
    """What ``decode_tree(encode_leaf(entries))`` gives: the entries in stored (sorted) order."""
    return "T", dict(sorted(entries.items()))


def _split_node(level: int, buckets: dict[int, bytes]) -> tuple[str, Any]:
    return "H", (level, dict(sorted(buckets.items())))


def _name_hash(name: str) -> bytes:
    return hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()


def _bucket(name: str, level: int) -> int:
    return _name_hash(name)[level % 16] % FANOUT


# ------------------------------------------------------------ one directory


def dir_get(src: TreeReader, node: bytes, key: Key) -> Entry | None:
    while True:
        kind, body = src.tree(node)
        if kind == "T":
            return body.get(key)
        level, buckets = body
        node = buckets.get(_bucket(key[0], level))
        if node is None:
            return None


def dir_entries(src: TreeReader, node: bytes) -> dict[Key, Entry]:
    kind, body = src.tree(node)
    if kind == "T":
        return body
    out: dict[Key, Entry] = {}
    for child in body[1].values():
        out.update(dir_entries(src, child))
    return out


def dir_set(src: TreeSource, node: bytes, updates: dict[Key, Entry | None], level: int = 0) -> bytes:
    """Apply ``updates`` (``None`` removes) to a directory node; returns the new node id."""
    kind, body = src.tree(node)
    if kind == "T":
        entries = dict(body)
        for key, entry in updates.items():
            if entry is None:
                entries.pop(key, None)
            else:
                entries[key] = entry
        if len(entries) <= LEAF_MAX:
            data = encode_leaf(entries)
            if len(data) <= LEAF_BYTES or len(entries) == 1 or level >= 15:
                return src.put_tree(data, _leaf_node(entries))
        return _split(src, entries, level)
    node_level, buckets = body
    grouped: dict[int, dict[Key, Entry | None]] = {}
    for key, entry in updates.items():
        grouped.setdefault(_bucket(key[0], node_level), {})[key] = entry
    new_buckets = dict(buckets)
    for b, ups in grouped.items():
        child = new_buckets.get(b, EMPTY_TREE_ID)
        new_child = dir_set(src, child, ups, node_level + 1)
        if new_child == EMPTY_TREE_ID:
            new_buckets.pop(b, None)
        else:
            new_buckets[b] = new_child
    if not new_buckets:
        return EMPTY_TREE_ID
    return src.put_tree(encode_split(node_level, new_buckets), _split_node(node_level, new_buckets))


def _split(src: TreeSource, entries: dict[Key, Entry], level: int) -> bytes:
    groups: dict[int, dict[Key, Entry]] = {}
    for key, entry in entries.items():
        groups.setdefault(_bucket(key[0], level), {})[key] = entry
    buckets = {}
    for b, group in groups.items():
        data = encode_leaf(group) if len(group) <= LEAF_MAX else None
        if data is not None and (len(data) <= LEAF_BYTES or len(group) == 1 or level >= 14):
            buckets[b] = src.put_tree(data, _leaf_node(group))
        else:
            buckets[b] = _split(src, group, level + 1)
    return src.put_tree(encode_split(level, buckets), _split_node(level, buckets))


# ------------------------------------------------------------ whole trees


def find_dir(src: TreeReader, root: bytes, segments: list[str]) -> bytes | None:
    node = root
    for seg in segments:
        entry = dir_get(src, node, (seg, "d"))
        if entry is None:
            return None
        node = entry.oid
    return node


def lookup(src: TreeReader, root: bytes, segments: list[str]) -> Entry | None:
    """The file entry at ``segments``, or ``None``."""
    if not segments:
        return None
    parent = find_dir(src, root, segments[:-1])
    return None if parent is None else dir_get(src, parent, (segments[-1], "f"))


def lookup_many(src: Any, roots: list[bytes], segments: list[str]) -> list[Entry | None]:
    """``lookup`` of one path under many roots, walked a level at a time:
    ``src.tree_bytes(ids)`` gives the (hash-checked) bytes of a level's nodes at once,
    and each node is searched for one key without being decoded (``leaf_get``)."""
    if not segments:
        return [None] * len(roots)
    keys = [(seg, "d") for seg in segments[:-1]] + [(segments[-1], "f")]
    found: list[Entry | None] = [None] * len(roots)
    walks = [(i, root, 0) for i, root in enumerate(roots)]  # (which root, node, key reached)
    while walks:
        nodes = src.tree_bytes([node for _, node, _ in walks])
        going = []
        for i, node, depth in walks:
            key = keys[depth]
            try:
                entry = _node_get(nodes[node], key)
            except ValueError as e:
                raise ValueError(f"tree {node.hex()}: {e}") from None
            if isinstance(entry, bytes):  # the same key, one level down the hash split
                going.append((i, entry, depth))
                continue
            if entry is None:
                continue
            if depth + 1 == len(keys):
                found[i] = entry
            else:
                going.append((i, entry.oid, depth + 1))
        walks = going
    return found


def _node_get(data: bytes, key: Key) -> Entry | bytes | None:
    """In a node's bytes: the entry ``key`` (a leaf), or the child node that would hold
    it (a split), or ``None``. ``ValueError`` for bytes that are not a tree."""
    if data[:1] == b"T":
        return leaf_get(data, *key)
    level, buckets = decode_tree(data)[1]
    return buckets.get(_bucket(key[0], level))


def list_names(src: TreeReader, root: bytes, segments: list[str]) -> list[str]:
    node = find_dir(src, root, segments)
    return [] if node is None else list_dir(src, node)


def list_dir(src: TreeReader, node: bytes) -> list[str]:
    """Sorted names in a directory node, subdirectories with a trailing ``/``."""
    return sorted({name + "/" if kind == "d" else name for (name, kind) in dir_entries(src, node)})


def update(src: TreeSource, root: bytes, changes: dict[tuple[str, ...], Entry | None]) -> bytes:
    """Apply file changes to a tree.

    ``changes`` maps path segments to a file ``Entry`` (write) or ``None``
    (delete the file *and* everything below that path, as ag2's ``delete``
    does). Directories left empty disappear, as implicit directories do.
    """
    here: dict[Key, Entry | None] = {}
    below: dict[str, dict[tuple[str, ...], Entry | None]] = {}
    for segs, entry in changes.items():
        if len(segs) == 1:
            here[(segs[0], "f")] = entry
            if entry is None:
                here[(segs[0], "d")] = None
        else:
            below.setdefault(segs[0], {})[segs[1:]] = entry
    for name, sub in below.items():
        if here.get((name, "d"), 0) is None:
            # The directory is deleted in this same change set; later writes under it
            # are applied on an empty directory (ops are pre-ordered by the caller).
            child = EMPTY_TREE_ID
        else:
            current = dir_get(src, root, (name, "d"))
            child = current.oid if current else EMPTY_TREE_ID
        new_child = update(src, child, sub)
        here[(name, "d")] = None if new_child == EMPTY_TREE_ID else Entry("d", new_child)
    if not here:
        return root
    return dir_set(src, root, here)


def update_files(src: TreeSource, root: bytes, changes: dict[tuple[str, ...], Entry | None]) -> bytes:
    """Set or remove single files: ``None`` removes the file at that path only, never a
    directory of the same name (``update`` removes both, as ag2's ``delete`` does). Used
    to replay a tree diff entry by entry (a purge rewriting history)."""
    here: dict[Key, Entry | None] = {}
    below: dict[str, dict[tuple[str, ...], Entry | None]] = {}
    for segs, entry in changes.items():
        if len(segs) == 1:
            here[(segs[0], "f")] = entry
        else:
            below.setdefault(segs[0], {})[segs[1:]] = entry
    for name, sub in below.items():
        current = dir_get(src, root, (name, "d"))
        new_child = update_files(src, current.oid if current else EMPTY_TREE_ID, sub)
        here[(name, "d")] = None if new_child == EMPTY_TREE_ID else Entry("d", new_child)
    if not here:
        return root
    return dir_set(src, root, here)


def walk(src: TreeReader, node: bytes, prefix: str = "") -> Iterator[tuple[str, Entry]]:
    """Every file below ``node`` as ``(path, entry)``, paths in sorted order."""
    entries = dir_entries(src, node)
    for (name, kind) in sorted(entries):
        entry = entries[(name, kind)]
        if kind == "f":
            yield f"{prefix}/{name}", entry
        else:
            yield from walk(src, entry.oid, f"{prefix}/{name}")


def diff(
    src: TreeReader, a: bytes | None, b: bytes | None, prefix: str = ""
) -> Iterator[tuple[str, Entry | None, Entry | None]]:
    """Files that differ between two trees as ``(path, old, new)``; equal subtrees are skipped."""
    if a == b:
        return
    for (name, kind), ea, eb in _dir_pairs(src, a, b):
        path = f"{prefix}/{name}"
        if kind == "f":
            yield path, ea, eb
        else:
            yield from diff(src, ea.oid if ea else None, eb.oid if eb else None, path)


def _dir_pairs(src: TreeReader, a: bytes | None, b: bytes | None) -> Iterator[tuple[Key, Entry | None, Entry | None]]:
    if a == b:
        return
    ka = src.tree(a) if a is not None else ("T", {})
    kb = src.tree(b) if b is not None else ("T", {})
    if ka[0] == "H" and kb[0] == "H" and ka[1][0] == kb[1][0]:
        ba, bb = ka[1][1], kb[1][1]
        for bucket in sorted(set(ba) | set(bb)):
            yield from _dir_pairs(src, ba.get(bucket), bb.get(bucket))
        return
    ea = dir_entries(src, a) if a is not None else {}
    eb = dir_entries(src, b) if b is not None else {}
    for key in sorted(set(ea) | set(eb)):
        x, y = ea.get(key), eb.get(key)
        if x != y:
            yield key, x, y


# ------------------------------------------------------------ checking trees from outside


def check_name(name: str) -> None:
    """A directory entry name is one path segment ``write`` would accept
    (``ValueError`` otherwise): not empty, no ``/``, no ``..``, no control
    characters. ``.`` is a name like any other, as in ag2's stores."""
    if not name or "/" in name:
        raise ValueError(f"tree entry name {name!r} is not one path segment")
    try:
        normalize("/" + name)
    except InvalidPath as e:
        raise ValueError(f"tree entry name {name!r} is not allowed: {e}") from None


class TreeChecker:
    """Checks the shape of tree graphs whose nodes each passed ``check_tree``.

    What one node cannot show on its own: a split node's level is its depth
    among the split nodes of its directory, every name sits in the bucket its
    hash chooses at every level above it, no leaf under a split is empty, a
    file entry records its blob's size (``blob_size(oid)``, ``None`` when
    missing), and no path is deeper or longer than ``write`` allows. Walks
    iteratively and remembers each (node, bucket position) it verified, so
    checking every commit of a history costs about the number of distinct
    nodes, not commits times files. Problems raise ``ValueError``.
    """

    def __init__(self, src: TreeReader, blob_size: Any) -> None:
        self._src = src
        self._blob_size = blob_size
        # (node, bucket position) -> (deepest path in segments, longest path in bytes)
        self._dims: dict[tuple[bytes, tuple], tuple[int, int]] = {}

    def nodes(self) -> set[bytes]:
        """Every node checked so far."""
        return {node for node, _where in self._dims}

    def check_root(self, root: bytes) -> None:
        segments, nbytes = self._node_dims(root)
        if segments > MAX_SEGMENTS:
            raise ValueError(f"tree {root.hex()} nests paths deeper than {MAX_SEGMENTS} segments")
        if nbytes > MAX_PATH_BYTES:
            raise ValueError(f"tree {root.hex()} holds a path longer than {MAX_PATH_BYTES} bytes")

    def _node_dims(self, top: bytes) -> tuple[int, int]:
        stack: list[tuple[bytes, tuple, int]] = [(top, (), 0)]  # (node, bucket position, segments above)
        while stack:
            node, where, depth = stack[-1]
            if (node, where) in self._dims:
                stack.pop()
                continue
            if depth > MAX_SEGMENTS:  # stop before walking a hostile chain of directories to its end
                raise ValueError(f"tree {top.hex()} nests paths deeper than {MAX_SEGMENTS} segments")
            children, own = self._node(node, where)
            pending = [(c, w, depth + (1 if step else 0)) for c, w, step in children if (c, w) not in self._dims]
            if pending:
                stack.extend(pending)
                continue
            segments, nbytes = own
            for child, w, step in children:
                s, b = self._dims[(child, w)]
                segments, nbytes = max(segments, s + (1 if step else 0)), max(nbytes, b + step)
            self._dims[(node, where)] = (segments, nbytes)
            stack.pop()
        return self._dims[(top, ())]

    def _node(self, node: bytes, where: tuple) -> tuple[list[tuple[bytes, tuple, int]], tuple[int, int]]:
        """Check one node in its position. Returns its children as (node, position,
        bytes the step adds to a path: 0 for a bucket, ``/name`` for a directory)
        and the (segments, bytes) its own files need."""
        kind, body = self._src.tree(node)
        if kind == "H":
            level, buckets = body
            _check_split(node, level, where)
            return [(buckets[b], where + ((level, b),), 0) for b in sorted(buckets)], (0, 0)
        _check_leaf(node, body, where)
        children: list[tuple[bytes, tuple, int]] = []
        own = (0, 0)
        for (name, k), entry in body.items():
            step = 1 + len(name.encode("utf-8"))
            if k == "d":
                children.append((entry.oid, (), step))
                continue
            size = self._blob_size(entry.oid)
            if size is None:
                raise ValueError(f"tree {node.hex()} names blob {entry.oid.hex()}, which is missing")
            if size != entry.size:
                raise ValueError(f"tree {node.hex()} records size {entry.size} for {name!r}, whose blob holds {size}")
            own = (1, max(own[1], step))
        return children, own


class TreeDiffChecker:
    """Checks a history's trees a commit at a time, each against its first
    parent's tree, which passed before; returns the files that differ.

    The checks are ``TreeChecker``'s, made only on the nodes the new tree does
    not share, at the same place, with the old one: a shared node sits in the
    same position under the same path in both trees, so what was true of it
    there is true here. The walk is the diff the change index needs anyway, so
    checking a commit's trees costs what the commit changed, and nothing is
    remembered per node (``TreeChecker`` keeps every node's dimensions, which
    grows with the history). A path's depth and length are checked on each new
    entry's own path.

    ``changed_many`` walks many commits' diffs breadth first, together, so the
    nodes one level needs (old and new sides) can be read in one statement
    (``read_ahead``): the old side of a directory changed rarely was read long
    ago and is no longer cached. Iterative: a hostile tree is refused at
    ``MAX_SEGMENTS`` directories, never by Python's recursion limit.
    """

    def __init__(self, src: TreeReader, blob_size: Any, read_ahead: Any = None) -> None:
        self._src = src
        self._blob_size = blob_size
        # (new ids, old ids) -> None: load these nodes before a level is walked; the old
        # ones (not also new) are nodes of the old trees, which were checked before
        self._read_ahead = read_ahead

    def changed(self, old: bytes, new: bytes) -> list[str]:
        """The paths of the files that differ between ``old`` (already checked;
        ``EMPTY_TREE_ID`` checks all of ``new``) and ``new``, after checking
        every node of ``new`` not shared with ``old``. Problems raise ``ValueError``
        (or what reading a node raises)."""
        got = self.changed_many([(old, new)])[0]
        if isinstance(got, Exception):
            raise got
        return got

    def changed_many(self, pairs: list[tuple[bytes, bytes]]) -> list[list[str] | Exception]:
        """``changed`` for each pair, walked together a level at a time; a pair's
        problem is its result (the exception) and stops only its own walk."""
        results: list[list[str] | Exception] = [[] for _ in pairs]
        # (pair, old node or None, new node or None, bucket position, path, its bytes, directories above)
        level = [(i, old, new, (), "", 0, 0) for i, (old, new) in enumerate(pairs)]
        while level:
            if self._read_ahead is not None:
                new = {item[2] for item in level if item[2] is not None}
                self._read_ahead(new, {item[1] for item in level if item[1] is not None} - new)
            below: list = []
            for item in level:
                out = results[item[0]]
                if isinstance(out, Exception):
                    continue
                try:
                    self._step(item, out, below)
                except (ValueError, MemrevError, KeyError, IndexError) as e:
                    results[item[0]] = e
            level = below
        return results

    def _step(self, item: tuple, out: list[str], below: list) -> None:
        """One pair of nodes at the same place: equal (nothing), gone, paired
        bucket by bucket (both split at the same level), or compared entry by entry."""
        i, a, b, where, prefix, nbytes, depth = item
        if a == b:
            return
        if b is None:  # gone: every file below the old node (checked before) changed
            out.extend(path for path, _ in walk(self._src, a, prefix))
            return
        kb = self._src.tree(b)
        ka = self._src.tree(a) if a is not None else ("T", {})
        if kb[0] == "H" and ka[0] == "H" and ka[1][0] == kb[1][0]:
            level, buckets = kb[1]
            _check_split(b, level, where)
            old_buckets = ka[1][1]
            for bucket in set(old_buckets) | set(buckets):
                was, now = old_buckets.get(bucket), buckets.get(bucket)
                if was != now:
                    below.append((i, was, now, where + ((level, bucket),), prefix, nbytes, depth))
            return
        old_entries = dict(dir_entries(self._src, a)) if a is not None else {}  # a copy: a leaf's is the cached node
        for key, entry in self._new_entries(b, kb, where).items():
            was = old_entries.pop(key, None)
            if was != entry:
                self._entry(i, key, was, entry, prefix, nbytes, depth, out, below)
        for key, was in old_entries.items():  # removed
            self._entry(i, key, was, None, prefix, nbytes, depth, out, below)

    def _new_entries(self, top: bytes, decoded: tuple[str, Any], where: tuple) -> dict[Key, Entry]:
        """The entries below a new directory node, each node below checked in its position."""
        entries: dict[Key, Entry] = {}
        nodes = [(top, decoded, where)]
        while nodes:
            node, (kind, body), place = nodes.pop()
            if kind == "H":
                level, buckets = body
                _check_split(node, level, place)
                nodes.extend((child, self._src.tree(child), place + ((level, b),)) for b, child in buckets.items())
                continue
            _check_leaf(node, body, place)
            entries.update(body)
        return entries

    def _entry(
        self, i: int, key: Key, was: Entry | None, entry: Entry | None, prefix: str, nbytes: int, depth: int, out: list, below: list
    ) -> None:
        """One entry that differs: a file's path is out (a new file's blob and size
        checked), a directory is walked at the next level; a new entry's own path is checked."""
        name, kind = key
        path = f"{prefix}/{name}"
        if entry is not None:
            nbytes += 1 + len(name.encode("utf-8"))
            if depth + 1 > MAX_SEGMENTS:
                raise ValueError(f"tree nests paths deeper than {MAX_SEGMENTS} segments (at {path[:200]!r})")
            if nbytes > MAX_PATH_BYTES:
                raise ValueError(f"tree holds a path longer than {MAX_PATH_BYTES} bytes (at {path[:200]!r})")
        if kind == "d":
            below.append((i, was.oid if was else None, entry.oid if entry else None, (), path, nbytes, depth + 1))
            return
        out.append(path)
        if entry is not None:
            size = self._blob_size(entry.oid)
            if size is None:
                raise ValueError(f"tree at {path[:200]!r} names blob {entry.oid.hex()}, which is missing")
            if size != entry.size:
                raise ValueError(f"tree at {path[:200]!r} records size {entry.size} for {name!r}, whose blob holds {size}")


def _check_split(node: bytes, level: int, where: tuple) -> None:
    if level != len(where):
        raise ValueError(f"split tree node {node.hex()} has level {level} where {len(where)} belongs")


def _check_leaf(node: bytes, body: dict[Key, Entry], where: tuple) -> None:
    """A leaf under a split is not empty, and each name sits in the bucket its hash chooses at every level above."""
    if not where:
        return
    if not body:
        raise ValueError(f"split tree node holds an empty leaf {node.hex()}")
    for name, _kind in body:
        h = _name_hash(name)  # once per name, not once per level
        for level, b in where:
            if h[level % 16] % FANOUT != b:
                raise ValueError(f"tree {node.hex()} holds {name!r} in the wrong hash bucket")
