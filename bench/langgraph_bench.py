"""LangGraph stores side by side: ``get``, ``put`` and ``search(filter)`` on one N-item namespace.

    python bench/langgraph_bench.py 10000 [--rounds 3] [--workdir DIR]
    python bench/run.py --langgraph 10000          # the same

LangGraph's ``InMemoryStore``, LangGraph's ``SqliteStore`` (a file, WAL, ``synchronous=NORMAL`` as memrev's default) and
``memrev.langgraph.MemrevStore`` on a SQLite memrev store, each filled with the
same N items (in batches of 500) in one namespace, then in this order:

- ``get``: 300 reads of random keys;
- ``put``: 100 updates of random items (each one ``put``: one commit for memrev);
- ``search``: 30 ``search(ns, filter={"group": 7}, limit=10)`` (a tenth of the items match);
- ``search, no match``: 10 ``search(ns, filter={"group": 99}, limit=10)``: every item is tested;
- ``put+search``: 30 pairs, the search right after a put (memrev moves its view by one diff);
- ``cold search``: the first filtered search of a fresh adapter on the filled store (memrev
  reads the folder: one ``tree``, one ``read_many``, the folder's log for the times).

Every round builds fresh stores, the stores in a rotated order; the report gives the
median over rounds of each round's median per operation, with (min, max) over rounds.
Offline; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from memrev import Store
from memrev.langgraph import MemrevStore

NS = ("bench", "users")
KINDS = ["InMemoryStore", "SqliteStore", "MemrevStore"]
OPS = ["load (per item)", "get", "put", "search", "search, no match", "put+search", "cold search"]


def value(i: int, rng: random.Random) -> dict[str, Any]:
    return {"group": i % 10, "score": rng.random(), "text": f"user {i} likes item {rng.randint(0, 999)}", "tags": ["a", "b"]}


def open_store(kind: str, where: Path) -> tuple[BaseStore, Callable[[], BaseStore], Callable[[], None]]:
    """The store, a way to open a fresh adapter on the same data, and its closer."""
    if kind == "InMemoryStore":
        mem = InMemoryStore()
        return mem, lambda: mem, lambda: None
    if kind == "SqliteStore":
        conn = sqlite3.connect(where / "lg.db", check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # what memrev's default durability="normal" does
        lite = SqliteStore(conn)
        lite.setup()
        return lite, lambda: SqliteStore(conn), conn.close
    handle = Store(where / "memrev")
    adapters = [MemrevStore(handle)]

    def fresh() -> BaseStore:
        adapters.append(MemrevStore(handle))
        return adapters[-1]

    def close() -> None:
        for a in adapters:
            a.close()
        handle.close()

    return adapters[0], fresh, close


def timed(fn: Callable[[], Any], n: int) -> float:
    """Median seconds of ``n`` calls."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def one_round(kind: str, n: int, where: Path, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    store, fresh, close = open_store(kind, where)
    try:
        t = time.perf_counter()
        for start in range(0, n, 500):
            store.batch([PutOp(NS, f"k{i}", value(i, rng)) for i in range(start, min(n, start + 500))])
        out = {"load (per item)": (time.perf_counter() - t) / n}
        out["cold search"] = timed(lambda: fresh().search(NS, filter={"group": 7}, limit=10), 1)
        out["get"] = timed(lambda: store.get(NS, f"k{rng.randrange(n)}"), 300)
        out["put"] = timed(lambda: store.put(NS, f"k{rng.randrange(n)}", value(rng.randrange(n), rng)), 100)
        found = store.search(NS, filter={"group": 7}, limit=10)
        assert len(found) == 10 and all(i.value["group"] == 7 for i in found), found
        out["search"] = timed(lambda: store.search(NS, filter={"group": 7}, limit=10), 30)
        assert store.search(NS, filter={"group": 99}, limit=10) == []
        out["search, no match"] = timed(lambda: store.search(NS, filter={"group": 99}, limit=10), 10)  # every item read

        def put_search() -> None:
            store.put(NS, f"k{rng.randrange(n)}", value(rng.randrange(n), rng))
            store.search(NS, filter={"group": 7}, limit=10)

        out["put+search"] = timed(put_search, 30)
        return out
    finally:
        close()


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def ratio(r: float) -> str:
    return f"{r:,.0f}×" if r >= 10 else f"{r:.2g}×"


def report(n: int, rounds: int, results: dict[str, dict[str, list[float]]]) -> str:
    def cell(kind: str, op: str) -> str:
        xs = results[kind][op]
        return f"{fmt(statistics.median(xs))} ({fmt(min(xs))}, {fmt(max(xs))})"

    lines = [
        f"{n:,} items in one namespace, {rounds} rounds; median of the rounds' medians per operation (min, max over rounds).",
        "",
        "| operation | " + " | ".join(KINDS) + " | MemrevStore / InMemoryStore | MemrevStore / SqliteStore |",
        "|---|" + "---|" * (len(KINDS) + 2),
    ]
    for op in OPS:
        med = {k: statistics.median(results[k][op]) for k in KINDS}
        lines.append(
            f"| {op} | " + " | ".join(cell(k, op) for k in KINDS)
            + f" | {ratio(med['MemrevStore'] / med['InMemoryStore'])} | {ratio(med['MemrevStore'] / med['SqliteStore'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, list[float]]] = {k: {op: [] for op in OPS} for k in KINDS}
    for r in range(args.rounds):
        order = KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]
        for kind in order:
            with tempfile.TemporaryDirectory(prefix="lg-bench-", dir=args.workdir) as where:
                for op, seconds in one_round(kind, args.n, Path(where), seed=r).items():
                    results[kind][op].append(seconds)
            print(f"round {r + 1}: {kind} done", file=sys.stderr, flush=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}")
    print(f"command: python bench/langgraph_bench.py {args.n} --rounds {args.rounds}")
    print()
    print(report(args.n, args.rounds, results))


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
