"""Two handles on one store: interleaved, in threads, and commits made elsewhere reaching ``on_change``."""

from __future__ import annotations

import threading
import time
from collections import Counter

import anyio
import pytest

from ...repo.ops import Delete, Write
from ...repo.repository import Repository
from ...versioned_store import VersionedStore
from .base import ConformanceBase, in_thread, joined


class ConcurrencyContracts(ConformanceBase):
    """``test_concurrency_*``: two handles on one store (a mixin of ``BackendConformance``)."""

    @pytest.mark.anyio
    async def test_concurrency_two_handles_interleaved(self, memrev_location: str):
        async with (
            VersionedStore(memrev_location, author="a") as a,
            VersionedStore(memrev_location, author="b", durability="full") as b,
        ):
            offsets = []
            for i in range(6):
                h = (a, b)[i % 2]
                await h.write(f"/{h.author}/{i}", str(i))
                offsets.append(await h.append("/shared.log", f"{h.author}{i}\n"))
            expected_log = "".join(f"{'ab'[i % 2]}{i}\n" for i in range(6))
            for h in (a, b):
                assert await h.read("/shared.log") == expected_log
                assert await h.list("/") == ["a/", "b/", "shared.log"]
            assert offsets == [expected_log.index(f"{'ab'[i % 2]}{i}\n") for i in range(6)]
            log = await a.log()
            assert len(log) == 12 and [c.author for c in log] == [x for i in range(5, -1, -1) for x in "ab"[i % 2] * 2]
            assert [c.id for c in await b.log()] == [c.id for c in log]
            assert await b.fsck() == []

    @pytest.mark.anyio
    async def test_concurrency_on_change_sees_commits_made_elsewhere(self, memrev_location: str):
        """A commit made without this handle (as by another process) reaches its subscribers."""
        async with VersionedStore(memrev_location, poll_interval=0.1) as s:
            got: list[str] = []

            async def record(path: str) -> None:
                got.append(path)

            sub = await s.on_change("/", record)
            await s.write("/own", "1")
            assert got == ["/own"], "a handle's own commit is delivered before the call returns"
            elsewhere = Repository(self.open_backend(memrev_location))
            try:
                elsewhere.commit("main", [Write("/far/x", b"1"), Delete("/own")], author="elsewhere")
            finally:
                elsewhere.backend.close()
            deadline = time.monotonic() + 10
            while len(got) < 3 and time.monotonic() < deadline:
                await anyio.sleep(0.02)
            assert sorted(got[1:]) == ["/far/x", "/own"], f"on_change received {got}"
            await sub.close()
            assert await s.read("/far/x") == "1" and await s.read("/own") is None

    def test_concurrency_two_handles_in_threads(self, memrev_location: str):
        n = 15
        barrier = threading.Barrier(2)

        def worker(name: str) -> int:
            async def run() -> int:
                async with VersionedStore(memrev_location, author=name) as s:
                    barrier.wait(30)
                    for i in range(n):
                        await s.append("/log", f"{name} {i}\n")
                        if i % 5 == 0:
                            await s.write(f"/{name}/{i}", str(i))
                    return len(await s.log())

            return anyio.run(run)

        threads = [in_thread(lambda name=name: worker(name)) for name in ("p", "q")]
        for t, out in threads:
            joined(t, out, "a committing thread", 120)

        async def check() -> None:
            async with VersionedStore(memrev_location) as s:
                text = await s.read("/log")
                assert text is not None, "the log both threads appended to is missing"
                lines = text.splitlines()
                assert Counter(lines) == Counter(f"{w} {i}" for w in "pq" for i in range(n)), lines
                for w in "pq":
                    assert [ln for ln in lines if ln.startswith(w)] == [f"{w} {i}" for i in range(n)]
                    assert await s.list(f"/{w}") == sorted(str(i) for i in range(0, n, 5))
                log = await s.log()
                assert len(log) == 2 * (n + len(range(0, n, 5)))
                assert all(len(c.parents) == 1 for c in log[:-1]) and log[-1].parents == ()
                assert await s.fsck() == []

        anyio.run(check)
