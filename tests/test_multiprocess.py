"""Several processes on one store folder, and a process killed mid-write.

(a) two processes appending concurrently to one path lose nothing and get
    distinct, correct offsets;
(b) a writer killed with SIGKILL leaves a store that opens and holds every
    write whose call had returned;
(c) ``on_change`` sees another process's commits within ``poll_interval``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from helpers import spawn
from memrev import VersionedStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# --------------------------------------------------------------------------
# (a) concurrent appends
# --------------------------------------------------------------------------

APPENDER = r"""
import asyncio, json, os, sys, time
from memrev import VersionedStore

folder, who, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

async def main():
    store = VersionedStore(folder, author=who)
    try:
        print("ready", flush=True)
        while not os.path.exists(go):   # start both writers at the same instant
            time.sleep(0.001)
        out = []
        for i in range(n):
            line = f"{who} line {i:04d} é日😀\n"
            out.append([line, await store.append("/shared/stream.log", line)])
        print(json.dumps(out), flush=True)
    finally:
        store.close()

asyncio.run(main())
"""


async def test_two_processes_append_concurrently(tmp_path: Path):
    folder = tmp_path / "store"
    n = 300
    store = VersionedStore(str(folder))
    await store.write("/other", "created by the parent")
    store.close()

    go = tmp_path / "go"
    procs = [spawn(APPENDER, str(folder), who, str(n), str(go)) for who in ("p1", "p2")]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        go.touch()
        results = []
        for p in procs:
            out = p.stdout.read()  # the same buffered stream readline() used
            p.wait(timeout=120)
            assert p.returncode == 0, p.stderr.read()
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    pairs = [tuple(x) for r in results for x in r]
    assert len(pairs) == 2 * n
    async with VersionedStore(str(folder)) as store:
        content = await store.read("/shared/stream.log")
        assert content is not None
        lines = content.splitlines(keepends=True)
        expected = Counter(line for line, _ in pairs)
        assert Counter(lines) == expected, "lines lost or duplicated"
        assert all(c == 1 for c in Counter(lines).values())
        # each process's lines are in its own order
        for r in results:
            mine = [line for line, _ in r]
            assert [ln for ln in lines if ln in set(mine)] == mine
        offsets = [off for _, off in pairs]
        assert len(set(offsets)) == 2 * n, "two appends got the same offset"
        data = content.encode("utf-8")
        assert len(data) == sum(len(line.encode()) for line, _ in pairs)
        for line, off in pairs:
            b = line.encode("utf-8")
            assert data[off : off + len(b)] == b, f"offset {off} does not hold {line!r}"
            assert await store.read_range("/shared/stream.log", off, off + len(b)) == line
        # offsets tile the file exactly
        ends = sorted((off, off + len(line.encode())) for line, off in pairs)
        assert ends[0][0] == 0 and ends[-1][1] == len(data)
        assert all(a[1] == b[0] for a, b in zip(ends, ends[1:]))
        # one commit per append, on one linear history
        log = await store.log("/shared/stream.log")
        assert len(log) == 2 * n
        assert Counter(c.author for c in log) == {"p1": n, "p2": n}
        full = await store.log()
        assert len(full) == 2 * n + 1
        for newer, older in zip(full, full[1:]):
            assert newer.parents == (older.id,)
        assert await store.read("/other") == "created by the parent"


CREATOR = r"""
import asyncio, os, sys, time
from memrev import VersionedStore
root, who, rounds, nproc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def barrier(k):
    # every process announces itself, then waits for all the others
    open(os.path.join(root, f"at-{k}-{who}"), "w").close()
    while sum(1 for f in os.listdir(root) if f.startswith(f"at-{k}-")) < nproc:
        time.sleep(0.0005)

async def main():
    for k in range(rounds):
        barrier(k)
        store = VersionedStore(os.path.join(root, f"fresh{k}"), author=who)
        try:
            for i in range(3):
                await store.write(f"/{who}/{i}", f"{who}-{i}")
        finally:
            store.close()

asyncio.run(main())
"""


async def test_processes_creating_the_same_new_store(tmp_path: Path):
    """Several processes open one not-yet-existing store at the same instant
    (20 times over): all of them succeed and every write lands."""
    rounds, who = 20, ("c1", "c2", "c3")
    procs = [spawn(CREATOR, str(tmp_path), w, str(rounds), str(len(who))) for w in who]
    deadline = time.monotonic() + 120
    try:
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed:  # the others would wait at the barrier forever
                pytest.fail(f"a process failed to open the new store:\n{failed[0].stderr.read()}")
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.02)
        for p in procs:
            assert p.returncode == 0, p.stderr.read()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    for k in range(rounds):
        async with VersionedStore(str(tmp_path / f"fresh{k}")) as store:
            assert await store.list("/") == [f"{w}/" for w in who]
            for w in who:
                for i in range(3):
                    assert await store.read(f"/{w}/{i}") == f"{w}-{i}"
            assert len(await store.log()) == 3 * len(who)


# --------------------------------------------------------------------------
# (b) kill -9
# --------------------------------------------------------------------------

KILLED_WRITER = r"""
import asyncio, json, random, sys
from memrev import VersionedStore

folder, seed, durability = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def ops(seed):
    rng = random.Random(seed)
    i = 0
    while True:
        k = rng.random()
        if k < 0.35:
            yield ("write", f"/w/{i}", f"new file {i} é " + "x" * rng.randrange(0, 3000))
        elif k < 0.6:
            yield ("write", f"/over/{rng.randrange(5)}", f"overwrite {i} 日本 " + "y" * rng.randrange(0, 3000))
        elif k < 0.9:
            yield ("append", "/stream.log", f"line {i} 😀\n")
        else:
            yield ("delete", f"/w/{rng.randrange(max(i, 1))}")
        i += 1

async def main():
    store = VersionedStore(folder, durability=durability)
    print("ready", flush=True)
    for n, op in enumerate(ops(seed)):
        if op[0] == "write":
            await store.write(op[1], op[2])
            ack = None
        elif op[0] == "append":
            ack = await store.append(op[1], op[2])
        else:
            await store.delete(op[1])
            ack = None
        sys.stdout.write(json.dumps([n, ack]) + "\n")
        sys.stdout.flush()

asyncio.run(main())
"""


def _ops(seed: int):
    """The same deterministic stream of operations as the child."""
    rng = random.Random(seed)
    i = 0
    while True:
        k = rng.random()
        if k < 0.35:
            yield ("write", f"/w/{i}", f"new file {i} é " + "x" * rng.randrange(0, 3000))
        elif k < 0.6:
            yield ("write", f"/over/{rng.randrange(5)}", f"overwrite {i} 日本 " + "y" * rng.randrange(0, 3000))
        elif k < 0.9:
            yield ("append", "/stream.log", f"line {i} 😀\n")
        else:
            yield ("delete", f"/w/{rng.randrange(max(i, 1))}")
        i += 1


def _model(ops: list[tuple]) -> dict[str, str]:
    m: dict[str, str] = {}
    for op in ops:
        if op[0] == "write":
            m[op[1]] = op[2]
        elif op[0] == "append":
            m[op[1]] = m.get(op[1], "") + op[2]
        else:
            m.pop(op[1], None)
    return m


async def _store_state(store: VersionedStore) -> dict[str, str]:
    state: dict[str, str] = {}
    for d in ["/w", "/over"]:
        for name in await store.list(d):
            assert not name.endswith("/")
            state[f"{d}/{name}"] = await store.read(f"{d}/{name}")
    log = await store.read("/stream.log")
    if log is not None:
        state["/stream.log"] = log
    assert sorted(await store.list("/")) == sorted(
        {p.split("/")[1] + ("/" if p.count("/") > 1 else "") for p in state}
    )
    return state


@pytest.mark.parametrize("trial", range(5))
async def test_kill_9_keeps_every_acknowledged_write(tmp_path: Path, trial: int):
    seed = random.randrange(1 << 30)
    folder = tmp_path / "store"
    rng = random.Random(seed)
    min_acks = 50 + rng.randrange(0, 100)
    durability = "full" if trial == 4 else "normal"  # both promise to survive kill -9
    child = spawn(KILLED_WRITER, str(folder), str(seed), durability)
    acks: list[list] = []
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        while len(acks) < min_acks:
            line = child.stdout.readline()
            assert line, f"child died early: {child.stderr.read()}"
            acks.append(json.loads(line))
        time.sleep(rng.uniform(0, 0.03))  # a random instant, mid-write most likely
        os.kill(child.pid, signal.SIGKILL)
        # read through the same buffered stream: acks it already buffered count
        rest = child.stdout.read()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    for line in rest.splitlines():  # acks already in the pipe were acknowledged too
        if line.strip():
            try:
                acks.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line: not an ack
    n = len(acks)
    assert [a[0] for a in acks] == list(range(n))

    gen = _ops(seed)
    ops = [next(gen) for _ in range(n + 1)]
    acked, in_flight = ops[:n], ops[n]
    candidates = [_model(acked), _model(ops)]

    async with VersionedStore(str(folder)) as store:
        state = await _store_state(store)
        assert state in candidates, (
            f"seed={seed}: after kill -9 with {n} acknowledged ops the store holds neither "
            f"the acknowledged state nor that plus the in-flight op {in_flight[:2]}; "
            f"differing paths: {sorted(k for k in set(state) | set(candidates[0]) if state.get(k) != candidates[0].get(k))}"
        )
        # offsets returned by acknowledged appends still point at their lines
        for (i, off), op in zip(acks, acked):
            if op[0] == "append":
                b = op[2].encode()
                assert await store.read_range("/stream.log", off, off + len(b)) == op[2], (seed, i, off)
        # history is intact: one commit per changing op, readable at every revision
        log = await store.log()
        changing = 0
        model: dict[str, str] = {}
        for op in ops[: n + (state == candidates[1] != candidates[0])]:
            after = _model([("write", k, v) for k, v in model.items()] + [op])
            changing += after != model
            model = after
        assert len(log) == changing, (seed, len(log), changing)
        for c in log[:: max(1, len(log) // 10)]:
            await store.list("/", rev=c.id)
            for p in c.paths:
                await store.read(p, rev=c.id)
        # and it is writable
        off = await store.append("/stream.log", "after the crash\n")
        assert off == len(state.get("/stream.log", "").encode())
        await store.write("/w/after", "ok")
        assert await store.read("/w/after") == "ok"


# --------------------------------------------------------------------------
# (c) on_change across processes
# --------------------------------------------------------------------------

REMOTE_WRITER = r"""
import asyncio, sys
from memrev import VersionedStore
folder = sys.argv[1]

async def main():
    store = VersionedStore(folder, author="remote")
    try:
        print("ready", flush=True)
        for cmd in sys.stdin:
            cmd = cmd.strip()
            if cmd == "quit":
                break
            op, path, *content = cmd.split(" ", 2)
            if op == "write":
                await store.write(path, content[0])
            elif op == "append":
                await store.append(path, content[0])
            elif op == "delete":
                await store.delete(path)
            print("done", flush=True)
    finally:
        store.close()

asyncio.run(main())
"""


class _Remote:
    def __init__(self, folder: Path) -> None:
        self.p = spawn(REMOTE_WRITER, str(folder), stdin=True)
        assert self.p.stdout.readline().strip() == "ready", self.p.stderr.read()

    async def do(self, cmd: str) -> float:
        """Run one command in the other process; the time its call returned."""
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = await anyio.to_thread.run_sync(self.p.stdout.readline)
        assert line.strip() == "done", self.p.stderr.read()
        return time.monotonic()

    def close(self) -> None:
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            self.p.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.p.kill()
            self.p.wait()


async def test_on_change_sees_other_process_commits():
    poll = 0.2
    bound = poll + 1.0
    with tempfile.TemporaryDirectory() as d:
        store = VersionedStore(d, poll_interval=poll)
        await store.write("/seed", "x")
        got: list[tuple[str, float]] = []
        arrived = anyio.Event()

        async def cb(path: str) -> None:
            got.append((path, time.monotonic()))
            arrived.set()

        sub = await store.on_change("/watched", cb)
        remote = _Remote(Path(d))
        try:
            # a write outside the prefix is not delivered
            await remote.do("write /other/y outside")
            await remote.do("write /watchedx/y sibling-prefix")
            # a write inside is, within poll_interval + 1 s of the call returning
            t = await remote.do("write /watched/a hello")
            with anyio.fail_after(bound + 1.0):
                await arrived.wait()
            assert got[0][0] == "/watched/a", got
            assert got[0][1] - t <= bound, f"delivered after {got[0][1] - t:.2f}s > {bound}s"
            await anyio.sleep(3 * poll)
            assert [p for p, _ in got] == ["/watched/a"], f"expected exactly one delivery: {got}"
            assert await store.read("/watched/a") == "hello"
            assert await store.list("/watched") == ["a"]
            assert await store.exists("/watchedx") is True

            # appends and deletes are changes too
            got.clear()
            await remote.do("append /watched/log one")
            await remote.do("delete /watched/a")
            t = await remote.do("write /watched/deep/er x")
            deadline = t + bound
            while {p for p, _ in got} != {"/watched/log", "/watched/a", "/watched/deep/er"}:
                assert time.monotonic() < deadline + 1.0, f"missing notifications after {bound}s: {got}"
                await anyio.sleep(0.02)
            assert max(ts for _, ts in got) - t <= bound
            await anyio.sleep(3 * poll)
            assert all(p.startswith("/watched/") for p, _ in got), got

            # after close: nothing more
            await sub.close()
            got.clear()
            await remote.do("write /watched/b after-close")
            await anyio.sleep(3 * poll + 0.2)
            assert got == []
        finally:
            remote.close()
            await sub.close()
            store.close()


async def test_own_commit_after_an_unseen_remote_commit_is_delivered_once():
    """Another process commits, then this handle commits before its next poll:
    the poller must not deliver this handle's own commit a second time."""
    poll = 1.0
    with tempfile.TemporaryDirectory() as d:
        store = VersionedStore(d, poll_interval=poll)
        await store.write("/seed", "x")
        got: list[str] = []

        async def cb(path: str) -> None:
            got.append(path)

        sub = await store.on_change("/", cb)
        remote = _Remote(Path(d))
        try:
            await anyio.sleep(0.05)
            await remote.do("write /remote/r 1")
            await store.write("/local/l", "2")  # right after: the poller has not run yet
            assert got.count("/local/l") == 1, got  # delivered before write() returned
            await anyio.sleep(2.5 * poll)
            assert sorted(got) == ["/local/l", "/remote/r"], f"expected each path once: {got}"
            assert await store.list("/") == ["local/", "remote/", "seed"]
        finally:
            remote.close()
            await sub.close()
            store.close()


TXN_WRITER = r"""
import asyncio, sys
from memrev import VersionedStore
folder, n = sys.argv[1], int(sys.argv[2])

async def main():
    store = VersionedStore(folder, author="txn")
    try:
        print("ready", flush=True)
        for i in range(n):
            async with store.transaction(message=f"pair {i}"):
                await store.write("/pair/left", str(i))
                await store.append("/pair/log", f"{i}\n")
                await store.write("/pair/right", str(i))
        print("done", flush=True)
    finally:
        store.close()

asyncio.run(main())
"""


async def test_readers_never_see_half_a_transaction(tmp_path: Path):
    folder = tmp_path / "store"
    n = 150
    async with VersionedStore(str(folder)) as store:
        await store.write("/pair/left", "-1")
        await store.write("/pair/right", "-1")
        child = spawn(TXN_WRITER, str(folder), str(n))
        try:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
            seen = set()
            while True:
                head = await store.resolve("HEAD")
                left = await store.read("/pair/left", rev=head)
                right = await store.read("/pair/right", rev=head)
                log = await store.read("/pair/log", rev=head)
                assert left == right, f"half a transaction visible at {head}: left={left} right={right}"
                k = int(left)
                assert (log or "") == "".join(f"{i}\n" for i in range(k + 1)), (k, log)
                seen.add(k)
                if child.poll() is not None:
                    break
                await anyio.sleep(0.001)
            child.wait(timeout=60)
            assert child.returncode == 0, child.stderr.read()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        log = await store.log()
        assert len(log) == n + 2
        assert all(c.paths == ("/pair/left", "/pair/log", "/pair/right") for c in log[:n])
        assert await store.read("/pair/left") == str(n - 1)
