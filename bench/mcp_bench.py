"""MCP round trips (issue 23): ``memory_view`` and ``memory_create`` through a real ``memrev mcp``
stdio subprocess, beside the same tools in process (``mcp.Client(server)``, no transport) and the
floor under both, the store's own ``read_versioned`` and ``write`` in this process. Fresh SQLite
stores; each round times N calls of each; medians, p10 and p90 over all calls of all rounds.

    PYTHONPATH=src python bench/mcp_bench.py --calls 50 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import mcp

from memrev.mcp import create_server
from memrev.store import Store

Timed = Callable[[int], Awaitable[None]]


async def _times(step: Timed, calls: int) -> list[float]:
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        await step(i)
        out.append(time.perf_counter() - t0)
    return out


async def _tool_steps(c: mcp.Client, calls: int) -> dict[str, list[float]]:
    await c.call_tool("memory_create", {"path": "/memory/plan.md", "content": "draft\n" * 40})

    async def view(i: int) -> None:
        r = await c.call_tool("memory_view", {"path": "/memory/plan.md"})
        assert not r.is_error

    async def create(i: int) -> None:
        r = await c.call_tool("memory_create", {"path": f"/memory/n{i}.md", "content": f"note {i}\n" * 20})
        assert not r.is_error

    return {"memory_view": await _times(view, calls), "memory_create": await _times(create, calls)}


async def stdio_round(folder: Path, calls: int) -> dict[str, list[float]]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    params = mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "memrev.cli", "mcp", "--store", str(folder / "stdio")],
        env={**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    async with mcp.Client(params) as c:
        return await _tool_steps(c, calls)


async def inproc_round(folder: Path, calls: int) -> dict[str, list[float]]:
    store = Store(str(folder / "inproc"), create=True)
    try:
        async with mcp.Client(create_server(store)) as c:
            return await _tool_steps(c, calls)
    finally:
        store.close()


async def floor_round(folder: Path, calls: int) -> dict[str, list[float]]:
    store = Store(str(folder / "floor"), create=True)
    try:
        await store.write("/memory/plan.md", "draft\n" * 40)

        async def view(i: int) -> None:
            await store.read_versioned("/memory/plan.md")

        async def create(i: int) -> None:
            await store.write(f"/memory/n{i}.md", f"note {i}\n" * 20)

        return {"memory_view": await _times(view, calls), "memory_create": await _times(create, calls)}
    finally:
        store.close()


def _ms(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=10)
    return f"{statistics.median(xs) * 1000:.2f} ms (p10 {q[0] * 1000:.2f}, p90 {q[-1] * 1000:.2f})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    ways = {"stdio subprocess": stdio_round, "in process": inproc_round, "Store call (floor)": floor_round}
    got: dict[str, dict[str, list[float]]] = {w: {"memory_view": [], "memory_create": []} for w in ways}
    for r in range(args.rounds):
        for way, fn in ways.items():  # interleaved: a noisy moment hits every way alike
            with tempfile.TemporaryDirectory(dir=args.workdir) as d:
                for tool, xs in asyncio.run(fn(Path(d), args.calls)).items():
                    got[way][tool] += xs
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    floor = {t: statistics.median(got["Store call (floor)"][t]) for t in ("memory_view", "memory_create")}
    print(f"| way ({args.calls} calls x {args.rounds} rounds) | memory_view | x floor | memory_create | x floor |")
    print("|---|---|---|---|---|")
    for way in ways:
        cells = []
        for tool in ("memory_view", "memory_create"):
            xs = got[way][tool]
            cells += [_ms(xs), f"{statistics.median(xs) / floor[tool]:.1f}"]
        print(f"| {way} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
