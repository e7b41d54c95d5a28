"""gc and export are linear in the length of an append run (issue 8 item 9).

Linearity is checked by counting work — backend calls plus rows they return —
never by time (timings are in bench/run.py). Before the fix every version of
a run fetched all earlier pieces of it: n versions cost ~n²/2 rows.
"""

from __future__ import annotations

import io

import pytest

from memrev import VersionedStore
from memrev.maintenance import bundles, gc

pytestmark = pytest.mark.anyio


class CountingBackend:
    """Forwards to a real backend, counting calls and the rows list results hold."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.work = 0

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr) or name == "write":
            return attr

        def counted(*args, **kwargs):
            result = attr(*args, **kwargs)
            self.work += 1 + (len(result) if isinstance(result, (list, dict, set)) else 0)
            return result

        return counted


async def work_for(tmp_path, n: int) -> tuple[int, int]:
    store = VersionedStore(tmp_path / f"s{n}")
    try:
        for i in range(n):
            await store.append("/log/run.jsonl", f'{{"turn": {i}}}\n')
        repo = store._live()
        counter = CountingBackend(repo.backend)
        repo.backend = counter
        repo.forget()
        bundles.export_bundle(repo, io.BytesIO(), repo.backend.list_refs("refs/heads/"))
        export_work, counter.work = counter.work, 0
        repo.forget()
        gc.gc(repo)
        gc_work = counter.work
        repo.backend = counter._inner
        assert await store.fsck() == []
        return export_work, gc_work
    finally:
        store.close()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_gc_and_export_work_grows_linearly_with_an_append_run(tmp_path):
    small, large = await work_for(tmp_path, 150), await work_for(tmp_path, 600)
    for what, a, b in (("export", small[0], large[0]), ("gc", small[1], large[1])):
        # 4x the versions: linear work grows ~4x, the old quadratic walk ~16x.
        assert b <= 5 * a, (what, a, b)


@pytest.mark.slow  # 0.5 s in the quick loop: 1,000 appends
async def test_export_progress_is_reported(tmp_path):
    store = VersionedStore(tmp_path / "s")
    try:
        for i in range(1000):
            await store.append("/log.md", f"{i}\n")
        repo = store._live()
        seen: list[tuple[str, int]] = []
        bundles.export_bundle(repo, io.BytesIO(), repo.backend.list_refs("refs/heads/"), progress=lambda w, n: seen.append((w, n)))
        assert ("commits walked", 1000) in seen
    finally:
        store.close()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_gc_progress_is_reported(tmp_path):
    store = VersionedStore(tmp_path / "s")
    try:
        for i in range(1000):
            await store.append("/log.md", f"{i}\n")
        seen: list[tuple[str, int]] = []
        await store.gc(progress=lambda w, n: seen.append((w, n)))
        assert ("commits walked", 1000) in seen and ("blobs walked", 1000) in seen
        assert await store.read("/log.md") == "".join(f"{i}\n" for i in range(1000))
    finally:
        store.close()
