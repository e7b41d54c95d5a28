"""Reliability tests with figures (issue 5, item 4); the figures are in docs/reliability.md.

Run ``python -m pytest tests/test_reliability.py -s`` to see them printed.

1. **Crash**, per backend: a child process runs a seeded stream of writes,
   rewrites, appends and deletes (file and directory deletes) and prints an
   ack line after each call returned; it is killed with SIGKILL after a
   seeded random delay. The store must open, ``fsck()`` must be clean, and
   its state must be exactly the acknowledged operations, plus or minus the
   one operation in flight. Trials are chained four to a store, so later
   kills hit a store with history.
2. **Concurrency, SQLite**: 8 processes x 500 appends to one path plus
   8 x 200 writes to paths of their own, all at once.
3. **Concurrency, PostgreSQL**: 4 processes (standing for 4 hosts, one
   connection each), same workload.
4. **Fuzzing** (hypothesis, both backends): odd paths and contents give the
   ag2-compatible result (``MemoryKnowledgeStore`` is the oracle) or a typed
   memrev error, never a partial commit; ``fsck()`` clean afterwards. Plus
   explicit edge paths (root, 10k characters, 5,000 segments) on both
   backends and the cost of a huge rewrite.
5. **Corruption**: flipped bytes and deleted rows in every table, a head
   index that disagrees, truncated SQLite files, a torn WAL tail, random bit
   flips in the SQLite file. Reads must raise a memrev error (never return
   wrong content, never leak a sqlite3/psycopg/zstd exception) and ``fsck()``
   must report the fault.

The master seed is ``MEMREV_RELIABILITY_SEED`` (default below); it is printed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import threading
import time
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from ag2.knowledge import MemoryKnowledgeStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memrev
import memrev.repo.commit
from helpers import spawn
from memrev import VersionedStore
from memrev.core import trees

pytestmark = pytest.mark.anyio

SEED = int(os.environ.get("MEMREV_RELIABILITY_SEED", "20250611"))

# Figures collected by the tests, printed when the module finishes (run with -s).
FIGURES: dict[str, list[str]] = {}


def _figure(title: str, line: str) -> None:
    FIGURES.setdefault(title, []).append(line)


@pytest.fixture(scope="module", autouse=True)
def _print_figures():
    yield
    if FIGURES:
        print(f"\n\n######## reliability figures (seed {SEED}) ########")
        for title, lines in FIGURES.items():
            print(f"\n== {title} ==")
            print("\n".join(lines))


# --------------------------------------------------------------------------
# child processes
# --------------------------------------------------------------------------


class _Child:
    """A child process whose stdout and stderr are drained by threads (a full pipe never blocks it)."""

    def __init__(self, script: str, *args: str, stdin: bool = False) -> None:
        self.p = spawn(script, *args, stdin=stdin)
        self.lines: list[str] = []
        self.err: list[str] = []
        self.eof = False
        self._cv = threading.Condition()
        self._out = threading.Thread(target=self._drain_out, daemon=True)
        self._err = threading.Thread(target=lambda: self.err.extend(self.p.stderr), daemon=True)
        self._out.start()
        self._err.start()

    def _drain_out(self) -> None:
        for line in self.p.stdout:
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        with self._cv:
            self.eof = True
            self._cv.notify_all()

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self._cv:
            while f"{text}\n" not in self.lines and not self.eof and time.monotonic() < deadline:
                self._cv.wait(max(0.0, deadline - time.monotonic()))
            found = f"{text}\n" in self.lines
        if not found:
            if self.p.poll() is None:
                self.p.kill()
            self.reap()
            raise AssertionError(f"child did not print {text!r}; stderr:\n{self.stderr}")

    def go(self) -> None:
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def kill(self) -> None:
        os.kill(self.p.pid, signal.SIGKILL)
        self.reap()

    def reap(self, timeout: float = 60) -> int:
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self._out.join(timeout=10)
        self._err.join(timeout=10)
        return self.p.returncode

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def _pg_exec(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, args)
        return cur.fetchall() if cur.description else []


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


async def _state(store: VersionedStore) -> dict[str, str]:
    """Every file of the store at its head, found through ``list`` (the tree), read through ``read``."""
    out: dict[str, str] = {}
    todo = ["/"]
    while todo:
        d = todo.pop()
        for name in await store.list(d):
            p = d.rstrip("/") + "/" + name.rstrip("/")
            if name.endswith("/"):
                todo.append(p)
            else:
                out[p] = await store.read(p)
    return out


# --------------------------------------------------------------------------
# 1. Crash: kill -9 at a random instant
# --------------------------------------------------------------------------

# The operation stream: executed by the child, replayed by the parent.
OPS_SRC = r'''
import random as _random

FILES = [f"/notes/{i}.md" for i in range(6)] + [f"/d/{a}/{i}" for a in "xy" for i in range(3)]
WORKING = "/memory/working.md"
LOGS = ["/log/a.jsonl", "/log/b.jsonl"]
DIRS = ["/d/x", "/d", "/notes", "/log", "/memory"]


def content(rng, n):
    k = rng.random()
    if k < 0.1:
        return ""
    if k < 0.7:
        return f"version {n} é日😀\n" * rng.randrange(1, 60)
    return f"version {n} " + rng.randbytes(rng.randrange(1, 2500)).hex() + "\n"


def edit(old, n):
    """A rewrite that changes one line in the middle (WorkingMemoryAggregate style)."""
    lines = old.splitlines(keepends=True)
    if not lines:
        return "".join(f"working line {i}\n" for i in range(40))
    lines[(n * 7919) % len(lines)] = f"edited by op {n} 日本\n"
    return "".join(lines)


def gen_ops(seed):
    rng = _random.Random(seed)
    n = 0
    while True:
        r = rng.random()
        if r < 0.25:
            op = ("write", rng.choice(FILES), content(rng, n))
        elif r < 0.40:
            op = ("edit", rng.choice([WORKING, WORKING, FILES[0]]), n)
        elif r < 0.50:
            op = ("extend", rng.choice(LOGS), f'{{"op": {n}, "via": "rewrite", "t": "é😀"}}\n')
        elif r < 0.82:
            op = ("append", rng.choice(LOGS), f'{{"op": {n}, "e": "日本"}}\n')
        elif r < 0.95:
            op = ("delete", rng.choice(FILES + ["/missing/file"]))
        else:
            op = ("delete", rng.choice(DIRS))
        yield op
        n += 1


def apply_op(model, op):
    kind, path = op[0], op[1]
    m = dict(model)
    if kind == "write":
        m[path] = op[2]
    elif kind == "edit":
        m[path] = edit(m.get(path, ""), op[2])
    elif kind in ("extend", "append"):
        m[path] = m.get(path, "") + op[2]
    else:
        for k in [k for k in m if k == path or k.startswith(path + "/")]:
            del m[k]
    return m
'''

CRASH_CHILD = (
    OPS_SRC
    + r'''
import asyncio, json, sys
from memrev import VersionedStore

loc, seed = sys.argv[1], int(sys.argv[2])
print("imported", flush=True)
if sys.stdin.readline() != "go\n":  # the parent's clock starts now; EOF: the parent is gone
    sys.exit(0)


async def main():
    store = VersionedStore(loc)
    print("ready", flush=True)
    out = sys.stdout
    for n, op in enumerate(gen_ops(seed)):
        kind, path = op[0], op[1]
        result = None
        if kind == "write":
            await store.write(path, op[2])
        elif kind == "edit":
            await store.write(path, edit(await store.read(path) or "", op[2]))
        elif kind == "extend":  # EventLogWriter: rewrite the whole, grown log
            await store.write(path, (await store.read(path) or "") + op[2])
        elif kind == "append":
            result = await store.append(path, op[2])
        else:
            await store.delete(path)
        # the call has returned: acknowledge it, with what it did (one write(2) per line)
        out.write(json.dumps(["ack", n, kind, path, result]) + "\n")
        out.flush()


asyncio.run(main())
'''
)

_OPS: dict[str, Any] = {}
exec(OPS_SRC, _OPS)  # noqa: S102 - the same generator the child runs


@dataclass
class _Plan:
    index: int
    chain: int
    seed: int
    anchor: str  # the child's line the delay counts from: "go" (kills during open) or "ready"
    delay: float


async def _crash_campaign(
    label: str,
    new_location: Callable[[], tuple[str, str]],
    settle: Callable[[], None] | None = None,
    *,
    trials: int = 24,
    chain: int = 4,
    open_window: float = 0.025,
    check: Callable[[VersionedStore], Any] | None = None,
) -> None:
    """Run ``trials`` kill -9 trials; ``new_location()`` gives (location for the child, for the parent).

    The kill instant is drawn from a seeded mix: 20 % within ``open_window``
    of "go" (while the child opens, or creates, the store), 25 % within 50 ms
    of "ready" (the first commits, the one creating the branch among them),
    25 % at 50-300 ms and 30 % at 300-700 ms after "ready".
    """
    rng = random.Random(f"{SEED}-crash-{label}")
    plans = []
    for i in range(trials):
        r = rng.random()
        if r < 0.2:
            anchor, delay = "go", rng.uniform(0, open_window)
        elif r < 0.45:
            anchor, delay = "ready", rng.uniform(0, 0.05)
        elif r < 0.7:
            anchor, delay = "ready", rng.uniform(0.05, 0.3)
        else:
            anchor, delay = "ready", rng.uniform(0.3, 0.7)
        plans.append(_Plan(i, i // chain, rng.randrange(1 << 30), anchor, delay))

    locations: dict[int, tuple[str, str]] = {}
    children: list[_Child] = []

    def spawn(plan: _Plan) -> _Child:
        if plan.chain not in locations:
            locations[plan.chain] = new_location()
        child = _Child(CRASH_CHILD, locations[plan.chain][0], str(plan.seed), stdin=True)
        children.append(child)
        return child

    violations: list[str] = []
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        child = spawn(plans[0])
        model: dict[str, str] = {}
        commits = 0
        for k, plan in enumerate(plans):
            if plan.index % chain == 0:
                model, commits = {}, 0  # a new store
            child.wait_for("imported")
            nxt = spawn(plans[k + 1]) if k + 1 < len(plans) else None  # imports meanwhile; opens nothing before "go"
            child.go()
            if plan.anchor == "ready":
                child.wait_for("ready")
            time.sleep(plan.delay)
            child.kill()
            assert child.p.returncode == -signal.SIGKILL, child.stderr
            if settle is not None:
                settle()
            last_of_chain = plan.index % chain == chain - 1 or k == len(plans) - 1
            row, model, commits = await _verify_trial(
                label, plan, child, locations[plan.chain][1], model, commits, last_of_chain, violations, check
            )
            rows.append(row)
            child = nxt
    finally:
        for c in children:
            if c.p.poll() is None:
                c.kill()
    _crash_report(label, rows, violations, chain, len(locations), time.monotonic() - started)


async def _verify_trial(
    label: str,
    plan: _Plan,
    child: _Child,
    location: str,
    model: dict[str, str],
    commits: int,
    last_of_chain: bool,
    violations: list[str],
    check: Callable[[VersionedStore], Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str], int]:
    """Check the store after one kill; returns (figures, the store's state, its commit count)."""
    where = f"{label} trial {plan.index} (seed {plan.seed}, killed {plan.delay * 1000:.0f} ms after {plan.anchor!r})"
    # what the child acknowledged (a torn last line is not an acknowledgement)
    acks = []
    for line in child.lines:
        if line.startswith('["ack"'):
            if not line.endswith("\n"):
                break
            acks.append(json.loads(line))
    gen = _OPS["gen_ops"](plan.seed)
    ops = [next(gen) for _ in range(len(acks) + 1)]
    for i, (ack, op) in enumerate(zip(acks, ops)):
        assert ack[1:4] == [i, op[0], op[1]], f"{where}: ack {ack} is not op {i} {op[:2]}"
        if op[0] == "append":
            expected = len(model.get(op[1], "").encode())
            if ack[4] != expected:
                violations.append(f"{where}: append #{i} to {op[1]} returned offset {ack[4]}, expected {expected}")
        new = _OPS["apply_op"](model, op)
        commits += new != model
        model = new
    in_flight = ops[len(acks)]
    with_flight = _OPS["apply_op"](model, in_flight)
    candidates = {"not applied": (model, commits), "applied": (with_flight, commits + (with_flight != model))}

    t0 = time.monotonic()
    outcome = "store does not open"
    try:
        store = VersionedStore(location)
    except Exception as e:  # noqa: BLE001
        violations.append(f"{where}: the store does not open: {type(e).__name__}: {e}")
        store = None
    if store is not None:
        try:
            problems = await store.fsck()
            if problems:
                violations.append(f"{where}: fsck found {len(problems)} problems: {problems[:3]}")
            state = await _state(store)
            n_log = len(await store.log())
            matches = [name for name, (m, c) in candidates.items() if state == m and n_log == c]
            if matches:
                outcome = "no-op in flight" if len(matches) == 2 else matches[0]
                model, commits = candidates[matches[0]]
            else:
                a = candidates["not applied"][0]
                diff = sorted(p for p in set(state) | set(a) if state.get(p) != a.get(p))
                violations.append(
                    f"{where}: after {len(acks)} acknowledged ops the store is neither the acknowledged state "
                    f"nor that plus the in-flight op {in_flight[:2]} (log has {n_log} commits, expected "
                    f"{candidates['not applied'][1]} or {candidates['applied'][1]}; differing paths {diff[:5]})"
                )
                outcome, model, commits = "VIOLATION", state, n_log
            if check is not None:  # what the caller's kind of store must also hold (problems, as text)
                violations.extend(f"{where}: {problem}" for problem in await check(store))
            # the offsets the last acknowledged appends returned still hold their lines
            checked = 0
            for i in range(len(acks) - 1, -1, -1):
                op = ops[i]
                if op[0] != "append" or checked >= 20:
                    continue
                checked += 1
                data, off = op[2].encode(), acks[i][4]
                if model.get(op[1], "").encode()[off : off + len(data)] == data:
                    got = await store.read_range(op[1], off, off + len(data))
                    if got != op[2]:
                        violations.append(f"{where}: read_range({op[1]}, {off}) = {got!r}, expected {op[2]!r}")
            if last_of_chain:  # the store is still writable after its last kill
                before = model.get("/log/a.jsonl", "")
                off = await store.append("/log/a.jsonl", "after the crash\n")
                if off != len(before.encode()) or await store.read("/log/a.jsonl") != before + "after the crash\n":
                    violations.append(f"{where}: the append after the crash returned {off} or is not there")
        finally:
            store.close()
    row = dict(
        anchor=plan.anchor, delay=plan.delay, acks=len(acks), ready="ready\n" in child.lines, outcome=outcome,
        verify=time.monotonic() - t0,
    )
    return row, model, commits


def _crash_report(
    label: str, rows: list[dict[str, Any]], violations: list[str], chain: int, stores: int, elapsed: float
) -> None:
    after_go = [r["delay"] * 1000 for r in rows if r["anchor"] == "go"]
    after_ready = [r["delay"] * 1000 for r in rows if r["anchor"] == "ready"]
    acks_n = [r["acks"] for r in rows]
    outcomes = Counter(r["outcome"] for r in rows)

    def spread(ms: list[float]) -> str:
        if not ms:
            return "none"
        return (
            f"{len(ms)} kills, min {min(ms):.1f} / p25 {_pct(ms, .25):.0f} / median {statistics.median(ms):.0f} / "
            f"p75 {_pct(ms, .75):.0f} / max {max(ms):.0f} ms"
        )

    title = f"crash: kill -9 ({label})"
    lines = [
        f"trials: {len(rows)} (chains of {chain} kills per store, {stores} stores), seed {SEED}",
        f"acknowledged ops: {sum(acks_n)} in total; per trial min {min(acks_n)} / median "
        f"{statistics.median(acks_n):.0f} / max {max(acks_n)}",
        f"kill instant, counted from 'go' (child about to open the store): {spread(after_go)}",
        f"kill instant, counted from 'ready' (store open, ops running): {spread(after_ready)}; "
        f"<50 ms: {sum(d < 50 for d in after_ready)}, 50-300 ms: {sum(50 <= d < 300 for d in after_ready)}, "
        f">=300 ms: {sum(d >= 300 for d in after_ready)}",
        f"killed before the store had opened: {sum(not r['ready'] for r in rows)}",
        "in-flight op after restart: " + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())),
        f"verification (open + fsck + state + log) per trial: median {statistics.median(r['verify'] for r in rows):.2f} s",
        f"violations: {len(violations)}",
        f"wall time: {elapsed:.1f} s",
    ]
    print(f"\n{title}\n  " + "\n  ".join(lines))
    for line in lines:
        _figure(title, line)
    assert rows, "no trial ran"
    assert not violations, "\n".join(violations)


@pytest.mark.slow
async def test_crash_sqlite_kill_9_at_random_instants(tmp_path: Path):
    counter = iter(range(1000))

    def new_location() -> tuple[str, str]:
        folder = str(tmp_path / f"store{next(counter)}")
        return folder, folder

    await _crash_campaign("SQLite", new_location)


@pytest.mark.slow
async def test_crash_postgres_kill_9_at_random_instants(pg_server):
    app = "memrev-crash-child"
    urls: list[str] = []

    def new_location() -> tuple[str, str]:
        url = pg_server.create_database("crash")
        urls.append(url)
        return f"{url}?application_name={app}", url

    def settle() -> None:
        # The server ends the killed client's session (rolling back or finishing
        # a COMMIT it had received) a moment after the kill; wait for that, so
        # the parent does not read before the in-flight commit's fate is sealed.
        deadline = time.monotonic() + 30
        while _pg_exec(pg_server.url(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,))[0][0]:
            assert time.monotonic() < deadline, "the server kept the killed client's session"
            time.sleep(0.005)

    try:
        await _crash_campaign("PostgreSQL", new_location, settle, open_window=0.4)
    finally:
        for url in urls:
            pg_server.drop_database(url)


# --------------------------------------------------------------------------
# 2-3. Concurrency: many processes, one branch
# --------------------------------------------------------------------------

CONC_CHILD = r"""
import asyncio, json, os, sys, time
from memrev import VersionedStore

loc, who, appends, writes, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]


async def main():
    store = VersionedStore(loc, author=who)  # one handle: one connection on PostgreSQL
    try:
        print("ready", flush=True)
        while not os.path.exists(go):  # start all writers at the same instant
            time.sleep(0.001)
        t0 = time.time()
        offsets, commits, w = [], 0, 0
        for i in range(appends):
            line = f"{who} line {i:04d} é日😀\n"
            offsets.append(await store.append("/shared/stream.log", line))
            commits += 1  # a non-empty append is always one commit
            while w < writes and w * appends < (i + 1) * writes:  # writes interleaved evenly
                await store.write(f"/own/{who}/{w}", f"{who} file {w} é日😀\n")
                commits += 1  # new content at a new path: one commit
                w += 1
        t1 = time.time()
        print(json.dumps({"who": who, "commits": commits, "writes": w, "offsets": offsets, "t0": t0, "t1": t1}), flush=True)
    finally:
        store.close()


asyncio.run(main())
"""


async def _concurrency(label: str, loc: str, go: Path, n_proc: int, appends: int, writes: int) -> None:
    async with VersionedStore(loc) as store:
        await store.write("/seed", "written before the workers start")
    whos = [f"{'p' if label == 'SQLite' else 'h'}{i}" for i in range(n_proc)]
    children = [_Child(CONC_CHILD, loc, who, str(appends), str(writes), str(go)) for who in whos]
    results = []
    try:
        for c in children:
            c.wait_for("ready", timeout=120)
        t_go = time.time()
        go.touch()
        for c in children:
            rc = await anyio.to_thread.run_sync(lambda c=c: c.reap(timeout=600))
            assert rc == 0, f"a worker failed (exit {rc}):\n{c.stderr}"
            assert c.stderr == "", f"a worker printed to stderr (an error surfaced):\n{c.stderr}"
            results.append(json.loads(c.lines[-1]))
        t_end = time.time()
    finally:
        for c in children:
            if c.p.poll() is None:
                c.kill()

    total = sum(r["commits"] for r in results)
    wall = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    async with VersionedStore(loc) as store:
        t0 = time.monotonic()
        content = await store.read("/shared/stream.log")
        lines = content.splitlines(keepends=True)
        expected = Counter(f"{r['who']} line {i:04d} é日😀\n" for r in results for i in range(appends))
        got = Counter(lines)
        assert got == expected, f"lines lost {sum((expected - got).values())}, duplicated {sum((got - expected).values())}"
        for r in results:  # each process's lines in its own order
            mine = [f"{r['who']} line {i:04d} é日😀\n" for i in range(appends)]
            mine_set = set(mine)
            assert [ln for ln in lines if ln in mine_set] == mine
        data = content.encode()
        spans = sorted(
            (off, off + len(f"{r['who']} line {i:04d} é日😀\n".encode()))
            for r in results
            for i, off in enumerate(r["offsets"])
        )
        assert spans[0][0] == 0 and spans[-1][1] == len(data), "offsets do not cover the file"
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "offsets overlap or leave gaps"
        for r in results:
            for i, off in enumerate(r["offsets"]):
                line = f"{r['who']} line {i:04d} é日😀\n"
                assert await store.read_range("/shared/stream.log", off, off + len(line.encode())) == line
        for r in results:
            assert r["writes"] == writes
            assert await store.list(f"/own/{r['who']}") == sorted(str(w) for w in range(writes))
            for w in range(writes):
                assert await store.read(f"/own/{r['who']}/{w}") == f"{r['who']} file {w} é日😀\n"
        log = await store.log()
        assert len(log) == 1 + total, f"log has {len(log)} commits; the workers made {total} (+1 seed)"
        assert all(newer.parents == (older.id,) for newer, older in zip(log, log[1:])), "history is not linear"
        assert log[-1].parents == ()
        assert Counter(c.author for c in log if c.author != "memrev") == {r["who"]: r["commits"] for r in results}
        assert len(await store.log("/shared/stream.log")) == n_proc * appends
        # No fsck() here: it is quadratic in the length of an append run and took
        # 100 s on this store (see test_fsck_time_is_linear_in_an_append_run).
        verify = time.monotonic() - t0

    title = f"concurrency ({label})"
    per = [r["commits"] / (r["t1"] - r["t0"]) for r in results]
    lines = [
        f"workload: {n_proc} processes x {appends} appends to one path + {n_proc} x {writes} writes to own paths",
        f"commits: {total} (+1 seed), every one reachable from the branch, linear history; lines lost: 0, "
        f"duplicated: 0; offsets tile the file ({len(data)} bytes)",
        f"wall time (first worker start to last worker done): {wall:.2f} s -> {total / wall:.0f} commits/s "
        f"(per process {min(per):.0f}-{max(per):.0f} commits/s)",
        f"until every worker had exited: {t_end - t_go:.2f} s; verification {verify:.2f} s",
        "errors surfaced to callers: 0 (every worker exited 0 with empty stderr)",
    ]
    print(f"\n{title}\n  " + "\n  ".join(lines))
    for line in lines:
        _figure(title, line)


@pytest.mark.slow
async def test_concurrency_sqlite_8_processes(tmp_path: Path):
    await _concurrency("SQLite", str(tmp_path / "store"), tmp_path / "go", 8, 500, 200)


@pytest.mark.slow
async def test_concurrency_postgres_4_hosts(pg_url, tmp_path: Path):
    await _concurrency("PostgreSQL", pg_url, tmp_path / "go", 4, 500, 200)


@pytest.mark.slow
async def test_fsck_time_is_linear_in_an_append_run(tmp_path: Path):
    """fsck of a store whose log got 1,200 appends (one append run) takes about
    what reading it takes, not time quadratic in the run: EventLogWriter-style
    logs get an append per turn, and fsck must stay usable on them."""
    async with VersionedStore(str(tmp_path / "store")) as store:
        for i in range(1200):
            await store.append("/log/events.jsonl", f"event {i:05d} é日😀\n")
        t = time.perf_counter()
        await store.read("/log/events.jsonl")
        read = time.perf_counter() - t
        t = time.perf_counter()
        assert await store.fsck() == []
        took = time.perf_counter() - t
    line = f"one append run of 1,200 pieces: read {read * 1000:.0f} ms, fsck {took:.2f} s"
    print("\n" + line)
    _figure("fsck cost (SQLite)", line)
    assert took < 1.5, f"fsck took {took:.1f} s for 1,200 appends"


# --------------------------------------------------------------------------
# 4. Fuzzing: odd paths and contents against ag2's MemoryKnowledgeStore
# --------------------------------------------------------------------------

_FORBIDDEN_CHARS = {*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000)}


def _ag2_normalize(path: str) -> str:
    if not path.startswith("/"):
        path = "/" + path
    while "//" in path:
        path = path.replace("//", "/")
    if path != "/" and path.endswith("/"):
        path = path.rstrip("/")
    return path


def _must_refuse(name: str, vals: list) -> type[Exception] | None:
    """The typed error memrev promises (docs/design.md, "Bad input") for these arguments."""
    path = vals[0]
    if not isinstance(path, str):
        return memrev.InvalidPath
    if any(ord(c) in _FORBIDDEN_CHARS for c in path) or ".." in _ag2_normalize(path).split("/"):
        return memrev.InvalidPath
    if name in ("write", "append"):
        content = vals[1]
        if not isinstance(content, str):
            return memrev.InvalidContent
        try:
            content.encode("utf-8")
        except UnicodeEncodeError:
            return memrev.InvalidContent
    return None


def _may_refuse(name: str, vals: list) -> bool:
    """Inputs ag2 takes but a store may reasonably refuse with ``InvalidPath``:
    a file at the root itself, and paths over 1,024 UTF-8 bytes or 128 segments
    (a documented limit anywhere above those is fine)."""
    norm = _ag2_normalize(vals[0])
    if norm == "/" and name in ("write", "append"):
        return True
    return len(norm.encode()) > 1024 or norm.count("/") > 128


class _Arg:
    """A generated argument with a short repr (hypothesis prints 5 MB strings otherwise)."""

    __slots__ = ("value", "label")

    def __init__(self, value: Any) -> None:
        self.value = value
        if isinstance(value, str) and len(value) > 40:
            self.label = f"<str of {len(value)} chars: {value[:16]!r}...>"
        else:
            self.label = repr(value)

    def __repr__(self) -> str:
        return self.label

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' falsifying-example printer
        printer.text(self.label)


_rng = random.Random(SEED)
# 10,000 characters each: compressible ASCII, and incompressible text across the BMP and astral planes
LONG_ASCII = "a" * 10_000
LONG_TEXT = "".join(
    chr(_rng.choice([_rng.randrange(0x4E00, 0x9FFF), _rng.randrange(0x1F300, 0x1F5FF), _rng.randrange(0xC0, 0x24F)]))
    for _ in range(10_000)
)
# ~5 MB contents (lines of ~50 KB; see test_huge_rewrite_with_many_new_lines for short lines)
_LINE = "é日😀 huge content line " * 2000
HUGE = {
    "huge": "".join(f"{i:04d} {_LINE}\n" for i in range(95)),
    "huge-astral": "\U0001f600" * 1_250_000,
}
HUGE["huge-edited"] = HUGE["huge"].replace("0047 ", "0047 EDITED ", 1)
HUGE["huge-surrogate"] = HUGE["huge"][:-1] + "\ud800"

_ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
_SEGMENT = st.one_of(
    st.text(_ANY_CHAR, max_size=6),
    st.text(st.sampled_from("ab.é😀\U0001d11e "), min_size=1, max_size=4),
    st.sampled_from(
        ["", ".", "..", "...", "..x", "a", "b", "é", "😀", "\U0001d11e", "\x00", "\n", "\t", "\x1b", "\x7f",
         "\x85", "\x9f", "\ud800", "\udfff", "\u200b", "\ufeff", "\u2028"]
    ),
    st.sampled_from([LONG_ASCII, LONG_TEXT]),
)
_PATH_STR = st.one_of(
    st.builds(
        lambda lead, segs, trail: lead + "/".join(segs) + trail,
        st.sampled_from(["", "/", "//"]),
        st.lists(_SEGMENT, max_size=4),
        st.sampled_from(["", "/", "//"]),
    ),
    st.sampled_from(["", "/", "//", "///", "/////", ".", "..", "/..", "a//b", "/a/./b", "/a/../b", " ", "/ /"]),
    st.just("/d" * 5_000),  # 10,000 characters, 5,000 segments
)
_PATH = st.one_of(
    _PATH_STR, _PATH_STR, _PATH_STR, st.sampled_from([None, b"/x", 1, 2.5, ["/x"], bytearray(b"/x"), {"p": 1}])
).map(_Arg)
_CONTENT = st.one_of(
    st.text(_ANY_CHAR, max_size=30),  # any code point: controls, lone surrogates, astral
    st.text(st.sampled_from("ab\n é😀\U0001d11e\x00"), max_size=30),
    st.just(""),
    st.sampled_from(sorted(HUGE)).map(HUGE.__getitem__),
    st.sampled_from([None, b"bytes", bytearray(b"x"), 0, 1.5, ["x"], {"a": 1}, memoryview(b"m")]),
).map(_Arg)


@st.composite
def _scenario(draw) -> list[tuple]:
    pool = draw(st.lists(_PATH, min_size=1, max_size=3))
    path = st.sampled_from(pool)
    op = st.one_of(
        st.tuples(st.just("write"), path, _CONTENT),
        st.tuples(st.just("append"), path, _CONTENT),
        st.tuples(st.just("delete"), path),
        st.tuples(st.just("read"), path),
        st.tuples(st.just("list"), path),
        st.tuples(st.just("exists"), path),
        st.tuples(st.just("read_range"), path, st.integers(-3, 12), st.one_of(st.none(), st.integers(-3, 14))),
    )
    return draw(st.lists(op, min_size=1, max_size=8))


FUZZ_STATS: dict[str, Counter] = {}


async def _fuzz_example(store: VersionedStore, ops: list[tuple], stats: Counter) -> None:
    oracle = MemoryKnowledgeStore()
    trace: list[str] = []

    def where() -> str:
        return "\n  ".join(trace)

    for op in ops:
        name, *args = op
        vals = [a.value if isinstance(a, _Arg) else a for a in args]
        must, may = _must_refuse(name, vals), False
        if must is None:
            may = _may_refuse(name, vals)
        head0, n0 = await store.head(), len(await store.log())
        before = dict(oracle._data)
        try:
            value, exc = await getattr(store, name)(*vals), None
        except Exception as e:  # noqa: BLE001 - classified below
            value, exc = None, e
        trace.append(f"{name}{tuple(args)!r} -> " + (f"raised {type(exc).__name__}: {exc}"[:300] if exc else f"{value!r}"[:120]))
        if must is memrev.InvalidContent and _may_refuse(name, vals) and isinstance(exc, memrev.InvalidPath):
            # Bad content for a path that may itself be refused (the root, an over-long
            # path): either typed refusal is right; which argument is checked first is not a promise.
            stats[f"{name}: InvalidPath (bad path and bad content)"] += 1
        elif must is not None:
            assert isinstance(exc, must), f"expected {must.__name__}:\n  {where()}"
            stats[f"{name}: {must.__name__}"] += 1
        elif may and isinstance(exc, memrev.InvalidPath):
            stats[f"{name}: InvalidPath (allowed: root file / over-long path)"] += 1
        else:
            try:
                expected, oexc = await getattr(oracle, name)(*vals), None
            except Exception as e:  # noqa: BLE001
                expected, oexc = None, e
            if oexc is not None:
                assert exc is not None and isinstance(exc, type(oexc)), (
                    f"ag2 raised {type(oexc).__name__}({oexc}), memrev did not:\n  {where()}"
                )
            else:
                assert exc is None, f"ag2 accepts this, memrev raised {type(exc).__name__}:\n  {where()}"
                assert type(value) is type(expected) and value == expected, (
                    f"ag2 returned {expected!r:.200}:\n  {where()}"
                )
            stats[f"{name}: ag2-compatible"] += 1
        head1, n1 = await store.head(), len(await store.log())
        if exc is not None:
            assert (head1, n1) == (head0, n0), f"a call that raised moved the branch (partial commit):\n  {where()}"
        elif name in ("write", "append", "delete"):
            assert n1 - n0 == int(oracle._data != before), f"expected {int(oracle._data != before)} commit:\n  {where()}"
    live = {r.path for r in store.repo.backend.head_rows(store.branch_name)}
    assert live == set(oracle._data), f"files differ from ag2's:\n  {where()}"
    for p, v in oracle._data.items():
        assert await store.read(p) == v, f"{p!r} differs at the end:\n  {where()}"
    assert await store.list("/") == await oracle.list("/"), where()
    problems = await store.fsck()
    assert problems == [], f"fsck: {problems}\n  {where()}"


_FUZZ_SETTINGS = dict(
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.large_base_example,
    ],
)


def _fuzz_figures(label: str, stats: Counter) -> None:
    title = f"fuzzing ({label})"
    FIGURES.pop(title, None)
    _figure(title, f"operations: {sum(stats.values())} (examples: {stats.pop('__examples__', 0)})")
    for key, n in sorted(stats.items()):
        _figure(title, f"  {key}: {n}")


@pytest.mark.slow
@settings(max_examples=60, **_FUZZ_SETTINGS)
@given(ops=_scenario())
async def test_fuzz_paths_and_contents_sqlite(tmp_path_factory, ops):
    stats = FUZZ_STATS.setdefault("SQLite", Counter())
    stats["__examples__"] += 1
    folder = tmp_path_factory.mktemp("fuzz")
    store = VersionedStore(str(folder))
    try:
        await _fuzz_example(store, ops, stats)
    finally:
        store.close()
        shutil.rmtree(folder, ignore_errors=True)
        _fuzz_figures("SQLite", Counter(stats))


_schemas = iter(range(1 << 30))


@pytest.mark.slow
@settings(max_examples=40, **_FUZZ_SETTINGS)
@given(ops=_scenario())
async def test_fuzz_paths_and_contents_postgres(pg_url, ops):
    stats = FUZZ_STATS.setdefault("PostgreSQL", Counter())
    stats["__examples__"] += 1
    schema = f"fz{next(_schemas)}"  # one store per example: a schema of its own
    _pg_exec(pg_url, f'CREATE SCHEMA "{schema}"')
    store = VersionedStore(f"{pg_url}?options=-csearch_path%3D{schema}")
    try:
        await _fuzz_example(store, ops, stats)
    finally:
        store.close()
        _pg_exec(pg_url, f'DROP SCHEMA "{schema}" CASCADE')
        _fuzz_figures("PostgreSQL", Counter(stats))


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store")
    return request.getfixturevalue("pg_url")


EDGE_PATHS = {
    "root '/'": "/",
    "empty ''": "",
    "only slashes '////'": "////",
    "10k ASCII chars": "/" + LONG_ASCII,
    "10k incompressible chars": "/" + LONG_TEXT,
    "10k chars, 5000 segments": "/d" * 5_000,
    "astral + empty segments": "//\U0001d11e//😀///x//",
}


@pytest.mark.parametrize("case", sorted(EDGE_PATHS))
async def test_edge_paths_match_ag2_or_are_refused_cleanly(location: str, case: str):
    """Each path through write, read, exists, list, append, read_range, delete:
    ag2's result, or a typed ``InvalidPath`` (allowed for a file at the root and
    for over-long paths) that writes nothing; ``fsck()`` clean afterwards."""
    path = EDGE_PATHS[case]
    parent = _ag2_normalize(path).rsplit("/", 1)[0] or "/"
    ops = [
        ("write", path, "first é😀\n"),
        ("read", path),
        ("exists", path),
        ("list", parent),
        ("append", path, "more\n"),
        ("read_range", path, 0, 5),
        ("write", path + "/child", "a child"),
        ("list", path),
        ("delete", path),
        ("read", path),
        ("exists", path),
    ]
    stats: Counter = Counter()
    backend = "PostgreSQL" if location.startswith("postgres") else "SQLite"
    wrapped = [(name, *(_Arg(a) if i < 2 else a for i, a in enumerate(rest))) for name, *rest in ops]
    store = VersionedStore(location)
    outcome = "?"
    try:
        await _fuzz_example(store, wrapped, stats)
        refused = sorted(k.split(":")[0] for k in stats if "InvalidPath" in k)
        outcome = f"InvalidPath on {', '.join(refused)}; the rest as ag2" if refused else "ag2-compatible"
    except AssertionError as e:
        first, _, rest = str(e).partition("\n")
        outcome = "FAILS: " + first[:60] + " | " + rest.split("-> raised ")[-1].split("\n")[0][:110]
        raise
    finally:
        store.close()
        _figure("edge paths", f"{backend:10} | {case:26} | {outcome}")


@pytest.mark.slow
async def test_sqlite_writer_blocked_past_the_busy_timeout_gets_a_memrev_error(tmp_path: Path, monkeypatch):
    """A writer that waits out SQLite's busy timeout (60 s; 0.3 s here) behind
    another process's write gets a memrev error (the backend interface says
    ``TransientConflict``, which ``Repository.commit`` retries), not a raw
    ``sqlite3.OperationalError: database is locked``; nothing is written."""
    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real_connect(*a, **{**k, "timeout": 0.3}))
    folder = tmp_path / "store"
    async with VersionedStore(str(folder)) as store:
        await store.write("/a", "1")
        other = real_connect(str(folder / "memrev.db"), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process in the middle of a long commit
        try:
            with pytest.raises(memrev.TransientConflict, match="locked by another writer; nothing was written") as ei:
                await store.write("/a", "2")
            line = f"write blocked past the busy timeout raised {_describe(ei.value)}"
            print("\n" + line)
            _figure("SQLite writer blocked past the busy timeout", line)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await store.read("/a") == "1"
        assert len(await store.log()) == 1
        await store.write("/a", "3")  # usable again once the other writer is done
        assert await store.read("/a") == "3"


@pytest.mark.slow
async def test_huge_rewrite_with_many_new_lines(tmp_path: Path):
    """Rewriting an existing file with 2 MB of new short lines costs about what
    writing those 2 MB to a new path costs (the commit holds the store's write
    lock meanwhile: on SQLite every other writer waits, and gives up after 60 s)."""
    body = "".join(f"{i:07d} é日😀 entry\n" for i in range(80_000))
    async with VersionedStore(str(tmp_path / "store")) as store:
        t = time.perf_counter()
        await store.write("/fresh", body)
        fresh = time.perf_counter() - t
        await store.write("/rewritten", "a small older version\n")
        t = time.perf_counter()
        await store.write("/rewritten", body)
        rewrite = time.perf_counter() - t
        assert await store.read("/rewritten") == body
        assert await store.fsck() == []
    line = (
        f"2 MB / 80,000 lines: written to a new path in {fresh * 1000:.0f} ms; over a small existing file "
        f"in {rewrite * 1000:.0f} ms"
    )
    print("\n" + line)
    _figure("huge rewrite (SQLite)", line)
    assert rewrite < max(1.0, 20 * fresh), f"rewrite took {rewrite:.2f} s vs {fresh:.3f} s for a fresh write"


# --------------------------------------------------------------------------
# 5. Corruption
# --------------------------------------------------------------------------

BIG = "".join(f"line {i:03d} of the big note, é日😀\n" for i in range(300))
ALLOWED = (memrev.IntegrityError, memrev.RevisionNotFound, memrev.NotAMemrevStore)
CORRUPTION = "corruption: fault -> what read raised -> what fsck said"


@contextlib.contextmanager
def _fixed_clock():
    """Commit times from a counter: the same build gives the same ids and the same file bytes."""
    clock = itertools.count(1_700_000_000_000_000_000, 1_000_000_000)
    saved = memrev.repo.commit.time
    memrev.repo.commit.time = types.SimpleNamespace(time_ns=lambda: next(clock), sleep=time.sleep)
    try:
        yield
    finally:
        memrev.repo.commit.time = saved


async def _build(loc: str) -> None:
    with _fixed_clock():
        await _build_store(loc)


async def _build_store(loc: str) -> None:
    s = VersionedStore(loc)
    try:
        await s.write("/notes/raw.md", "tiny raw payload")  # < 96 bytes: stored raw
        await s.write("/notes/big.md", BIG)  # zstd-compressed full blob
        await s.write("/dir/a", "aaa-content")
        await s.write("/dir/b", "bbb-content")
        await s.write("/dir/sub/c", "ccc")
        for i in range(8):
            await s.append("/log/events.jsonl", f"ev{i:03d}\n")  # an append run of 6-byte pieces
        await s.write("/notes/big.md", BIG.replace("line 150", "LINE 150"))  # a delta on the full blob
    finally:
        s.close()


PROBES: list[tuple[str, Callable[[VersionedStore], Any]]] = [
    ("read /notes/raw.md", lambda s: s.read("/notes/raw.md")),
    ("read /notes/big.md", lambda s: s.read("/notes/big.md")),
    ("read /dir/a", lambda s: s.read("/dir/a")),
    ("read /dir/b", lambda s: s.read("/dir/b")),
    ("read /dir/sub/c", lambda s: s.read("/dir/sub/c")),
    ("read /log/events.jsonl", lambda s: s.read("/log/events.jsonl")),
    ("read_range /log/events.jsonl", lambda s: s.read_range("/log/events.jsonl", 0)),
    ("read_range /log/events.jsonl 12-30", lambda s: s.read_range("/log/events.jsonl", 12, 30)),
    ("exists /dir/sub", lambda s: s.exists("/dir/sub")),
    ("list /", lambda s: s.list("/")),
    ("list /dir", lambda s: s.list("/dir")),
    ("list /notes", lambda s: s.list("/notes")),
    ("log", lambda s: s.log()),
    ("log /notes/big.md", lambda s: s.log("/notes/big.md")),
    ("read /notes/big.md at HEAD~1", lambda s: s.read("/notes/big.md", rev="HEAD~1")),
    ("read /dir/a at HEAD", lambda s: s.read("/dir/a", rev="HEAD")),
]


def _describe(exc: BaseException) -> str:
    mod, name = type(exc).__module__, type(exc).__name__
    return f"{name if mod == 'builtins' else mod + '.' + name}: {str(exc)[:70]}"


# Probes answered from the derived history indexes (the per-path change index):
# by design (docs/design.md, "Derived indexes") they are trusted for speed and
# never serve content; damage to them must be reported by fsck (and is repaired
# by `fsck --repair`). A wrong answer from one of these is a violation only if
# fsck then stays silent.
HISTORY_PROBES = {"log", "log /notes/big.md"}


async def _probe(loc: str, expected: dict[str, Any] | None) -> tuple[dict[str, str], list[str], str]:
    """Open ``loc`` and run every probe; (outcome per probe, violations, fsck summary)."""
    outcomes: dict[str, str] = {}
    violations: list[str] = []
    history_wrong: list[str] = []
    try:
        store = VersionedStore(loc)
    except (memrev.NotAMemrevStore, memrev.SchemaTooNew) as e:
        return {"open": f"{type(e).__name__}: {str(e)[:70]}"}, [], "cannot run: the store does not open"
    except Exception as e:  # noqa: BLE001
        return {"open": _describe(e)}, [f"open raised {_describe(e)}"], "cannot run"
    try:
        for label, probe in PROBES:
            try:
                value = await probe(store)
            except ALLOWED as e:
                outcomes[label] = f"{type(e).__name__}: {str(e)[:70]}"
            except Exception as e:  # noqa: BLE001
                outcomes[label] = "RAW " + _describe(e)
                violations.append(f"{label} raised {_describe(e)} (not a memrev error)")
            else:
                if expected is not None and value != expected[label] and label in HISTORY_PROBES:
                    outcomes[label] = "wrong history (index damage)"
                    history_wrong.append(f"{label} returned {str(value)[:60]!r} and fsck reported nothing")
                elif expected is not None and value != expected[label]:
                    outcomes[label] = f"WRONG content {str(value)[:40]!r}"
                    violations.append(f"{label} returned {str(value)[:60]!r}, expected {str(expected[label])[:60]!r}")
                else:
                    outcomes[label] = "ok"
        try:
            problems = await store.fsck()
            fsck = f"{len(problems)} problem(s): {problems[0][:90]}" if problems else "[] (clean)"
            if history_wrong and not problems:
                violations.extend(history_wrong)
        except Exception as e:  # noqa: BLE001
            fsck = "RAISED " + _describe(e)
            violations.append(f"fsck raised {_describe(e)}")
    finally:
        store.close()
    return outcomes, violations, fsck


async def _expected(loc: str) -> dict[str, Any]:
    async with VersionedStore(loc) as s:
        return {label: await probe(s) for label, probe in PROBES}


@dataclass
class _Raw:
    """Direct access to the rows under a store, bypassing memrev (``%s`` placeholders)."""

    kind: str
    target: str  # SQLite file, or PostgreSQL URL

    def q(self, sql: str, args: tuple = ()) -> list[tuple]:
        if self.kind == "postgres":
            return _pg_exec(self.target, sql, args)
        conn = sqlite3.connect(self.target)
        try:
            rows = conn.execute(sql.replace("%s", "?"), args).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()

    def head_blob(self, path: str) -> bytes:
        return bytes(self.q("SELECT blob FROM head WHERE branch = 'main' AND path = %s", (path,))[0][0])

    def payload(self, oid: bytes) -> bytes:
        return bytes(self.q("SELECT data FROM blobs WHERE id = %s", (oid,))[0][0])

    def flip_payload(self, oid: bytes, pos: int, bit: int = 0) -> None:
        data = bytearray(self.payload(oid))
        data[pos % len(data)] ^= 1 << bit
        self.q("UPDATE blobs SET data = %s WHERE id = %s", (bytes(data), oid))

    def flip_row(self, table: str, oid: bytes) -> None:
        data = bytearray(bytes(self.q(f"SELECT data FROM {table} WHERE id = %s", (oid,))[0][0]))
        data[len(data) // 2] ^= 0x01
        self.q(f"UPDATE {table} SET data = %s WHERE id = %s", (bytes(data), oid))


async def _ids(loc: str) -> dict[str, bytes]:
    async with VersionedStore(loc) as s:
        repo = s.repo
        log = await s.log()
        head = bytes.fromhex(log[0].id)
        root = repo.root(head)
        return {
            "head": head,
            "head~2": bytes.fromhex(log[2].id),
            "root": root,
            "dir": trees.find_dir(repo, root, ["dir"]),
        }


def _flip_start(raw: _Raw, ids: dict) -> None:
    """One bit flipped in the ``start`` column of an append piece, so that the run's order changes."""
    oid = raw.head_blob("/log/events.jsonl")
    lineage = bytes(raw.q("SELECT lineage FROM blobs WHERE id = %s", (oid,))[0][0])
    pieces = sorted((s, bytes(i)) for i, s in raw.q("SELECT id, start FROM blobs WHERE lineage = %s", (lineage,)))
    starts = [s for s, _ in pieces]
    lo, hi = starts[0], starts[-1]
    order = [pid for _, pid in pieces]
    for s, pid in pieces[1:-1]:
        for bit in range(8):
            new = s ^ (1 << bit)
            if not lo < new < hi or new in starts:
                continue
            if [q for _, q in sorted((new if q == pid else t, q) for t, q in pieces)] != order:
                raw.q("UPDATE blobs SET start = %s WHERE id = %s", (new, pid))
                return
    raise AssertionError("no reordering bit flip found")


def _head_swap(raw: _Raw, ids: dict) -> None:
    other = raw.q("SELECT blob, size FROM head WHERE branch = 'main' AND path = '/dir/b'")[0]
    raw.q("UPDATE head SET blob = %s, size = %s WHERE branch = 'main' AND path = '/dir/a'", (bytes(other[0]), other[1]))


@dataclass(frozen=True)
class _Fault:
    name: str
    apply: Callable[[_Raw, dict], None]
    target: str  # the probe that reads the damaged data
    must_raise: bool = True  # False: an index fault; the right content is an acceptable answer too


FAULTS = [
    _Fault("blob payload (raw) 1 byte flipped", lambda r, i: r.flip_payload(r.head_blob("/notes/raw.md"), 5), "read /notes/raw.md"),
    _Fault(
        "blob payload (zstd) frame-header byte flipped",
        lambda r, i: r.flip_payload(bytes(r.q("SELECT base FROM blobs WHERE id = %s", (r.head_blob("/notes/big.md"),))[0][0]), 1),
        "read /notes/big.md",
    ),
    _Fault(
        "blob payload (zstd) middle byte flipped",
        lambda r, i: r.flip_payload(
            bytes(r.q("SELECT base FROM blobs WHERE id = %s", (r.head_blob("/notes/big.md"),))[0][0]),
            len(r.payload(bytes(r.q("SELECT base FROM blobs WHERE id = %s", (r.head_blob("/notes/big.md"),))[0][0]))) // 2,
        ),
        "read /notes/big.md",
    ),
    _Fault("blob payload (delta) 1 byte flipped", lambda r, i: r.flip_payload(r.head_blob("/notes/big.md"), 3), "read /notes/big.md"),
    _Fault(
        "blob payload (append piece) 1 byte flipped",
        lambda r, i: r.flip_payload(r.head_blob("/log/events.jsonl"), 2),
        "read /log/events.jsonl",
    ),
    _Fault("blob row: append piece start bit flipped", _flip_start, "read /log/events.jsonl"),
    _Fault("blob row deleted (/dir/a)", lambda r, i: r.q("DELETE FROM blobs WHERE id = %s", (r.head_blob("/dir/a"),)), "read /dir/a"),
    _Fault("tree row byte flipped (root at HEAD)", lambda r, i: r.flip_row("trees", i["root"]), "list /"),
    _Fault("tree row byte flipped (/dir at HEAD)", lambda r, i: r.flip_row("trees", i["dir"]), "list /dir"),
    _Fault("tree row deleted (/dir at HEAD)", lambda r, i: r.q("DELETE FROM trees WHERE id = %s", (i["dir"],)), "list /dir"),
    _Fault("commit row byte flipped (HEAD)", lambda r, i: r.flip_row("commits", i["head"]), "log"),
    _Fault("commit row deleted (HEAD~2)", lambda r, i: r.q("DELETE FROM commits WHERE id = %s", (i["head~2"],)), "log"),
    _Fault(
        "ref -> missing commit",
        lambda r, i: r.q("UPDATE refs SET target = %s WHERE name = 'refs/heads/main'", (bytes(range(20)),)),
        "log",
    ),
    _Fault("head-index row -> another path's blob", _head_swap, "read /dir/a", must_raise=False),
    _Fault(
        "head-index row deleted (/dir/a)",
        lambda r, i: r.q("DELETE FROM head WHERE branch = 'main' AND path = '/dir/a'"),
        "read /dir/a",
        must_raise=False,
    ),
    _Fault(
        "change-index row: path altered",
        lambda r, i: r.q("UPDATE changes SET path = '/notes/raw.mX' WHERE path = '/notes/raw.md'"),
        "log",
        must_raise=False,
    ),
    _Fault(
        "change-index row: prev link cut (/notes/big.md)",
        lambda r, i: r.q(
            "UPDATE changes SET prev = NULL WHERE path = '/notes/big.md'"
            " AND seq = (SELECT max(seq) FROM changes WHERE path = '/notes/big.md')"
        ),
        "log /notes/big.md",
        must_raise=False,
    ),
    _Fault(
        "head-index row size too small (/log)",
        lambda r, i: r.q("UPDATE head SET size = size - 6 WHERE branch = 'main' AND path = '/log/events.jsonl'"),
        "read_range /log/events.jsonl",
        must_raise=False,
    ),
]


async def _run_fault(backend: str, fault: _Fault, raw: _Raw, loc: str, expected: dict, ids: dict) -> None:
    fault.apply(raw, ids)
    outcomes, violations, fsck = await _probe(loc, expected)
    target = outcomes.get(fault.target, outcomes.get("open", "?"))
    _figure(CORRUPTION, f"{backend:10} | {fault.name:46} | {fault.target:30} -> {target:75} | fsck: {fsck}")
    if fault.must_raise and target == "ok":
        violations.append(f"{fault.target} returned content although its data is damaged")
    if not fsck.split(" ")[0].isdigit():
        violations.append(f"fsck did not report the fault: {fsck}")
    assert not violations, f"{backend}, {fault.name}:\n  " + "\n  ".join(violations)


@pytest.fixture(scope="module")
def sqlite_pristine(tmp_path_factory) -> tuple[Path, dict, dict]:
    folder = tmp_path_factory.mktemp("pristine") / "store"
    anyio.run(_build, str(folder))
    return folder, anyio.run(_expected, str(folder)), anyio.run(_ids, str(folder))


@pytest.fixture(scope="module")
def pg_pristine(pg_server) -> tuple[str, dict, dict]:
    name = f"pristine{os.getpid()}"
    _pg_exec(pg_server.url(), f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8')
    url = pg_server.url(name)
    anyio.run(_build, url)
    result = name, anyio.run(_expected, url), anyio.run(_ids, url)
    yield result
    _pg_exec(pg_server.url(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_corruption_sqlite(fault: _Fault, sqlite_pristine, tmp_path: Path):
    pristine, expected, ids = sqlite_pristine
    folder = tmp_path / "store"
    shutil.copytree(pristine, folder)
    await _run_fault("SQLite", fault, _Raw("sqlite", str(folder / "memrev.db")), str(folder), expected, ids)


_copies = iter(range(1 << 30))


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_corruption_postgres(fault: _Fault, pg_pristine, pg_server):
    template, expected, ids = pg_pristine
    name = f"corrupt{os.getpid()}_{next(_copies)}"
    _pg_exec(pg_server.url(), f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    url = pg_server.url(name)
    try:
        await _run_fault("PostgreSQL", fault, _Raw("postgres", url), url, expected, ids)
    finally:
        _pg_exec(pg_server.url(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


TRUNCATIONS = ["50 B", "100 B", "1 KiB", "4 KiB", "half", "last page cut", "last byte cut"]


@pytest.mark.parametrize("cut", TRUNCATIONS)
async def test_truncated_sqlite_file(cut: str, sqlite_pristine, tmp_path: Path):
    """Cut the (cleanly closed) SQLite file: the store refuses to open with
    ``NotAMemrevStore``, or opens and returns only right content."""
    pristine, expected, _ = sqlite_pristine
    folder = tmp_path / "store"
    shutil.copytree(pristine, folder)
    db = folder / "memrev.db"
    size = db.stat().st_size
    offset = {"50 B": 50, "100 B": 100, "1 KiB": 1024, "4 KiB": 4096, "half": size // 2,
              "last page cut": size - 4096, "last byte cut": size - 1}[cut]  # fmt: skip
    with open(db, "r+b") as f:
        f.truncate(offset)
    outcomes, violations, fsck = await _probe(str(folder), expected)
    shown = outcomes.get("open") or ("every read right" if set(outcomes.values()) == {"ok"} else str(Counter(outcomes.values())))
    _figure(CORRUPTION, f"{'SQLite':10} | {f'file truncated to {offset} of {size} B':46} | {'open + every read':30} -> {shown:75} | fsck: {fsck}")
    assert not violations, "\n".join(violations)


async def test_torn_wal_tail_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The WAL cut at several offsets (what a power loss with synchronous=NORMAL
    can leave): the store opens at an earlier commit of the same history,
    consistent and fsck-clean, never a mix."""
    # No checkpoint while the files are copied: the handle's checkpoint thread copies
    # WAL frames into the database behind the commits, and a database holding frames
    # the cut WAL lost is no state a power loss leaves (a checkpoint copies only what
    # is synced in the WAL). The WAL then holds every commit and the database none.
    from memrev.backends import sqlite as sqlite_backend

    monkeypatch.setattr(sqlite_backend, "_CHECKPOINT_BYTES", 1 << 40)
    src = tmp_path / "live"
    store = VersionedStore(str(src))  # kept open: its commits stay in the WAL
    try:
        for i in range(40):
            await store.write(f"/f/{i % 7}", f"version {i} " + "x" * (i * 150))
            await store.append("/log", f"event {i}\n")
        history = await store.log()
        ids = [c.id for c in history]
        wal = (src / "memrev.db-wal").read_bytes()
        main = (src / "memrev.db").read_bytes()
        frame = 24 + 4096
        rng = random.Random(f"{SEED}-wal")
        cuts = sorted({32, 32 + frame, len(wal) // 2, len(wal) - 1, len(wal)} | {rng.randrange(32, len(wal)) for _ in range(5)})
        rows, violations = [], []
        for cut in cuts:
            d = tmp_path / f"cut{cut}"
            d.mkdir()
            (d / "memrev.db").write_bytes(main)
            (d / "memrev.db-wal").write_bytes(wal[:cut])
            try:
                async with VersionedStore(str(d)) as copy:
                    log = await copy.log()
                    kept = [c.id for c in log]
                    if kept != ids[len(ids) - len(kept) :]:
                        violations.append(f"cut {cut}: the history is not a prefix of the original")
                        continue
                    if kept and await _state(copy) != await _state(store.at(kept[0])):
                        violations.append(f"cut {cut}: the files differ from the original at {kept[0][:10]}")
                    if not kept and await _state(copy):
                        violations.append(f"cut {cut}: files without a commit")
                    problems = await copy.fsck()
                    if problems:
                        violations.append(f"cut {cut}: fsck {problems[:2]}")
                    rows.append((cut, len(kept)))
            except Exception as e:  # noqa: BLE001
                violations.append(f"cut {cut}: {_describe(e)}")
    finally:
        store.close()
    _figure(
        CORRUPTION,
        f"{'SQLite':10} | {'WAL tail cut (' + str(len(cuts)) + ' offsets)':46} | {'open + log + state':30} -> "
        + f"{'opens at an earlier commit; commits kept: ' + ', '.join(f'{n}/{len(ids)}' for _, n in rows):75} | fsck: "
        + ("[] (clean) each time" if not violations else f"{len(violations)} violations"),
    )
    assert not violations, "\n".join(violations)


@pytest.mark.slow
async def test_compressed_payload_bit_flips_sqlite(tmp_path: Path):
    """Every bit position of the first 24 bytes of a zstd-compressed payload, and
    24 random ones after: each read gives the right content or ``IntegrityError``."""
    folder = tmp_path / "store"
    async with VersionedStore(str(folder)) as s:
        await s.write("/big", BIG)
    raw = _Raw("sqlite", str(folder / "memrev.db"))
    oid = raw.head_blob("/big")
    pristine = raw.payload(oid)
    assert pristine[:1] == b"z"
    rng = random.Random(f"{SEED}-zstd")
    flips = [(p, b) for p in range(24) for b in range(8)] + [
        (rng.randrange(24, len(pristine)), rng.randrange(8)) for _ in range(24)
    ]
    results: Counter = Counter()
    bad: list[str] = []
    for pos, bit in flips:
        data = bytearray(pristine)
        data[pos] ^= 1 << bit
        raw.q("UPDATE blobs SET data = %s WHERE id = %s", (bytes(data), oid))
        async with VersionedStore(str(folder)) as s:
            try:
                got = await s.read("/big")
                results["right content (flip had no effect)" if got == BIG else "WRONG content"] += 1
                if got != BIG:
                    bad.append(f"byte {pos} bit {bit}: wrong content")
            except memrev.IntegrityError:
                results["IntegrityError"] += 1
            except BaseException as e:  # noqa: BLE001 - MemoryError included
                results[f"raw {type(e).__module__}.{type(e).__name__}"] += 1
                bad.append(f"byte {pos} bit {bit}: {type(e).__name__}: {e}")
    raw.q("UPDATE blobs SET data = %s WHERE id = %s", (pristine, oid))
    line = f"{len(flips)} single-bit flips in a {len(pristine)}-byte zstd payload: " + ", ".join(
        f"{k}: {v}" for k, v in results.most_common()
    )
    print("\n" + line)
    _figure("compressed payload bit flips (SQLite)", line)
    assert not bad, f"{len(bad)} flips leaked a non-memrev error or wrong content, e.g.\n  " + "\n  ".join(bad[:5])


@pytest.mark.slow
async def test_random_bit_flips_in_the_sqlite_file(tmp_path: Path):
    """Bit rot anywhere in the SQLite file (seeded, 60 single-bit flips in a
    deterministic store): the store refuses to open with a memrev error, or
    every read gives the right content or a memrev error; fsck never raises."""
    pristine = tmp_path / "pristine"
    await _build(str(pristine))
    expected = await _expected(str(pristine))
    data = (pristine / "memrev.db").read_bytes()
    rng = random.Random(f"{SEED}-bitrot")
    classes: Counter = Counter()
    violations: list[str] = []
    for n in range(60):
        pos, bit = rng.randrange(len(data)), rng.randrange(8)
        d = tmp_path / f"flip{n}"
        d.mkdir()
        b = bytearray(data)
        b[pos] ^= 1 << bit
        (d / "memrev.db").write_bytes(bytes(b))
        outcomes, bad, fsck = await _probe(str(d), expected)
        if "open" in outcomes:
            cls = "refused at open: " + outcomes["open"].split(":")[0]
        elif set(outcomes.values()) == {"ok"}:
            cls = "every read right; fsck " + ("clean" if fsck.startswith("[]") else "reports it")
        else:
            cls = "reads raise " + "/".join(sorted({v.split(":")[0] for v in outcomes.values() if v != "ok"}))
        classes[cls] += 1
        violations += [f"byte {pos} bit {bit}: {v}" for v in bad]
        shutil.rmtree(d)
    _figure("random bit flips in the SQLite file", f"60 flips in a {len(data)}-byte file:")
    for cls, k in classes.most_common():
        _figure("random bit flips in the SQLite file", f"  {k:3} {cls}")
    assert not violations, f"{len(violations)} violations, e.g.\n  " + "\n  ".join(violations[:8])
