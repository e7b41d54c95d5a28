"""PostgreSQL: several writers on one branch (issue 26). What a commit does when its
guessed head went stale, counted in round trips (on the wire, by a relay) and in the
backend's work counters, never in time (speed: bench/run.py).

A stale guess is refused by the server, and the refused attempt's lock statement
(``memrev_lock_read``) returns what the commit computed again reads: the new head's
commit row, the tree nodes along the commit's paths (``memrev_path_nodes`` walks
them on the server) and the blob rows of the files there. The attempt is the
pipeline's implicit transaction, rolled back by the server at its sync (no
ROLLBACK), so the commit is two round trips and the branch's row lock is never held
while this client works. A commit that must lock first (``expect_head``, or after
stale guesses in a row) gets the same rows with the lock: two round trips, the lock
held across one.
"""

from __future__ import annotations

import socket

import pytest

from helpers import RoundTripRelay, spawn
from memrev import errors
from memrev.backends.postgres import PostgresBackend, _name_hash
from memrev.core import trees
from memrev.core.paths import split
from memrev.repo.ops import Delete, Write
from memrev.repo.repository import Repository


@pytest.fixture
def relay(pg_url):
    r = RoundTripRelay(pg_url)
    yield r
    r.close()


def _trips(relay: RoundTripRelay, backend: PostgresBackend) -> int:
    view = socket.socket(fileno=backend._conn.pgconn.socket)
    try:
        port = view.getsockname()[1]
    finally:
        view.detach()  # the descriptor stays psycopg's
    with relay._lock:
        return relay.trips.get(port, 0)


class _Refusals:
    """Counts the HeadMoved refusals of a repository's commit attempts."""

    def __init__(self, repo: Repository) -> None:
        self.n = 0
        real = repo._commit_once

        def counting(*args, **kwargs):
            try:
                return real(*args, **kwargs)
            except errors.HeadMoved:
                self.n += 1
                raise

        repo._commit_once = counting


def _delta(counters, before) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in counters.items() if v != before.get(k, 0)}


def test_the_name_hash_sent_to_the_server_is_the_trees_own():
    for name in ("a", "w0.json", "ünïcode", "x" * 300, ""):
        assert _name_hash(name) == trees._name_hash(name)


def _big_store(repo: Repository) -> bytes:
    """Nested folders, a folder split by hash (80 names), a name that is a file and a folder."""
    repo.commit("main", [Write(f"/big/f{i:02d}", f"{i}".encode()) for i in range(80)], author="t")
    repo.commit("main", [Write("/a", b"file a"), Write("/a/b/c.md", b"deep"), Write("/a/b/d", b"d")], author="t")
    return repo.commit("main", [Write("/big/sub/x", b"x" * 9000)], author="t").id


def test_the_server_walks_the_nodes_a_commit_reads(pg_url):
    """memrev_path_nodes returns exactly the tree nodes the client's lookups of those paths
    read (through hash-split levels, a name that is a file and a folder, a folder itself),
    and the blob rows of the files there whose payload is small."""
    repo = Repository(PostgresBackend(pg_url))
    try:
        head = _big_store(repo)
        root = repo.commit_data(head)[1].tree
        assert repo.tree(trees.find_dir(repo, root, ["big"]))[0] == "H"  # split by hash
        cases = [["/big/f07"], ["/big/f07", "/big/f55", "/a"], ["/a/b/c.md"], ["/a/b"], ["/big/sub/x"],
                 ["/nowhere/x"], ["/big/missing"], ["/"], ["/a", "/a/b/d", "/big/sub"]]
        for paths in cases:
            read: set[bytes] = set()

            class Recorder:
                def __init__(self, into: set[bytes] = read) -> None:
                    self.into = into

                def tree(self, oid: bytes):
                    self.into.add(oid)
                    return repo.tree(oid)

            files = {}
            for path in paths:
                segments = split(path)
                entry = trees.lookup(Recorder(), root, segments)
                if entry is not None:
                    files[entry.oid] = path
                folder = trees.find_dir(Recorder(), root, segments) if segments else None
                if folder is not None:
                    Recorder().tree(folder)
            backend = repo.backend
            backend.prefetch_paths("refs/heads/main", paths)
            want = backend._want
            if want is None:  # nothing to walk (the root alone)
                assert paths == ["/"]
                continue
            rows = backend._all(
                "SELECT * FROM memrev_path_rows(%s, %s::text[], %s::bytea[], %s::integer[])", (root, *want[1:])
            )
            got_trees = {r[0] for r in rows if r[3] is None}
            got_blobs = {r[0]: r for r in rows if r[3] is not None}
            assert got_trees == read, paths
            small = {oid for oid in files if len(repo.backend.get_blob(oid).data) <= 8192}
            assert set(got_blobs) == small, paths
            for oid in small:
                b = repo.backend.get_blob(oid)
                assert tuple(got_blobs[oid][2:]) == (b.data, b.kind, b.base, b.lineage, b.start, b.size, b.depth)
    finally:
        repo.backend.close()


def test_a_stale_guess_costs_one_round_trip_and_no_lock_held_across_the_client(relay, pg_url):
    """Another handle moved the branch (a file beside this one's, in a folder split by
    hash): this handle's commit is refused once and made again without a read, in two
    round trips in all; the branch's lock is held by neither across this client's work."""
    mine, other = Repository(PostgresBackend(relay.url)), Repository(PostgresBackend(pg_url))
    try:
        _big_store(mine)
        mine.commit("main", [Write("/big/f03", b"mine 1")], author="me")
        refusals = _Refusals(mine)
        for i in range(5):
            theirs = other.commit("main", [Write(f"/big/f{40 + i}", f"other {i}".encode())], author="other").id
            mine.backend._lock_next.clear()  # no backing off to locking first (see the next tests)
            mine.backend._stale_streak.clear()
            counters = mine.backend.counters
            before, trips = dict(counters), _trips(relay, mine.backend)
            result = mine.commit("main", [Write("/big/f03", f"mine {i + 2}\n".encode() * 20)], author="me")
            assert _trips(relay, mine.backend) - trips == 2
            work = _delta(counters, before)
            assert work.get("round_trips") == 2 and work.get("head_moved") == 1, work
            assert "locked_round_trips" not in work, work  # the lock never outlived a round trip
            assert not {"tree_reads", "blob_reads", "commit_reads"} & work.keys(), work  # all came with the refusal
            assert work["prefetched_rows"] >= 4, work  # root, /big and its bucket node, the file's blob
            assert result.parent == theirs
            assert mine.backend._conn.pgconn.transaction_status == 0  # IDLE: nothing left open
        assert refusals.n == 5
        head = mine.head("main")
        assert [c.author for c in mine.log(head)[:2]] == ["me", "other"]
        assert mine.blobs.content(mine.entry_at(head, "/big/f03").oid) == b"mine 6\n" * 20
        assert mine.blobs.content(mine.entry_at(head, "/big/f44").oid) == b"other 4"
        assert mine.last_change("/big/f03", head) is not None
        assert len(mine.path_log("/big/f03", mine.commit_data(head)[0])) == 7
    finally:
        mine.backend.close()
        other.backend.close()


def test_a_commit_that_locks_first_reads_the_head_with_the_lock(relay, pg_url):
    """A commit that must see the real head (``expect_head``) locks the ref first; the
    head's commit, the tree nodes along its paths and their blob rows come in that same
    round trip: two round trips, the lock held across one (it was four: a read per node)."""
    mine, other = Repository(PostgresBackend(relay.url)), Repository(PostgresBackend(pg_url))
    try:
        _big_store(mine)
        mine.commit("main", [Write("/a/b/c.md", b"mine")], author="me")
        other.commit("main", [Write("/a/b/e", b"other"), Write("/big/f11", b"other")], author="other")
        head = other.head("main")
        counters = mine.backend.counters
        before, trips = dict(counters), _trips(relay, mine.backend)
        result = mine.commit("main", [Write("/a/b/c.md", b"changed")], author="me", expect_head=head)
        work = _delta(counters, before)
        assert _trips(relay, mine.backend) - trips == 2, work
        assert work.get("locked_round_trips") == 1 and "head_moved" not in work, work
        assert not {"tree_reads", "blob_reads", "commit_reads"} & work.keys(), work
        assert result.parent == head
        assert mine.blobs.content(mine.entry_at(result.id, "/a/b/e").oid) == b"other"
    finally:
        mine.backend.close()
        other.backend.close()


def test_a_folder_deleted_on_a_stale_guess_loses_what_was_added_meanwhile(pg_url):
    """Delete of a folder computed again on the new head: the folder's node came with the
    refusal, and the files another handle added to it meanwhile are deleted too."""
    mine, other = Repository(PostgresBackend(pg_url)), Repository(PostgresBackend(pg_url))
    try:
        mine.commit("main", [Write("/d/x", b"x"), Write("/keep", b"k")], author="me")
        other.commit("main", [Write("/d/y", b"y"), Write("/d/sub/z", b"z")], author="other")
        refusals = _Refusals(mine)
        result = mine.commit("main", [Delete("/d")], author="me")
        assert refusals.n == 1
        assert sorted(result.paths) == ["/d/sub/z", "/d/x", "/d/y"]
        for path in ("/d/x", "/d/y", "/d/sub/z"):
            assert mine.entry_at(result.id, path) is None
        assert mine.entry_at(result.id, "/keep") is not None
    finally:
        mine.backend.close()
        other.backend.close()


def test_after_stale_guesses_in_a_row_the_next_attempt_locks(pg_url):
    """Two refusals in a row (another handle commits after each) and the third attempt
    locks the ref: a commit is refused at most twice, never runs out of attempts."""
    mine, other = Repository(PostgresBackend(pg_url)), Repository(PostgresBackend(pg_url))
    try:
        mine.commit("main", [Write("/m", b"0")], author="me")
        other.commit("main", [Write("/o", b"0")], author="other")
        refusals = _Refusals(mine)
        backend = mine.backend
        real = backend._stale_reader

        def moving_again(name):  # another commit lands right after each refusal's answer
            read = real(name)

            def then_move(cursor):
                read(cursor)
                moved.append(name)
                other.commit("main", [Write("/o", f"moved {len(moved)}".encode())], author="other")

            return then_move

        moved = []
        backend._stale_reader = moving_again
        before = dict(backend.counters)
        result = mine.commit("main", [Write("/m", b"1")], author="me")
        work = _delta(backend.counters, before)
        assert refusals.n == 2 and work["head_moved"] == 2, work
        assert work.get("locked_round_trips") == 1, work  # the third attempt: locked, then committed
        assert mine.head("main") == result.id
    finally:
        mine.backend.close()
        other.backend.close()


WRITER = r"""
import asyncio, json, sys
from memrev import Store

async def main():
    w, k = int(sys.argv[2]), int(sys.argv[3])
    async with Store(sys.argv[1], author=f"w{w}") as s:
        backend = s.repo.backend
        for i in range(k):
            await s.write(f"/conc/w{w}.json", f"{w}:{i}\n" * (1 + i % 7))
        print(json.dumps(dict(backend.counters)))

asyncio.run(main())
"""


@pytest.mark.slow  # four processes commit 40 times each
@pytest.mark.anyio
async def test_four_writer_processes_on_one_branch_lose_nothing(pg_url):
    """4 processes x 40 commits to paths of their own on one branch: every commit is
    there, each path's log counts exactly its writer's commits, fsck finds nothing; a
    commit is refused at most twice and holds the lock across at most one round trip."""
    from memrev import Store

    async with Store(pg_url) as store:
        await store.write("/conc/README", "writers\n")
    n, k = 4, 40
    procs = [spawn(WRITER, pg_url, str(w), str(k)) for w in range(n)]
    counts = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        import json

        counts.append(json.loads(out.strip().splitlines()[-1]))
    async with Store(pg_url) as store:
        assert len(await store.log()) == 1 + n * k
        for w in range(n):
            assert len(await store.log(path=f"/conc/w{w}.json")) == k
            assert await store.read(f"/conc/w{w}.json") == f"{w}:{k - 1}\n" * (1 + (k - 1) % 7)
        assert await store.fsck() == []
    total = {key: sum(c.get(key, 0) for c in counts) for key in ("head_moved", "locked_round_trips", "commit_attempts")}
    assert total["head_moved"] <= 2 * n * k, total
    assert total["locked_round_trips"] <= n * k, total
    assert total["commit_attempts"] == n * k + total["head_moved"], total
