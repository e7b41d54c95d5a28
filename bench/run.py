"""memrev benchmark: memrev vs AG2's knowledge stores vs a commit per write in git.

    python bench/run.py                       # full run, writes docs/benchmarks.md
    python bench/run.py --quick               # smoke run (< 5 min), writes bench/results/benchmarks-quick.md
    python bench/run.py --out docs/benchmarks.md
    python bench/run.py --quick --speed-only --workdir /tmp --keep   # issue 14's rows only; stores cached
    python bench/run.py --speed-only --sizes 1000,10000,100000 --stores memrev   # history at scale, SQLite only
    python bench/run.py --langgraph 10000     # LangGraph's stores and MemrevStore side by side (bench/langgraph_bench.py)
    python bench/run.py --long-runs --before-src DIR   # issue 26's rows, before vs after (bench/long_runs.py)

Issue 14's rows (bench/speed.py, bench/speed_report.py) run first: memrev's
W1 write paired with one bare database transaction (the floor), independent
writers (1 vs 4, as tasks and as processes), history at scale on stores built
through the Repository (cached under WORKDIR/memrev-bench-cache with --keep),
and CLI start. To measure another checkout of memrev with this harness, point
PYTHONPATH at its src/ (the report names the memrev source it imported).

Every (store, workload, repetition) runs in its own fresh subprocess
(bench/child.py), so peak memory (ru_maxrss) is per store and per workload.
Repetitions are interleaved (rep 1 of every store, then rep 2, ...) and the
store order rotates per repetition, to spread the noise of a shared machine.
Medians over repetitions are reported.  Fully offline.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import pgserver  # noqa: E402
import speed  # noqa: E402
import speed_report  # noqa: E402
from fmt import collect, conc_med, conc_nreps, div, f_bytes, f_mb, f_ms, f_rate, f_ratio, med, nreps, table  # noqa: E402
from stores import ALL_STORES, HISTORY_STORES, PG_STORES  # noqa: E402

# The memrev the children import (PYTHONPATH decides: a baseline run points it at another checkout).
MEMREV_SRC = Path(importlib.util.find_spec("memrev").origin).parent
CONC_STORES = ["memrev", "memrev-pg"]  # the concurrency workload: memrev on SQLite and on PostgreSQL

FULL = dict(
    w1_n=1000,
    w2_n=5000,
    w2_n_git=1000,
    w2_window=500,
    w2_tail_reads=21,
    w3_files=2000,
    w3_lists=200,
    w3_reads=2000,
    w4_reads=10000,
    w5_n=200,
    hist_back=500,
    hist_reps=101,
    hist_fresh=3,
    scale_small=10,
    scale_big=1_000_000,
    scale_fallback=100_000,
    scale_budget_s=180.0,
    scale_writes=200,
    scale_rounds=3,
    conc_appends=300,
    conc_writes=100,
    conc_writers=[1, 4],
    reps=3,
    reps_cheap=5,
    cheap_s=5.0,
    child_timeout=400,
    # issue 14: floors, independent writers, history at scale, CLI start (bench/speed.py)
    floor_reps=3,
    conc_w_n=1000,
    conc_w_n_pg=300,
    conc_modes=["tasks", "procs"],
    hs_sizes=[1_000, 10_000, 100_000],
    hs_file_n=5_000,
    hs_reps=5,
    hs_timeout=1_200,
    cli_runs=20,
)
QUICK = dict(
    w1_n=200,
    w2_n=500,
    w2_n_git=200,
    w2_window=100,
    w2_tail_reads=5,
    w3_files=200,
    w3_lists=20,
    w3_reads=200,
    w4_reads=2000,
    w5_n=50,
    hist_back=100,
    hist_reps=21,
    hist_fresh=1,
    scale_small=10,
    scale_big=10_000,
    scale_fallback=None,
    scale_budget_s=30.0,
    scale_writes=50,
    scale_rounds=1,
    conc_appends=50,
    conc_writes=20,
    conc_writers=[1, 4],
    reps=1,
    reps_cheap=1,
    cheap_s=5.0,
    child_timeout=60,
    floor_reps=3,
    conc_w_n=300,
    conc_w_n_pg=100,
    conc_modes=["tasks", "procs"],
    hs_sizes=[1_000, 10_000],
    hs_file_n=5_000,
    hs_reps=3,
    hs_timeout=300,
    cli_runs=5,
)

WORKLOADS = ["W1", "W2", "W3", "W4", "W5"]
CHEAP = {"W4"}  # repeated reps_cheap times


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- running children


def run_child(cfg: dict, base: Path, tag: str, timeout: float) -> dict:
    out = base / f"{tag}.result.json"
    errf = base / f"{tag}.stderr"
    cfg = dict(cfg, out=str(out))
    t0 = time.perf_counter()
    with open(errf, "w") as ef:
        p = subprocess.Popen(
            [sys.executable, str(HERE / "child.py"), json.dumps(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=ef,
            cwd=str(ROOT),
        )
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return {
                "store": cfg["store"],
                "workload": cfg["workload"],
                "rep": cfg.get("rep"),
                "ok": False,
                "op": f"whole {cfg['workload']} workload",
                "error": f"timeout: child killed after {timeout:.0f} s",
                "wall_s": time.perf_counter() - t0,
            }
    try:
        res = json.loads(out.read_text())
    except Exception:
        res = {
            "store": cfg["store"],
            "workload": cfg["workload"],
            "rep": cfg.get("rep"),
            "ok": False,
            "op": None,
            "error": f"child exited {p.returncode} without a result: {errf.read_text()[-1500:]}",
        }
    res["child_wall_s"] = time.perf_counter() - t0
    return res


def rotate(xs: list, k: int) -> list:
    k %= len(xs)
    return xs[k:] + xs[:k]


def cleanup(store: str, wd: Path) -> None:
    """Remove a child's store: its folder, and for PostgreSQL stores its database."""
    shutil.rmtree(wd, ignore_errors=True)
    if store in PG_STORES:
        try:
            pgserver.drop_database(wd.name)
        except Exception as e:  # noqa: BLE001 - the server is thrown away at the end anyway
            log(f"  (could not drop the database of {wd.name}: {e})")


def run_all(P: dict, base: Path, cache: Path, only_stores: list[str] | None, skip: set[str] = frozenset(),
            speed_only: bool = False) -> list[dict]:
    results: list[dict] = []
    stores_all = [s for s in ALL_STORES if (not only_stores or s in only_stores) and s not in skip]
    reps = max(P["reps"], P["reps_cheap"])
    t_start = time.perf_counter()

    def go(cfg: dict, tag: str) -> dict:
        r = run_child(cfg, base, tag, cfg.get("child_timeout", P["child_timeout"]))
        status = "ok" if r.get("ok") else f"ERROR {r.get('op')}: {r.get('error')}"
        log(
            f"[{time.perf_counter() - t_start:7.1f}s] {cfg['workload']:8s} {cfg['store']:12s} "
            f"rep {cfg.get('rep')}  {r.get('child_wall_s', 0):6.1f}s  {tag}  {status}"
        )
        results.append(r)
        return r

    common = {k: v for k, v in P.items()}
    run_speed(P, base, cache, only_stores, skip, go)
    if speed_only:
        return results
    for rep in range(reps):
        for wl in WORKLOADS:
            nrep = P["reps_cheap"] if wl in CHEAP else P["reps"]
            if rep >= nrep:
                continue
            stores = list(stores_all)
            if rep >= P["reps"]:
                # extra repetitions only for stores whose first run of this workload was cheap
                stores = [
                    s for s in stores
                    if any(
                        x["workload"] == wl and x["store"] == s and x.get("rep") == 0
                        and x.get("child_wall_s", 1e9) < P["cheap_s"]
                        for x in results
                    )
                ]
            if wl == "W1" and (not only_stores or "memrev-full" in only_stores or "memrev" in only_stores):
                stores.append("memrev-full")
            if wl == "W1" and (not only_stores or "memrev-worktree" in only_stores or "memrev" in only_stores):
                stores.append("memrev-worktree")  # W1 only: the cost of keeping the plain files too
            for store in rotate(stores, rep):
                wd = base / f"{wl}-{store}-r{rep}"
                cfg = dict(common, store=store, workload=wl, rep=rep, workdir=str(wd))
                r = go(cfg, f"{wl}-{store}-r{rep}")
                if not (wl == "W1" and store in HISTORY_STORES):
                    cleanup(store, wd)
            if wl == "W1":
                for store in rotate([s for s in HISTORY_STORES if s in stores_all], rep):
                    wd = base / f"W1-{store}-r{rep}"
                    w1ok = any(
                        x.get("ok") and x["workload"] == "W1" and x["store"] == store and x.get("rep") == rep
                        for x in results
                    )
                    if w1ok:
                        cfg = dict(common, store=store, workload="history", rep=rep, workdir=str(wd))
                        go(cfg, f"history-{store}-r{rep}")
                    else:
                        results.append(
                            {
                                "store": store,
                                "workload": "history",
                                "rep": rep,
                                "ok": False,
                                "op": "(skipped)",
                                "error": "W1 failed for this store, no history to read",
                            }
                        )
                    cleanup(store, wd)
        # ---- concurrency: N writer processes on one shared store (memrev on SQLite / PostgreSQL)
        if rep < P["reps"]:
            for store in rotate([s for s in CONC_STORES if s in stores_all], rep):
                for n in P["conc_writers"]:
                    tag = f"conc-{store}-n{n}-r{rep}"
                    wd = base / tag
                    cfg = dict(common, store=store, workload="concurrency", rep=rep, workdir=str(wd), writers=n)
                    r = go(cfg, tag)
                    r["writers"] = n
                    cleanup(store, wd)

    # ---- scale: memrev only
    if not only_stores or "memrev" in only_stores:
        def scale_run(n: int, timeout: float) -> dict:
            wd = base / f"scale-{n}"
            cfg = dict(common, store="memrev", workload="scale", rep=0, workdir=str(wd), scale_paths=n)
            r = run_child(cfg, base, f"scale-{n}", timeout)
            status = "ok" if r.get("ok") else f"ERROR {r.get('op')}: {r.get('error')}"
            log(
                f"[{time.perf_counter() - t_start:7.1f}s] scale    memrev  paths={n:<9d} "
                f"{r.get('child_wall_s', 0):6.1f}s  build {r.get('build_s', float('nan')):.1f}s  {status}"
            )
            r["scale_paths_requested"] = n
            shutil.rmtree(wd, ignore_errors=True)
            return r

        small = scale_run(P["scale_small"], P["child_timeout"])
        small["scale_role"] = "small"
        results.append(small)
        big_n = P["scale_big"]
        fb = P["scale_fallback"]
        note = None
        if fb:
            probe = scale_run(fb, P["child_timeout"])
            probe["scale_role"] = "probe"
            results.append(probe)
            if probe.get("ok"):
                est = probe["build_s"] * big_n / fb
                if est > P["scale_budget_s"]:
                    note = (
                        f"{fb:,} paths took {probe['build_s']:.1f} s to build in one transaction; "
                        f"{big_n:,} would take ~{est:.0f} s (> {P['scale_budget_s']:.0f} s budget), "
                        f"so the scale comparison uses {fb:,} paths."
                    )
                    big_n = None
            else:
                note = f"building {fb:,} paths failed, so {big_n:,} was not attempted"
                big_n = None
        if big_n:
            big = scale_run(big_n, max(P["child_timeout"], P["scale_budget_s"] * 2 + 120))
            big["scale_role"] = "big"
            results.append(big)
            if not big.get("ok") and fb:
                note = f"the {big_n:,}-path run failed ({big.get('error')}); the scale comparison uses {fb:,} paths."
                for r in results:
                    if r.get("scale_role") == "probe":
                        r["scale_role"] = "big"
        elif fb:
            for r in results:
                if r.get("scale_role") == "probe":
                    r["scale_role"] = "big"
        results.append({"workload": "scale-note", "store": "memrev", "ok": True, "note": note})
    return results


def run_speed(P: dict, base: Path, cache: Path, only_stores: list[str] | None, skip: set[str], go) -> None:
    """Issue 14's measurements (bench/speed.py): floors, independent writers, history at scale, CLI start."""
    want = lambda s: (not only_stores or s in only_stores or (s != "memrev-pg" and "memrev" in only_stores)) and s not in skip  # noqa: E731
    for rep in range(P["floor_reps"]):
        for store in rotate([s for s in ("memrev", "memrev-full", "memrev-pg") if want(s)], rep):
            tag = f"floor-{store}-r{rep}"
            go(dict(P, store=store, workload="floor", rep=rep, workdir=str(base / tag)), tag)
            cleanup(store, base / tag)
    for rep in range(P["reps"]):
        for store in rotate([s for s in ("memrev", "memrev-full", "memrev-pg") if want(s)], rep):
            for mode in P["conc_modes"]:
                for n in P["conc_writers"]:
                    tag = f"writers-{store}-{mode}-n{n}-r{rep}"
                    r = go(dict(P, store=store, workload="writers", rep=rep, workdir=str(base / tag),
                                writers=n, conc_mode=mode), tag)
                    r.update(writers=n, conc_mode=mode)
                    cleanup(store, base / tag)
    if want("memrev"):
        run_history_scale(P, base, cache, go)
        tag = "cli"
        go(dict(P, store="memrev", workload="cli", rep=0, workdir=str(base / tag)), tag)
        cleanup("memrev", base / tag)


def run_history_scale(P: dict, base: Path, cache: Path, go) -> None:
    """Build (or reuse from ``cache``) one store per size, then query, fsck and gc it, each in its own child."""
    cache.mkdir(parents=True, exist_ok=True)
    stores = [("file", P["hs_file_n"], ["hfile"])] + [("spread", n, ["hquery", "hfsck", "hgc"]) for n in P["hs_sizes"]]
    for kind, n, workloads in stores:
        store_dir = cache / f"{kind}-{n}-{speed.schema_tag()}"
        hs = dict(P, store="memrev", rep=0, build_kind=kind, build_n=n, store_dir=str(store_dir),
                  child_timeout=P["hs_timeout"])
        tag = f"hbuild-{kind}-{n}"
        b = go(dict(hs, workload="hbuild", workdir=str(base / tag)), tag)
        b.update(build_kind=kind, build_n=n)
        if not b.get("ok"):
            continue
        for rep in range(P["reps"] if kind == "file" else 1):
            for wl in workloads:
                tag = f"{wl}-{kind}-{n}-r{rep}"
                r = go(dict(hs, workload=wl, rep=rep, workdir=str(base / tag)), tag)
                r.update(build_kind=kind, build_n=n)
                shutil.rmtree(base / tag, ignore_errors=True)


# --------------------------------------------------------------------------- machine


def src_fingerprint() -> str:
    """sha256 over memrev's source files, to notice the library changing during a run."""
    import hashlib

    h = hashlib.sha256()
    src = MEMREV_SRC
    for f in sorted(src.rglob("*.py")):
        h.update(str(f.relative_to(src)).encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:12]


def machine_info() -> dict:
    info: dict = {}
    try:
        info["nproc"] = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    except Exception:
        info["nproc"] = str(len(os.sched_getaffinity(0)))
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["cpu"] = cpu
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram"] = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        info["ram"] = "?"
    try:
        info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        info["loadavg_start"] = ["?"]
    info["python"] = platform.python_version() + f" ({sys.executable})"
    info["os"] = f"{platform.system()} {platform.release()}"
    pk = {}
    for name in ["memrev", "ag2", "autogen-core", "dulwich", "pygit2", "zstandard", "watchdog", "psycopg"]:
        try:
            pk[name] = md.version(name)
        except md.PackageNotFoundError:
            pk[name] = "not installed"
    try:
        import pygit2

        pk["libgit2"] = pygit2.LIBGIT2_VERSION
    except Exception:
        pass
    pk["sqlite (python sqlite3)"] = sqlite3.sqlite_version
    info["packages"] = pk
    try:
        rev = subprocess.run(
            ["git", "-C", str(MEMREV_SRC), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        info["git"] = rev.stdout.strip() if rev.returncode == 0 else "(no commit yet)"
        dirty = subprocess.run(
            ["git", "-C", str(MEMREV_SRC), "status", "--porcelain", "."], capture_output=True, text=True
        ).stdout.strip()
        if dirty:
            info["git"] += " + uncommitted changes in src/"
    except Exception:
        info["git"] = "?"
    return info


# --------------------------------------------------------------------------- report


DURABILITY = {
    "memrev": "`durability=\"normal\"` (default)",
    "memrev-full": "`durability=\"full\"` (fsync per commit)",
    "memrev-worktree": "`worktree=True`: as memrev, plus the file rewritten (temp + rename, no fsync) per commit",
    "memrev-pg": "PostgreSQL `synchronous_commit=on`, server `fsync=on`: a commit returns after its WAL is flushed on the server",
    "ag2-memory": "none (process memory)",
    "ag2-disk": "plain files, no fsync, no history",
    "ag2-sqlite": "SQLite defaults (rollback journal, synchronous=FULL: fsync per commit), no history",
    "dulwich": "loose objects not fsynced, ref file fsynced per commit (dulwich defaults)",
    "pygit2": "no fsync (libgit2 defaults)",
}


def peer_sections(R: list[dict], P: dict, stores: list[str]) -> list[str]:
    """The W1..W5, history, PostgreSQL, concurrency, scale and memory sections (memrev vs its peers)."""
    L: list[str] = []
    # W1
    L.append(f"## W1 — {P['w1_n']:,} successive writes of a 2 KB `/memory/working.md` (2-3 of ~50 lines change per write)")
    L.append("")
    rows = []
    w1_extra = [x for x in ("memrev-full", "memrev-worktree") if collect(R, "W1", x)]
    for s in stores + w1_extra:
        rows.append([
            f"**{s}**" if s.startswith("memrev") else s,
            f_rate(med(R, "W1", s, "writes_per_s")),
            f_ms(med(R, "W1", s, "write_ms_median")),
            f_ms(med(R, "W1", s, "write_ms_p99")),
            f_bytes(med(R, "W1", s, "disk_bytes")) if s != "ag2-memory" else "n/a (memory)",
            f_bytes(med(R, "W1", s, "disk_alloc_bytes")) if s != "ag2-memory" else "n/a",
            f_mb(med(R, "W1", s, "maxrss_kb")),
            nreps(R, "W1", s),
        ])
    L.append(table(["store", "writes/s", "median write ms", "p99 write ms", "bytes on disk", "allocated", "peak RSS MB", "ok runs"], rows))
    L.append("")
    L.append("(`memrev-full` is memrev with `durability=\"full\"`; compare with ag2-sqlite, which also fsyncs per commit. "
             "`memrev-worktree` is memrev with `worktree=True`: each commit also rewrites the plain file, as ag2-disk does, "
             "under the working tree's lock, in a worker thread.) "
             f"Only memrev, dulwich and pygit2 keep the {P['w1_n']:,} versions; the other stores keep the last one.")
    L.append("")

    # W2
    L.append(f"## W2 — {P['w2_n']:,} appends of a 300-byte JSON line to one file, then `read_range` of the last 10 lines")
    L.append("")
    rows = []
    for s in stores:
        rows.append([
            f"**{s}**" if s.startswith("memrev") else s,
            f"{int(med(R, 'W2', s, 'n') or 0):,}",
            f_rate(med(R, "W2", s, "appends_per_s")),
            f_rate(med(R, "W2", s, "first_per_s")),
            f_rate(med(R, "W2", s, "last_per_s")),
            f_ratio(med(R, "W2", s, "last_over_first")),
            f_ms(med(R, "W2", s, "tail_read_ms_median")),
            f_bytes(med(R, "W2", s, "disk_bytes")) if s != "ag2-memory" else "n/a (memory)",
            f_mb(med(R, "W2", s, "maxrss_kb")),
            nreps(R, "W2", s),
        ])
    win = P["w2_window"]
    L.append(table(["store", "appends", "appends/s", f"first {win}/s", f"last {win}/s", "last/first", "tail read_range ms", "bytes on disk", "peak RSS MB", "ok runs"], rows))
    L.append("")

    # W3
    L.append(f"## W3 — {P['w3_files']:,} files of 1 KB in `/artifacts/`, then {P['w3_lists']} × `list('/artifacts')` and {P['w3_reads']:,} random reads")
    L.append("")
    rows = []
    for s in stores:
        rows.append([
            f"**{s}**" if s.startswith("memrev") else s,
            f_rate(med(R, "W3", s, "setup_writes_per_s")),
            f_rate(med(R, "W3", s, "lists_per_s")),
            f_ms(med(R, "W3", s, "list_ms_median")),
            f_rate(med(R, "W3", s, "reads_per_s")),
            f_bytes(med(R, "W3", s, "disk_bytes")) if s != "ag2-memory" else "n/a (memory)",
            f_mb(med(R, "W3", s, "maxrss_kb")),
            nreps(R, "W3", s),
        ])
    L.append(table(["store", "setup writes/s", "lists/s", "median list ms", "reads/s", "bytes on disk", "peak RSS MB", "ok runs"], rows))
    L.append("")

    # W4
    L.append(f"## W4 — {P['w4_reads']:,} reads of one 2 KB file")
    L.append("")
    rows = []
    for s in stores:
        rows.append([
            f"**{s}**" if s.startswith("memrev") else s,
            f_rate(med(R, "W4", s, "reads_per_s")),
            f_ms(med(R, "W4", s, "read_us_median")),
            f_mb(med(R, "W4", s, "maxrss_kb")),
            nreps(R, "W4", s),
        ])
    L.append(table(["store", "reads/s", "median read µs", "peak RSS MB", "ok runs"], rows))
    L.append("")

    # W5
    L.append(f"## W5 — {P['w5_n']} EventLogWriter-style whole rewrites of `/log/s.jsonl`, growing ~2 KB each")
    L.append("")
    rows = []
    for s in stores:
        rows.append([
            f"**{s}**" if s.startswith("memrev") else s,
            f_rate(med(R, "W5", s, "rewrites_per_s")),
            f_bytes(med(R, "W5", s, "final_log_bytes")),
            f_bytes(med(R, "W5", s, "disk_bytes")) if s != "ag2-memory" else "n/a (memory)",
            f_ratio(med(R, "W5", s, "disk_over_log")) if s != "ag2-memory" else "n/a",
            f_bytes(med(R, "W5", s, "disk_alloc_bytes")) if s != "ag2-memory" else "n/a",
            f_mb(med(R, "W5", s, "maxrss_kb")),
            nreps(R, "W5", s),
        ])
    L.append(table(["store", "rewrites/s", "final log size", "bytes on disk", "disk / log", "allocated", "peak RSS MB", "ok runs"], rows))
    L.append("")

    # history
    back = P["hist_back"]
    L.append(f"## History — after W1's {P['w1_n']:,} versions of `/memory/working.md`")
    L.append("")
    L.append(
        f"Read the file {back} revisions back by commit id (memrev: `read(path, rev=id)` with ids from `log(path)`; git: "
        f"commit → tree → blob), warm = median of {P['hist_reps']} reads of that revision in the same process after one "
        f"read; *distinct* = median of reading ~100 different revisions around it once each; fresh process = a new "
        f"interpreter opens the store and does one read, only open+read timed (median of {P['hist_fresh']} per run). "
        "Diff of two successive revisions: memrev `diff(a, b, path)`, pygit2 `repo.diff(commit_a, commit_b).patch`, "
        "dulwich `tree_changes` + `difflib.unified_diff`. All in ms, medians."
    )
    L.append("")
    rows = []
    for s in HISTORY_STORES:
        if not collect(R, "history", s):
            continue
        rows.append([
            f"**{s}**" if s.startswith("memrev") else s,
            f_ms(med(R, "history", s, "read_rev_first_ms")),
            f_ms(med(R, "history", s, "read_rev_warm_ms")),
            f_ms(med(R, "history", s, "read_rev_distinct_ms")),
            f_ms(med(R, "history", s, "fresh_read_ms_median")),
            f_ms(med(R, "history", s, "diff_warm_ms")),
            (f"{f_ms(med(R, 'history', s, 'resolve_ms'))} (first call {f_ms(med(R, 'history', s, 'resolve_first_ms'))})"
             if s.startswith("memrev") else "n/a"),
            f_ms(med(R, "history", s, "log_path_ms")) if s.startswith("memrev") else "n/a",
            nreps(R, "history", s),
        ])
    L.append(table(["store", "first past read", "past read, warm", "distinct revisions", "fresh process open+read", "diff, warm", f"resolve HEAD~{back}", "log(path)", "ok runs"], rows))
    L.append("")

    # PostgreSQL vs SQLite
    if any(r.get("store") == "memrev-pg" for r in R):
        L.append("## memrev on PostgreSQL (memrev-pg) next to memrev on SQLite")
        L.append("")
        L.append("The same workloads as above (medians over runs); *pg / SQLite* = memrev-pg's value / memrev's: "
                 "for rates (/s) > 1 means PostgreSQL is faster, for times (ms, µs) and bytes > 1 means PostgreSQL "
                 "is slower / larger. memrev-pg fsyncs its WAL on every commit, so the fair durability "
                 "comparison for write rates is memrev-full (SQLite `durability=\"full\"`).")
        L.append("")
        rows = []

        def pgrow(label, wl, key, fmt, ref="memrev"):
            a, b = med(R, wl, ref, key), med(R, wl, "memrev-pg", key)
            rows.append([label, fmt(a), fmt(b), f_ratio(div(b, a)), nreps(R, wl, "memrev-pg")])

        msf = lambda x: "—" if x is None else f"{f_ms(x)} ms"  # noqa: E731
        rate = lambda x: "—" if x is None else f"{f_rate(x)}/s"  # noqa: E731
        pgrow("W1 writes/s", "W1", "writes_per_s", rate)
        if collect(R, "W1", "memrev-full"):
            a, b = med(R, "W1", "memrev-full", "writes_per_s"), med(R, "W1", "memrev-pg", "writes_per_s")
            rows.append(["W1 writes/s vs **memrev-full** (SQLite, fsync per commit)", rate(a), rate(b),
                         f_ratio(div(b, a)), nreps(R, "W1", "memrev-pg")])
        pgrow("W1 median write", "W1", "write_ms_median", msf)
        pgrow("W1 p99 write", "W1", "write_ms_p99", msf)
        pgrow(f"W1 bytes on disk ({P['w1_n']:,} versions)", "W1", "disk_bytes", f_bytes)
        pgrow("W2 appends/s", "W2", "appends_per_s", rate)
        pgrow(f"W2 last {P['w2_window']} / first {P['w2_window']}", "W2", "last_over_first", f_ratio)
        pgrow("W2 tail read_range", "W2", "tail_read_ms_median", msf)
        pgrow("W2 bytes on disk", "W2", "disk_bytes", f_bytes)
        pgrow("W3 setup writes/s", "W3", "setup_writes_per_s", rate)
        pgrow("W3 lists/s", "W3", "lists_per_s", rate)
        pgrow("W3 random reads/s", "W3", "reads_per_s", rate)
        pgrow("W4 reads/s", "W4", "reads_per_s", rate)
        pgrow("W4 median read (µs)", "W4", "read_us_median", f_ms)
        pgrow("W5 rewrites/s", "W5", "rewrites_per_s", rate)
        pgrow("W5 bytes on disk / final log size", "W5", "disk_over_log", f_ratio)
        if collect(R, "history", "memrev-pg"):
            pgrow(f"history: read {P['hist_back']} revisions back, warm", "history", "read_rev_warm_ms", msf)
            pgrow("history: distinct revisions", "history", "read_rev_distinct_ms", msf)
            pgrow("history: fresh process open + read", "history", "fresh_read_ms_median", msf)
            pgrow("history: diff, warm", "history", "diff_warm_ms", msf)
            pgrow(f"history: resolve HEAD~{P['hist_back']}", "history", "resolve_ms", msf)
            pgrow("history: log(path)", "history", "log_path_ms", msf)
        for n in P["conc_writers"]:
            a = conc_med(R, "memrev", n, "commits_per_s")
            b = conc_med(R, "memrev-pg", n, "commits_per_s")
            rows.append([f"concurrency: {n} writer{'s' if n > 1 else ''}, total commits/s", rate(a), rate(b),
                         f_ratio(div(b, a)), conc_nreps(R, "memrev-pg", n)])
        L.append(table(["measure", "memrev (SQLite)", "memrev-pg", "pg / SQLite", "pg ok runs"], rows))
        L.append("")

    # concurrency
    if any(r.get("workload") == "concurrency" for r in R):
        per = P["conc_appends"] + P["conc_writes"]
        L.append("## Concurrency — N writer processes on one shared store")
        L.append("")
        L.append(
            f"Each writer is its own process with its own store handle (SQLite: the same store folder; PostgreSQL: the "
            f"same database, one connection per process, standing for one host each) and does {P['conc_appends']} "
            f"appends of a distinct 300-byte JSON line to one shared path `/conc/shared.jsonl`, interleaved with "
            f"{P['conc_writes']} writes of 300 bytes to paths of its own: {per} commits per writer. All writers open "
            "their store first, then start together on a signal; *total commits/s* = all commits / (last writer's "
            "end − first writer's start). After each run (not timed) the shared file is read back: every line must "
            "be present exactly once, every offset `append` returned must point at its line, and every distinct-path "
            "write must read back. Medians over runs."
        )
        L.append("")
        rows = []
        for st in CONC_STORES:
            base1 = conc_med(R, st, P["conc_writers"][0], "commits_per_s")
            for n in P["conc_writers"]:
                rs = [r for r in R if r.get("workload") == "concurrency" and r.get("store") == st and r.get("writers") == n]
                if not rs:
                    continue
                v = conc_med(R, st, n, "commits_per_s")
                okc = [r for r in rs if r.get("ok")]
                checked = sum(1 for r in okc if r.get("verified"))
                rows.append([
                    f"**{st}**" + (" (SQLite)" if st == "memrev" else " (PostgreSQL)"),
                    str(n),
                    f"{n * per:,}",
                    f_rate(v),
                    f_rate(conc_med(R, st, n, "per_writer_commits_per_s")),
                    f_ms(conc_med(R, st, n, "commit_ms_median")),
                    f_ratio(div(v, base1)),
                    f"{checked}/{len(okc)} runs: all {n * P['conc_appends']:,} lines once" if okc else "—",
                    conc_nreps(R, st, n),
                ])
        L.append(table(["backend", "writers", "commits per run", "total commits/s", "per writer commits/s",
                        "median commit ms", f"vs {P['conc_writers'][0]} writer", "check", "ok runs"], rows))
        L.append("")

    # scale
    L.append("## Scale — memrev commit cost vs number of paths in the tree")
    L.append("")
    sm = next((r for r in R if r.get("scale_role") == "small"), None)
    bg = next((r for r in R if r.get("scale_role") == "big"), None)
    probe = next((r for r in R if r.get("scale_role") == "probe"), None)
    note = next((r.get("note") for r in R if r.get("workload") == "scale-note"), None)
    L.append(
        "Paths are built in one `async with store.transaction():` (1,000 files per directory), then "
        f"{P['scale_rounds']} rounds × {P['scale_writes']} single-commit writes of a small file (alternating a new "
        "path and a changed existing path in a random directory) are timed. The build is done once per size "
        "(it is the expensive part); the write latency is the median over the rounds' medians."
    )
    L.append("")
    rows = []
    for r in [sm, probe if probe is not bg else None, bg]:
        if not r:
            continue
        n = r.get("paths", r.get("scale_paths_requested"))
        rows.append([
            f"{n:,}",
            f"{r['build_s']:.1f} s" if r.get("build_s") is not None else "—",
            f_rate(n / r["build_s"]) if r.get("build_s") else "—",
            f_ms(r.get("write_ms_median")),
            f_ms(r.get("write_ms_new")),
            f_ms(r.get("write_ms_changed")),
            f_bytes(r.get("disk_bytes")),
            f_mb(r.get("maxrss_kb")),
            "ok" if r.get("ok") else f"ERROR: {r.get('op')}: {r.get('error')}",
        ])
    L.append(table(["paths in tree", "build (one transaction)", "paths/s", "median write ms", "new path ms", "changed path ms", "bytes on disk", "peak RSS MB", "status"], rows))
    L.append("")
    if note:
        L.append(f"**Note:** {note}")
        L.append("")

    # memory
    L.append("## Peak memory (ru_maxrss of each child, MB, median over runs)")
    L.append("")
    L.append("`after open` is the RSS right after imports + opening the store (the interpreter + library baseline).")
    L.append("")
    rows = []
    for s in stores + (["memrev-full"] if collect(R, "W1", "memrev-full") else []):
        row = [f"**{s}**" if s.startswith("memrev") else s]
        row.append(f_mb(med(R, "W1", s, "rss_after_open_kb")))
        for wl in WORKLOADS:
            row.append(f_mb(med(R, wl, s, "maxrss_kb")) if collect(R, wl, s) else "")
        rows.append(row)
    L.append(table(["store", "after open"] + WORKLOADS, rows))
    L.append("")
    L.append("Growth during the workload (peak − RSS after open, MB, median over runs):")
    L.append("")
    rows = []
    for s in stores + (["memrev-full"] if collect(R, "W1", "memrev-full") else []):
        row = [f"**{s}**" if s.startswith("memrev") else s]
        for wl in WORKLOADS:
            xs = [
                (r["maxrss_kb"] - r["rss_after_open_kb"]) / 1024
                for r in collect(R, wl, s)
                if r.get("ok") and "rss_after_open_kb" in r
            ]
            row.append(f"{max(0.0, statistics.median(xs)):.0f}" if xs else "")
        rows.append(row)
    L.append(table(["store"] + WORKLOADS, rows))
    L.append("")

    return L


def build_report(results: list[dict], P: dict, info: dict, cmd: str, started: str, elapsed: float, quick: bool,
                 before: dict | None = None) -> tuple[str, list]:
    R = results
    L: list[str] = []
    stores = [s for s in ALL_STORES if any(r.get("store") == s for r in R)]
    L.append("# memrev benchmarks")
    L.append("")
    if quick:
        L.append("> **Smoke run (`--quick`)**: reduced sizes, one repetition. Numbers are not comparable with the full run.")
        L.append("")
    L.append("Generated by `bench/run.py`. Do not edit by hand; re-run the benchmark.")
    L.append("")
    if info.get("postgres_skipped"):
        L.append(f"> **memrev-pg (memrev on PostgreSQL) was skipped in this run:** {info['postgres_skipped']}.")
        L.append("")
    L.append(f"- **Command:** `{cmd}`")
    L.append(f"- **Date:** {started} (UTC), total run time {elapsed / 60:.1f} min")
    L.append(f"- **Machine:** nproc={info['nproc']}, CPU: {info['cpu']}, RAM: {info['ram']}, {info['os']}")
    L.append(
        f"- **Load average** (1/5/15 min) at start: {' '.join(info.get('loadavg_start', ['?']))}, at end: "
        f"{' '.join(info.get('loadavg_end', ['?']))} (other jobs share this machine)"
    )
    L.append(f"- **Python:** {info['python']}")
    L.append("- **Packages:** " + ", ".join(f"{k} {v}" for k, v in info["packages"].items()))
    L.append(f"- **memrev source:** {info.get('memrev_src')} at git {info['git']}; sha256 of src/memrev/**/*.py at start {info.get('src_start')}, at end {info.get('src_end')}")
    if info.get("src_start") != info.get("src_end"):
        L.append("")
        L.append("> **Warning: memrev's source changed while this benchmark ran; its repetitions may mix versions. Re-run.**")
    L.append("")
    L.append("## Method")
    L.append("")
    L.append(
        f"- Each (store, workload, repetition) runs in its own fresh subprocess (`bench/child.py`) on a fresh store "
        f"in a temporary directory on the local disk; peak memory is `resource.getrusage(RUSAGE_SELF).ru_maxrss` of that "
        f"child. Every measurement is repeated {P['reps']} times (W4: {P['reps_cheap']} times for stores whose first W4 child took "
        f"< {P['cheap_s']:g} s; the *ok runs* column shows the count); the tables show the **median** "
        "over repetitions (latencies are medians over many calls within a run, then the median over runs). Repetitions "
        "are interleaved and the store order rotates per repetition; the machine is shared and noisy."
    )
    L.append("- Workload data comes from seeded RNGs (`bench/data.py`) and is identical for every store; it is generated "
             "before the clock starts. Every workload checks the answers it gets (see *Problems* below).")
    L.append(
        "- **Issue 14's sections come first** (`bench/speed.py`, `bench/speed_report.py`): the floor, independent "
        "writers, history at scale, footprint, CLI start; each says how it is measured. `--speed-only` runs only "
        "those, `--sizes` picks the store sizes, `--keep` caches the built stores, `--before RAW_JSON` adds a "
        "*before* column to the targets, `bench/compare.py BEFORE AFTER` sets two runs' targets side by side. "
        "The memrev measured is the one on `PYTHONPATH` (named under *memrev source* above)."
    )
    L.append("- All stores are driven through the same async `KnowledgeStore` calls (`write`, `read`, `list`, `append`, `read_range`).")
    L.append(
        "- **Git peers** (\"a commit per write\", `bench/stores.py`): each write creates a blob, rebuilds every tree on the "
        "path (dulwich: `Tree` objects added with `object_store.add_object`; pygit2: one `TreeBuilder` per level), creates "
        "one commit whose parent is the current head and moves `refs/heads/master` (dulwich `refs.set_if_equals`, pygit2 "
        "`create_commit(ref, ...)`). Bare repos, loose objects only, never packed, no reflog. git has no append or directory "
        "listing: **append = read the blob + write(old + new) as one commit** (returns the old length as offset); **list = walk "
        "the head tree down to the directory and read that tree object**; read_range = read the blob and slice. The head commit "
        "id and its root tree id are cached in the handle; all other trees and blobs are read from the object store."
    )
    L.append(
        f"- **W2 for dulwich/pygit2 is capped at {P['w2_n_git']:,} appends** (instead of {P['w2_n']:,}): append is a "
        f"whole-file rewrite there, so the cost is quadratic; their first/last windows are the first and last "
        f"{min(P['w2_window'], P['w2_n_git'] // 2)} of those appends."
    )
    L.append("- Bytes on disk = sum of file sizes (`st_size`) of everything the store keeps, measured after `close()` "
             "(memrev: the whole store folder incl. `-wal`/`-shm`; SQLite: db + journal files; git: the whole repo folder; "
             "ag2-disk: its root folder). The *allocated* column is `st_blocks × 512` (what `du` shows; loose git objects "
             "take a 4 KiB block each). Targets use the `st_size` sum; 1 KB = 1,000 bytes.")
    L.append("- Durability as configured: " + "; ".join(f"**{k}**: {v}" for k, v in DURABILITY.items()) + ".")
    pg = info.get("postgres")
    if pg:
        L.append(
            f"- **memrev-pg** is memrev on PostgreSQL (`VersionedStore(\"postgresql://...\")`, psycopg "
            f"{info['packages'].get('psycopg', '?')}). `bench/run.py` starts **one throwaway PostgreSQL {pg['version']} "
            "server** for the whole run (`bench/pgserver.py`: `initdb` + `pg_ctl` in a temporary folder on the same local "
            "disk, run as the `postgres` OS user when root, stopped at the end) and every child gets a **fresh database** "
            "(`CREATE DATABASE ... TEMPLATE template0`, dropped after the child; the history child reuses its W1 database). "
            f"Server settings as the server reports them: `fsync={pg['fsync']}`, `synchronous_commit={pg['synchronous_commit']}` "
            f"(memrev also sets it on its sessions), `full_page_writes={pg['full_page_writes']}`, "
            f"`wal_sync_method={pg['wal_sync_method']}`, `shared_buffers={pg['shared_buffers']}`, otherwise defaults; "
            f"clients connect over **local TCP to {pg['listen_addresses']}** (no network hop, but the TCP stack and one "
            "round trip per statement). Every commit therefore waits for a WAL flush (an fsync) on the server. "
            "Bytes on disk for memrev-pg = `pg_total_relation_size` summed over the database's tables (heap + indexes + "
            "TOAST), not the files of the whole cluster (WAL and the empty database's catalogs are left out). Peak RSS "
            "is the client process only; the server's memory is not counted."
        )
    elif info.get("postgres_skipped"):
        L.append(f"- **memrev-pg skipped:** {info['postgres_skipped']}.")
    if info["packages"].get("watchdog") not in (None, "not installed"):
        L.append("- `ag2.knowledge.DiskKnowledgeStore` needs `watchdog`, which ag2 does not install; the benchmark environment "
                 "got it with `pip install watchdog` (it is not a memrev dependency).")
    L.append("")

    L += speed_report.sections(R, P)
    if any(r.get("workload") == "W1" for r in R):
        L += peer_sections(R, P, stores)

    # targets
    targets = compute_targets(R, P)
    L.append("## Targets")
    L.append("")
    if before is None:
        L.append(table(
            ["target", "memrev", "reference", "measured", "threshold", "result"],
            [[t["name"], t["a"], t["b"], t["measured"], t["threshold"], f"**{t['result']}**"] for t in targets],
        ))
    else:
        old = {t["name"]: t for t in compute_targets(before["results"], before["params"])}
        m = before["machine"]
        L.append(f"*before* = the same harness on {m.get('memrev_src', '?')} at git {m.get('git', '?')} "
                 f"(`{before['command']}`, {before.get('started', 'an earlier run')}); a *before* measured at other "
                 "sizes (a full run against a `--quick` one) is left out.")
        L.append("")
        L.append(table(
            ["target", "before", "memrev", "reference", "measured", "threshold", "result"],
            [[t["name"], old[t["name"]]["measured"] if t["name"] in old else "—", t["a"], t["b"], t["measured"],
              t["threshold"], f"**{t['result']}**"] for t in targets],
        ))
    L.append("")
    np_ = sum(t["result"] == "PASS" for t in targets)
    L.append(f"{np_} of {len(targets)} targets pass.")
    L.append("")

    # problems
    L.append("## Problems seen")
    L.append("")
    probs = []
    for r in R:
        if r.get("workload") == "scale-note":
            continue
        tag = f"{r.get('workload')} / {r.get('store')} / rep {r.get('rep')}"
        if r.get("workload") == "concurrency":
            tag += f" / {r.get('writers')} writers"
        if not r.get("ok"):
            probs.append(f"- **{tag}**: call `{r.get('op')}` raised `{r.get('error')}`")
        for c in r.get("check_failures") or []:
            probs.append(f"- **{tag}**: wrong answer: {c}")
    L.extend(probs or ["None: every child finished and every answer checked out."])
    L.append("")
    return "\n".join(L), targets


def compute_targets(R: list[dict], P: dict) -> list[dict]:
    T: list[dict] = []

    def add(name, a, b, measured, op, thr, fmt=f_ratio, a_fmt=str, b_fmt=str):
        if measured is None:
            res = "NO DATA"
        else:
            res = "PASS" if (measured >= thr if op == ">=" else measured <= thr) else "FAIL"
        T.append({
            "name": name,
            "a": a_fmt(a) if a is not None else "—",
            "b": b_fmt(b) if b is not None else "—",
            "measured": fmt(measured) if measured is not None else "—",
            "threshold": f"{op} {thr:g}" if fmt is f_ratio else f"{op} {fmt(thr)}",
            "result": res,
            "value": measured,
        })

    rate = lambda x: f"{f_rate(x)}/s"  # noqa: E731
    msf = lambda x: f"{f_ms(x)} ms"  # noqa: E731

    speed_report.targets(R, P, add)
    if not any(r.get("workload") == "W1" for r in R):  # --speed-only: no peer rows
        return T
    m1 = med(R, "W1", "memrev", "writes_per_s")
    s1 = med(R, "W1", "ag2-sqlite", "writes_per_s")
    d1 = med(R, "W1", "dulwich", "writes_per_s")
    f1 = med(R, "W1", "memrev-full", "writes_per_s")
    add("W1 writes/s ≥ 10× ag2 SqliteKnowledgeStore", m1, s1, div(m1, s1), ">=", 10, a_fmt=rate, b_fmt=rate)
    add("W1 writes/s ≥ 20× dulwich commit-per-write", m1, d1, div(m1, d1), ">=", 20, a_fmt=rate, b_fmt=rate)
    add('W1 writes/s at durability="full" ≥ 2× ag2 Sqlite', f1, s1, div(f1, s1), ">=", 2, a_fmt=rate, b_fmt=rate)
    m4, s4 = med(R, "W4", "memrev", "reads_per_s"), med(R, "W4", "ag2-sqlite", "reads_per_s")
    add("W4 reads/s ≥ 3× ag2 Sqlite", m4, s4, div(m4, s4), ">=", 3, a_fmt=rate, b_fmt=rate)
    m3, s3 = med(R, "W3", "memrev", "lists_per_s"), med(R, "W3", "ag2-sqlite", "lists_per_s")
    add("W3 lists/s ≥ 10× ag2 Sqlite", m3, s3, div(m3, s3), ">=", 10, a_fmt=rate, b_fmt=rate)
    lf = med(R, "W2", "memrev", "last_over_first")
    add(
        f"W2 appends/s, last {P['w2_window']} / first {P['w2_window']} ≥ 0.8",
        med(R, "W2", "memrev", "last_per_s"), med(R, "W2", "memrev", "first_per_s"), lf, ">=", 0.8,
        a_fmt=lambda x: f"last {f_rate(x)}/s", b_fmt=lambda x: f"first {f_rate(x)}/s",
    )
    b1 = med(R, "W1", "memrev", "disk_bytes")
    add(f"bytes on disk after W1 ({P['w1_n']:,} versions) ≤ 300 KB", b1, None, b1, "<=", 300 * 1000,
        fmt=f_bytes, a_fmt=f_bytes)
    r5 = med(R, "W5", "memrev", "disk_over_log")
    add("bytes on disk after W5 ≤ 2× final log size", med(R, "W5", "memrev", "disk_bytes"),
        med(R, "W5", "memrev", "final_log_bytes"), r5, "<=", 2, a_fmt=f_bytes, b_fmt=lambda x: f"log {f_bytes(x)}")
    back = P["hist_back"]
    mr = med(R, "history", "memrev", "read_rev_warm_ms")
    pr = med(R, "history", "pygit2", "read_rev_warm_ms")
    add(f"read {back} revisions back (warm) ≤ 0.5 ms", mr, None, mr, "<=", 0.5, fmt=msf, a_fmt=msf)
    add(f"read {back} revisions back (warm) ≤ pygit2 warm", mr, pr, div(mr, pr), "<=", 1, a_fmt=msf, b_fmt=msf)
    md_ = med(R, "history", "memrev", "diff_warm_ms")
    pd = med(R, "history", "pygit2", "diff_warm_ms")
    add("diff of two successive revisions (warm) ≤ 0.5 ms", md_, None, md_, "<=", 0.5, fmt=msf, a_fmt=msf)
    add("diff of two successive revisions (warm) ≤ pygit2 warm", md_, pd, div(md_, pd), "<=", 1, a_fmt=msf, b_fmt=msf)
    rs = med(R, "history", "memrev", "resolve_ms")
    add(f"resolve HEAD~{back} ≤ 5 ms", rs, None, rs, "<=", 5, fmt=msf, a_fmt=msf)
    ratios = {}
    for wl in WORKLOADS:
        a, b = med(R, wl, "memrev", "maxrss_kb"), med(R, wl, "ag2-sqlite", "maxrss_kb")
        if a is not None and b is not None:
            ratios[wl] = a / b
    worst = max(ratios.values()) if len(ratios) == len(WORKLOADS) else None
    wk = max(ratios, key=ratios.get) if ratios else None
    add(
        "peak memory of memrev W1..W5 children ≤ 1.5× ag2 Sqlite's (worst workload)",
        med(R, wk, "memrev", "maxrss_kb") if wk else None,
        med(R, wk, "ag2-sqlite", "maxrss_kb") if wk else None,
        worst, "<=", 1.5,
        a_fmt=lambda x: f"{f_mb(x)} MB ({wk})", b_fmt=lambda x: f"{f_mb(x)} MB",
    )
    if ratios:
        T[-1]["name"] += " — per workload: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
    sm = next((r for r in R if r.get("scale_role") == "small"), None)
    bg = next((r for r in R if r.get("scale_role") == "big"), None)
    a = bg.get("write_ms_median") if bg and bg.get("ok") else None
    b = sm.get("write_ms_median") if sm and sm.get("ok") else None
    nb = (bg or {}).get("paths", (bg or {}).get("scale_paths_requested", 0))
    ns = (sm or {}).get("paths", (sm or {}).get("scale_paths_requested", 0))
    add(
        f"commit cost with {nb:,} paths ≤ 2× with {ns:,} paths",
        a, b, div(a, b), "<=", 2,
        a_fmt=lambda x: f"{f_ms(x)} ms @ {nb:,}", b_fmt=lambda x: f"{f_ms(x)} ms @ {ns:,}",
    )
    return T


# --------------------------------------------------------------------------- main

# Sections other tools measure (bench/viewer.py, bench/purge_scale.py print their tables by hand): a
# re-run of this benchmark keeps them from the file it overwrites.
KEPT_HEADINGS = ("## Viewer — ", "## Purge — ", "## Many writers, long runs")


def kept_sections(out: Path) -> str:
    try:
        old = out.read_text()
    except OSError:
        return ""
    starts = [old.find("\n" + h) for h in KEPT_HEADINGS if old.find("\n" + h) >= 0]
    return "\n" + old[min(starts) + 1:] if starts else ""



def report_from(args) -> None:
    """Render a report from a raw results file (as the run that wrote it would have)."""
    raw = json.loads(Path(args.report_from).read_text())
    quick = "--quick" in raw["command"].split()
    out = Path(args.out) if args.out else (
        ROOT / "bench/results/benchmarks-quick.md" if quick else ROOT / "docs/benchmarks.md"
    )
    before = json.loads(Path(args.before).read_text()) if args.before else None
    report, targets = build_report(raw["results"], raw["params"], raw["machine"], raw["command"],
                                   raw.get("started", "?"), raw.get("elapsed_s", float("nan")), quick, before)
    out.write_text(report + kept_sections(out))
    log(f"report: {out}")
    for t in targets:
        log(f"  {t['result']:7s} {t['name']}: {t['measured']} ({t['threshold']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke run (< 5 min)")
    ap.add_argument("--out", help="report path (default docs/benchmarks.md; bench/results/benchmarks-quick.md with --quick)")
    ap.add_argument("--stores", help="comma-separated subset of stores (debugging; the report is then partial)")
    ap.add_argument("--workdir", help="where the temporary stores live (default: system temp dir)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary directory, and cache the history-at-scale stores in "
                         "WORKDIR/memrev-bench-cache for the next run (keyed by size and schema version)")
    ap.add_argument("--speed-only", action="store_true",
                    help="only issue 14's rows: floors, independent writers, history at scale, CLI start")
    ap.add_argument("--report-from", metavar="RAW_JSON",
                    help="render the report of an earlier run from its raw results (nothing is measured)")
    ap.add_argument("--before", metavar="RAW_JSON",
                    help="raw results of an earlier run (bench/results/raw-*.json): a *before* column in the targets")
    ap.add_argument("--sizes", help="comma-separated store sizes (commits) for history at scale, e.g. 1000,10000")
    ap.add_argument("--gc-scale", nargs="*", type=int, metavar="N",
                    help="only time gc and export after N appends to one file (default 1000 2000 4000); see bench/gc_scale.py")
    ap.add_argument("--purge-scale", nargs="*", type=int, metavar="N",
                    help="only time purge (text and paths) beside gc and reindex on N-commit stores (default 10000),"
                         " 3 rounds; see bench/purge_scale.py")
    ap.add_argument("--mcp", nargs="?", type=int, const=50, metavar="CALLS",
                    help="only time MCP round trips (memory_view, memory_create) over stdio, in process and against"
                         " the store call, CALLS calls x 3 rounds (default 50); see bench/mcp_bench.py")
    ap.add_argument("--langgraph", type=int, metavar="N",
                    help="only time LangGraph stores (InMemoryStore, SqliteStore, MemrevStore) on an N-item namespace,"
                         " 3 rounds; see bench/langgraph_bench.py")
    ap.add_argument("--long-runs", action="store_true",
                    help="only issue 26's rows (many writers, long runs), before and after side by side with"
                         " --before-src; writes its section of --out (default docs/benchmarks.md); see bench/long_runs.py")
    ap.add_argument("--before-src", metavar="DIR", help="with --long-runs: the src folder of an older memrev (before)")
    ap.add_argument("--one-build", action="store_true",
                    help="with --long-runs: row 7's stores built once, by the before side, and checked by both")
    args = ap.parse_args()
    if args.long_runs:
        import long_runs

        long_runs.main([*(["--before-src", args.before_src] if args.before_src else []), *(["--quick"] if args.quick else []),
                        *(["--workdir", args.workdir] if args.workdir else []), *(["--keep"] if args.keep else []),
                        *(["--out", args.out] if args.out else []), *(["--one-build"] if args.one_build else []),
                        "--command", "python bench/run.py" + "".join(f" {shlex.quote(a)}" for a in sys.argv[1:])])
        return
    if args.mcp is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        import mcp_bench

        mcp_bench.main(["--calls", str(args.mcp)] + (["--workdir", args.workdir] if args.workdir else []))
        return
    if args.langgraph is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        import langgraph_bench

        langgraph_bench.main([str(args.langgraph)] + (["--workdir", args.workdir] if args.workdir else []))
        return
    if args.purge_scale is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        import purge_scale

        purge_scale.main([str(n) for n in (args.purge_scale or [10000])] + (["--workdir", args.workdir] if args.workdir else []))
        return
    if args.gc_scale is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        import gc_scale

        gc_scale.main(args.gc_scale or [1000, 2000, 4000])
        return
    if args.report_from:
        report_from(args)
        return
    P = dict(QUICK if args.quick else FULL)
    if args.sizes:
        P["hs_sizes"] = [int(x) for x in args.sizes.split(",")]
    only = [s.strip() for s in args.stores.split(",")] if args.stores else None
    out = Path(args.out) if args.out else (
        ROOT / "bench/results/benchmarks-quick.md" if args.quick else ROOT / "docs/benchmarks.md"
    )
    cmd = "python bench/run.py" + "".join(f" {shlex.quote(a)}" for a in sys.argv[1:])
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    base = Path(tempfile.mkdtemp(prefix="memrev-bench-", dir=args.workdir))
    log(f"workdir {base}")
    t0 = time.perf_counter()
    info = machine_info()
    info["src_start"] = src_fingerprint()
    info["memrev_src"] = str(MEMREV_SRC)
    server = None
    skip: set[str] = set()
    want_pg = not only or any(s in PG_STORES for s in only)
    try:
        if want_pg:
            reason = pgserver.unavailable_reason()
            if reason is None:
                try:
                    server = pgserver.PgServer(parent_dir=args.workdir)
                    os.environ["MEMREV_BENCH_PG_URL"] = server.url()
                    info["postgres"] = server.describe()
                    log(f"PostgreSQL {info['postgres']['version']} on {server.url()} "
                        f"(fsync={info['postgres']['fsync']}, synchronous_commit={info['postgres']['synchronous_commit']})")
                except Exception as e:  # noqa: BLE001
                    reason = f"starting the throwaway PostgreSQL server failed: {e}"[:1500]
                    if server is not None:
                        server.stop()
                        server = None
            if reason is not None:
                skip |= set(PG_STORES)
                info["postgres_skipped"] = reason
                log(f"WARNING: memrev-pg skipped: {reason}")
        cache = Path(args.workdir or tempfile.gettempdir()) / "memrev-bench-cache" if args.keep else base / "cache"
        results = run_all(P, base, cache, only, skip, speed_only=args.speed_only)
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    info["src_end"] = src_fingerprint()
    if info["src_end"] != info["src_start"]:
        log("WARNING: memrev's source changed during the run; results may mix versions")
    try:
        info["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    before = json.loads(Path(args.before).read_text()) if args.before else None
    report, targets = build_report(results, P, info, cmd, started, elapsed, args.quick, before)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report + kept_sections(out))
    rdir = ROOT / "bench/results"
    rdir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    raw = rdir / f"raw-{'quick-' if args.quick else ''}{stamp}.json"
    raw.write_text(json.dumps({"params": P, "machine": info, "command": cmd, "started": started, "elapsed_s": elapsed,
                               "results": results}, indent=1, default=str))
    log(f"\nreport: {out}\nraw results: {raw}\ntotal {elapsed / 60:.1f} min\n")
    for t in targets:
        log(f"  {t['result']:7s} {t['name']}: {t['measured']} ({t['threshold']})")


if __name__ == "__main__":
    main()
