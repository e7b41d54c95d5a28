"""PostgreSQL group commit: the commits waiting for one handle's worker share one
transaction (``Repository.commit_group``) and, on a current head, one round trip.

Round trips are counted on the wire (``helpers.RoundTripRelay``), never
timed (speed: bench/run.py).
"""

from __future__ import annotations

import pytest

from helpers import RoundTripRelay
from memrev import errors
from memrev.backends.postgres import PostgresBackend
from memrev.repo.ops import Write
from memrev.repo.repository import CommitRequest, Repository
from test_pg_round_trips import _trips


@pytest.fixture
def relay(pg_url):
    r = RoundTripRelay(pg_url)
    yield r
    r.close()


def _group(n: int, round_: int) -> list[CommitRequest]:
    return [CommitRequest("main", [Write(f"/w{i}.json", f"{round_}:{i}\n".encode() * 20)], author=f"w{i}") for i in range(n)]


def test_a_group_of_four_on_a_current_head_is_one_round_trip(relay):
    """Four commits of one group (each in its savepoint, each its own commit and
    compare-and-swap) go to the server in one pipeline with BEGIN and COMMIT."""
    repo = Repository(PostgresBackend(relay.url))
    try:
        repo.commit("main", [Write("/README", b"x")], author="t")
        repo.commit_group(_group(4, 0))  # every path exists: later groups write deltas
        before = _trips(relay, repo.backend)
        results = repo.commit_group(_group(4, 1))
        assert _trips(relay, repo.backend) - before == 1
        assert all(r.id is not None for r in results), results
        assert [r.parent for r in results[1:]] == [r.id for r in results[:-1]]
        head = repo.head("main")
        assert head == results[-1].id
        log = repo.log(head)
        assert [c.id for c in log[:4]] == [r.id.hex() for r in reversed(results)]
        assert [c.author for c in log[:4]] == ["w3", "w2", "w1", "w0"]
        for i, r in enumerate(results):  # each commit's number is its own, and its history link
            seq = repo.commit_data(r.id)[0]
            assert repo.backend.change_prev(f"/w{i}.json", seq) is not None
            assert repo.last_change(f"/w{i}.json", head) == seq
    finally:
        repo.backend.close()


def test_a_group_whose_commit_answer_is_lost_is_not_committed_twice(pg_url):
    """The connection drops after the server committed a group and before its answer
    arrived: the callers get memrev's "either wholly there or not at all" error, and the
    group is not sent again (a group the server refused is, with each request alone:
    here that would have made every commit twice)."""
    lossy = RoundTripRelay(pg_url)
    repo = Repository(PostgresBackend(lossy.url))
    try:
        repo.commit("main", [Write("/README", b"x")], author="t")
        repo.commit_group(_group(3, 0))
        lossy.armed = True
        with pytest.raises(errors.MemrevError, match="either wholly there or not at all"):
            repo.commit_group(_group(3, 1))
        reader = Repository(PostgresBackend(pg_url))
        try:
            log = reader.log(reader.head("main"))
            assert [c.author for c in log[:3]] == ["w2", "w1", "w0"]
            assert len(log) == 1 + 3 + 3  # committed once, not twice
        finally:
            reader.backend.close()
    finally:
        repo.backend.close()
        lossy.close()
