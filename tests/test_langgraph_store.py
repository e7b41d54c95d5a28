"""``memrev.langgraph.MemrevStore`` beyond the kit: its files, commits, times, history and threads."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp

from memrev import Store, errors
from memrev.langgraph import MemrevStore, escape, item_path, unescape

pytestmark = pytest.mark.anyio


@pytest.fixture
def handle(store_location: Any) -> Any:
    store = Store(store_location)
    yield store
    store.close()


@pytest.fixture
def lg(handle: Store) -> Any:
    adapter = MemrevStore(handle)
    yield adapter
    adapter.close()


# ------------------------------------------------------------------ names


@given(st.text(max_size=40))
def test_any_key_round_trips_through_its_file_name(key: str) -> None:
    name = escape(key)
    assert unescape(name) == key
    assert "." not in name and "/" not in name and name


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3), st.text(max_size=8),
       st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3), st.text(max_size=8))
def test_two_items_never_share_a_file(ns1: list[str], k1: str, ns2: list[str], k2: str) -> None:
    if (ns1, k1) != (ns2, k2):
        assert item_path(ns1, k1) != item_path(ns2, k2)


def test_the_tree_holds_escaped_names(handle: Store, lg: MemrevStore) -> None:
    lg.put(("users", "a/b:c", "é"), "x.json", {"b": 1, "a": [2]})
    path = "/langgraph/users/a%2Fb%3Ac/%C3%A9/x%2Ejson.json"
    text = asyncio.run(handle.read(path))
    assert text == '{\n "a": [\n  2\n ],\n "b": 1\n}\n'  # canonical: sorted keys, readable diffs
    assert json.loads(text) == {"a": [2], "b": 1}


def test_a_too_long_key_is_refused_and_nothing_written(handle: Store, lg: MemrevStore) -> None:
    with pytest.raises(errors.InvalidArgument):
        lg.batch([PutOp(("ok",), "fine", {"v": 1}), PutOp(("ok",), "é" * 400, {"v": 1})])
    assert asyncio.run(handle.head()) is None
    assert lg.get(("ok",), "é" * 400) is None  # what cannot be stored was never put


def test_bad_ops_in_a_batch_write_nothing(handle: Store, lg: MemrevStore) -> None:
    for bad in ([PutOp(("ok",), "k", {"v": 1}), PutOp(("bad.label",), "k", {"v": 1})],
                [PutOp(("ok",), "k", {"v": 1}), PutOp(("langgraph",), "k", {"v": 1})],
                [PutOp(("ok",), "k", {"v": 1}), GetOp((), "k")]):
        with pytest.raises(InvalidNamespaceError):
            lg.batch(bad)
    with pytest.raises(errors.InvalidContent):
        lg.batch([PutOp(("ok",), "k", {"v": 1}), PutOp(("ok",), "j", {"v": object()})])
    with pytest.raises(errors.InvalidContent):
        lg.put(("ok",), "k", {"v": float("nan")})
    assert asyncio.run(handle.head()) is None


# ------------------------------------------------------------------ commits and times


async def test_one_batch_is_one_commit_and_an_unchanged_put_none(handle: Store, lg: MemrevStore) -> None:
    await lg.abatch([PutOp(("n",), "a", {"v": 1}), PutOp(("n",), "b", {"v": 2}), PutOp(("m",), "c", {"v": 3})])
    assert len(await handle.log()) == 1
    await lg.aput(("n",), "a", {"v": 1})
    assert len(await handle.log()) == 1
    await lg.abatch([PutOp(("n",), "a", None), PutOp(("n",), "b", {"v": 20})])
    log = await handle.log()
    assert len(log) == 2 and set(log[0].paths) == {"/langgraph/n/a.json", "/langgraph/n/b.json"}
    assert log[0].message == "langgraph: 1 put, 1 deleted"


async def test_created_at_stays_across_updates_and_resets_after_delete(handle: Store, lg: MemrevStore) -> None:
    await lg.aput(("t",), "k", {"v": 1})
    first = await lg.aget(("t",), "k")
    await lg.aput(("t",), "k", {"v": 2})
    await lg.aput(("t",), "other", {"v": 0})
    second = await lg.aget(("t",), "k")
    assert first is not None and second is not None
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    log = await handle.log("/langgraph/t/k.json")
    assert [c.time for c in log] == [second.updated_at, first.created_at]  # the commits' own times
    await lg.adelete(("t",), "k")
    await lg.aput(("t",), "k", {"v": 3})
    third = await lg.aget(("t",), "k")
    assert third is not None and third.created_at > second.updated_at and third.created_at == third.updated_at


async def test_times_are_read_from_history_by_a_fresh_adapter(handle: Store, lg: MemrevStore) -> None:
    """Nothing in the view is needed: a new adapter (another process) reads the same times."""
    await lg.aput(("t",), "k", {"v": 1})
    await lg.aput(("t",), "k", {"v": 2})
    await lg.aput(("t",), "j", {"v": 1})
    await lg.adelete(("t",), "j")
    await lg.aput(("t",), "j", {"v": 2})
    fresh = MemrevStore(handle)
    for key in "kj":
        assert await fresh.aget(("t",), key) == await lg.aget(("t",), key)
    assert sorted(i.key for i in await fresh.asearch(("t",))) == ["j", "k"]
    assert {(i.key, i.created_at) for i in await fresh.asearch(("t",))} == {
        (i.key, i.created_at) for i in await lg.asearch(("t",))
    }


async def test_another_handles_writes_are_seen(store_location: Any) -> None:
    a, b = Store(store_location), Store(store_location)
    try:
        one, two = MemrevStore(a), MemrevStore(b)
        await one.aput(("s",), "x", {"v": 1})
        assert [i.key for i in await two.asearch(("s",))] == ["x"]
        await two.aput(("s",), "y", {"v": 2})
        await two.adelete(("s",), "x")
        assert [i.key for i in await one.asearch(("s",))] == ["y"]
        assert await one.alist_namespaces() == [("s",)]
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------------ beyond the contract


async def test_history_at_branch_and_diff(handle: Store, lg: MemrevStore) -> None:
    await lg.aput(("h",), "k", {"v": 1}, )
    first = await handle.head()
    assert first is not None
    async with handle.provenance(agent="planner"):
        await lg.aput(("h",), "k", {"v": 2})
    await lg.adelete(("h",), "k")
    versions = await lg.ahistory(("h",), "k")
    assert [v["value"] for v in versions] == [None, {"v": 2}, {"v": 1}]
    assert versions[1]["meta"].get("agent") == "planner"
    old = lg.at(first)
    assert (await old.aget(("h",), "k")).value == {"v": 1}  # type: ignore[union-attr]
    with pytest.raises(errors.ReadOnlyRevision):
        await old.aput(("h",), "k", {"v": 9})
    assert '-  "v": 1' not in await lg.adiff(("h",), "k", first, versions[1]["rev"])
    assert '+ "v": 2' in await lg.adiff(("h",), "k", first, versions[1]["rev"])
    side = await lg.abranch("experiment", at=first)
    try:
        await side.aput(("h",), "k", {"v": 100})
        assert (await side.aget(("h",), "k")).value == {"v": 100}  # type: ignore[union-attr]
        assert await lg.aget(("h",), "k") is None
    finally:
        side.store.close()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


async def test_ttl_sweep_is_one_commit_and_expiry_is_a_sidecar(handle: Store) -> None:
    clock = Clock()
    lg = MemrevStore(handle, ttl={"default_ttl": 5, "refresh_on_read": False}, clock=clock)
    await lg.abatch([PutOp(("t",), k, {"v": k}, ttl=5) for k in "abc"] + [PutOp(("t",), "kept", {"v": 0}, ttl=None)])
    assert await handle.read("/langgraph-ttl/t/a.json") is not None and await handle.read("/langgraph/t/a.json") == '{\n "v": "a"\n}\n'
    commits = len(await handle.log())
    clock.now += timedelta(minutes=6)
    assert await lg.asweep_ttl() == 3
    log = await handle.log()
    assert len(log) == commits + 1 and "ttl sweep" in log[0].message
    assert await handle.list("/langgraph/t") == ["kept.json"]
    assert lg.supports_ttl


async def test_ttl_refresh_changes_the_sidecar_not_the_item(handle: Store) -> None:
    clock = Clock()
    lg = MemrevStore(handle, ttl={"default_ttl": 10}, clock=clock)
    await lg.aput(("t",), "k", {"v": 1})
    item = await lg.aget(("t",), "k")
    clock.now += timedelta(minutes=5)
    again = await lg.aget(("t",), "k")
    assert again is not None and item is not None and again.updated_at == item.updated_at
    assert len(await handle.log("/langgraph/t/k.json")) == 1 and len(await handle.log("/langgraph-ttl/t/k.json")) == 2


async def test_embeddings_are_stored_and_not_recomputed(handle: Store) -> None:
    calls: list[str] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.extend(texts)
        return [[float(len(t)), 1.0] for t in texts]

    lg = MemrevStore(handle, index={"dims": 2, "embed": embed, "fields": ["text"]})
    await lg.aput(("e",), "a", {"text": "hello", "n": 1})
    await lg.aput(("e",), "a", {"text": "hello", "n": 2})  # the indexed text is the same
    assert calls == ["hello"]
    stored = json.loads(await handle.read("/langgraph-vectors/e/a.json") or "")
    assert stored["vectors"] == {"text": [5.0, 1.0]}
    found = await MemrevStore(handle, index={"dims": 2, "embed": embed, "fields": ["text"]}).asearch(("e",), query="hello")
    assert found[0].score == pytest.approx(1.0) and calls == ["hello", "hello"]  # only the query was embedded


# ------------------------------------------------------------------ threads and loops


def test_sync_calls_from_a_plain_thread(handle: Store) -> None:
    lg = MemrevStore(handle)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: (lg.put(("p",), "k", {"v": 1}), out.append(lg.get(("p",), "k"))))
    thread.start()
    thread.join()
    assert out[0].value == {"v": 1}
    lg.close()


async def test_sync_calls_from_a_worker_thread_do_not_block_the_loop(handle: Store) -> None:
    """A sync put in a worker thread while the loop runs (a sync node in ``ainvoke``): its work
    runs on that loop, which stays free: the embedding it waits for needs the loop to run a task."""
    loop_ran = threading.Event()
    waited: list[bool] = []

    def embed(texts: list[str]) -> list[list[float]]:
        waited.append(loop_ran.wait(10))  # set by a task on the loop while this put is in flight
        return [[1.0, 0.0] for _ in texts]

    lg = MemrevStore(handle, index={"dims": 2, "embed": embed, "fields": ["text"]})
    await lg.aput(("w",), "first", {"text": "x"}, index=False)  # the loop becomes the adapter's home
    worker = asyncio.ensure_future(asyncio.to_thread(lg.put, ("w",), "k", {"text": "hello"}))
    while not waited and not worker.done():
        loop_ran.set()  # only a free loop gets here
        await asyncio.sleep(0.01)
    await worker
    got = await asyncio.to_thread(lg.get, ("w",), "k")
    assert waited == [True] and got is not None and got.value == {"text": "hello"}
    lg.close()


async def test_a_sync_call_on_the_loop_is_refused(lg: MemrevStore) -> None:
    with pytest.raises(asyncio.InvalidStateError, match="aget|abatch|use a"):
        lg.get(("x",), "k")


@pytest.mark.slow
def test_two_processes_put_into_one_namespace_and_lose_nothing(tmp_path: Any) -> None:
    import multiprocessing

    location = str(tmp_path / "shared")
    Store(location).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(location, w)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = Store(location)
    try:
        keys = sorted(i.key for i in MemrevStore(store).search(("shared",), limit=1000))
        assert keys == sorted(f"w{w}-{i}" for w in range(2) for i in range(40))
    finally:
        store.close()


def _writer(location: str, w: int) -> None:
    store = Store(location)
    lg = MemrevStore(store)
    for i in range(40):
        lg.put(("shared",), f"w{w}-{i}", {"w": w, "i": i})
    lg.close()
    store.close()


async def test_versioned_store_langgraph_opens_the_adapter(tmp_path: Any) -> None:
    from memrev import VersionedStore

    async with VersionedStore(tmp_path / "s") as store:
        lg = store.langgraph(ttl={"default_ttl": 60})
        assert isinstance(lg, MemrevStore) and lg.store is store and lg.ttl_config == {"default_ttl": 60}
        await lg.aput(("v",), "k", {"v": 1})
        assert await store.read("/langgraph/v/k.json") == '{\n "v": 1\n}\n'
        lg.close()


def test_the_background_sweeper_deletes_the_expired(handle: Store) -> None:
    import time

    clock = Clock()
    lg = MemrevStore(handle, ttl={"default_ttl": 1, "sweep_interval_minutes": 0.002}, clock=clock)
    lg.put(("t",), "k", {"v": 1})
    clock.now += timedelta(minutes=2)
    lg.start_ttl_sweeper()
    deadline = time.monotonic() + 10
    while asyncio.run(handle.read("/langgraph/t/k.json")) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lg.stop_ttl_sweeper(timeout=5)
    assert asyncio.run(handle.read("/langgraph/t/k.json")) is None and asyncio.run(handle.read("/langgraph-ttl/t/k.json")) is None
    lg.close()
