"""PostgreSQL group commit: the commits waiting for one handle's worker share one
transaction (``Repository.commit_group``) and, on a current head, one round trip.

Round trips are counted on the wire (``RoundTripRelay`` of test_pg_round_trips), never
timed (speed: bench/run.py).
"""

from __future__ import annotations

import pytest

from memrev.backends.postgres import PostgresBackend
from memrev.ops import Write
from memrev.repo import CommitRequest, Repository
from test_pg_round_trips import RoundTripRelay, _trips


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
