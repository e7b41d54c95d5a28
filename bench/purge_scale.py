"""Purge on a store of N commits (issue 22): how long ``purge`` takes and what it reclaims,
beside the whole-store work it is made of (gc's walk, reindex), in one run.

Each round builds a fresh SQLite store of N commits shaped like an agent's memory (a
working-memory file rewritten, notes files written, an event log appended to, a branch),
with a 32-character sentinel written at commit 5 and carried by every later version of
the working-memory file. Then, on copies of that store: ``gc`` (the walk every purge
makes), ``reindex`` (the rebuild every purge makes), ``purge(text=[sentinel])`` and
``purge(paths=["/notes/*"])``. Medians and spread over the rounds.

    PYTHONPATH=src python bench/purge_scale.py 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from memrev import Store
from memrev.backends import open_backend
from memrev.maintenance.gc import gc
from memrev.repo import Repository, indexes
from memrev.repo.ops import Append, Write


def build(folder: Path, n: int, sentinel: str) -> None:
    repo = Repository(open_backend(str(folder)))
    working = "# Working memory\n" + "".join(f"fact {k}: something the agent keeps\n" for k in range(30))
    for i in range(1, n + 1):
        if i == 5:
            working = working.replace("fact 3:", f"fact 3 (key {sentinel}):")
        kind = i % 4
        if kind == 0:
            lines = working.splitlines(keepends=True)
            lines[1 + i % 30] = f"fact {i % 30}: revised at step {i}{' key ' + sentinel if i == 5 else ''}\n"
            working = "".join(lines)
            ops = [Write("/memory/working.md", working.encode())]
        elif kind == 1:
            ops = [Write(f"/notes/{i % 50}.md", f"note {i}\n".encode())]
        elif kind == 2:
            ops = [Append("/log/run.jsonl", f'{{"turn": {i}}}\n'.encode())]
        else:
            ops = [Write("/memory/working.md", working.encode())] if i == 5 else [Write(f"/facts/{i % 200}.md", f"fact {i}\n".encode())]
        repo.commit("main", ops, author="bench", message=f"step {i}")
        if i == n // 2:
            repo.backend.close()
            asyncio.run(_branch(folder))
            repo = Repository(open_backend(str(folder)))
    repo.backend.close()


async def _branch(folder: Path) -> None:
    store = Store(str(folder))
    side = await store.branch("side")
    await side.write("/side.md", "side work\n")
    side.close()
    store.close()


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.name.startswith("memrev.db"))


async def _purge(folder: Path, **kw) -> tuple[float, object]:
    store = Store(str(folder))
    try:
        t0 = time.perf_counter()
        report = await store.purge(reason="bench", **kw)
        return time.perf_counter() - t0, report
    finally:
        store.close()


def round_(n: int, tmp: Path, k: int) -> dict:
    sentinel = secrets.token_hex(16)
    base = tmp / f"base{k}"
    build(base, n, sentinel)
    out: dict = {"bytes_store": size(base)}
    g = copy(base, tmp / f"gc{k}")
    repo = Repository(open_backend(str(g)))
    out["gc_s"] = timed(lambda: gc(repo))
    repo.backend.close()
    r = copy(base, tmp / f"re{k}")
    repo = Repository(open_backend(str(r)))
    out["reindex_s"] = timed(lambda: indexes.reindex(repo))
    repo.backend.close()
    t = copy(base, tmp / f"text{k}")
    out["text_s"], rep = asyncio.run(_purge(t, text=[sentinel]))
    out["text_report"] = {k2: getattr(rep, k2) for k2 in ("commits_rewritten", "commits_dropped", "versions_redacted", "bytes_before", "bytes_after", "verified")}
    p = copy(base, tmp / f"paths{k}")
    out["paths_s"], rep = asyncio.run(_purge(p, paths=["/notes/*"]))
    out["paths_report"] = {k2: getattr(rep, k2) for k2 in ("commits_rewritten", "commits_dropped", "versions_removed", "bytes_before", "bytes_after", "verified")}
    for d in (base, g, r, t, p):
        shutil.rmtree(d, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sizes", nargs="*", type=int, default=[10000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for n in args.sizes:
            rounds = [round_(n, Path(tmp), k) for k in range(args.rounds)]
            row = {"commits": n, "rounds": rounds}
            rows.append(row)
            for key in ("gc_s", "reindex_s", "text_s", "paths_s"):
                xs = [r[key] for r in rounds]
                print(f"{n:>7} commits {key:<10} median {statistics.median(xs):6.2f} s  (min {min(xs):.2f}, max {max(xs):.2f})", flush=True)
            for what in ("text_report", "paths_report"):
                print(f"{n:>7} commits {what}: {rounds[-1][what]}", flush=True)
            print(f"{n:>7} commits store {rounds[-1]['bytes_store']} bytes; cpu count {os.cpu_count()}", flush=True)
    return rows


if __name__ == "__main__":
    main()
