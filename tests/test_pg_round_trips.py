"""PostgreSQL commit path: network round trips per commit, and the guessed branch head.

A commit is computed on the head the handle saw last (``guess_ref``) and sent
whole with ``COMMIT`` (``write_commit``: one call of ``memrev_commit``), so a
writer whose head is current pays one round trip. Round trips are counted on
the wire by a TCP relay between memrev and the server: one round trip is the
client sending and the server answering, however many statements a pipeline
holds. These tests count round trips, never time (speed: bench/run.py).
"""

from __future__ import annotations

import socket

import pytest

from helpers import RoundTripRelay, spawn
from memrev import VersionedStore, errors
from memrev.backends.postgres import PostgresBackend
from memrev.repo.indexes import index_branch
from memrev.repo.ops import Delete, Write
from memrev.repo.repository import CommitRequest, Repository

pytestmark = pytest.mark.anyio


@pytest.fixture
def relay(pg_url):
    r = RoundTripRelay(pg_url)
    yield r
    r.close()


async def test_a_commit_on_a_current_head_is_one_round_trip(relay):
    """BEGIN, the blob, tree nodes, memrev_commit (compare-and-swap, commit row, head and
    change rows with their history links) and COMMIT go in one pipeline. It was 6."""
    async with VersionedStore(relay.url) as store:
        for i in range(3):
            await store.write("/memory/working.md", f"line {i}\n" * 40)
        backend = store.repo.backend
        before = _trips(relay, backend)
        for i in range(3, 13):
            await store.write("/memory/working.md", f"line {i}\n" * 40)
        assert _trips(relay, backend) - before == 10  # one per commit
        assert len(await store.log()) == 13
        assert [c.message for c in await store.log(path="/memory/working.md")] == [
            c.message for c in await store.log()
        ]
        assert await store.fsck() == []


async def test_new_files_in_new_directories_are_one_round_trip_each(relay):
    """A directory key new to the branch finds its history link on the server
    (memrev_last_change), not by a read of the client's."""
    async with VersionedStore(relay.url) as store:
        await store.write("/a", "0")
        backend = store.repo.backend
        before = _trips(relay, backend)
        for i in range(5):
            await store.write(f"/dir{i}/sub/file", str(i))
        assert _trips(relay, backend) - before == 5
        assert await store.fsck() == []
        assert [c.paths for c in await store.log("/dir3")] == [("/dir3/sub/file",)]


def _trips(relay: RoundTripRelay, backend: PostgresBackend) -> int:
    fd = backend._conn.pgconn.socket
    view = socket.socket(fileno=fd)
    try:
        port = view.getsockname()[1]
    finally:
        view.detach()  # the descriptor stays psycopg's
    with relay._lock:
        return relay.trips.get(port, 0)


MOVE = r"""
import asyncio, sys
from memrev import VersionedStore

async def main():
    async with VersionedStore(sys.argv[1], author="other") as s:
        await s.write("/notes/other.md", "from another process")
        await s.write("/notes/shared.md", "other's version")

asyncio.run(main())
"""


@pytest.mark.slow  # 1.2 s in the quick loop: another process moves the branch
async def test_a_stale_guessed_head_is_detected_and_the_commit_recomputed(relay, pg_url):
    """Another process moves the branch; this handle's next commit, computed on the head
    it saw last, is refused by the compare-and-swap on the server (HeadMoved), rolled
    back whole, and computed again on the locked current head: nothing is lost, the
    history links run through the other process's commits."""
    async with VersionedStore(relay.url, author="me") as store:
        await store.write("/notes/shared.md", "my first version")
        await store.write("/notes/mine.md", "mine 1")
        seen = await store.head()
        p = spawn(MOVE, pg_url)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        repo, backend = store.repo, store.repo.backend
        moved = []
        real = repo._commit_once

        def counting(*args, **kwargs):
            try:
                return real(*args, **kwargs)
            except errors.HeadMoved as e:
                moved.append(e)
                raise

        repo._commit_once = counting
        before = _trips(relay, backend)
        await store.write("/notes/shared.md", "my second version")
        trips = _trips(relay, backend) - before
        del repo._commit_once
        assert len(moved) == 1  # detected once, then done on the locked head
        # The refused attempt and its ROLLBACK (2); then the ref locked (1), what the other
        # process wrote read under the lock (its commit, two tree nodes, the file's blob and
        # its base: 5) and the commit with COMMIT (1). A locked commit used to need 10 here.
        assert trips <= 9, trips
        log = await store.log()
        assert [c.author for c in log] == ["me", "other", "other", "me", "me"]
        assert log[3].id == seen
        assert log[0].parents == (log[1].id,)  # built on the other process's commit, not on the guess
        assert await store.read("/notes/other.md") == "from another process"
        assert await store.read("/notes/shared.md") == "my second version"
        assert await store.read("/notes/mine.md") == "mine 1"
        history = await store.log(path="/notes/shared.md")
        assert [c.author for c in history] == ["me", "other", "me"]
        assert [c.paths for c in await store.log("/notes")] == [c.paths for c in log]
        assert await store.fsck() == []
        # Commits are on a current head again. (The first re-reads its delta base: a
        # rollback makes the blob store forget the rows it remembered.)
        await store.write("/notes/mine.md", "mine 2")
        before = _trips(relay, backend)
        await store.write("/notes/mine.md", "mine 3")
        assert _trips(relay, backend) - before == 1


def test_a_group_on_a_stale_head_commits_every_request(relay, pg_url):
    """Group commit (each request in a savepoint) on a guessed head that moved: the
    group is refused whole and committed again on the locked head; every request lands."""
    repo = Repository(PostgresBackend(relay.url))
    other = Repository(PostgresBackend(pg_url))
    try:
        repo.commit("main", [Write("/a", b"0")], author="me")
        other.commit("main", [Write("/b", b"other")], author="other")
        results = repo.commit_group(
            [CommitRequest("main", [Write(f"/g{i}", str(i).encode())], author="me") for i in range(3)]
        )
        assert all(r.id is not None for r in results), results
        assert [r.parent for r in results[1:]] == [r.id for r in results[:-1]]
        assert repo.head("main") == results[-1].id
        assert repo.commit_data(results[0].parent)[1].author == "other"  # built on the moved head
        for path in ("/a", "/b", "/g0", "/g1", "/g2"):
            assert repo.last_change(path, repo.head("main")) is not None
    finally:
        repo.backend.close()
        other.backend.close()


def test_directory_links_match_the_per_path_lookup(pg_url):
    """The history link of a directory key that the branch has no head row for is what
    Repository.last_change says (a branch indexed at an older commit, a folder emptied
    since): memrev_last_change on the server agrees with the client's lookup."""
    repo = Repository(PostgresBackend(pg_url))
    try:
        repo.commit("main", [Write("/d/x/1", b"1")], author="t")
        repo.commit("main", [Write("/d/x/2", b"2")], author="t")
        repo.commit("main", [Delete("/d/x")], author="t")
        repo.commit("main", [Write("/e", b"e")], author="t")
        base = repo.head("main")
        with repo.backend.write():
            repo.backend.set_ref_if_equals("refs/heads/side", None, base)
            index_branch(repo, "side", base, None)  # no head row for the emptied /d/x/ there
        assert repo.backend.head_get("side", "/d/x/") is None
        expected = repo.last_change("/d/x/", repo.head("side"))
        assert expected is not None
        result = repo.commit("side", [Write("/d/x/3", b"3")], author="t")
        seq = repo.commit_data(result.id)[0]
        assert repo.backend.change_prev("/d/x/", seq) == (expected, None)
        assert repo.backend.change_prev("/d/", seq) == (repo.last_change("/d/", base), None)
    finally:
        repo.backend.close()


def test_under_steady_contention_a_handle_locks_instead_of_guessing(relay, pg_url):
    """Another handle commits between every two commits of this one: each guess would be
    stale. A refused guess returns the new head with what the commit reads (its tree
    nodes, its file's blob row), so the commit is made again at once in one round trip,
    and the branch's next 1, 2, 4 ... (up to 64) commits lock first, reading the head
    with the lock: 10 contended commits are refused 4 times, not 10; none takes more
    than 3 round trips (it was 4 to 6), none reads a tree node, and the lock is held
    across at most one round trip of a commit."""
    mine, other = Repository(PostgresBackend(relay.url)), Repository(PostgresBackend(pg_url))
    refused = []
    real = mine._commit_once

    def counting(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except errors.HeadMoved as e:
            refused.append(e)
            raise

    mine._commit_once = counting
    try:
        mine.commit("main", [Write("/mine", b"0")], author="me")
        counters = mine.backend.counters
        for i in range(1, 11):
            other.commit("main", [Write("/other", str(i).encode())], author="other")
            before, trips, was = dict(counters), _trips(relay, mine.backend), len(refused)
            mine.commit("main", [Write("/mine", str(i).encode())], author="me")
            work = {k: v - before.get(k, 0) for k, v in counters.items()}
            assert _trips(relay, mine.backend) - trips == work["round_trips"] <= 2 + (len(refused) - was), work
            assert work.get("locked_round_trips", 0) <= 1 and not work.get("tree_reads"), work
        assert len(refused) == 4
        log = mine.log(mine.head("main"))
        assert [c.author for c in log[:4]] == ["me", "other", "me", "other"] and len(log) == 21
        assert mine.blobs.content(mine.entry_at(mine.head("main"), "/mine").oid) == b"10"
    finally:
        mine.backend.close()
        other.backend.close()


@pytest.mark.parametrize("cached", [True, False], ids=["h1-cached", "h1-forgotten"])
def test_a_guessed_head_that_gc_removed_is_a_stale_head_not_a_missing_commit(pg_url, cached):
    """This handle last saw branch ``side`` at H1; another handle deleted the branch, gc
    removed H1, and the branch was made again. The next commit here guesses H1, which no
    longer exists: that is a stale guess like any other (recomputed on the locked head),
    not ``RevisionNotFound``, whether H1 is still in this handle's caches (caught by the
    compare-and-swap) or not (caught when the guessed ref is locked, before H1 is read)."""
    from memrev import history
    from memrev.maintenance import gc as gc_mod

    mine, other = Repository(PostgresBackend(pg_url)), Repository(PostgresBackend(pg_url))
    try:
        mine.commit("main", [Write("/m", b"main")], author="me")
        h1 = mine.commit("side", [Write("/a", b"1")], author="me").id
        history.delete_branch(other, "side")
        gc_mod.gc(other, keep_seconds=0)
        assert other.backend.get_commit(h1) is None
        again = other.commit("side", [Write("/b", b"2")], author="other").id
        if not cached:
            mine.forget()
        result = mine.commit("side", [Write("/c", b"3")], author="me")
        assert result.parent == again
        assert mine.head("side") == result.id
        assert mine.entry_at(result.id, "/b") is not None and mine.entry_at(result.id, "/a") is None
    finally:
        mine.backend.close()
        other.backend.close()
