"""gc never takes what a ref or a commit in flight still needs (issue 8 items 2 and 4).

- Every deleted branch tip stays reachable for the whole safety window, even when
  a branch of the same name is deleted twice in the same second (or microsecond).
- A restore, merge, branch or tag that read its objects before gc ran, then
  waited for gc's lock, must not commit a reference to what gc removed: it
  raises ``RevisionNotFound`` and writes nothing; a revert writes the content
  again and succeeds. fsck is clean afterwards.

Both on SQLite and on a real PostgreSQL server (``memrev.testing.fixtures``). The races are
made deterministic with a hook and events, not sleeps: the operation's first
write transaction starts only once gc holds its exclusive lock.
"""

from __future__ import annotations

import threading
import time

import pytest

import memrev
from memrev import VersionedStore
from memrev.history import refs as history_mod
from memrev.maintenance import gc as gc_mod
from memrev.repo import revisions
from memrev.repo.ops import SetEntry, Write

pytestmark = pytest.mark.anyio

DAY = 86400


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "store")
    return request.getfixturevalue("pg_url")


def patch_clock(monkeypatch, clock: _Clock) -> None:
    """Stop the clock of branch deletion (memrev.history.refs) and of gc (memrev.maintenance.gc)."""
    monkeypatch.setattr(history_mod, "time", clock)
    monkeypatch.setattr(gc_mod, "time", clock)


class _Clock:
    """``time`` for memrev.history.refs and memrev.maintenance.gc with the clock stopped at ``now`` (both resolutions)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def time_ns(self) -> int:
        return int(self.now * 1e9)


async def _branch_with_own_file(store: VersionedStore, name: str, text: str) -> str:
    side = await store.branch(name)
    try:
        await side.write(f"/{name}/only.md", text * 20, message=f"{name}: {text.strip()}")
        return await side.resolve("HEAD")
    finally:
        side.close()


# --------------------------------------------------------------------------- item 2


async def test_a_branch_name_deleted_twice_in_one_second_keeps_both_tips(location, monkeypatch):
    async with VersionedStore(location) as store:
        await store.write("/keep.md", "keep\n")
        patch_clock(monkeypatch, _Clock(1_800_000_000.25))
        first = await _branch_with_own_file(store, "scratch", "first try\n")
        await store.delete_branch("scratch")
        second = await _branch_with_own_file(store, "scratch", "second try\n")
        await store.delete_branch("scratch")
        deleted = store.repo.backend.list_refs(revisions.DELETED_PREFIX)
        assert sorted(deleted.values()) == sorted(bytes.fromhex(t) for t in (first, second))

        # Inside the window the default gc keeps both tips, whole.
        assert await store.gc() == {"commits": 0, "trees": 0, "blobs": 0, "refs": 0}
        assert await store.read("/scratch/only.md", rev=first) == "first try\n" * 20
        assert await store.read("/scratch/only.md", rev=second) == "second try\n" * 20
        assert await store.fsck() == []

        # Past the window both go, and nothing else.
        patch_clock(monkeypatch, _Clock(1_800_000_000.25 + 15 * DAY))
        removed = await store.gc()
        assert (removed["refs"], removed["commits"]) == (2, 2)
        for tip in (first, second):
            with pytest.raises(memrev.RevisionNotFound):
                await store.read("/scratch/only.md", rev=tip)
        assert await store.read("/keep.md") == "keep\n"
        assert await store.fsck() == []


async def test_the_same_tip_deleted_twice_in_one_microsecond_keeps_its_own_ref(location, monkeypatch):
    async with VersionedStore(location) as store:
        await store.write("/keep.md", "keep\n")
        tip = await _branch_with_own_file(store, "scratch", "only\n")
        patch_clock(monkeypatch, _Clock(1_800_000_000.0))
        await store.delete_branch("scratch")
        (await store.branch("scratch", at=tip)).close()
        await store.delete_branch("scratch")
        deleted = store.repo.backend.list_refs(revisions.DELETED_PREFIX)
        assert len(deleted) == 2 and set(deleted.values()) == {bytes.fromhex(tip)}
        assert await store.gc() == {"commits": 0, "trees": 0, "blobs": 0, "refs": 0}
        assert await store.fsck() == []


async def test_deleted_refs_of_older_stores_still_expire(location):
    """``refs/deleted/<name>@<seconds>`` (the old naming) is honoured by the window too."""
    async with VersionedStore(location) as store:
        await store.write("/keep.md", "keep\n")
        tip = await _branch_with_own_file(store, "old", "old\n")
        backend = store.repo.backend
        with backend.write():
            backend.set_ref_if_equals(f"refs/deleted/old@{int(time.time()) - 2 * DAY}", None, bytes.fromhex(tip))
            backend.delete_ref("refs/heads/old")
        assert (await store.gc(keep_seconds=3 * DAY))["commits"] == 0
        assert (await store.gc(keep_seconds=DAY))["commits"] == 1
        assert await store.fsck() == []


# --------------------------------------------------------------------------- item 4


def _gc_before_first_write(store: VersionedStore, gc_handle: VersionedStore, delete: str | None) -> threading.Thread:
    """Make ``store``'s next write transaction start only once gc (on another handle) holds its lock.

    Before that, ``delete`` (a branch) is deleted through the other handle. The
    operation has read everything it needs by then; its transaction then waits
    for gc's exclusive lock, as it would with gc running in another process.
    """
    backend, gc_repo = store.repo.backend, gc_handle.repo
    real_write, real_delete = backend.write, gc_repo.backend.delete_unreachable
    gc_holds_lock = threading.Event()
    errors: list[BaseException] = []

    def delete_unreachable(table, keep):
        gc_holds_lock.set()
        return real_delete(table, keep)

    def run_gc() -> None:
        try:
            gc_mod.gc(gc_repo, keep_seconds=0)
        except Exception as e:  # noqa: BLE001 - reported to the test through ``worker.errors``
            errors.append(e)
            gc_holds_lock.set()

    def write(*args, **kwargs):
        backend.write = real_write  # once
        if delete is not None:
            history_mod.delete_branch(gc_repo, delete)
        gc_repo.backend.delete_unreachable = delete_unreachable
        worker.start()
        assert gc_holds_lock.wait(60), "gc never took its lock"
        assert not errors, errors
        return real_write(*args, **kwargs)

    worker = threading.Thread(target=run_gc, name="gc")
    worker.errors = errors  # type: ignore[attr-defined]
    backend.write = write
    return worker


async def _race(location, operation, *, delete: str | None, prepare=None):
    """Run ``operation(store, side_tip)`` with gc collecting the side branch just before it commits.

    ``prepare(store)`` runs first, before the hook is set.
    """
    async with VersionedStore(location) as store, VersionedStore(location) as gc_handle:
        await store.write("/keep.md", "keep\n")
        tip = await _branch_with_own_file(store, "side", "side only\n")
        if delete is None:
            await store.delete_branch("side")
        if prepare is not None:
            await prepare(store)
        before = await store.resolve("HEAD")
        worker = _gc_before_first_write(store, gc_handle, "side" if delete else None)
        try:
            outcome = await operation(store, tip)
        except memrev.MemrevError as e:
            outcome = e
        worker.join(60)
        assert not worker.is_alive() and not worker.errors
        after = {"head": await store.resolve("HEAD"), "branches": await store.branches(), "tags": await store.tags()}
        with pytest.raises(memrev.RevisionNotFound):
            await gc_handle.read("/side/only.md", rev=tip)  # gc did collect the side branch
        assert await store.fsck() == []
        assert await gc_handle.fsck() == []
        await store.write("/after.md", "the store goes on\n")
        assert await store.fsck() == []
        return outcome, before, after


async def test_restore_from_a_collected_commit_writes_nothing(location):
    outcome, before, after = await _race(location, lambda s, tip: s.restore("/side", tip), delete=None)
    assert isinstance(outcome, memrev.RevisionNotFound), outcome
    assert "gc" in str(outcome)
    assert after["head"] == before


async def test_merge_of_a_branch_deleted_and_collected_meanwhile_writes_nothing(location):
    async def main_moves_on(store):
        await store.write("/main-only.md", "main\n")

    outcome, before, after = await _race(
        location, lambda s, tip: s.merge("side"), delete="side", prepare=main_moves_on
    )
    assert isinstance(outcome, memrev.RevisionNotFound), outcome
    assert after["head"] == before


async def test_branch_at_a_collected_commit_is_refused(location):
    outcome, _, after = await _race(location, lambda s, tip: s.branch("again", at=tip), delete=None)
    assert isinstance(outcome, memrev.RevisionNotFound), outcome
    assert list(after["branches"]) == ["main"]


async def test_tag_at_a_collected_commit_is_refused(location):
    async def tag(store, tip):
        await store.tag("keep-side", tip)
        return await store.tags()

    outcome, _, after = await _race(location, tag, delete=None)
    assert isinstance(outcome, memrev.RevisionNotFound), outcome
    assert after["tags"] == {}


async def test_revert_of_a_collected_commit_writes_its_content_again(location):
    """revert reads the old versions and writes the result as new blobs: nothing dangles."""

    async def same_file_on_main(store):
        await store.write("/side/only.md", "side only\n" * 20)  # so undoing the side commit changes main

    outcome, _, after = await _race(location, lambda s, tip: s.revert(tip), delete=None, prepare=same_file_on_main)
    assert isinstance(outcome, str), outcome
    assert after["head"] == outcome


async def test_a_commit_naming_a_blob_that_is_not_stored_is_refused(location):
    """Without source commits to vouch for them, each ``set`` blob is looked up inside the lock."""
    async with VersionedStore(location) as store:
        await store.write("/a.md", "a\n")
        before = await store.resolve("HEAD")
        with pytest.raises(memrev.RevisionNotFound, match="removed by gc"):
            store.repo.commit("main", [SetEntry("/ghost.md", b"\x07" * 20, 3)], author="t")
        with pytest.raises(memrev.RevisionNotFound, match="removed by gc"):
            store.repo.commit("main", [Write("/b.md", b"b")], author="t", merge_parent=b"\x08" * 20)
        assert await store.resolve("HEAD") == before
        assert await store.fsck() == []
