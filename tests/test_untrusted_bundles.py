"""Untrusted bytes: a bundle whose every hash checks out is still refused when
its objects are malformed (issue 8 items 5 and 17), and fsck reports the same
damage in a store written directly (rows put with the backend, as an old
import or a damaged disk would leave them).

Each forged bundle is sealed with a valid checksum (what a forger can do), so
only the structure checks stand between it and the store.
"""

from __future__ import annotations

import pytest
import zstandard

import memrev
from memrev import VersionedStore
from memrev.backends.base import BlobRow
from memrev.core import delta
from memrev.core.objects import (
    EMPTY_TREE_ID,
    CommitData,
    Entry,
    blob_id,
    commit_id,
    encode_leaf,
    encode_split,
    put_varint,
    tree_id,
)
from memrev.core.trees import _bucket
from test_bundles_gc import BUNDLE_MAGIC, _refused, seal_bundle

pytestmark = pytest.mark.anyio


# --------------------------------------------------------------------------- forging objects


class Forge:
    """Objects as records of a bundle, and the rows fsck would find in a store."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, list[bytes]]] = []
        self.blob_rows: list[BlobRow] = []
        self.tree_rows: list[tuple[bytes, bytes]] = []
        self.commit_rows: list[tuple[bytes, bytes | None, bytes]] = []
        self.sizes: dict[bytes, int] = {}
        self.depths: dict[bytes, int] = {}

    def full(self, content: bytes) -> bytes:
        oid = blob_id("F", content)
        self.records.append((b"B", [oid, b"F", b"", content]))
        self.blob_rows.append(BlobRow(oid, "F", None, None, 0, len(content), 0, b"r" + content))
        self.sizes[oid], self.depths[oid] = len(content), 0
        return oid

    def delta(self, base: bytes, ops: list, size: int) -> bytes:
        payload = delta.encode(ops)
        oid = blob_id("D", payload, base)
        self.records.append((b"B", [oid, b"D", base, payload]))
        depth = self.depths[base] + 1
        self.blob_rows.append(BlobRow(oid, "D", base, None, 0, size, depth, b"r" + payload))
        self.sizes[oid], self.depths[oid] = size, depth
        return oid

    def raw_blob(self, oid: bytes, kind: bytes, base: bytes, payload: bytes) -> None:
        self.records.append((b"B", [oid, kind, base, payload]))

    def tree(self, data: bytes) -> bytes:
        oid = tree_id(data)
        self.records.append((b"T", [oid, data]))
        self.tree_rows.append((oid, data))
        return oid

    def commit(self, tree: bytes, *, parents: tuple = (), author: str = "a", message: str = "m",
               meta: dict | None = None, data: bytes | None = None) -> bytes:
        if data is None:
            data = CommitData(tree, parents, 1_700_000_000_000_000, author, message, meta or {}).encode()
        oid = commit_id(data)
        self.records.append((b"C", [oid, data]))
        self.commit_rows.append((oid, parents[0] if parents else None, data))
        return oid

    def bundle(self, tip: bytes) -> bytes:
        return seal_bundle({"refs": {"refs/heads/main": tip.hex()}}, self.records)

    def write_into(self, store: VersionedStore, tip: bytes) -> None:
        """Put the rows straight into a store's backend, as damage would."""
        backend = store._live().backend
        with backend.write():
            for row in self.blob_rows:
                backend.put_blob(row)
            for oid, data in self.tree_rows:
                backend.put_tree(oid, data)
            for oid, parent, data in self.commit_rows:
                backend.put_commit(oid, parent, data)
            backend.set_ref_if_equals("refs/heads/main", None, tip)


def leaf(*entries: tuple) -> bytes:
    """Leaf bytes exactly as given: names (str or raw bytes), in the order given."""
    out = bytearray(b"T")
    for name, kind, oid, size in entries:
        raw = name.encode("utf-8") if isinstance(name, str) else name
        put_varint(out, len(raw))
        out += raw
        out += kind.encode()
        out += oid
        put_varint(out, size)
    return bytes(out)


def one_file(name, content: bytes = b"hello", size: int | None = None) -> tuple[Forge, bytes]:
    f = Forge()
    blob = f.full(content)
    root = f.tree(leaf((name, "f", blob, len(content) if size is None else size)))
    return f, f.commit(root)


# --------------------------------------------------------------------------- cases


def bad_name(name):
    return lambda: one_file(name)


def wrong_size():
    return one_file("notes.md", b"hello", size=8)


def unsorted():
    f = Forge()
    blob = f.full(b"x")
    return f, f.commit(f.tree(leaf(("b", "f", blob, 1), ("a", "f", blob, 1))))


def duplicate():
    f = Forge()
    blob = f.full(b"x")
    return f, f.commit(f.tree(leaf(("a", "f", blob, 1), ("a", "f", blob, 1))))


def dir_with_size():
    f = Forge()
    blob = f.full(b"x")
    sub = f.tree(leaf(("a", "f", blob, 1)))
    return f, f.commit(f.tree(leaf(("d", "d", sub, 7))))


def unknown_kind():
    f = Forge()
    blob = f.full(b"x")
    return f, f.commit(f.tree(leaf(("a", "x", blob, 1))))


def truncated_tree():
    f = Forge()
    blob = f.full(b"x")
    return f, f.commit(f.tree(leaf(("a", "f", blob, 1))[:-3]))


def wrong_bucket():
    f = Forge()
    blob = f.full(b"x")
    child = f.tree(encode_leaf({("a", "f"): Entry("f", blob, 1)}))
    return f, f.commit(f.tree(encode_split(0, {(_bucket("a", 0) + 1) % 16: child})))


def wrong_level():
    f = Forge()
    blob = f.full(b"x")
    child = f.tree(encode_leaf({("a", "f"): Entry("f", blob, 1)}))
    return f, f.commit(f.tree(encode_split(1, {_bucket("a", 1): child})))


def empty_leaf_in_split():
    f = Forge()
    return f, f.commit(f.tree(encode_split(0, {3: EMPTY_TREE_ID})))


def deep_directories():
    f = Forge()
    blob = f.full(b"x")
    node = f.tree(leaf(("f", "f", blob, 1)))
    for _ in range(3000):
        node = f.tree(leaf(("d", "d", node, 0)))
    return f, f.commit(node)


def deep_delta_chain():
    """3,000 deltas on deltas (normal commits cap a chain at 32)."""
    f = Forge()
    oid, size = f.full(b"x" * 200), 200
    for _ in range(3000):
        oid = f.delta(oid, [(0, 0, size), (1, 0, b"y")], size + 1)
        size += 1
    return f, f.commit(f.tree(leaf(("log.md", "f", oid, size))))


def full_blob_with_base():
    f = Forge()
    base = f.full(b"base")
    oid = blob_id("F", b"x")
    f.raw_blob(oid, b"F", base, b"x")
    return f, f.commit(f.tree(leaf(("a", "f", oid, 1))))


def delta_without_base():
    f = Forge()
    payload = delta.encode([(1, 0, b"x")])
    oid = blob_id("F", payload)
    f.raw_blob(oid, b"D", b"", payload)
    return f, f.commit(f.tree(leaf(("a", "f", oid, 1))))


def bad_delta_opcode():
    f = Forge()
    base = f.full(b"base")
    payload = b"\x07garbage"
    oid = blob_id("D", payload, base)
    f.raw_blob(oid, b"D", base, payload)
    return f, f.commit(f.tree(leaf(("a", "f", oid, 1))))


def delta_copies_past_base():
    f = Forge()
    base = f.full(b"base")
    oid = f.delta(base, [(0, 0, 99)], 99)
    return f, f.commit(f.tree(leaf(("a", "f", oid, 99))))


def missing_parent():
    f, _ = one_file("a")
    root = f.records[1][1][0]
    return f, f.commit(root, parents=(b"\x01" * 20,), message="child")


def missing_tree():
    f = Forge()
    return f, f.commit(b"\x02" * 20)


def control_in(field: str):
    def case():
        f = Forge()
        blob = f.full(b"x")
        root = f.tree(leaf(("a", "f", blob, 1)))
        kwargs = {"author": "eve\x1b[2J", "message": "ok"} if field == "author" else {"message": "fine\x1b]0;pwned\x07"}
        return f, f.commit(root, **kwargs)

    return case


def meta_not_object():
    f = Forge()
    blob = f.full(b"x")
    root = f.tree(leaf(("a", "f", blob, 1)))
    data = CommitData(root, (), 1, "a", "m").encode() + b"[1,2]"
    return f, f.commit(root, data=data)


def commit_padded():
    f = Forge()
    blob = f.full(b"x")
    root = f.tree(leaf(("a", "f", blob, 1)))
    data = CommitData(root, (), 1, "a", "m", {"k": 1}).encode().replace(b'{"k":1}', b'{ "k": 1 }')
    return f, f.commit(root, data=data)


def stray_blob():
    f, tip = one_file("a")
    f.full(b"nobody names me")
    return f, tip


CASES = {
    "dotdot": (bad_name(".."), "not allowed"),
    "slash": (bad_name("a/b"), "one path segment"),
    "empty-name": (bad_name(""), "one path segment"),
    "escape": (bad_name("x\x1b[31m"), "not allowed"),
    "nul": (bad_name("a\x00b"), "not allowed"),
    "non-utf8": (bad_name(b"\xff\xfe"), "malformed"),
    "unsorted": (unsorted, "canonical"),
    "duplicate": (duplicate, "canonical"),
    "dir-size": (dir_with_size, "records a size"),
    "unknown-kind": (unknown_kind, "unknown kind"),
    "truncated-tree": (truncated_tree, "malformed"),
    "wrong-size": (wrong_size, "records size 8"),
    "wrong-bucket": (wrong_bucket, "wrong hash bucket"),
    "wrong-level": (wrong_level, "level 1"),
    "empty-leaf": (empty_leaf_in_split, "empty leaf"),
    "deep-dirs": (deep_directories, "deeper than 255"),
    "deep-delta-chain": (deep_delta_chain, "more than 32 bases"),
    "full-with-base": (full_blob_with_base, "invalid kind or base"),
    "delta-without-base": (delta_without_base, "invalid kind or base"),
    "bad-opcode": (bad_delta_opcode, "unknown operation"),
    "copy-past-base": (delta_copies_past_base, "past the end"),
    "missing-parent": (missing_parent, "missing"),
    "missing-tree": (missing_tree, "missing"),
    "author-control": (control_in("author"), "control character"),
    "message-control": (control_in("message"), "control character"),
    "meta-not-object": (meta_not_object, "not a JSON object"),
    "commit-padded": (commit_padded, "canonical"),
    "stray-blob": (stray_blob, "used by no commit"),
}

# What fsck says about the same rows written directly (a store has no "stray" notion: gc's job).
FSCK_SAYS = {
    "dotdot": "not allowed", "slash": "one path segment", "empty-name": "one path segment",
    "escape": "not allowed", "nul": "not allowed", "non-utf8": "malformed", "unsorted": "canonical",
    "duplicate": "canonical", "dir-size": "records a size", "unknown-kind": "unknown kind",
    "truncated-tree": "malformed", "wrong-size": "records size 8", "wrong-bucket": "wrong hash bucket",
    "wrong-level": "level 1", "empty-leaf": "empty leaf", "deep-dirs": "deeper than 255",
    "deep-delta-chain": "depth", "missing-parent": "missing parent", "missing-tree": "missing",
    "author-control": "control character", "message-control": "control character",
    "meta-not-object": "not a JSON object", "commit-padded": "canonical", "copy-past-base": "corrupt delta",
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_malformed_objects_are_refused_and_nothing_is_written(case, tmp_path):
    build, expected = CASES[case]
    forge, tip = build()
    message = await _refused(tmp_path, forge.bundle(tip), case)
    assert expected in message, message


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(FSCK_SAYS))
async def test_fsck_reports_the_same_damage_written_directly(case, tmp_path):
    forge, tip = CASES[case][0]()
    store = VersionedStore(tmp_path / "damaged")
    try:
        forge.write_into(store, tip)
        problems = await store.fsck()
        assert any(FSCK_SAYS[case] in p for p in problems), problems
    finally:
        store.close()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_a_deep_chain_already_in_a_store_is_an_error_not_a_recursion(tmp_path):
    forge, tip = deep_delta_chain()
    store = VersionedStore(tmp_path / "deep")
    try:
        forge.write_into(store, tip)
        with pytest.raises(memrev.IntegrityError, match="more than 32 bases"):
            await store.read("/log.md")
        with pytest.raises(memrev.IntegrityError, match="more than 32 bases"):
            await store.read_range("/log.md", 0, 10)
        with pytest.raises(memrev.IntegrityError, match="more than 32 bases"):
            await store.write("/log.md", "x" * 300)
        assert await store.fsck()
    finally:
        store.close()


async def test_entry_size_is_what_read_and_read_range_agree_on(tmp_path):
    """The reported case: an entry saying 8 bytes over a 5-byte blob is refused at import."""
    forge, tip = wrong_size()
    message = await _refused(tmp_path, forge.bundle(tip), "size")
    assert "whose blob holds 5" in message


async def test_a_valid_forged_bundle_imports(tmp_path):
    """The forging helpers make bundles memrev accepts when nothing is wrong (so the
    refusals above are about the defect, not the helpers)."""
    f = Forge()
    blob = f.full(b"hello")
    big = f.full(b"x" * 300)
    grown = f.delta(big, [(0, 0, 300), (1, 0, b"more\n")], 305)
    sub = f.tree(encode_leaf({("grown.md", "f"): Entry("f", grown, 305)}))
    root = f.tree(encode_leaf({("a.md", "f"): Entry("f", blob, 5), ("sub", "d"): Entry("d", sub)}))
    base_commit = f.commit(root, message="first\n\tindented line")
    tip = f.commit(root, parents=(base_commit,), message="second", meta={"k": [1, "two"]})
    path = tmp_path / "ok.memrev"
    path.write_bytes(f.bundle(tip))
    store = VersionedStore(tmp_path / "ok")
    try:
        assert await store.import_bundle(path) == {"refs/heads/main": tip.hex()}
        assert await store.read("/sub/grown.md") == "x" * 300 + "more\n"
        assert await store.fsck() == []
    finally:
        store.close()


async def test_trailing_data_inside_the_frame_is_refused(tmp_path):
    f, tip = one_file("a")
    sealed = f.bundle(tip)
    raw = zstandard.ZstdDecompressor().decompress(sealed[len(BUNDLE_MAGIC):])
    tampered = BUNDLE_MAGIC + zstandard.ZstdCompressor().compress(raw + b"extra")
    message = await _refused(tmp_path, tampered, "inner-tail")
    assert "trailing" in message


async def test_a_second_frame_after_the_bundle_is_refused(tmp_path):
    f, tip = one_file("a")
    tail = zstandard.ZstdCompressor().compress(b"")
    message = await _refused(tmp_path, f.bundle(tip) + tail, "frame-tail")
    assert "trailing" in message


async def test_control_characters_in_commit_messages_are_refused_when_committing(tmp_path):
    """The same check guards commits made here (item 17: one rule, not two)."""
    store = VersionedStore(tmp_path / "s")
    try:
        with pytest.raises(memrev.InvalidContent, match="control character"):
            await store.write("/a.md", "x", message="hi\x1b[2J")
        await store.write("/a.md", "x", message="two\nlines\tand a tab")
        assert [c.message for c in await store.log()] == ["two\nlines\tand a tab"]
    finally:
        store.close()

