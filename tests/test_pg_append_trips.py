"""PostgreSQL appends: round trips per append, counted on the wire (never time).

An append asks the store two things before it stores its piece: whether the
piece is there already (the same bytes appended to the same base by another
branch) and whether the run's tip is taken, under the run's lock. Both, with
the lock between them, go in one pipeline (``append_probe``); the commit is
the second round trip. It was four: the piece, the lock, the tip, the commit.
"""

from __future__ import annotations

import pytest

from helpers import RoundTripRelay
from memrev import Store
from test_pg_round_trips import _trips

pytestmark = pytest.mark.anyio


@pytest.fixture
def relay(pg_url):
    r = RoundTripRelay(pg_url)
    yield r
    r.close()


async def test_an_append_on_a_current_head_is_two_round_trips(relay):
    line = "x" * 119 + "\n"
    async with Store(relay.url) as store:
        await store.write("/log.jsonl", line)
        for _ in range(3):
            await store.append("/log.jsonl", line)
        backend = store.repo.backend
        before = _trips(relay, backend)
        offsets = [await store.append("/log.jsonl", line) for _ in range(10)]
        assert _trips(relay, backend) - before == 20  # two per append
        assert offsets == [len(line) * (4 + i) for i in range(10)]
        assert await store.read("/log.jsonl") == line * 14
        assert len(await store.log(path="/log.jsonl")) == 14
        assert await store.fsck() == []


async def test_two_branches_appending_to_one_tip_still_fork_the_run(pg_url):
    """The probe's lock and tip check keep their meaning: the second branch that
    appends to the same version starts a run of its own; both read back whole."""
    async with Store(pg_url) as main:
        await main.write("/log", "base\n")
        await main.append("/log", "one\n")
        await main.branch("side")
        side = main.on_branch("side")
        await main.append("/log", "main\n")
        await side.append("/log", "side\n")
        await side.append("/log", "side2\n")
        await main.append("/log", "main\n")  # the same bytes on another version: another piece
        assert await main.read("/log") == "base\none\nmain\nmain\n"
        assert await side.read("/log") == "base\none\nside\nside2\n"
        assert await main.fsck() == []
