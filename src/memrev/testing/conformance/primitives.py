"""The backend primitives: blobs and append runs, trees, commits, refs and locks, the head and change indexes."""

from __future__ import annotations

import os
import time

import pytest

from ... import errors
from ...backends.base import Backend, BlobRow, CommitWrite, HeadRow
from .base import ConformanceBase, in_thread, joined, make_oid

# Paths that a prefix scan must tell apart: siblings that sort between "a" and
# "a/" ("a-", "a."), right after it ("a0"), LIKE wildcards, case, non-ASCII.
_HEAD_PATHS = [
    "/a", "/a/b", "/a/b/c", "/a/é", "/a-b", "/a.b", "/a0", "/a!", "/a_", "/a_/x", "/a%/y", "/aXb/u",
    "/A/z", "/ab/x", "/aB", "/é/1", "/e\u0301/2", "/日本/3", "/😀/4", "/a/😀",
]


class PrimitiveContracts(ConformanceBase):
    """``test_backend_*``: the backend primitives, called directly (a mixin of ``BackendConformance``)."""

    def test_backend_blobs_round_trip_and_are_idempotent(self, memrev_backend: Backend, memrev_location: str):
        b = memrev_backend
        binary = bytes(range(256)) * 3
        rows = [
            BlobRow(make_oid("full"), "F", None, None, 0, 5, 0, b"rhello"),
            BlobRow(make_oid("delta"), "D", make_oid("full"), None, 0, 9, 1, b"z" + binary),
            BlobRow(b"\x00" * 19 + b"\xff", "F", None, None, 0, 0, 0, b"r"),  # NUL bytes in the id
            BlobRow(make_oid("big"), "F", None, None, 0, 1 << 20, 0, os.urandom(1 << 20)),
            BlobRow(make_oid("huge"), "A", make_oid("full"), make_oid("huge"), 1 << 33, (1 << 33) + 5, 3, b"r12345"),  # 64-bit
        ]
        assert b.get_blob(rows[0].id) is None
        with b.write():
            for row in rows:
                b.put_blob(row)
        for row in rows:
            got = b.get_blob(row.id)
            assert got == row, f"get_blob({row.id!r}) returned {got!r:.200}, expected {row!r:.200}"
            assert type(got.data) is bytes and (got.base is None or type(got.base) is bytes)
        with b.write():  # the same row again: no error, nothing changes
            b.put_blob(rows[0])
            b.put_blob(rows[1])
        assert b.get_blob(rows[0].id) == rows[0]
        assert sorted(b.iter_blob_ids()) == sorted(r.id for r in rows)
        other = self._second_backend(memrev_location)
        try:
            assert other.get_blob(rows[1].id) == rows[1], "a committed blob is visible to another handle"
        finally:
            other.close()

    def test_backend_append_runs(self, memrev_backend: Backend):
        b = memrev_backend
        run, other_run = make_oid("run"), make_oid("other-run")
        base = BlobRow(make_oid("base"), "F", None, None, 0, 4, 0, b"rabcd")
        pieces = [
            BlobRow(run, "A", base.id, run, 4, 7, 1, b"refg"),
            BlobRow(make_oid("p2"), "A", run, run, 7, 9, 1, b"rhi"),
            BlobRow(make_oid("p3"), "A", make_oid("p2"), run, 9, 15, 1, b"rjklmno"),
        ]
        stranger = BlobRow(other_run, "A", base.id, other_run, 4, 6, 1, b"rXY")
        with b.write():
            b.put_blob(base)
            for row in [*pieces, stranger]:
                b.put_blob(row)
            b.put_blob(pieces[1])  # idempotent, also for append pieces
        with b.write():
            assert b.lineage_has(run, 4) and b.lineage_has(run, 7) and b.lineage_has(run, 9)
            assert not b.lineage_has(run, 5) and not b.lineage_has(run, 15) and not b.lineage_has(base.id, 0)
        assert b.lineage_has(other_run, 4)
        starts = {p.start: p for p in pieces}
        for lo, hi in [(0, 15), (4, 15), (4, 5), (5, 8), (7, 9), (8, 9), (9, 10), (6, 14), (14, 15)]:
            got = b.lineage_pieces(run, lo, hi)
            got_starts = [p.start for p in got]
            assert got_starts == sorted(got_starts), f"lineage_pieces(run, {lo}, {hi}) not in order: {got_starts}"
            assert all(p.lineage == run for p in got), f"lineage_pieces(run, {lo}, {hi}) returned another run's piece"
            assert all(p.start < hi for p in got), f"lineage_pieces(run, {lo}, {hi}) returned {got_starts}"
            needed = [s for s, p in starts.items() if s < hi and p.size > lo]
            assert set(needed) <= set(got_starts), (
                f"lineage_pieces(run, {lo}, {hi}) returned pieces starting at {got_starts}, "
                f"missing {sorted(set(needed) - set(got_starts))}"
            )
            for p in got:
                assert p == starts[p.start]

    def test_backend_append_run_clash_is_an_error(self, memrev_backend: Backend):
        """A piece whose place ``(lineage, start)`` is taken by another blob id is refused, never dropped.

        ``put_blob`` ignores a duplicate *id* (content-addressed, so it is the
        same row), but two different pieces claiming one place in a run means
        two writers extended the same run: storing neither silently would
        leave a tree naming a blob that does not exist.
        """
        b = memrev_backend
        run = make_oid("run")
        base = BlobRow(make_oid("base"), "F", None, None, 0, 4, 0, b"rabcd")
        piece = BlobRow(run, "A", base.id, run, 4, 7, 1, b"refg")
        clash = BlobRow(make_oid("clash"), "A", base.id, run, 4, 6, 1, b"rXY")
        with b.write():
            b.put_blob(base)
            b.put_blob(piece)
        refused: BaseException | None = None
        try:
            with b.write():
                b.put_blob(clash)
        except Exception as e:  # noqa: BLE001 - any error is a refusal (PostgreSQL: ConcurrentUpdate)
            refused = e
        stored = b.get_blob(clash.id)
        assert refused is not None, (
            "put_blob of a piece whose (lineage, start) another blob already holds returned without error, "
            f"and get_blob of it now returns {stored!r}: the row was dropped silently"
        )
        assert stored is None, "a refused put_blob left its row behind"
        assert b.get_blob(piece.id) == piece and b.lineage_pieces(run, 4, 7) == [piece]
        with b.write():  # the handle is usable after the refusal
            b.put_blob(BlobRow(make_oid("next"), "A", run, run, 7, 8, 1, b"rh"))
        assert [p.start for p in b.lineage_pieces(run, 4, 8)] == [4, 7]

    def test_backend_trees_round_trip_and_are_idempotent(self, memrev_backend: Backend):
        b = memrev_backend
        trees = {make_oid("t1"): b"T\x00\x01tree one", make_oid("t2"): bytes(range(256)), make_oid("t3"): b"x" * 100_000}
        assert b.get_tree(make_oid("t1")) is None
        with b.write():
            for oid, data in trees.items():
                b.put_tree(oid, data)
            b.put_tree(make_oid("t1"), trees[make_oid("t1")])
        for oid, data in trees.items():
            assert b.get_tree(oid) == data
            assert type(b.get_tree(oid)) is bytes
        assert dict(b.iter_trees()) == trees

    def test_backend_commits_sequence_numbers_and_first_parent(self, memrev_backend: Backend):
        b = memrev_backend
        ids = [make_oid("c", i) for i in range(5)]
        with b.write():
            seqs = [b.put_commit(ids[0], None, b"data0")]
            for i in range(1, 5):
                seqs.append(b.put_commit(ids[i], ids[i - 1], f"data{i}".encode()))
            again = b.put_commit(ids[2], ids[1], b"data2")
        assert all(isinstance(s, int) and s >= 1 for s in seqs), f"commit numbers must be ints >= 1, got {seqs}"
        assert seqs == sorted(seqs) and len(set(seqs)) == 5, f"commit numbers must increase in insertion order: {seqs}"
        assert again == seqs[2], f"put_commit of an existing id returned {again}, expected its number {seqs[2]}"
        for i, oid in enumerate(ids):
            assert b.get_commit(oid) == (seqs[i], f"data{i}".encode())
            assert b.commit_at(seqs[i]) == (oid, f"data{i}".encode())
        assert b.get_commit(make_oid("missing")) is None
        assert b.commit_at(max(seqs) + 1000) is None
        assert list(b.iter_commits()) == [(s, oid, f"data{i}".encode()) for i, (s, oid) in enumerate(zip(seqs, ids))]
        got = b.commits_at([seqs[3], seqs[0], max(seqs) + 1000])
        assert sorted(got) == sorted([(seqs[0], ids[0], b"data0"), (seqs[3], ids[3], b"data3")])
        assert b.commits_at([]) == []
        # first-parent walks
        assert b.first_parent(ids[4], 0) == ids[4]
        for steps in range(5):
            assert b.first_parent(ids[4], steps) == ids[4 - steps], f"first_parent(c4, {steps})"
        assert b.first_parent(ids[4], 5) is None
        assert b.first_parent(ids[4], 50) is None
        assert b.first_parent(ids[0], 1) is None

    def test_backend_commits_with_prefix(self, memrev_backend: Backend):
        b = memrev_backend
        ids = [bytes.fromhex(h + "00" * 18) for h in ("ab00", "ab01", "abff", "ac00", "aa00", "ffff", "ff00", "00ab")]
        with b.write():
            for i, oid in enumerate(ids):
                b.put_commit(oid, None, b"c%d" % i)

        def found(prefix: str, limit: int = 50) -> set[bytes]:
            got = b.commits_with_prefix(bytes.fromhex(prefix), limit)
            assert len(got) == len(set(got)) <= limit, f"commits_with_prefix({prefix}, {limit}) returned {got}"
            return set(got)

        def expected(prefix: str) -> set[bytes]:
            return {i for i in ids if i.hex().startswith(prefix)}

        for prefix in ("ab", "ab01", "ac", "aa", "ff", "ffff", "00", "01", "abff", "ab0100"):
            assert found(prefix) == expected(prefix), f"commits_with_prefix({prefix})"
        limited = found("ab", 2)
        assert len(limited) == 2 and limited <= expected("ab")

    def test_backend_refs_compare_and_swap(self, memrev_backend: Backend):
        b = memrev_backend
        A, B, C = make_oid("A"), make_oid("B"), make_oid("C")
        name = "refs/heads/main"
        assert b.get_ref(name) is None
        with b.write():
            assert b.lock_ref(name) is None
            assert b.set_ref_if_equals(name, None, A) is True, "create-if-absent on a missing ref must succeed"
        assert b.get_ref(name) == A
        with b.write():
            assert b.set_ref_if_equals(name, None, B) is False, "create-if-absent on an existing ref must fail"
            assert b.set_ref_if_equals(name, C, B) is False, "a swap from a stale value must fail"
            assert b.get_ref(name) == A, "a failed swap changed the ref"
            assert b.lock_ref(name) == A
            assert b.set_ref_if_equals(name, A, B) is True
            assert b.get_ref(name) == B, "inside write(), the transaction sees its own ref move"
        assert b.get_ref(name) == B
        with b.write():
            assert b.set_ref_if_equals("refs/heads/other", A, C) is False, "a swap on a missing ref must fail"
        assert b.get_ref("refs/heads/other") is None

    def test_backend_refs_listing_is_literal_and_case_sensitive(self, memrev_backend: Backend):
        b = memrev_backend
        refs = {
            "refs/heads/main": make_oid("1"), "refs/heads/ma_n": make_oid("2"), "refs/heads/Main": make_oid("3"),
            "refs/heads/m%": make_oid("4"), "refs/heads/main/sub": make_oid("5"), "refs/tags/v1": make_oid("6"),
            "refs/headsX/y": make_oid("7"), "refs/deleted/x@1": make_oid("8"),
        }
        with b.write():
            for name, target in refs.items():
                assert b.set_ref_if_equals(name, None, target)
        for prefix in ("refs/", "refs/heads/", "refs/heads/m", "refs/heads/ma_", "refs/heads/ma%", "refs/heads/m%",
                       "refs/heads/M", "refs/heads/main", "refs/tags/", "refs/heads", "", "nope/", "refs/heads/_"):
            want = {n: t for n, t in refs.items() if n.startswith(prefix)}
            assert b.list_refs(prefix) == want, f"list_refs({prefix!r}) returned {sorted(b.list_refs(prefix))}"
        with b.write():
            b.delete_ref("refs/heads/ma_n")
            b.delete_ref("refs/heads/never-existed")  # no error
        assert b.get_ref("refs/heads/ma_n") is None and b.get_ref("refs/heads/main") == refs["refs/heads/main"]
        with b.write():  # a deleted ref can be created again
            assert b.set_ref_if_equals("refs/heads/ma_n", None, make_oid("9"))
        assert b.get_ref("refs/heads/ma_n") == make_oid("9")

    @pytest.mark.parametrize("exists", [False, True], ids=["new-ref", "existing-ref"])
    def test_backend_lock_ref_serializes_writers(self, memrev_location: str, exists: bool):
        """A second writer's ``lock_ref`` waits for the first transaction, then sees its move."""
        name, A, B, C = "refs/heads/locked", make_oid("A"), make_oid("B"), make_oid("C")
        a, b = self._second_backend(memrev_location), self._second_backend(memrev_location)
        try:
            old = None
            if exists:
                with a.write():
                    assert a.set_ref_if_equals(name, None, A)
                old = A

            def second() -> tuple:
                with b.write():
                    seen = b.lock_ref(name)
                    return seen, b.set_ref_if_equals(name, seen, C)

            with a.write():
                assert a.lock_ref(name) == old
                t, out = in_thread(second)
                time.sleep(0.3)
                assert out == [], f"a second writer got past lock_ref while the first held it: {out}"
                assert a.set_ref_if_equals(name, old, B)
            seen, moved = joined(t, out, "the second writer")
            assert seen == B, f"after waiting, the second writer's lock_ref returned {seen!r}, expected {B!r}"
            assert moved is True
            assert a.get_ref(name) == C
        finally:
            a.close()
            b.close()

    def test_backend_write_is_atomic_and_isolated(self, memrev_backend: Backend, memrev_location: str):
        """An exception inside ``write()`` undoes every primitive; other handles never see uncommitted rows."""
        b = memrev_backend
        reader = self._second_backend(memrev_location)
        name = "refs/heads/main"
        try:
            with b.write():
                assert b.set_ref_if_equals(name, None, make_oid("old"))
            with pytest.raises(RuntimeError, match="boom"):
                with b.write():
                    b.put_blob(BlobRow(make_oid("blob"), "F", None, None, 0, 1, 0, b"rx"))
                    b.put_tree(make_oid("tree"), b"tree")
                    seq = b.put_commit(make_oid("commit"), None, b"commit")
                    assert b.lock_ref(name) == make_oid("old")
                    assert b.set_ref_if_equals(name, make_oid("old"), make_oid("commit"))
                    assert b.set_ref_if_equals("refs/tags/t", None, make_oid("commit"))
                    b.head_put("main", [HeadRow("/f", make_oid("blob"), 1, seq)])
                    b.change_put([("/f", seq, None, None)])
                    # readers on another handle see none of it, and are not blocked
                    t, out = in_thread(lambda: (reader.get_ref(name), reader.get_commit(make_oid("commit")),
                                                 reader.head_get("main", "/f")))
                    assert joined(t, out, "a reader during a write", 20) == (make_oid("old"), None, None)
                    raise RuntimeError("boom")
            assert b.get_blob(make_oid("blob")) is None
            assert b.get_tree(make_oid("tree")) is None
            assert b.get_commit(make_oid("commit")) is None
            assert b.get_ref(name) == make_oid("old") and b.get_ref("refs/tags/t") is None
            assert b.head_get("main", "/f") is None and b.head_all("main") == []
            assert b.change_prev("/f", seq) is None and b.paths_at([seq]) == {}
            with b.write():  # the handle is usable after a rollback
                assert b.set_ref_if_equals(name, make_oid("old"), make_oid("new"))
            assert reader.get_ref(name) == make_oid("new")
        finally:
            reader.close()

    def test_backend_exclusive_write_excludes_other_writers(self, memrev_location: str):
        a, b = self._second_backend(memrev_location), self._second_backend(memrev_location)
        try:
            def other() -> bool:
                with b.write():
                    return b.set_ref_if_equals("refs/heads/x", None, make_oid("b"))

            with a.write(exclusive=True):
                t, out = in_thread(other)
                time.sleep(0.3)
                assert out == [], "a write transaction ran while write(exclusive=True) was open"
                assert a.set_ref_if_equals("refs/heads/y", None, make_oid("a"))
            assert joined(t, out, "a writer waiting for an exclusive write") is True
            assert a.list_refs("refs/heads/") == {"refs/heads/x": make_oid("b"), "refs/heads/y": make_oid("a")}
        finally:
            a.close()
            b.close()

    def test_backend_head_index_rows_are_exact_per_branch(self, memrev_backend: Backend):
        b = memrev_backend
        rows = [HeadRow(p, make_oid("blob", i), i + 1, 10 + i) for i, p in enumerate(_HEAD_PATHS)]
        dead = [HeadRow("/a/dead", None, 0, 40), HeadRow("/t/dead", None, 0, 41), HeadRow("/t/x/dead", None, 0, 41)]
        with b.write():
            b.head_put("main", rows + dead)
            b.head_put("other", [HeadRow("/a/other", make_oid("o"), 1, 50), HeadRow("/t/y", make_oid("o"), 1, 50)])
            b.head_put("main", [])  # empty batch: no-op
        by_path = {r.path: r for r in rows}
        live = set(by_path)
        for r in rows + dead:
            assert b.head_get("main", r.path) == r, f"head_get('main', {r.path!r})"
        for missing in ("/A", "/a/b/", "/a/other", "/nope", "/A/Z", "/e", "/e\u0301/1", "/\u00e9/2"):
            assert b.head_get("main", missing) is None, f"head_get('main', {missing!r}) should be None"
        assert b.head_get("other", "/a") is None
        assert sorted(b.head_all("main"), key=lambda r: r.path) == sorted(rows + dead, key=lambda r: r.path)
        assert sorted(b.head_rows("main"), key=lambda r: r.path) == sorted(rows, key=lambda r: r.path)
        # a later put replaces the row, a tombstone replaces a file and the other way round
        with b.write():
            b.head_put("main", [HeadRow("/a", make_oid("new"), 99, 60), HeadRow("/a/b", None, 0, 60),
                                HeadRow("/a/dead", make_oid("alive"), 5, 60)])
        assert b.head_get("main", "/a") == HeadRow("/a", make_oid("new"), 99, 60)
        assert b.head_get("main", "/a/b") == HeadRow("/a/b", None, 0, 60)
        assert {r.path for r in b.head_rows("main")} == (live - {"/a/b"}) | {"/a", "/a/dead"}
        assert len(b.head_all("main")) == len(rows + dead)
        with b.write():
            b.head_clear("main")
        assert b.head_all("main") == [] and b.head_get("main", "/a") is None
        assert len(b.head_all("other")) == 2, "head_clear cleared another branch"

    def test_backend_change_index(self, memrev_backend: Backend):
        """Per-path change rows: first parent's previous change, merged side's, chains and lookups."""
        b = memrev_backend
        rows = [
            ("/x", 1, None, None), ("/x", 2, 1, None), ("/x", 3, 1, None), ("/x", 5, 2, 3),  # 5 merges 2 and 3
            ("/y", 2, None, None), ("/y", 4, 2, None), ("/X", 4, None, None), ("/x_", 6, None, None),
        ]
        with b.write():
            b.change_put(rows)
            b.change_put([])
        assert b.change_prev("/x", 5) == (2, 3)
        assert b.change_prev("/x", 2) == (1, None)
        assert b.change_prev("/x", 1) == (None, None)
        assert b.change_prev("/x", 4) is None and b.change_prev("/nope", 1) is None
        assert b.change_chain("/x", 5) == [5, 3, 2, 1]
        assert b.change_chain("/x", 3) == [3, 1]
        assert b.change_chain("/y", 4) == [4, 2]
        assert b.change_chain("/X", 4) == [4]
        assert b.change_before("/x", 4) == 3
        assert b.change_before("/x", 5) == 5
        assert b.change_before("/x", 100) == 5
        assert b.change_before("/x", 0) is None
        assert b.change_before("/nope", 100) is None
        assert b.change_before("/X", 100) == 4, "paths are case-sensitive"
        got = {k: sorted(v) for k, v in b.paths_at([2, 4, 6, 99]).items()}
        assert got == {2: ["/x", "/y"], 4: ["/X", "/y"], 6: ["/x_"]}, f"paths_at returned {got}"
        assert b.paths_at([]) == {}
        assert sorted(b.change_rows("/x", 5)) == [(1, None, None), (2, 1, None), (3, 1, None), (5, 2, 3)]
        assert sorted(b.change_rows("/x", 2)) == [(1, None, None), (2, 1, None)]
        assert b.change_rows("/x_", 5) == [] and b.change_rows("/nope", 99) == []
        with b.write():  # a row put again is replaced
            b.change_put([("/x", 5, 2, None)])
        assert b.change_prev("/x", 5) == (2, None)
        assert b.change_chain("/x", 5) == [5, 2, 1]

    def test_backend_write_commit_stores_the_commit_and_moves_the_ref(self, memrev_backend: Backend):
        """write_commit: the commit row (first parent: the old head), head and change rows with
        their history links, the ref moved; a ref no longer at the old head: ConcurrentUpdate,
        nothing written (a backend may raise it when the transaction ends)."""
        b = memrev_backend
        ref, A, B, C = "refs/heads/main", make_oid("A"), make_oid("B"), make_oid("C")

        def links(rows: list[HeadRow]) -> dict[str, int | None]:  # what Repository passes: the head rows' numbers
            return {r.path: None if (row := b.head_get("main", r.path)) is None else row.seq for r in rows}

        rows = [HeadRow("/d/f", make_oid("b1"), 3, 0), HeadRow("/d/", None, 0, 0)]
        with b.write():
            number = b.write_commit(CommitWrite(ref, "main", None, A, b"commit A", rows, {}, links(rows)))
        seq_a = number()
        assert b.get_ref(ref) == A and b.get_commit(A) == (seq_a, b"commit A")
        assert b.head_get("main", "/d/f") == HeadRow("/d/f", make_oid("b1"), 3, seq_a)
        assert b.change_prev("/d/f", seq_a) == (None, None) and b.change_prev("/d/", seq_a) == (None, None)
        rows = [HeadRow("/d/f", None, 0, 0), HeadRow("/d/", None, 0, 0), HeadRow("/e", make_oid("b2"), 1, 0)]
        with b.write():
            number = b.write_commit(CommitWrite(ref, "main", A, B, b"commit B", rows, {"/e": 7}, links(rows)))
        seq_b = number()
        assert seq_b > seq_a and b.get_ref(ref) == B and b.first_parent(B, 1) == A
        assert b.head_get("main", "/d/f") == HeadRow("/d/f", None, 0, seq_b), "a deletion is a tombstone row"
        assert b.change_prev("/d/f", seq_b) == (seq_a, None) and b.change_prev("/d/", seq_b) == (seq_a, None)
        assert b.change_prev("/e", seq_b) == (None, 7), "prev2: the merged line's last change"
        commits = len(list(b.iter_commits()))
        rows = [HeadRow("/e", make_oid("b3"), 1, 0)]
        with pytest.raises(errors.ConcurrentUpdate), b.write():
            b.write_commit(CommitWrite(ref, "main", A, C, b"commit C", rows, {}, links(rows)))
        assert b.get_ref(ref) == B and b.get_commit(C) is None and len(list(b.iter_commits())) == commits
        assert b.head_get("main", "/e") == HeadRow("/e", make_oid("b2"), 1, seq_b)

    def test_backend_a_path_s_changes_with_their_commits(self, memrev_backend: Backend):
        """``change_commits``: a path's change rows joined to their commits (a missing one as
        ``None, None``); ``change_paths``: what each of those commits changed."""
        b = memrev_backend
        ids = [make_oid("pc", i) for i in range(4)]
        with b.write():
            seqs = [b.put_commit(oid, None, b"rec%d" % i) for i, oid in enumerate(ids)]
            b.change_put([
                ("/f", seqs[0], None, None), ("/g", seqs[0], None, None), ("/f", seqs[2], seqs[0], None),
                ("/g", seqs[1], seqs[0], None), ("/f", seqs[3], seqs[2], seqs[1]), ("/d/", seqs[3], None, None),
                ("/f", seqs[3] + 50, seqs[3], None),  # names a commit that is not there
            ])
        got = sorted(b.change_commits("/f", seqs[3] + 50))
        assert got == [
            (seqs[0], None, None, ids[0], b"rec0"), (seqs[2], seqs[0], None, ids[2], b"rec2"),
            (seqs[3], seqs[2], seqs[1], ids[3], b"rec3"), (seqs[3] + 50, seqs[3], None, None, None),
        ], f"change_commits returned {got}"
        assert sorted(b.change_commits("/f", seqs[2])) == got[:2]
        assert b.change_commits("/nope", 99) == []
        paths = {k: sorted(v) for k, v in b.change_paths("/f", seqs[3]).items()}
        assert paths == {seqs[0]: ["/f", "/g"], seqs[2]: ["/f"], seqs[3]: ["/d/", "/f"]}, f"change_paths returned {paths}"
        assert b.change_paths("/nope", 99) == {}

    def test_backend_a_path_s_log_rows_newest_first_with_the_other_files(self, memrev_backend: Backend):
        """``path_log_rows``: ``change_commits`` newest first, each row with one other file
        its commit changed (directory keys left out; ``None`` if none), a commit with
        several once per file in consecutive rows; ``records=False``: ids only, once each."""
        b = memrev_backend
        ids = [make_oid("pl", i) for i in range(4)]
        with b.write():
            seqs = [b.put_commit(oid, None, b"rec%d" % i) for i, oid in enumerate(ids)]
            b.change_put([
                ("/f", seqs[0], None, None), ("/g", seqs[0], None, None), ("/h", seqs[0], None, None),
                ("/d/", seqs[1], None, None), ("/d/x", seqs[1], None, None), ("/d/", seqs[2], seqs[1], None),
                ("/d/y", seqs[2], None, None), ("/f", seqs[2], seqs[0], None), ("/f", seqs[3] + 50, seqs[2], None),
            ])
        rows = b.path_log_rows("/f", seqs[3] + 50)
        got = list(rows)
        assert got == [
            (seqs[3] + 50, seqs[2], None, None, None, None),
            (seqs[2], seqs[0], None, ids[2], b"rec2", "/d/y"),
            (seqs[0], None, None, ids[0], b"rec0", "/g"), (seqs[0], None, None, ids[0], b"rec0", "/h"),
        ], f"path_log_rows returned {got}"
        assert list(b.path_log_rows("/d/", seqs[2])) == [
            (seqs[2], seqs[1], None, ids[2], b"rec2", "/d/y"), (seqs[2], seqs[1], None, ids[2], b"rec2", "/f"),
            (seqs[1], None, None, ids[1], b"rec1", "/d/x"),
        ]
        assert list(b.path_log_rows("/f", seqs[0] - 1)) == [] and list(b.path_log_rows("/nope", 99)) == []
        assert list(b.path_log_rows("/f", seqs[3] + 50, records=False)) == [
            (seqs[3] + 50, seqs[2], None, None, None, None), (seqs[2], seqs[0], None, ids[2], None, None),
            (seqs[0], None, None, ids[0], None, None),
        ], "records=False: each commit once, without its record and files"

    def test_backend_blob_chain_follows_delta_bases(self, memrev_backend: Backend):
        """``blob_chain``: a blob and its delta bases in order, at most ``limit`` rows,
        ending at a row that is not a delta or at a missing base."""
        b = memrev_backend
        full = BlobRow(make_oid("bc", 0), "F", None, None, 0, 3, 0, b"rabc")
        deltas = [BlobRow(make_oid("bc", i), "D", make_oid("bc", i - 1), None, 0, 3, i, b"r%d" % i) for i in range(1, 5)]
        orphan = BlobRow(make_oid("bc", 9), "D", make_oid("bc", 8), None, 0, 3, 1, b"r9")  # its base is missing
        with b.write():
            for row in (full, *deltas, orphan):
                b.put_blob(row)
        assert b.blob_chain(deltas[3].id, 10) == [*deltas[::-1], full]
        assert b.blob_chain(deltas[3].id, 2) == deltas[:1:-1]
        assert b.blob_chain(full.id, 10) == [full]
        assert b.blob_chain(orphan.id, 10) == [orphan]
        assert b.blob_chain(make_oid("bc", 7), 10) == []

    def test_backend_a_new_store_has_no_stale_index(self, memrev_backend: Backend):
        """Only a migration of a store that holds commits marks an index stale (reindex clears it)."""
        b = memrev_backend
        assert b.stale_indexes() == set()
        with b.write():
            b.set_index_fresh("directory-keys")  # clearing what is not there is harmless
        assert b.stale_indexes() == set()

    def test_backend_batches_of_many_rows(self, memrev_backend: Backend):
        b = memrev_backend
        n = 1200
        with b.write():
            seqs = [b.put_commit(make_oid("m", i), None, b"%d" % i) for i in range(n)]
            b.change_put([(f"/p/{i % 7}", s, None, None) for i, s in enumerate(seqs)])
            b.head_put("main", [HeadRow(f"/p/{i:04d}", make_oid("b", i), i, seqs[i]) for i in range(n)])
        assert len(b.commits_at(seqs)) == n
        assert sum(len(v) for v in b.paths_at(seqs).values()) == n
        assert len(b.head_rows("main")) == n and len(list(b.iter_commits())) == n

    def test_backend_delete_unreachable(self, memrev_backend: Backend):
        b = memrev_backend
        c = [make_oid("c", i) for i in range(3)]
        t = [make_oid("t", i) for i in range(3)]
        bl = [make_oid("b", i) for i in range(3)]
        with b.write():
            seqs = [b.put_commit(c[0], None, b"0"), b.put_commit(c[1], c[0], b"1"), b.put_commit(c[2], c[1], b"2")]
            for i in range(3):
                b.put_tree(t[i], b"tree%d" % i)
                b.put_blob(BlobRow(bl[i], "F", None, None, 0, 1, 0, b"r%d" % i))
            b.change_put([("/f", seqs[i], seqs[i - 1] if i else None, None) for i in range(3)])
            assert b.set_ref_if_equals("refs/heads/main", None, c[1])
        with b.write(exclusive=True):
            assert b.delete_unreachable("commits", {c[0], c[1]}) == 1
            assert b.delete_unreachable("trees", {t[0]}) == 2
            assert b.delete_unreachable("blobs", {bl[1], bl[2], make_oid("never-stored")}) == 1
            assert b.delete_unreachable("commits", {c[0], c[1]}) == 0
        assert b.get_commit(c[2]) is None and b.commit_at(seqs[2]) is None
        assert b.get_commit(c[1]) == (seqs[1], b"1")
        assert b.paths_at([seqs[2]]) == {}, "change rows of a deleted commit must go with it"
        assert b.change_prev("/f", seqs[1]) == (seqs[0], None)
        assert b.get_tree(t[0]) == b"tree0" and b.get_tree(t[1]) is None and b.get_tree(t[2]) is None
        assert b.get_blob(bl[0]) is None and b.get_blob(bl[1]) is not None
        assert [oid for _, oid, _ in b.iter_commits()] == [c[0], c[1]]
        assert sorted(b.iter_blob_ids()) == sorted([bl[1], bl[2]])
        assert [oid for oid, _ in b.iter_trees()] == [t[0]]

