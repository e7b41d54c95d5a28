"""Issue 14 workloads (run in bench/child.py processes): the floor, independent
writers, history at scale, CLI start.

* ``floor``: memrev's W1 writes interleaved, write by write, with one bare
  database transaction inserting the same content bytes into one table, on the
  same disk (SQLite) or the same server (PostgreSQL). Pairing every memrev
  write with a floor write in one process puts both under the same noise.
* ``writers``: total commits/s of N independent writers (each writes its own
  path), as N asyncio tasks on one handle or as N processes.
* ``hbuild`` / ``hquery`` / ``hfile`` / ``hfsck`` / ``hgc``: history at scale
  on stores built once through the Repository (one commit per call, no async
  layer), cached by size and schema version.
* ``cli``: wall time of ``memrev --help`` and ``memrev log -n 5`` subprocesses.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import data
from stores import disk_usage, open_store

perf = time.perf_counter
W1_PATH = "/memory/working.md"


class OpError(Exception):
    """Carries which store call failed (child.py reports ``op``)."""

    def __init__(self, op: str) -> None:
        super().__init__(op)
        self.op = op


def _med(xs):
    return statistics.median(xs) if xs else None


def _ms(xs):
    return None if not xs else statistics.median(xs) * 1e3


def open_footprint(h, res) -> None:
    """Bytes of the store's files while it is still open (memrev on SQLite: db + WAL + shm)."""
    if not h.disk_paths():
        return
    res["disk_open_bytes"] = h.disk_usage()[0]
    side = [p for d in h.disk_paths() if d.is_dir() for p in d.iterdir() if p.name.endswith(("-wal", "-shm"))]
    res["wal_open_bytes"] = disk_usage(side)[0]


# --------------------------------------------------------------------------- floors


class SqliteFloor:
    """One bare SQLite WAL transaction per write: BEGIN; INSERT the bytes; COMMIT."""

    def __init__(self, file: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(str(file), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.execute("CREATE TABLE IF NOT EXISTS floor(id INTEGER PRIMARY KEY, path TEXT NOT NULL, body BLOB NOT NULL)")

    def write(self, path: str, body: bytes) -> None:
        c = self.conn
        c.execute("BEGIN")
        c.execute("INSERT INTO floor(path, body) VALUES (?, ?)", (path, body))
        c.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class PgFloor:
    """One autocommit INSERT per write over a psycopg connection (as memrev's backend connects)."""

    def __init__(self, tag: str) -> None:
        import psycopg

        import pgserver

        self.tag = tag
        self.conn = psycopg.connect(pgserver.create_database(tag), autocommit=True)
        self.conn.execute("SET synchronous_commit = on")
        self.conn.execute("CREATE TABLE floor(id bigserial PRIMARY KEY, path text NOT NULL, body bytea NOT NULL)")

    def write(self, path: str, body: bytes) -> None:
        self.conn.execute("INSERT INTO floor(path, body) VALUES (%s, %s)", (path, body))

    def close(self) -> None:
        import pgserver

        self.conn.close()
        pgserver.drop_database(self.tag)


def _open_floor(store: str, workdir: Path):
    if store == "memrev":
        return SqliteFloor(workdir / "floor.sqlite", "NORMAL"), "SQLite WAL, synchronous=NORMAL"
    if store == "memrev-full":
        return SqliteFloor(workdir / "floor.sqlite", "FULL"), "SQLite WAL, synchronous=FULL"
    if store == "memrev-pg":
        return PgFloor(workdir.name + "-floor"), "PostgreSQL autocommit INSERT"
    raise ValueError(f"no floor for store {store!r}")


async def floor(h, cfg, res):
    """W1's writes, each paired with one floor transaction of the same bytes (order alternates)."""
    versions = data.working_md_versions(cfg["w1_n"])
    fl, res["floor"] = _open_floor(h.name, Path(cfg["workdir"]))
    s = h.store
    lat_m, lat_f = [], []
    try:
        for i, v in enumerate(versions):
            body = v.encode()
            for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                a = perf()
                if which == 0:
                    fl.write(W1_PATH, body)
                    lat_f.append(perf() - a)
                else:
                    try:
                        await s.write(W1_PATH, v)
                    except Exception as e:
                        raise OpError(f"write({W1_PATH!r}) #{i}") from e
                    lat_m.append(perf() - a)
    finally:
        fl.close()
    res["n"] = len(versions)
    res["memrev_ms"] = _ms(lat_m)
    res["floor_ms"] = _ms(lat_f)
    res["ratio"] = res["memrev_ms"] / res["floor_ms"]
    if await s.read(W1_PATH) != versions[-1]:
        res.setdefault("check_failures", []).append("floor: read(path) after the run != last written version")
    open_footprint(h, res)
    h.close()
    res["disk_bytes"] = h.disk_usage()[0]


# --------------------------------------------------------------------------- independent writers


def conc_writes(cfg) -> int:
    """Commits per writer: PostgreSQL commits take ~10x longer, so fewer keep its runs as long as SQLite's."""
    return cfg["conc_w_n_pg"] if cfg["store"] == "memrev-pg" else cfg["conc_w_n"]


def _writer_bodies(w: int, k: int) -> list[str]:
    return data.conc_lines(w, k)


def _writer_path(w: int) -> str:
    return f"/conc/w{w}.json"


async def _write_all(s, w: int, k: int) -> tuple[float, float, list[float]]:
    lat = []
    path = _writer_path(w)
    t0 = time.time()
    for i, body in enumerate(_writer_bodies(w, k)):
        a = perf()
        try:
            await s.write(path, body)
        except Exception as e:
            raise OpError(f"writer {w}: write({path!r}) #{i}") from e
        lat.append(perf() - a)
    return t0, time.time(), lat


async def writer_proc(cfg, res):
    """One of N writer processes (``writers`` with conc_mode="procs")."""
    w = cfg["writer"]
    h = open_store(cfg["store"], cfg["workdir"], create=False)
    try:
        print("ready", flush=True)
        deadline = time.time() + 120
        while not os.path.exists(cfg["go"]):  # all writers start at the same instant
            if time.time() > deadline:
                raise OpError(f"writer {w}: no go signal")
            time.sleep(0.0005)
        res["t0"], res["t1"], lat = await _write_all(h.store, w, conc_writes(cfg))
    finally:
        h.close()
    res["lat"] = lat


def _spawn_writers(cfg, n: int) -> list[dict]:
    import json

    wd = Path(cfg["workdir"])
    go = wd / "go"
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
    procs = []
    try:
        for w in range(n):
            wcfg = dict(cfg, workload="writer-proc", writer=w, go=str(go), out=str(wd / f"writer{w}.json"))
            errf = open(wd / f"writer{w}.stderr", "w")
            procs.append((subprocess.Popen([sys.executable, child, json.dumps(wcfg)], stdout=subprocess.PIPE,
                                           stderr=errf, text=True), errf))
        for w, (p, _) in enumerate(procs):
            if p.stdout.readline().strip() != "ready":
                raise OpError(f"writer {w} did not start: {(wd / f'writer{w}.stderr').read_text()[-1500:]}")
        go.touch()
        for p, _ in procs:
            p.wait(timeout=cfg["child_timeout"])
    finally:
        for p, errf in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            errf.close()
    outs = []
    for w in range(n):
        try:
            r = json.loads((wd / f"writer{w}.json").read_text())
        except Exception as e:
            raise OpError(f"writer {w} exited without a result: {(wd / f'writer{w}.stderr').read_text()[-1500:]}") from e
        if not r.get("ok"):
            raise OpError(f"{r.get('op')}: {r.get('error')}")
        outs.append((r["t0"], r["t1"], r["lat"]))
    return outs


async def writers(h, cfg, res):
    """N independent writers, each its own path: as N tasks on one handle, or as N processes."""
    n, k, mode = cfg["writers"], conc_writes(cfg), cfg["conc_mode"]
    s = h.store
    await s.write("/conc/README", "independent writers\n")  # the store and branch exist before the clock
    if mode == "tasks":
        outs = await asyncio.gather(*(_write_all(s, w, k) for w in range(n)))
    else:
        h.close()
        outs = _spawn_writers(cfg, n)
        h = open_store(cfg["store"], cfg["workdir"], create=False)
        s = h.store
    t0, t1 = min(o[0] for o in outs), max(o[1] for o in outs)
    res["commits"] = n * k
    res["elapsed_s"] = t1 - t0
    res["commits_per_s"] = n * k / (t1 - t0)
    res["commit_ms_median"] = _ms([x for o in outs for x in o[2]])
    # check (not timed): every writer's last write is there, and each write is its own commit
    bad = []
    for w in range(n):
        path = _writer_path(w)
        if await s.read(path) != _writer_bodies(w, k)[-1]:
            bad.append(f"writers: {path} does not hold its last write")
        got = len(await s.log(path))
        if got != k:
            bad.append(f"writers: log({path!r}) has {got} commits, expected {k}")
    if bad:
        res.setdefault("check_failures", []).extend(bad)
    h.close()


# --------------------------------------------------------------------------- history at scale: building


def schema_tag() -> str:
    """Cached stores are reused only by a memrev with the same schema version."""
    try:
        from memrev.backends import sqlite as sqlite_backend

        return f"s{len(sqlite_backend.MIGRATIONS)}"
    except Exception:  # noqa: BLE001 - an unknown layout: never reuse
        return f"t{os.getpid()}{time.time_ns()}"


def spread_path(i: int) -> str:
    """Commit i's new file: 100 top directories (1% of the commits each), 100 subdirectories each."""
    return f"/d{i % 100:02d}/s{(i // 100) % 100:02d}/f{i // 10_000:03d}.md"


def _repository(folder: Path):
    from memrev.backends import open_backend
    from memrev.repo import Repository

    return Repository(open_backend(str(folder)))


def _write_op(path: str, data: bytes):
    """A write operation for Repository.commit: a memrev.ops.Write record where memrev has
    them (the typed op records of issue 10), else the older ("write", path, bytes) tuple,
    so this harness measures checkouts from before and after that change."""
    try:
        from memrev.ops import Write
    except ImportError:
        return ("write", path, data)
    return Write(path, data)


def build_store(kind: str, n: int, folder: Path) -> float:
    """Build a store of ``n`` commits into ``folder`` (through a temp folder, so a
    killed build never leaves a half store behind). Returns seconds."""
    tmp = folder.with_name(folder.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    repo = _repository(tmp)
    t0 = perf()
    if kind == "file":  # one file, n versions of W1's 2 KB document
        for v in data.working_md_versions(n):
            repo.commit("main", [_write_op(W1_PATH, v.encode())], author="bench")
    else:  # n commits, each adding one small file somewhere in the tree
        for i in range(n):
            repo.commit("main", [_write_op(spread_path(i), f"file {i}\n{'x' * 64}\n".encode())], author="bench")
    built = perf() - t0
    repo.backend.close()
    os.rename(tmp, folder)
    return built


async def hbuild(h, cfg, res):
    folder = Path(cfg["store_dir"])
    if folder.exists():
        res["cached"] = True
        return
    res["cached"] = False
    res["build_s"] = build_store(cfg["build_kind"], cfg["build_n"], folder)
    res["build_commits_per_s"] = cfg["build_n"] / res["build_s"]


def _open_built(cfg, res=None):
    """Open a built store; then one full garbage collection, timed apart (``res["collect_ms"]``).

    This child imported ag2 and AutoGen (bench/stores.py) for the other workloads.
    CPython's first full collection of that heap (17-23 ms here, seen with
    ``gc.callbacks``) otherwise lands in whichever call happens to come next,
    so the *first call* timings would measure the imports, not the call.
    """
    import gc

    from memrev import VersionedStore

    s = VersionedStore(cfg["store_dir"], create=False)
    a = perf()
    gc.collect()
    if res is not None:
        res["collect_ms"] = (perf() - a) * 1e3
    return s


async def _timed(fn, reps: int) -> tuple[float, float | None, object]:
    """(first call ms, median ms of the next ``reps`` calls, first result)."""
    a = perf()
    out = await fn()
    first = (perf() - a) * 1e3
    lat = []
    for _ in range(reps):
        a = perf()
        await fn()
        lat.append(perf() - a)
    return first, _ms(lat), out


class _Rollback(Exception):
    """Raised inside a transaction to throw its staged writes away."""


async def hquery(h, cfg, res):
    """Store-wide queries on a store of n spread commits."""
    n, reps = cfg["build_n"], cfg["hs_reps"]
    s = _open_built(cfg, res)
    checks = res.setdefault("check_failures", [])
    try:
        res["log_dir_first_ms"], res["log_dir_ms"], got = await _timed(lambda: s.log("/d00"), reps)
        if len(got) != (n + 99) // 100:
            checks.append(f"hquery: log('/d00') has {len(got)} commits, expected {(n + 99) // 100}")
        res["log_page_first_ms"], res["log_page_ms"], got = await _timed(lambda: s.log(limit=20), reps)
        if len(got) != min(20, n):
            checks.append(f"hquery: log(limit=20) has {len(got)} commits")
        if n > 5000:
            res["resolve_first_ms"], res["resolve_ms"], _ = await _timed(lambda: s.resolve("HEAD~5000"), reps)
        res["list_first_ms"], res["list_ms"], _ = await _timed(lambda: s.list("/"), reps)
        await _list_in_transaction(s, reps, res, checks)
    finally:
        s.close()


async def _list_in_transaction(s, reps: int, res: dict, checks: list) -> None:
    lat = []
    try:
        async with s.transaction(message="bench: staged, rolled back"):
            await s.write("/staged/x.md", "staged\n")
            for _ in range(reps + 1):
                a = perf()
                got = await s.list("/")
                lat.append(perf() - a)
            raise _Rollback
    except _Rollback:
        pass
    res["list_txn_first_ms"] = lat[0] * 1e3
    res["list_txn_ms"] = _ms(lat[1:])
    if "staged/" not in got or "d00/" not in got:
        checks.append(f"hquery: list('/') in a transaction returned {got[:5]!r}...")


async def hfile(h, cfg, res):
    """log / history / blame of one file with n versions, and a read of an old version."""
    n, reps = cfg["build_n"], cfg["hs_reps"]
    s = _open_built(cfg, res)
    checks = res.setdefault("check_failures", [])
    try:
        a = perf()
        commits = await s.log(W1_PATH)
        res["log_first_ms"] = (perf() - a) * 1e3
        # log() may hand back commits decoded on first read: what a caller that shows
        # them pays (memrev log, the viewer) is log + every field read, timed apart.
        a = perf()
        shown = [c.to_json() for c in commits]
        res["log_fields_first_ms"] = (perf() - a) * 1e3
        if len(shown) != n or any(not j["message"] for j in shown):
            checks.append("hfile: a commit of log(path) has no message")
        _, res["log_ms"], _ = await _timed(lambda: s.log(W1_PATH), reps)
        if len(commits) != n:
            checks.append(f"hfile: log(path) has {len(commits)} commits, expected {n}")
        res["history_first_ms"], res["history_ms"], got = await _timed(lambda: s.history(W1_PATH), reps)
        if len(got) != n:
            checks.append(f"hfile: history(path) has {len(got)} entries, expected {n}")
        res["blame_first_ms"], res["blame_ms"], got = await _timed(lambda: s.blame(W1_PATH), reps)
        if len(got) != 50:
            checks.append(f"hfile: blame(path) has {len(got)} lines, expected 50")
        back = min(n - 1, n * 4 // 5)
        old = commits[back].id
        res["old_read_first_ms"], res["old_read_ms"], got = await _timed(lambda: s.read(W1_PATH, rev=old), max(reps, 21))
        if got != data.working_md_versions(n)[n - 1 - back]:
            checks.append("hfile: read of an old version returned the wrong text")
    finally:
        s.close()


def count_objects(folder: Path) -> int:
    """Rows in the object tables (blobs, trees, commits) of a SQLite store, read-only."""
    from memrev.backends import folder_store_file

    db = folder_store_file(folder)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("blobs", "trees", "commits") if t in have)
    finally:
        conn.close()


async def hfsck(h, cfg, res):
    s = _open_built(cfg, res)
    try:
        a = perf()
        problems = await s.fsck()
        res["fsck_s"] = perf() - a
    finally:
        s.close()
    res["objects"] = count_objects(Path(cfg["store_dir"]))
    res["disk_bytes"] = disk_usage([Path(cfg["store_dir"])])[0]
    res["objects_per_s"] = res["objects"] / res["fsck_s"]
    if problems:
        res.setdefault("check_failures", []).append(f"hfsck: fsck found {len(problems)} problems: {problems[:3]}")


async def hgc(h, cfg, res):
    """gc on a copy of the cached store (gc may repack; the cache stays as built)."""
    from memrev import VersionedStore

    copy = Path(cfg["workdir"]) / "gc-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(cfg["store_dir"], copy)
    s = VersionedStore(str(copy), create=False)
    try:
        a = perf()
        res["gc_result"] = await s.gc()
        res["gc_s"] = perf() - a
    finally:
        s.close()
        res["disk_after_gc_bytes"] = disk_usage([copy])[0]
        shutil.rmtree(copy, ignore_errors=True)


# --------------------------------------------------------------------------- CLI start


async def cli(h, cfg, res):
    """Median wall time of `memrev --help` and `memrev log -n 5`, a fresh interpreter each run.

    bench/cli_start.py (issue 10's own measurement: the quick-start store, interleaved
    rounds) when this checkout has it; else the same commands on a 2-commit store."""
    await h.store.write("/notes/a.md", "one\n")
    await h.store.write("/notes/a.md", "two\n")
    h.close()
    try:
        import cli_start
    except ImportError:
        cli_start = None
    if cli_start is not None:
        got = cli_start.measure(None, cfg["cli_runs"])
        res["cli_help_ms"], res["cli_log_ms"] = got["memrev --help"], got["memrev log -n 5"]
        res["cli_floor_ms"] = got.get("python -c pass")
        res["cli_command"] = " ".join(cli_start.memrev_command())
        res["cli_how"] = "bench/cli_start.py: the quick-start store, interleaved rounds"
        return
    folder = str(Path(cfg["workdir"]) / "memrev")
    exe = shutil.which("memrev")
    base = [exe] if exe else [sys.executable, "-m", "memrev.cli"]
    for key, args in (("help", ["--help"]), ("log", ["--store", folder, "log", "-n", "5"])):
        lat = []
        for _ in range(cfg["cli_runs"]):
            a = perf()
            p = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
            lat.append(perf() - a)
            if p.returncode != 0:
                raise OpError(f"memrev {' '.join(args)}: exit {p.returncode}: {p.stderr[-800:]}")
        res[f"cli_{key}_ms"] = _ms(lat)
    res["cli_command"] = " ".join(base)
    res["cli_how"] = "bench/speed.py: a 2-commit store"


WORKLOADS = {
    "floor": floor,
    "writers": writers,
    "hbuild": hbuild,
    "hquery": hquery,
    "hfile": hfile,
    "hfsck": hfsck,
    "hgc": hgc,
    "cli": cli,
}
# workloads that open no store of their own in child.py (they open the built store themselves)
NO_STORE = {"hbuild", "hquery", "hfile", "hfsck", "hgc"}


def maxrss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
