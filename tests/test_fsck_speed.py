"""fsck's tree work (issue 14): leaf trees judged canonical while decoding must
agree with the re-encode they replaced, and fsck reads each tree once, a page
of commits' new trees per statement, hashing each object once. Work is
counted (statements, hash calls), never timed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.test_maintenance_scale import CountingBackend, _build

import memrev.maintenance.fsck
from memrev.backends import open_backend
from memrev.core import trees
from memrev.core.objects import (
    ID_BYTES,
    Entry,
    check_tree,
    decode_tree,
    encode_leaf,
    put_varint,
)
from memrev.maintenance.fsck import fsck
from memrev.repo.ops import Write
from memrev.repo.repository import Repository


def _by_re_encoding(data: bytes) -> bool:
    """The check as it was: decode, check kinds and names, re-encode, compare bytes."""
    try:
        kind, body = decode_tree(data)
        for (name, k), entry in body.items():
            if k not in ("f", "d") or (k == "d" and entry.size):
                return False
            trees.check_name(name)
    except ValueError:
        return False
    return kind == "T" and encode_leaf(body) == data


def _accepted(data: bytes) -> bool:
    try:
        check_tree(data, trees.check_name)
    except ValueError:
        return False
    return True


names = st.sampled_from(["a", "b", "ab", "é", "x" * 130, "a.md", ".", "d"])
entries = st.dictionaries(
    st.tuples(names, st.sampled_from(["f", "d"])),
    st.tuples(st.binary(min_size=ID_BYTES, max_size=ID_BYTES), st.integers(0, 70_000)),
    max_size=6,
)


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
@settings(max_examples=300, deadline=None)
@given(entries, st.data())
def test_canonical_while_decoding_agrees_with_re_encoding(content, data):
    body = {key: Entry(key[1], oid, 0 if key[1] == "d" else size) for key, (oid, size) in content.items()}
    good = encode_leaf(body)
    assert _accepted(good) and _by_re_encoding(good)
    # Damage: flip, drop or insert one byte anywhere (sizes, names, order, padding).
    pos = data.draw(st.integers(1, len(good)))
    byte = data.draw(st.integers(0, 255))
    for bad in (good[:pos] + bytes([byte]) + good[pos + 1 :], good[:pos] + good[pos + 1 :], good[:pos] + bytes([byte]) + good[pos:]):
        assert _accepted(bad) == _by_re_encoding(bad), bad


def _padded(n: int) -> bytes:
    """``n`` as a varint one byte longer than needed (a zero last group)."""
    out = bytearray()
    put_varint(out, n)
    out[-1] |= 0x80
    return bytes(out) + b"\0"


@pytest.mark.parametrize("where", ["name length", "size"])
def test_a_padded_varint_is_not_canonical(where):
    oid = bytes(ID_BYTES)
    length = _padded(1) if where == "name length" else b"\x01"
    size = _padded(300) if where == "size" else b"\xac\x02"
    with pytest.raises(ValueError, match="canonical"):
        check_tree(b"T" + length + b"a" + b"f" + oid + size, trees.check_name)


@pytest.mark.slow  # 0.7 s in the quick loop: builds a 600-commit store
def test_fsck_reads_trees_a_page_at_a_time_and_hashes_each_object_once(tmp_path: Path, monkeypatch):
    """Before, every tree was read by a point query of its own (one statement
    per tree); now a page of commits' new trees is read a level per statement."""
    _build(tmp_path / "s", 600).backend.close()
    hashed: Counter[bytes] = Counter()

    def counting(real):
        def hash_once(data: bytes) -> bytes:
            oid = real(data)
            hashed[oid] += 1
            return oid

        return hash_once

    monkeypatch.setattr(memrev.maintenance.fsck, "tree_id", counting(memrev.maintenance.fsck.tree_id))
    monkeypatch.setattr(memrev.maintenance.fsck, "commit_id", counting(memrev.maintenance.fsck.commit_id))
    counted = CountingBackend(open_backend(str(tmp_path / "s"), create=False))
    try:
        assert fsck(Repository(counted)) == []
        n_trees = sum(1 for _ in counted._backend.iter_trees())
        n_commits = sum(1 for _ in counted._backend.iter_commits())
    finally:
        counted.close()
    assert len(hashed) == n_trees + n_commits and set(hashed.values()) == {1}
    # Point reads are left only for the head check, which rebuilds the branch
    # head through the repository: its root and 4 directories (was one per tree).
    assert counted.calls["get_tree"] <= 5, counted.calls
    assert counted.calls["get_trees"] <= 3 * (n_commits // memrev.maintenance.fsck.COMMIT_PAGE + 1), counted.calls



def test_a_tree_read_again_as_the_old_side_of_a_diff_is_not_checked_again(tmp_path: Path, monkeypatch):
    """The old side of a commit's diff is its first parent's tree, which passed
    before: a node of it the cache let go is read again (one row in the level's
    statement) but only decoded, not hashed and checked again. Here 300 leaf
    directories each change every 300 commits (as bench/speed.py's spread store
    past 10,000 commits), so the old side of each later commit's directory has
    left the cache: each was hashed a second time (256 here); now none is."""
    repo = Repository(open_backend(str(tmp_path / "s")))
    try:
        for i in range(600):
            repo.commit("main", [Write(f"/d{i % 20:02d}/s{(i // 20) % 15:02d}/f{i // 300}.md", f"{i}\n".encode())], author="t")
    finally:
        repo.backend.close()
    hashed: Counter[bytes] = Counter()
    real = memrev.maintenance.fsck.tree_id

    def counting(data: bytes) -> bytes:
        oid = real(data)
        hashed[oid] += 1
        return oid

    monkeypatch.setattr(memrev.maintenance.fsck, "tree_id", counting)
    repo = Repository(open_backend(str(tmp_path / "s"), create=False))
    try:
        assert fsck(repo) == []
        n_trees = sum(1 for _ in repo.backend.iter_trees())
    finally:
        repo.backend.close()
    again = sum(hashed.values()) - len(hashed)
    assert len(hashed) == n_trees and again == 0, again  # was 256
