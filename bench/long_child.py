"""One measurement of issue 26's rows (bench/long_runs.py), in a fresh process.

    python bench/long_child.py '<json config>'

The memrev it imports is the one on ``PYTHONPATH`` (the parent sets it to the
*before* or the *after* ``src``); the config's ``job`` names the function below.
The JSON result goes to ``config["out"]``: ``ok``, what was measured, ``memrev``
(the file imported), ``maxrss_kb`` and, when a check of the answers failed,
``check_failures``.
"""

from __future__ import annotations

import array
import asyncio
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import data  # noqa: E402
import speed  # noqa: E402
from stores import disk_usage, open_store  # noqa: E402

perf = time.perf_counter
HERE = Path(__file__).resolve().parent


def _store(location: str, **kw):
    from memrev.store import Store

    return Store(location, **kw)


def rss_kb() -> int:
    """This process's resident set now (VmRSS of /proc/self/status), KB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def quantile(xs, q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def spread_ms(xs) -> dict:
    """Median, p10 and p90 of latencies in seconds, as ms."""
    return {"median_ms": statistics.median(xs) * 1e3, "p10_ms": quantile(xs, 0.1) * 1e3, "p90_ms": quantile(xs, 0.9) * 1e3}


def _check(res: dict, ok: bool, what: str) -> None:
    if not ok:
        res.setdefault("check_failures", []).append(what)


# --------------------------------------------------------------------------- rows 1, 2: writers


def writer_body(w: int, i: int) -> str:
    """Writer w's i-th 300-byte JSON line (deterministic, generated before the clock starts)."""
    return data.json_line(random.Random(w * 1_000_003 + i), i)


async def _write_many(s, w: int, k: int, go: str | None = None) -> tuple[float, float, list[float]]:
    bodies = [(f"/w/p{w}/k{i}.json", writer_body(w, i)) for i in range(k)]
    if go is not None:
        print("ready", flush=True)
        deadline = time.time() + 120
        while not os.path.exists(go):  # every writer starts at the same instant
            if time.time() > deadline:
                raise RuntimeError(f"writer {w}: no go signal")
            time.sleep(0.0005)
    lat = []
    t0 = time.time()
    for path, body in bodies:
        a = perf()
        await s.write(path, body)
        lat.append(perf() - a)
    return t0, time.time(), lat


async def writer(cfg: dict, res: dict) -> None:
    """One of N writer processes: opens the store, says ready, waits for the go file, writes k paths."""
    s = _store(cfg["location"], create=False)
    try:
        res["t0"], res["t1"], res["lat"] = await _write_many(s, cfg["writer"], cfg["k"], cfg["go"])
        counters = getattr(s.repo.backend, "counters", None)  # PostgreSQL: round trips, refused guesses ...
        if counters is not None:
            res["counters"] = dict(counters)
    finally:
        s.close()


async def _count_and_close(s, res: dict, expected: int, what: str) -> None:
    """Not timed: every write is its own commit in the log."""
    got = len(await s.log())
    res["log_commits"] = got
    _check(res, got == expected, f"{what}: log has {got} commits, expected {expected}")
    s.close()


async def procs(cfg: dict, res: dict) -> None:
    """N writer processes on one branch, distinct paths; total commits/s over (last end - first start)."""
    n, k, loc = cfg["writers"], cfg["k"], cfg["location"]
    wd = Path(cfg["workdir"])
    wd.mkdir(parents=True, exist_ok=True)
    s = _store(loc)
    await s.write("/w/README", "writers\n")  # store and branch exist before the clock
    s.close()
    go = wd / "go"
    ps = []
    try:
        for w in range(n):
            wcfg = dict(cfg, job="writer", writer=w, go=str(go), out=str(wd / f"writer{w}.json"))
            err = open(wd / f"writer{w}.stderr", "w")
            ps.append((subprocess.Popen([sys.executable, str(HERE / "long_child.py"), json.dumps(wcfg)],
                                        stdout=subprocess.PIPE, stderr=err, text=True), err))
        for w, (p, _) in enumerate(ps):
            if p.stdout.readline().strip() != "ready":
                p.wait(timeout=30)
                raise RuntimeError(f"writer {w} did not start: {(wd / f'writer{w}.stderr').read_text()[-800:]}")
        go.touch()
        for p, _ in ps:
            p.wait(timeout=cfg["timeout"] * 0.9)  # before the parent's timeout kills this process, not its writers
    finally:
        for p, err in ps:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
    outs = []
    for w in range(n):
        r = json.loads((wd / f"writer{w}.json").read_text())
        if not r.get("ok"):
            raise RuntimeError(f"writer {w}: {r.get('error')}")
        outs.append(r)
    t0, t1 = min(o["t0"] for o in outs), max(o["t1"] for o in outs)
    res["commits"] = n * k
    res["commits_per_s"] = n * k / (t1 - t0)
    res["commit_ms_median"] = statistics.median(x for o in outs for x in o["lat"]) * 1e3
    if all("counters" in o for o in outs):
        res["counters_per_commit"] = {name: round(sum(o["counters"].get(name, 0) for o in outs) / (n * k), 2)
                                      for name in sorted({c for o in outs for c in o["counters"]})}
    await _count_and_close(_store(loc, create=False), res, n * k + 1, f"{n} writer processes")


async def tasks(cfg: dict, res: dict) -> None:
    """1 task, then 4 tasks (order from the config), each on a fresh store, one handle, distinct paths."""
    k = cfg["k"]
    for n in cfg["order"]:
        s = _store(str(Path(cfg["workdir"]) / f"tasks{n}"))
        await s.write("/w/README", "writers\n")
        outs = await asyncio.gather(*(_write_many(s, w, k) for w in range(n)))
        t0, t1 = min(o[0] for o in outs), max(o[1] for o in outs)
        res[f"commits_per_s_{n}"] = n * k / (t1 - t0)
        res[f"commit_ms_median_{n}"] = statistics.median(x for o in outs for x in o[2]) * 1e3
        await _count_and_close(s, res, n * k + 1, f"{n} tasks")


# --------------------------------------------------------------------------- row 3: append


def append_line(i: int) -> str:
    """A 120-byte JSON line (newline included)."""
    return data.json_line(random.Random(7_000 + i), i, size=120)


class _PgInsert:
    """A bare autocommit INSERT of the line over psycopg, on the same server."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("SET synchronous_commit = on")
        self.conn.execute("CREATE TABLE IF NOT EXISTS peer_lines(id bigserial PRIMARY KEY, line text NOT NULL)")

    async def append(self, path: str, line: str) -> int:
        self.conn.execute("INSERT INTO peer_lines(line) VALUES (%s)", (line,))
        return 0

    def close(self) -> None:
        self.conn.close()


async def append(cfg: dict, res: dict) -> None:
    """memrev ``append`` of a 120-byte line beside the peer's, interleaved one by one (order alternates)."""
    n, wd = cfg["n"], Path(cfg["workdir"])
    path = "/log/run.jsonl"
    lines = [append_line(i) for i in range(n)]
    s = _store(cfg["location"])
    if cfg["peer"] == "disk":
        from ag2.knowledge import DiskKnowledgeStore

        (wd / "disk").mkdir(parents=True, exist_ok=True)
        peer, close_peer = DiskKnowledgeStore(wd / "disk"), (lambda: None)
    else:
        pg = _PgInsert(cfg["location"])
        peer, close_peer = pg, pg.close
    await s.append(path, lines[0])  # both files exist before the clock
    await peer.append(path, lines[0])
    lat_m, lat_p, offsets = [], [], []
    try:
        for i, line in enumerate(lines[1:], 1):
            for who in ((0, 1) if i % 2 else (1, 0)):
                a = perf()
                if who == 0:
                    offsets.append(await s.append(path, line))
                    lat_m.append(perf() - a)
                else:
                    await peer.append(path, line)
                    lat_p.append(perf() - a)
        got = await s.read(path)
    finally:
        s.close()
        close_peer()
    _check(res, offsets == [120 * i for i in range(1, n)], "append: offsets are not 120 bytes apart")
    _check(res, got == "".join(lines), "append: the file read back is not the lines appended")
    res["memrev"] = spread_ms(lat_m)
    res["peer"] = spread_ms(lat_p)
    res["ratio"] = res["memrev"]["median_ms"] / res["peer"]["median_ms"]


# --------------------------------------------------------------------------- row 4: the floor


async def floor(cfg: dict, res: dict) -> None:
    """bench/speed.py's floor: W1's 2 KB writes paired with bare SQLite BEGIN; INSERT; COMMIT."""
    h = open_store("memrev", cfg["workdir"])
    await speed.floor(h, dict(cfg, w1_n=cfg["n"]), res)


# --------------------------------------------------------------------------- rows 5, 6: a long run


class Edits:
    """W1-style edits of 100 2 KB files (``/mem/p<i%100>.md``, ~50 lines of 40 characters):
    every write changes 2 lines of one file. Generated as it goes, so the harness holds
    100 files' lines (~250 KB), not the run's 30,000 versions."""

    def __init__(self, paths: int = 100, seed: int = 26) -> None:
        self.rng = random.Random(seed)
        self.files = [[self._line() for _ in range(50)] for _ in range(paths)]

    def _line(self) -> str:
        return "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz      ") for _ in range(40)).strip().ljust(40, "x")

    def next(self, i: int) -> tuple[str, str]:
        lines = self.files[i % len(self.files)]
        for _ in range(2):
            lines[self.rng.randrange(len(lines))] = self._line()
        return f"/mem/p{i % len(self.files)}.md", "\n".join(lines) + "\n"


def _wal_bytes(folder: Path) -> tuple[int, int]:
    """(bytes of the -wal files, bytes of the database files) under a store folder."""
    wal = db = 0
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            size = os.stat(os.path.join(dirpath, f)).st_size
            if f.endswith("-wal"):
                wal += size
            elif not f.endswith("-shm"):
                db += size
    return wal, db


async def long_run(cfg: dict, res: dict) -> None:
    """``total`` writes through the async Store: per-write latency of the first ``lat_n`` (row 5),
    VmRSS every ``rss_every`` commits (row 6), the -wal size every ``wal_every`` writes."""
    total, lat_n, every, wal_every = cfg["total"], cfg["lat_n"], cfg["rss_every"], cfg["wal_every"]
    folder = Path(cfg["workdir"]) / "store"
    edits = Edits()
    lat = array.array("d", bytes(8 * lat_n))  # allocated before the first sample: not growth
    lat_f = array.array("d", bytes(8 * lat_n))  # the floor's, paired with each of those writes
    rss: list[int] = [0] * (total // every)
    wal_max = 0
    s = _store(str(folder))
    fl = speed.SqliteFloor(Path(cfg["workdir"]) / "floor.sqlite", "NORMAL")
    try:
        for i in range(total):
            path, body = edits.next(i)
            if i < lat_n and i % 2:
                a = perf()
                fl.write(path, body.encode())
                lat_f[i] = perf() - a
            a = perf()
            await s.write(path, body)
            if i < lat_n:
                lat[i] = perf() - a
            if i < lat_n and not i % 2:
                a = perf()
                fl.write(path, body.encode())
                lat_f[i] = perf() - a
            if (i + 1) % every == 0:
                rss[(i + 1) // every - 1] = rss_kb()
            if i % wal_every == 0:
                wal_max = max(wal_max, _wal_bytes(folder)[0])
        res["wal_max_bytes"] = max(wal_max, _wal_bytes(folder)[0])
        res["db_open_bytes"] = _wal_bytes(folder)[1]
        _check(res, await s.read(path) == body, "long run: the last write does not read back")
        got = len(await s.log())
        _check(res, got == total, f"long run: log has {got} commits, expected {total}")
    finally:
        s.close()
        fl.close()  # open for the whole run: its page cache, full after a few hundred writes, is no growth
    xs = list(lat)
    res["lat_n"] = lat_n
    res["mean_ms"] = statistics.fmean(xs) * 1e3
    res["median_ms"] = statistics.median(xs) * 1e3
    res["p99_ms"] = quantile(xs, 0.99) * 1e3
    res["max_ms"] = max(xs) * 1e3
    res["mean_over_median"] = res["mean_ms"] / res["median_ms"]
    fs = list(lat_f)
    res["floor_mean_over_median"] = statistics.fmean(fs) / statistics.median(fs)  # same run, same disk, paired
    res["rss_every"] = every
    res["rss_kb"] = rss
    res["growth_kb"] = rss[-1] - rss[0]
    res["closed_bytes"] = disk_usage([folder])[0]


# --------------------------------------------------------------------------- row 7: fsck and gc at scale


async def build(cfg: dict, res: dict) -> None:
    """bench/speed.py's history-at-scale store of n spread commits (cached: skipped when it exists)."""
    folder = Path(cfg["store_dir"])
    res["cached"] = folder.exists()
    if not res["cached"]:
        folder.parent.mkdir(parents=True, exist_ok=True)
        res["build_s"] = speed.build_store("spread", cfg["n"], folder)


async def fsck(cfg: dict, res: dict) -> None:
    """fsck of the built store through Store (no agent framework imported): seconds, objects, peak RSS."""
    s = _store(cfg["store_dir"], create=False)
    try:
        res["rss_before_kb"] = rss_kb()
        a = perf()
        problems = await s.fsck()
        res["fsck_s"] = perf() - a
    finally:
        s.close()
    res["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res["us_per_commit"] = res["fsck_s"] / cfg["n"] * 1e6
    try:  # rows of the blobs, trees and commits tables: a store format without them is reported per commit
        res["objects"] = speed.count_objects(Path(cfg["store_dir"]))
        res["us_per_object"] = res["fsck_s"] / res["objects"] * 1e6
    except Exception as e:  # noqa: BLE001
        res["objects_error"] = f"{type(e).__name__}: {e}"[:200]
    _check(res, not problems, f"fsck found {len(problems)} problems: {problems[:3]}")


async def gc(cfg: dict, res: dict) -> None:
    """gc on a copy of the built store (bench/speed.py's hgc)."""
    await speed.hgc(None, cfg, res)


# --------------------------------------------------------------------------- row 8: bytes on disk


async def disk(cfg: dict, res: dict) -> None:
    """W1's 1,000 versions of the 2 KB file, bytes of the closed store; then after gc, closed again."""
    folder = Path(cfg["workdir"]) / "store"
    versions = data.working_md_versions(cfg["n"])
    s = _store(str(folder))
    for v in versions:
        await s.write("/memory/working.md", v)
    s.close()
    res["closed_bytes"] = disk_usage([folder])[0]
    s = _store(str(folder), create=False)
    try:
        res["gc_result"] = await s.gc()
        _check(res, await s.read("/memory/working.md") == versions[-1], "disk: the last version does not read back")
        _check(res, len(await s.log("/memory/working.md")) == len(versions), "disk: a version is missing from the log")
    finally:
        s.close()
    res["gc_bytes"] = disk_usage([folder])[0]


JOBS = {f.__name__: f for f in (writer, procs, tasks, append, floor, long_run, build, fsck, gc, disk)}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    res: dict = {"job": cfg["job"], "ok": False}
    try:
        import memrev

        res["memrev"] = os.path.dirname(memrev.__file__)
        asyncio.run(JOBS[cfg["job"]](cfg, res))
        res["ok"] = True
    except BaseException as e:  # noqa: BLE001 - reported in the result, the report shows it in its cell
        res["error"] = f"{type(e).__name__}: {e}"[:1500]
        res["traceback"] = traceback.format_exc()[-3000:]
    res["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    Path(cfg["out"]).write_text(json.dumps(res))
    if cfg.get("cleanup"):
        shutil.rmtree(cfg["workdir"], ignore_errors=True)


if __name__ == "__main__":
    main()
