"""Issue 26: many writers, long runs — every row of its table, before and after, side by side.

    python bench/run.py --long-runs [--before-src DIR] [--quick] [--workdir W --keep] [--out FILE]
    python bench/long_runs.py --rows 1,7 [the same options]     # only some rows (the others say "not run")

Each measurement is a fresh ``bench/long_child.py`` process. With ``--before-src DIR``
(the ``src`` folder of an older memrev) every one runs twice, once with
``PYTHONPATH=DIR`` (*before*) and once with this checkout's ``src`` (*after*), the
order alternating; each compares against its floor or peer inside the same process
(or, for writers, against the 1-writer case of the same side, run beside it).
Repetitions of the cheap rows are interleaved; medians with min-max (over
repetitions) or p10-p90 (over calls). PostgreSQL rows use one throwaway server
(bench/pgserver.py) and a fresh database per measurement.

The section ``## Many writers, long runs (issue 26)`` of the report file
(docs/benchmarks.md) is replaced (appended the first time); every other section
stays. ``MEMREV_LONG_RUNS_TINY=1`` shrinks ``--quick`` to a few writes per row
(tests/test_bench_harness.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import cli_start  # noqa: E402
import data  # noqa: E402
import pgserver  # noqa: E402
from fmt import f_bytes, f_ms, f_rate, table  # noqa: E402

HEADING = "## Many writers, long runs (issue 26)"
AFTER_SRC = ROOT / "src"

FULL = dict(reps=3, procs_k=600, procs_k_pg=200, tasks_k=1000, append_n=2000, append_n_pg=500, floor_n=1000,
            lat_n=20_000, total=30_000, rss_every=1000, wal_every=50, fsck_sizes=[1_000, 10_000, 100_000],
            disk_n=1000, cli_runs=7, timeout=900, build_timeout=2400)
QUICK = dict(FULL, reps=1, procs_k=200, procs_k_pg=60, tasks_k=200, append_n=400, append_n_pg=100, floor_n=300,
             lat_n=3_000, total=5_000, rss_every=1000, fsck_sizes=[1_000, 5_000], cli_runs=3, timeout=300,
             build_timeout=600)
TINY = dict(QUICK, procs_k=4, procs_k_pg=4, tasks_k=4, append_n=6, append_n_pg=4, floor_n=4, lat_n=30, total=40,
            rss_every=10, wal_every=5, fsck_sizes=[20, 40], disk_n=12, cli_runs=1, timeout=120, build_timeout=120)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def src_hash(src: Path) -> str:
    """sha256 of a memrev source tree's .py files: the key of its cached stores."""
    h = hashlib.sha256()
    for f in sorted((src / "memrev").rglob("*.py")):
        h.update(str(f.relative_to(src)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def side_env(src: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("MEMREV_STORE", None)
    return env


# --------------------------------------------------------------------------- running children


class Runner:
    """Runs jobs in fresh children, one side at a time, and keeps every result."""

    def __init__(self, sides: dict[str, Path], base: Path, P: dict, pg_url: str | None, pg_note: str = "") -> None:
        self.sides, self.base, self.P, self.pg_url, self.pg_note = sides, base, P, pg_url, pg_note
        self.results: list[dict] = []
        self.turn = 0
        self.t0 = time.perf_counter()

    def order(self) -> list[str]:
        """The sides, the first one alternating from call to call."""
        names = list(self.sides)
        self.turn += 1
        k = self.turn % len(names)
        return names[k:] + names[:k]

    def run(self, side: str, job: str, case: str, rep: int, cfg: dict, timeout: float | None = None,
            pg: bool = False, keep: bool = False) -> dict:
        tag = f"{side}-{case}-r{rep}"
        wd = self.base / tag
        wd.mkdir(parents=True, exist_ok=True)
        out = wd / "result.json"
        cfg = dict(cfg, job=job, workdir=str(wd), out=str(out), timeout=timeout or self.P["timeout"])
        res: dict = {"side": side, "job": job, "case": case, "rep": rep, "ok": False}
        db = None
        try:
            if pg:
                if self.pg_url is None:
                    raise RuntimeError(f"PostgreSQL {self.pg_note}")
                db = "l26_" + tag
                cfg["location"] = pgserver.create_database(db)
            cfg.setdefault("location", str(wd / "store"))
            a = time.perf_counter()
            with open(wd / "stderr", "w") as err:
                p = subprocess.run([sys.executable, str(HERE / "long_child.py"), json.dumps(cfg)], env=side_env(self.sides[side]),
                                   cwd=str(wd), stdout=subprocess.DEVNULL, stderr=err, timeout=cfg["timeout"])
            try:
                res.update(json.loads(out.read_text()))
            except (OSError, ValueError):
                res["error"] = f"child exited {p.returncode} without a result: {(wd / 'stderr').read_text()[-600:]}"
            res["wall_s"] = time.perf_counter() - a
        except subprocess.TimeoutExpired:
            res["error"] = f"timeout: child killed after {cfg['timeout']:.0f} s"
        except Exception as e:  # noqa: BLE001 - shown in the report's cell
            res["error"] = f"{type(e).__name__}: {e}"[:600]
        finally:
            if db is not None:
                try:
                    pgserver.drop_database(db)
                except Exception:  # noqa: BLE001 - the server is thrown away at the end
                    pass
            if not keep:
                shutil.rmtree(wd, ignore_errors=True)
        res.update(side=side, job=job, case=case, rep=rep)
        self.results.append(res)
        status = "ok" if res.get("ok") else f"ERROR {res.get('error')}"
        fails = res.get("check_failures")
        log(f"[{time.perf_counter() - self.t0:7.1f}s] {side:6s} {case:18s} r{rep} {res.get('wall_s', 0):6.1f}s {status}"
            + (f" CHECK FAILED {fails}" if fails else ""))
        return res


ROW_JOBS = {"procs": 1, "tasks": 2, "append": 3, "floor": 4, "long_run": 5, "fsck": 7, "disk": 8}


def run_all(r: Runner, cache: Path, rows: set[int] = frozenset(range(1, 10))) -> None:
    """Every measurement of the rows asked for (5 and 6 share one run; 8 and 9 also run in main)."""
    P = r.P
    cases = [("procs", f"procs-sqlite-{n}", dict(writers=n, k=P["procs_k"]), False) for n in (1, 4)]
    cases += [("procs", f"procs-pg-{n}", dict(writers=n, k=P["procs_k_pg"]), True) for n in (1, 4, 8)]
    cases += [("tasks", "tasks", dict(k=P["tasks_k"]), False),
              ("append", "append-sqlite", dict(n=P["append_n"], peer="disk"), False),
              ("append", "append-pg", dict(n=P["append_n_pg"], peer="insert"), True),
              ("floor", "floor", dict(n=P["floor_n"]), False)]
    cases = [c for c in cases if ROW_JOBS[c[0]] in rows]
    for rep in range(P["reps"] if cases else 0):
        for job, case, cfg, pg in cases[rep % len(cases):] + cases[:rep % len(cases)]:
            for side in r.order():
                if job == "tasks":
                    cfg = dict(cfg, order=[1, 4] if (rep + r.turn) % 2 else [4, 1])
                r.run(side, job, case, rep, cfg, pg=pg)
    for side in r.order() if rows & {5, 6} else ():
        r.run(side, "long_run", "long-run", 0, dict(total=P["total"], lat_n=P["lat_n"], rss_every=P["rss_every"],
                                                    wal_every=P["wal_every"]))
    for n in P["fsck_sizes"] if 7 in rows else ():
        first = next(iter(r.sides))
        shared = cache / f"{first}-{src_hash(r.sides[first])}-spread-{n}"
        if P.get("one_build"):  # built once, by the first side, before either side checks it
            built = r.run(first, "build", f"build-{n}", 0, dict(n=n, store_dir=str(shared)), timeout=P["build_timeout"])
            r.results += [dict(built, side=other, shared_with=first) for other in r.sides if other != first]
        for side in r.order():
            store_dir = shared if P.get("one_build") else cache / f"{side}-{src_hash(r.sides[side])}-spread-{n}"
            b = built if P.get("one_build") else r.run(
                side, "build", f"build-{n}", 0, dict(n=n, store_dir=str(store_dir)), timeout=P["build_timeout"])
            if not b.get("ok"):
                continue
            r.run(side, "fsck", f"fsck-{n}", 0, dict(store_dir=str(store_dir), n=n), timeout=P["build_timeout"])
            r.run(side, "gc", f"gc-{n}", 0, dict(store_dir=str(store_dir), n=n), timeout=P["build_timeout"])
    for side in r.order() if 8 in rows else ():
        r.run(side, "disk", "disk", 0, dict(n=P["disk_n"]))


# --------------------------------------------------------------------------- parent-side rows: git, CLI


def git_bytes(n: int, base: Path) -> dict:
    """W1's n versions as n commits of a git repo (git fast-import), then ``git gc``: bytes of objects + refs."""
    repo = base / "git-peer"
    shutil.rmtree(repo, ignore_errors=True)
    try:
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        stream = []
        for i, v in enumerate(data.working_md_versions(n)):
            body, msg = v.encode(), f"edit {i}".encode()
            stream += [b"commit refs/heads/main\n", f"committer bench <bench@example.org> {1_700_000_000 + i} +0000\n".encode(),
                       b"data %d\n%s\n" % (len(msg), msg), b"M 100644 inline memory/working.md\n", b"data %d\n%s\n" % (len(body), body)]
        subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=b"".join(stream), check=True)
        subprocess.run(["git", "-C", str(repo), "gc", "--quiet"], check=True)
        g = repo / ".git"
        size = sum(f.stat().st_size for d in (g / "objects", g / "refs") for f in d.rglob("*") if f.is_file())
        size += (g / "packed-refs").stat().st_size if (g / "packed-refs").exists() else 0
        count = subprocess.run(["git", "-C", str(repo), "rev-list", "--count", "main"], capture_output=True, text=True)
        return {"ok": True, "bytes": size, "commits": int(count.stdout.strip() or 0)}
    except Exception as e:  # noqa: BLE001 - shown in the report's cell
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def cli_times(sides: dict[str, Path], runs: int, base: Path) -> dict:
    """``python -m memrev.cli --store S --no-pager log -n 5`` per side (S: the quick-start store built by
    that side), interleaved with ``python -c pass``, a warm-up round first; medians over ``runs``."""
    out: dict = {"runs": runs}
    cmds = {"python -c pass": ([sys.executable, "-c", "pass"], side_env(AFTER_SRC))}
    for side, src in sides.items():
        store = base / f"quickstart-{side}"
        try:
            subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), str(store)], env=side_env(src),
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
            cmds[side] = ([sys.executable, "-m", "memrev.cli", "--store", str(store), "--no-pager", "log", "-n", "5"],
                          side_env(src))
        except Exception as e:  # noqa: BLE001 - shown in the report's cell
            out[f"{side}_error"] = f"building the quick-start store: {e}"[:300]
    for src in sides.values():
        # What pip does when it installs a package: every module compiled once. Without it, a
        # machine with PYTHONDONTWRITEBYTECODE set (this one) times compiling memrev at every start.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    names = list(cmds)
    for rnd in range(runs + 1):
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            if name in out.get("failed", ()):
                continue
            try:
                ms = cli_start._wall_ms(*cmds[name])
            except Exception as e:  # noqa: BLE001
                out[f"{name}_error"] = f"{e}"[:300]
                out.setdefault("failed", []).append(name)
                continue
            if rnd:
                times[name].append(ms)
    for name, ts in times.items():
        if ts:
            out[f"{name}_ms"] = statistics.median(ts)
            out[f"{name}_range"] = (min(ts), max(ts))
    return out


# --------------------------------------------------------------------------- the report


def ok(R: list[dict], side: str, case: str) -> list[dict]:
    return [x for x in R if x["side"] == side and x["case"] == case and x.get("ok")]


def failure(R: list[dict], side: str, case: str) -> str | None:
    bad = [x for x in R if x["side"] == side and x["case"] == case and not x.get("ok")]
    if bad:
        return bad[0].get("error", "failed")
    if not any(x["side"] == side and x["case"] == case for x in R):
        return "not run"
    return None


def esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")[:160]


def f2(x: float) -> str:
    return f"{x:.2f}"


def med_range(xs: list[float], f=f2) -> str:
    if not xs:
        return "—"
    m = f(statistics.median(xs))
    return m if len(xs) == 1 else f"{m} ({f(min(xs))}–{f(max(xs))})"


def rate(x: float) -> str:
    return f"{f_rate(x)}/s"


def us(x: float) -> str:
    return f"{x * 1e3:,.0f} µs" if x >= 0.1 else f"{x * 1e3:.1f} µs"


class Side:
    """One side's cell of a row: value, peer, ratio, the numbers the targets read, an error."""

    def __init__(self, value="—", peer="—", ratio: list[float] | None = None, measure: dict | None = None,
                 error: str | None = None) -> None:
        self.value, self.peer, self.ratio, self.measure, self.error = value, peer, ratio or [], measure or {}, error


def writers_side(R, side, case1, caseN) -> Side:
    err = failure(R, side, case1) or failure(R, side, caseN)
    one, many = ok(R, side, case1), ok(R, side, caseN)
    if not one or not many:
        return Side(error=err)
    by1 = {x["rep"]: x["commits_per_s"] for x in one}
    ratios = [x["commits_per_s"] / by1[x["rep"]] for x in many if x["rep"] in by1]
    ms = lambda rs: f_ms(statistics.median(x["commit_ms_median"] for x in rs))  # noqa: E731
    return Side(value=f"{med_range([x['commits_per_s'] for x in many], f_rate)}/s, {ms(many)} ms",
                peer=f"{med_range([x['commits_per_s'] for x in one], f_rate)}/s, {ms(one)} ms", ratio=ratios,
                measure={"ratio": statistics.median(ratios)}, error=err)


def tasks_side(R, side) -> Side:
    rs = ok(R, side, "tasks")
    if not rs:
        return Side(error=failure(R, side, "tasks"))
    ratios = [x["commits_per_s_4"] / x["commits_per_s_1"] for x in rs]
    return Side(value=f"{med_range([x['commits_per_s_4'] for x in rs], f_rate)}/s, "
                      f"{f_ms(statistics.median(x['commit_ms_median_4'] for x in rs))} ms",
                peer=f"{med_range([x['commits_per_s_1'] for x in rs], f_rate)}/s, "
                     f"{f_ms(statistics.median(x['commit_ms_median_1'] for x in rs))} ms",
                ratio=ratios, measure={"ratio": statistics.median(ratios)})


def lat_cell(rs, key) -> str:
    xs = [x[key] for x in rs]
    m = statistics.median(d["median_ms"] for d in xs)
    return f"{us(m)} (p10 {us(statistics.median(d['p10_ms'] for d in xs))}–p90 {us(statistics.median(d['p90_ms'] for d in xs))})"


def append_side(R, side, case) -> Side:
    rs = ok(R, side, case)
    if not rs:
        return Side(error=failure(R, side, case))
    ratios = [x["ratio"] for x in rs]
    return Side(value=lat_cell(rs, "memrev"), peer=lat_cell(rs, "peer"), ratio=ratios,
                measure={"ratio": statistics.median(ratios)})


def floor_side(R, side) -> Side:
    rs = ok(R, side, "floor")
    if not rs:
        return Side(error=failure(R, side, "floor"))
    ratios = [x["ratio"] for x in rs]
    return Side(value=f"{med_range([x['memrev_ms'] for x in rs], f_ms)} ms", peer=f"{med_range([x['floor_ms'] for x in rs], f_ms)} ms",
                ratio=ratios, measure={"ratio": statistics.median(ratios)})


def long_side(R, side, what: str) -> Side:
    rs = ok(R, side, "long-run")
    if not rs:
        return Side(error=failure(R, side, "long-run"))
    x = rs[0]
    if what == "latency":
        return Side(value=f"mean {f_ms(x['mean_ms'])} · median {f_ms(x['median_ms'])} · p99 {f_ms(x['p99_ms'])} · "
                          f"max {f_ms(x['max_ms'])} ms", ratio=[x["mean_over_median"]], measure={"ratio": x["mean_over_median"]},
                    peer="—" if "floor_mean_over_median" not in x else
                    f"bare txn's mean / median {x['floor_mean_over_median']:.2f}")
    if what == "wal":
        return Side(value=f"WAL max {f_bytes(x['wal_max_bytes'])}", peer=f"db {f_bytes(x['db_open_bytes'])}",
                    ratio=[x["wal_max_bytes"] / max(1, x["db_open_bytes"])], measure={"bytes": x["wal_max_bytes"]})
    k = x["rss_every"]
    rss = x["rss_kb"]
    return Side(value=f"{rss[0] / 1024:.0f} MB @ {k:,} → {rss[-1] / 1024:.0f} MB @ {k * len(rss):,}",
                peer=f"growth {x['growth_kb'] / 1024:+.1f} MB", measure={"mb": x["growth_kb"] / 1024})


def fsck_side(R, side, sizes, what: str) -> Side:
    job = "gc" if what == "gc" else "fsck"
    got = {n: ok(R, side, f"{job}-{n}") for n in sizes}
    errs = [failure(R, side, f"build-{n}") or failure(R, side, f"{job}-{n}") for n in sizes]
    err = next((e for e in errs if e), None)
    have = [n for n in sizes if got[n]]
    if not have:
        return Side(error=err)
    lo, hi = have[0], have[-1]
    short = lambda n: f"{n // 1000}k" if n >= 1000 else str(n)  # noqa: E731
    if what == "gc":
        secs = " · ".join(f"{short(n)} {got[n][0]['gc_s']:.2f} s" for n in have)
        r = (got[hi][0]["gc_s"] / hi) / (got[lo][0]["gc_s"] / lo) if hi != lo else None
        return Side(value=secs, ratio=[r] if r else [], measure={}, error=err)
    if what == "rss":
        x = got[hi][0]
        return Side(value=f"{x['peak_rss_kb'] / 1024:.0f} MB @ {short(hi)}", peer=f"{x['rss_before_kb'] / 1024:.0f} MB before fsck",
                    measure={"mb": x["peak_rss_kb"] / 1024}, error=err)
    secs = " · ".join(f"{short(n)} {got[n][0]['fsck_s']:.2f} s" for n in have)
    unit = "object" if all("us_per_object" in got[n][0] for n in have) else "commit"  # objects not countable: per commit
    per = " · ".join(f"{got[n][0]['us_per_' + unit]:.1f}" for n in have)
    objs = " · ".join(f"{got[n][0]['objects']:,}" if "objects" in got[n][0] else "?" for n in have)
    r = got[hi][0]["us_per_" + unit] / got[lo][0]["us_per_" + unit] if hi != lo else None
    note = next((got[n][0]["objects_error"] for n in have if "objects_error" in got[n][0]), None)
    return Side(value=f"{secs}; µs/{unit} {per}", peer=f"objects {objs}" + (f" ({esc(note)})" if note else ""),
                ratio=[r] if r else [], measure={"ratio": r} if r else {}, error=err)


def disk_side(R, side, git: dict, key: str) -> Side:
    rs = ok(R, side, "disk")
    if not rs:
        return Side(error=failure(R, side, "disk"))
    b = rs[0][key]
    g = git.get("bytes") if git.get("ok") else None
    return Side(value=f_bytes(b), peer=f"git gc {f_bytes(g)}" if g else f"git: {git.get('error')}",
                ratio=[b / g] if g else [], measure={"ratio": b / g if g else None, "bytes": b})


def cli_side(cli: dict, side: str) -> Side:
    ms = cli.get(f"{side}_ms")
    if ms is None:
        return Side(error=cli.get(f"{side}_error", "not run"))
    floor = cli.get("python -c pass_ms")
    lo, hi = cli[f"{side}_range"]
    return Side(value=f"{f_ms(ms)} ms ({f_ms(lo)}–{f_ms(hi)})", peer=f"python -c pass {f_ms(floor)} ms" if floor else "—",
                ratio=[ms / floor] if floor else [], measure={"ms": ms})


ROW_TARGETS = {  # key in Side.measure, op, threshold, how the target is written
    "ge1": [("ratio", ">=", 1.0, "≥ 1×")], "ge2": [("ratio", ">=", 2.0, "≥ 2×")], "ge3": [("ratio", ">=", 3.0, "≥ 3×")],
    "le1.5": [("ratio", "<=", 1.5, "≤ 1.5×")], "le2": [("ratio", "<=", 2.0, "≤ 2×")], "le3": [("ratio", "<=", 3.0, "≤ 3×")],
    "le1.3": [("ratio", "<=", 1.3, "≤ 1.3")], "wal": [("bytes", "<=", 4e6, "≤ 4 MB")], "rss": [("mb", "<=", 10.0, "≤ +10 MB")],
    "rss100": [("mb", "<=", 100.0, "≤ 100 MB")],
    "disk": [("ratio", "<=", 1.0, "≤ 1× git gc"), ("bytes", "<=", 300e3, "≤ 300 KB")], "cli": [("ms", "<=", 150.0, "≤ 150 ms")],
    "none": [],
}


def met(s: Side, targets) -> str:
    if s.error and not s.measure:
        return "no data"
    out = []
    for key, op, thr, _label in targets:
        v = s.measure.get(key)
        if v is None:
            out.append("no data")
        else:
            out.append("yes" if (v >= thr if op == ">=" else v <= thr) else "no")
    return " · ".join(out) if out else "—"


def checks_failed(R: list[dict], side: str, prefix: str) -> bool:
    return any(x["side"] == side and x["case"].startswith(prefix) and x.get("check_failures") for x in R)


def row_line(label: str, sides: dict[str, Side], target: str, R: list[dict] = (), cases: str = "~") -> list[str]:
    """One line of the table; ``cases``: the prefix of the cases it reads (a failed check marks the cell)."""
    b, a = sides.get("before"), sides["after"]
    targets = ROW_TARGETS[target]
    name = {id(s): n for n, s in sides.items()}

    def val(s: Side | None) -> str:
        if s is None:
            return "—"
        flag = " **(check failed: see Problems)**" if checks_failed(list(R), name[id(s)], cases) else ""
        if s.error == "not run":
            return "not run"
        if s.error and s.value == "—":
            return f"error: {esc(s.error)}{flag}"
        return s.value + (f" (error: {esc(s.error)})" if s.error else "") + flag

    peer = a.peer if b is None else (a.peer if b.peer == a.peer else f"b: {b.peer} · a: {a.peer}")
    rb = med_range(b.ratio) if b is not None else "—"
    t = " · ".join(x[3] for x in targets) or "—"
    m = met(a, targets) + (f" (before: {met(b, targets)})" if b is not None and targets else "")
    return [label, val(b), val(a), peer, rb, med_range(a.ratio), t, m]


def build_rows(R: list[dict], P: dict, git: dict, cli: dict, sides: list[str]) -> list[list[str]]:
    sizes = P["fsck_sizes"]
    big = f"{sizes[-1] // 1000}k" if sizes[-1] >= 1000 else str(sizes[-1])
    small = f"{sizes[0] // 1000}k" if sizes[0] >= 1000 else str(sizes[0])
    specs = [  # label, one side's cell, target, prefix of the cases it reads
        ("1 · 4 writer processes vs 1, SQLite (commits/s, median commit)",
         lambda s: writers_side(R, s, "procs-sqlite-1", "procs-sqlite-4"), "ge1", "procs-sqlite"),
        ("1 · 4 writer processes vs 1, PostgreSQL", lambda s: writers_side(R, s, "procs-pg-1", "procs-pg-4"), "ge2", "procs-pg"),
        ("1 · 8 writer processes vs 1, PostgreSQL", lambda s: writers_side(R, s, "procs-pg-1", "procs-pg-8"), "ge3", "procs-pg"),
        ("2 · 4 asyncio tasks vs 1, one handle, SQLite", lambda s: tasks_side(R, s), "ge1", "tasks"),
        ("3 · append 120 B vs `DiskKnowledgeStore.append` (median, p10–p90)", lambda s: append_side(R, s, "append-sqlite"),
         "le1.5", "append-sqlite"),
        ("3 · append 120 B on PostgreSQL vs a bare autocommit `INSERT`", lambda s: append_side(R, s, "append-pg"), "le2", "append-pg"),
        ("4 · write 2 KB vs bare SQLite `BEGIN; INSERT; COMMIT`", lambda s: floor_side(R, s), "le3", "floor"),
        (f"5 · {P['lat_n']:,} writes: mean / median", lambda s: long_side(R, s, "latency"), "le1.3", "long-run"),
        ("5 · largest `-wal` while open vs the database", lambda s: long_side(R, s, "wal"), "wal", "~"),
        (f"6 · RSS of one process, {P['total']:,} commits", lambda s: long_side(R, s, "rss"), "rss", "~"),
        (f"7 · fsck, per object {big} / {small}", lambda s: fsck_side(R, s, sizes, "fsck"), "le1.5", "fsck"),
        (f"7 · fsck peak RSS at {big}", lambda s: fsck_side(R, s, sizes, "rss"), "rss100", "~"),
        (f"7 · gc seconds (ratio: per commit {big} / {small})", lambda s: fsck_side(R, s, sizes, "gc"), "none", "gc"),
        (f"8 · bytes after {P['disk_n']:,} small edits, closed", lambda s: disk_side(R, s, git, "closed_bytes"), "disk", "disk"),
        (f"8 · bytes after {P['disk_n']:,} small edits, after gc", lambda s: disk_side(R, s, git, "gc_bytes"), "disk", "~"),
        ("9 · `memrev log -n 5` start to exit", lambda s: cli_side(cli, s), "cli", "~"),
    ]
    rows = []
    for label, cell, target, cases in specs:
        cells = {}
        for side in sides:
            try:
                cells[side] = cell(side)
            except Exception as e:  # noqa: BLE001 - a result the report cannot read is shown, never a crash
                cells[side] = Side(error=f"report: {type(e).__name__}: {e}")
        rows.append(row_line(label, cells, target, R, cases))
    return rows


def rss_curves(R: list[dict], sides: list[str]) -> list[str]:
    out = []
    for side in sides:
        rs = ok(R, side, "long-run")
        if rs:
            x = rs[0]
            out.append(f"- RSS curve, {side} (MB every {x['rss_every']:,} commits): "
                       + " ".join(f"{k / 1024:.0f}" for k in x["rss_kb"]))
    return out


def problems(R: list[dict]) -> list[str]:
    out = []
    for x in R:
        for c in x.get("check_failures") or []:
            out.append(f"- {x['side']} {x['case']} r{x['rep']}: wrong answer: {c}")
        if not x.get("ok"):
            out.append(f"- {x['side']} {x['case']} r{x['rep']}: {esc(x.get('error', '?'))}")
    return out


def machine() -> dict:
    info = {"nproc": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()}
    try:
        info["cpu"] = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                           if ln.startswith("model name"))
        kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal:"))
        info["ram"] = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration):
        pass
    return info


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def section(R, P, git, cli, sides: dict[str, Path], meta: dict) -> str:
    names = list(sides)
    m = meta["machine"]
    L = [HEADING, ""]
    if meta["quick"]:
        L += ["> **Smoke run (`--quick`)**: reduced sizes, one repetition; not comparable with the full run.", ""]
    L += [
        f"- **Command:** `{meta['command']}`",
        f"- **Date:** {meta['started']} (UTC), run time {meta['elapsed_s'] / 60:.1f} min",
        f"- **Machine:** {m.get('nproc')} CPUs, {m.get('cpu', '?')}, RAM {m.get('ram', '?')}, Linux {m.get('kernel')}, "
        f"Python {m.get('python')}; load average (1/5/15 min) at start {meta['load_start']}, at end {meta['load_end']} "
        "(other jobs share this machine)",
        "- **Sides:** " + "; ".join(f"*{s}* = `PYTHONPATH={p}` (memrev {meta['src_hash'][s]})" for s, p in sides.items()),
        f"- **PostgreSQL:** {meta.get('pg', 'not available')}",
        "",
        "Every cell is measured in a fresh process (`bench/long_child.py`) with that side's `src` first on the path; "
        "the two sides alternate which goes first, and each measures its own floor or peer in the same process "
        "(writers: beside the 1-writer case of the same side, in the same repetition). "
        f"Repetitions of rows 1–4: {P['reps']} (median, min–max in brackets); rows 5–9 once (spread over calls). "
        "*ratio* = the measured case over its floor or peer; *met* reads the *after* ratio or value (before's in brackets).",
        "",
        table(["row", "before", "after", "floor / peer", "ratio before", "ratio after", "target", "met"], build_rows(R, P, git, cli, names)),
        "",
        "How each row is measured:",
        "",
        f"- **1**: N writer processes (`memrev.store.Store`, default durability), each writing {P['procs_k']:,} "
        f"(PostgreSQL: {P['procs_k_pg']:,}) distinct paths `/w/p<N>/k<i>.json` of 300 bytes on one branch; all open "
        "the store, then start on a signal; commits/s = all commits / (last end − first start); afterwards (not timed) "
        "the log must hold every commit. Cell: commits/s, median commit.",
        f"- **2**: 1 task, then 4 tasks (order alternating) on one handle, {P['tasks_k']:,} distinct paths each, fresh store each.",
        f"- **3**: {P['append_n']:,} (PostgreSQL: {P['append_n_pg']:,}) appends of a 120-byte line to `/log/run.jsonl`, "
        "each paired with the peer's (ag2 `DiskKnowledgeStore.append`; PostgreSQL: one autocommit `INSERT` over psycopg, "
        "same server), order alternating; the offsets and the file read back are checked.",
        f"- **4**: bench/speed.py's floor (`speed.floor`): W1's {P['floor_n']:,} writes of the 2 KB file paired with a bare "
        "SQLite WAL `BEGIN; INSERT; COMMIT` (synchronous=NORMAL), ratio of medians.",
        f"- **5, 6**: one process writes {P['total']:,} W1-style edits (2 of ~50 lines of a 2 KB file, 100 paths "
        f"`/mem/p<i%100>.md`) through the async `Store`; latency of the first {P['lat_n']:,}, each paired with a bare "
        "SQLite WAL `BEGIN; INSERT; COMMIT` of the same bytes in the same process (order alternating; its mean / median "
        f"is the row's peer: what this machine's disk and scheduler alone give); `-wal` size every "
        f"{P['wal_every']} writes; VmRSS every {P['rss_every']:,} commits.",
        f"- **7**: bench/speed.py's history-at-scale stores (`speed.build_store('spread', n)`) at {', '.join(f'{n:,}' for n in P['fsck_sizes'])} "
        "commits, built once per side (cached under `--workdir` with `--keep`, keyed by the side's source hash; "
        + ("with `--one-build`, as here, built once by the first side and checked by both: the schema is the same); fsck "
           if P.get("one_build") else "); fsck ")
        + "through `Store.fsck` in its own process (peak RSS = its `ru_maxrss`; objects = rows of blobs, trees, commits); "
        "gc on a copy (`speed.hgc`).",
        f"- **8**: W1's {P['disk_n']:,} versions of `/memory/working.md` (2–3 of ~50 lines change each), store closed; "
        "then `gc()` and closed again; git: the same versions as commits (`git fast-import`, then `git gc`), bytes of "
        "`.git/objects` + refs.",
        f"- **9**: `python -m memrev.cli --store S --no-pager log -n 5` on the quick-start store S built by the same side, "
        f"median of {cli.get('runs')} runs interleaved with `python -c pass` after a warm-up round, each side's `src` compiled first "
        "(`compileall`, as `pip install` does: this machine sets PYTHONDONTWRITEBYTECODE). Both sides run "
        "`python -m memrev.cli` (not the console script) so both pay the same entry cost.",
        "- `python bench/long_runs.py --rows 1,7 ...` measures only some rows; with `--workdir W --keep` row 7's "
        "stores are cached in `W/memrev-long-cache` and reused by the next run of the same source.",
        "",
    ]
    L += rss_curves(R, names)
    probs = problems(R)
    L += ["", "Problems: " + ("none (every child finished and every check passed)." if not probs else ""), *probs, ""]
    return "\n".join(L)


def put_section(out: Path, text: str) -> None:
    """Replace this section of ``out`` (or append it); every other section stays as it is."""
    old = out.read_text() if out.exists() else "# memrev benchmarks\n"
    at = old.find("\n" + HEADING + "\n")
    if at < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = old.find("\n## ", at + 1)
        new = old[:at + 1] + text + (old[end:] if end >= 0 else "")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(new.rstrip("\n") + "\n")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-src", help="the src folder of an older memrev: the *before* side")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true", help="keep the built fsck stores in WORKDIR/memrev-long-cache")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--rows", help="only these rows of the table, e.g. 1,7 (the others show 'not run')")
    ap.add_argument("--one-build", action="store_true",
                    help="row 7: both sides check the same stores, built once by the first side (same schema)")
    ap.add_argument("--command", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    tiny = args.quick and os.environ.get("MEMREV_LONG_RUNS_TINY") == "1"
    P = dict(TINY if tiny else QUICK if args.quick else FULL)
    sides: dict[str, Path] = {}
    if args.before_src:
        sides["before"] = Path(args.before_src).resolve()
        if not (sides["before"] / "memrev" / "__init__.py").exists():
            raise SystemExit(f"--before-src {args.before_src}: no memrev/__init__.py in it")
    sides["after"] = AFTER_SRC
    meta = {"quick": args.quick, "machine": machine(), "load_start": loadavg(),
            "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "command": args.command or "python bench/long_runs.py " + " ".join(argv or sys.argv[1:]),
            "src_hash": {s: src_hash(p) for s, p in sides.items()}}
    base = Path(tempfile.mkdtemp(prefix="memrev-long-", dir=args.workdir))
    cache = (Path(args.workdir or tempfile.gettempdir()) / "memrev-long-cache") if args.keep else base / "cache"
    t0 = time.perf_counter()
    server = None
    try:
        reason = pgserver.unavailable_reason()
        if reason is None:
            try:
                try:
                    server = pgserver.PgServer(parent_dir=args.workdir)
                except Exception:  # noqa: BLE001 - e.g. the postgres user may not enter WORKDIR: the system temp dir
                    if args.workdir is None:
                        raise
                    server = pgserver.PgServer(parent_dir=None)
                os.environ["MEMREV_BENCH_PG_URL"] = server.url()
                d = server.describe()
                meta["pg"] = (f"one throwaway server {d.get('version', '?')} (fsync={d.get('fsync')}, "
                              f"synchronous_commit={d.get('synchronous_commit')}), local TCP; a fresh database per measurement")
            except Exception as e:  # noqa: BLE001 - the PostgreSQL rows say why
                meta["pg"] = f"not available: {e}"[:300]
        else:
            meta["pg"] = f"not available: {reason}"
        r = Runner(sides, base, P, server.url() if server else None, meta["pg"])
        rows = {int(x) for x in args.rows.split(",")} if args.rows else set(range(1, 10))
        P["one_build"] = args.one_build
        run_all(r, cache, rows)
        git = git_bytes(P["disk_n"], base) if 8 in rows else {"ok": False, "error": "not run"}
        cli = cli_times(sides, P["cli_runs"], base) if 9 in rows else {}
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)
    meta.update(elapsed_s=time.perf_counter() - t0, load_end=loadavg())
    text = section(r.results, P, git, cli, sides, meta)
    put_section(Path(args.out), text)
    raw = {"params": P, "meta": meta, "git": git, "cli": cli, "results": [
        {k: v for k, v in x.items() if k not in ("lat", "traceback")} for x in r.results]}
    rdir = Path(tempfile.gettempdir()) if tiny else ROOT / "bench" / "results"  # a test's tiny run leaves no file here
    rdir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (rdir / f"raw-long-{'quick-' if args.quick else ''}{stamp}.json").write_text(json.dumps(raw, indent=1, default=str))
    log(f"\n{text}\nreport: {args.out}; total {meta['elapsed_s'] / 60:.1f} min")
    return {"text": text, "raw": raw}


if __name__ == "__main__":
    main()
