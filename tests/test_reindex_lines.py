"""``reindex`` rebuilds exactly the derived indexes the commits wrote.

The rebuild carries each line of history's last change of every path instead of
walking the line for every link (``memrev.repo.indexes.rebuild``), so it is checked
against what ``Repository.commit`` and merges wrote as they committed: every change row
(path, commit, both links) and every branch's head rows, on a history with forks,
merges, deletes, folders emptied and refilled, and a branch made at an old commit.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memrev import VersionedStore

pytestmark = pytest.mark.anyio


def indexes(store: VersionedStore) -> tuple[list, dict]:
    backend = store.repo.backend
    changes = sorted(tuple(r) for r in backend.iter_changes())
    heads = {name: sorted((r.path, r.blob, r.size, r.seq) for r in backend.head_all(name)) for name in ("main", "a", "b", "old")}
    return changes, heads


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_reindex_rebuilds_what_the_commits_wrote(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    store = VersionedStore(str(tmp_path / "s"))
    handles = {"main": store}
    try:
        paths = ["/a.md", "/d/x.md", "/d/y.md", "/d/e/z.md", "/f/g.md", "/top.md"]
        for i in range(12):
            await store.write(rnd.choice(paths), f"main {i}\n")
        handles["a"] = await store.branch("a")
        handles["b"] = await store.branch("b")
        handles["old"] = await store.branch("old", at="HEAD~7")
        for i in range(60):
            name = rnd.choice(list(handles))
            h = handles[name]
            roll = rnd.random()
            path = rnd.choice(paths) if name in ("main", "old") else f"/{name}/{rnd.choice(paths)[1:]}"
            if roll < 0.15:
                await h.delete(rnd.choice([path, "/d"] if name in ("main", "old") else [path, f"/{name}/d"]))
            elif roll < 0.25 and name == "main":
                other = rnd.choice(["a", "b"])
                try:
                    await store.merge(other)
                except Exception:  # noqa: BLE001 - a conflict: no merge this time
                    pass
            elif roll < 0.3:
                await h.append(f"/log/{name}.jsonl", f"{name} {i}\n")
            else:
                await h.write(path, f"{name} {i} {rnd.random()}\n")
        await store.merge("a")
        await store.write("/after-merge.md", "x\n")
        await handles["b"].write("/b/late.md", "late\n")
        await store.merge("b")
        await store.write("/d/x.md", "after both merges\n")
        changes, heads = indexes(store)
        assert any(len(c.parents) == 2 for c in await store.log())
        await store.reindex()
        changes_after, heads_after = indexes(store)
        assert changes_after == changes
        for name, rows in heads.items():
            # the same rows, but for tombstones: a commit keeps the row of a file or folder it
            # deleted (blob None), a rebuild writes rows for what is there
            assert heads_after[name] == [r for r in rows if r[1] is not None or r[0] in {a[0] for a in heads_after[name]}]
            assert {r for r in rows if r not in heads_after[name]} == {r for r in rows if r[1] is None and r not in heads_after[name]}
        assert await store.fsck() == []
    finally:
        for name, h in handles.items():
            if name != "main":
                h.close()
        store.close()
