"""read_range with negative and out-of-range bounds on appended files matches ag2's
``MemoryKnowledgeStore`` exactly (issue 8 item 13): at the head (append runs are
read piece by piece), inside a transaction, and at a past revision (``store.at``)."""

from __future__ import annotations

import asyncio
import tempfile

import pytest
from ag2.knowledge import MemoryKnowledgeStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrev import VersionedStore

bounds = st.integers(min_value=-40, max_value=40)
lines = st.lists(st.text(alphabet="abc\n", min_size=1, max_size=8), min_size=1, max_size=6)


async def _answers(store, path: str, cases: list[tuple[int, int | None]]) -> list[str | type]:
    out: list[str | type] = []
    for start, end in cases:
        try:
            out.append(await store.read_range(path, start, end))
        except UnicodeDecodeError:
            out.append(UnicodeDecodeError)
    return out


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=lines, cases=st.lists(st.tuples(bounds, st.one_of(st.none(), bounds)), min_size=1, max_size=8))
def test_read_range_bounds_match_ag2(parts: list[str], cases: list[tuple[int, int | None]]):
    asyncio.run(_check(parts, cases))


async def _check(parts: list[str], cases: list[tuple[int, int | None]]) -> None:
    oracle = MemoryKnowledgeStore()
    with tempfile.TemporaryDirectory() as folder:
        async with VersionedStore(folder) as store:
            for text in parts:
                await oracle.append("/log", text)
                await store.append("/log", text)
            want = await _answers(oracle, "/log", cases)
            async with VersionedStore(folder) as fresh:  # nothing cached: read from the append run
                assert await _answers(fresh, "/log", cases) == want
            past = store.at(await store.head())
            await store.append("/log", "later\n")
            assert await _answers(past, "/log", cases) == want
            await oracle.append("/log", "later\n")
            async with store.transaction():
                await store.append("/log", "more\n")
                await oracle.append("/log", "more\n")
                assert await _answers(store, "/log", cases) == await _answers(oracle, "/log", cases)


@pytest.mark.anyio
async def test_negative_start_reads_the_tail(tmp_path):
    async with VersionedStore(str(tmp_path / "s")) as store:
        for text in ("first line\n", "second line\n", "third line\n"):
            await store.append("/log", text)
    async with VersionedStore(str(tmp_path / "s")) as fresh:
        assert await fresh.read_range("/log", -3) == "ne\n"
