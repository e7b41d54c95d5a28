"""One (store, workload) measurement in a fresh process.

Invoked by bench/run.py as ``python bench/child.py '<json config>'``; writes a
JSON result to ``config["out"]``.  Peak memory is this process's
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import data  # noqa: E402
import speed  # noqa: E402
from speed import OpError  # noqa: E402 - one class, so every workload's failures name their call
from stores import open_store  # noqa: E402

perf = time.perf_counter




def _med(xs):
    return statistics.median(xs) if xs else None


def _rss_now_kb() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


# --------------------------------------------------------------------------- workloads


async def w1(h, cfg, res):
    s = h.store
    path = "/memory/working.md"
    versions = data.working_md_versions(cfg["w1_n"])
    lat = []
    t0 = perf()
    for i, v in enumerate(versions):
        a = perf()
        try:
            await s.write(path, v)
        except Exception as e:
            raise OpError(f"write({path!r}, <{len(v)} chars>) #{i}") from e
        lat.append(perf() - a)
    el = perf() - t0
    res["n"] = len(versions)
    res["writes_per_s"] = len(versions) / el
    res["write_ms_median"] = _med(lat) * 1e3
    res["write_ms_p99"] = sorted(lat)[int(len(lat) * 0.99) - 1] * 1e3
    got = await s.read(path)
    if got != versions[-1]:
        res.setdefault("check_failures", []).append("W1: read(path) after the run != last written version")
    res["content_bytes"] = len(versions[-1].encode())
    speed.open_footprint(h, res)
    h.close()
    res["disk_bytes"], res["disk_alloc_bytes"] = h.disk_usage()


async def w2(h, cfg, res):
    s = h.store
    path = "/log/events.jsonl"
    n = cfg["w2_n_git"] if h.name in ("dulwich", "pygit2") else cfg["w2_n"]
    win = min(cfg["w2_window"], n // 2)
    lines = data.append_lines(n)
    offsets = []
    lat = []
    t0 = perf()
    for i, ln in enumerate(lines):
        a = perf()
        try:
            off = await s.append(path, ln)
        except Exception as e:
            raise OpError(f"append({path!r}, <{len(ln)} bytes>) #{i}") from e
        lat.append(perf() - a)
        offsets.append(off)
    el = perf() - t0
    res["n"] = n
    res["window"] = win
    res["appends_per_s"] = n / el
    res["first_per_s"] = win / sum(lat[:win])
    res["last_per_s"] = win / sum(lat[-win:])
    res["last_over_first"] = res["last_per_s"] / res["first_per_s"]
    res["append_ms_median_first"] = _med(lat[:win]) * 1e3
    res["append_ms_median_last"] = _med(lat[-win:]) * 1e3
    if offsets != [i * 300 for i in range(n)]:
        bad = next(i for i, o in enumerate(offsets) if o != i * 300)
        res.setdefault("check_failures", []).append(
            f"W2: append #{bad} returned offset {offsets[bad]}, expected {bad * 300}"
        )
    start = offsets[-10]
    expected = "".join(lines[-10:])
    tl = []
    for k in range(cfg["w2_tail_reads"]):
        a = perf()
        try:
            got = await s.read_range(path, start)
        except Exception as e:
            raise OpError(f"read_range({path!r}, {start}) #{k}") from e
        tl.append(perf() - a)
        if k == 0 and got != expected:
            res.setdefault("check_failures", []).append("W2: read_range(tail) returned wrong text")
    res["tail_read_ms_first"] = tl[0] * 1e3
    res["tail_read_ms_median"] = _med(tl) * 1e3
    h.close()
    res["disk_bytes"], res["disk_alloc_bytes"] = h.disk_usage()


async def w3(h, cfg, res):
    s = h.store
    files = data.artifact_files(cfg["w3_files"])
    t0 = perf()
    for i, (p, body) in enumerate(files):
        try:
            await s.write(p, body)
        except Exception as e:
            raise OpError(f"write({p!r}, <1 KB>) #{i}") from e
    res["setup_writes_per_s"] = len(files) / (perf() - t0)
    expected = sorted(p.rsplit("/", 1)[1] for p, _ in files)
    lat = []
    t0 = perf()
    for k in range(cfg["w3_lists"]):
        a = perf()
        try:
            got = await s.list("/artifacts")
        except Exception as e:
            raise OpError(f"list('/artifacts') #{k}") from e
        lat.append(perf() - a)
        if k == 0 and got != expected:
            res.setdefault("check_failures", []).append(
                f"W3: list('/artifacts') returned {len(got)} names, expected {len(expected)}"
            )
    res["lists_per_s"] = cfg["w3_lists"] / (perf() - t0)
    res["list_ms_median"] = _med(lat) * 1e3
    rng = random.Random(7)
    picks = [rng.randrange(len(files)) for _ in range(cfg["w3_reads"])]
    bad = 0
    t0 = perf()
    for k, j in enumerate(picks):
        p = files[j][0]
        try:
            got = await s.read(p)
        except Exception as e:
            raise OpError(f"read({p!r}) #{k}") from e
        if got is None or len(got) != 1024:
            bad += 1
    res["reads_per_s"] = len(picks) / (perf() - t0)
    if bad:
        res.setdefault("check_failures", []).append(f"W3: {bad} random reads returned wrong content")
    h.close()
    res["disk_bytes"], res["disk_alloc_bytes"] = h.disk_usage()


async def w4(h, cfg, res):
    s = h.store
    path = "/memory/profile.md"
    body = data.two_kb_file()
    await s.write(path, body)
    n = cfg["w4_reads"]
    lat = []
    t0 = perf()
    for k in range(n):
        a = perf()
        try:
            got = await s.read(path)
        except Exception as e:
            raise OpError(f"read({path!r}) #{k}") from e
        lat.append(perf() - a)
    el = perf() - t0
    if got != body:
        res.setdefault("check_failures", []).append("W4: read returned wrong content")
    res["reads_per_s"] = n / el
    res["read_us_median"] = _med(lat) * 1e6
    h.close()


async def w5(h, cfg, res):
    s = h.store
    path = "/log/s.jsonl"
    chunks = data.event_log_chunks(cfg["w5_n"])
    content = ""
    t0 = perf()
    for i, ch in enumerate(chunks):
        # EventLogWriter.persist: store.write(path, "\n".join(all lines so far))
        content = ch if not content else content + "\n" + ch
        try:
            await s.write(path, content)
        except Exception as e:
            raise OpError(f"write({path!r}, <{len(content)} chars>) #{i}") from e
    el = perf() - t0
    res["n"] = len(chunks)
    res["rewrites_per_s"] = len(chunks) / el
    got = await s.read(path)
    if got != content:
        res.setdefault("check_failures", []).append("W5: final read != final content")
    res["final_log_bytes"] = len(content.encode())
    h.close()
    res["disk_bytes"], res["disk_alloc_bytes"] = h.disk_usage()
    res["disk_over_log"] = res["disk_bytes"] / res["final_log_bytes"]


def _time_calls(fn, n):
    out = []
    for _ in range(n):
        a = perf()
        fn()
        out.append(perf() - a)
    return out


async def _atime_calls(coro_fn, n):
    out = []
    for _ in range(n):
        a = perf()
        await coro_fn()
        out.append(perf() - a)
    return out


def _fresh_reads(cfg, store, workdir, rev: str, path: str, expected_sha: str, res) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    times = []
    for _ in range(cfg["hist_fresh"]):
        p = subprocess.run(
            [sys.executable, os.path.join(here, "fresh_read.py"), store, workdir, rev, path],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if p.returncode != 0:
            raise OpError(f"fresh process: open + read({path!r}, rev={rev!r}): {p.stderr.strip()[-2000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        if r["sha"] != expected_sha:
            res.setdefault("check_failures", []).append("history: fresh-process read returned wrong content")
        times.append(r["ms"])
    res["fresh_read_ms_median"] = _med(times)
    res["fresh_read_ms_all"] = times


async def history(h, cfg, res):
    """After W1: read 500 revisions back, diff two successive revisions, HEAD~500."""
    path = "/memory/working.md"
    back = cfg["hist_back"]
    nreps = cfg["hist_reps"]
    versions = data.working_md_versions(cfg["w1_n"])
    expected = versions[-1 - back]
    expected_sha = hashlib.sha256(expected.encode()).hexdigest()
    s = h.store
    checks = res.setdefault("check_failures", [])
    if h.name in ("memrev", "memrev-pg"):
        a = perf()
        try:
            commits = await s.log(path)
        except Exception as e:
            raise OpError(f"log({path!r})") from e
        res["log_path_ms"] = (perf() - a) * 1e3
        if len(commits) < back + 2:
            raise OpError(f"log({path!r}) returned {len(commits)} commits, need > {back + 1}")
        if len(commits) != len(versions):
            checks.append(f"history: log(path) returned {len(commits)} commits, expected {len(versions)}")
        target = commits[back].id
        prev = commits[back + 1].id

        async def rd():
            return await s.read(path, rev=target)

        try:
            a = perf()
            got = await rd()
            res["read_rev_first_ms"] = (perf() - a) * 1e3
            lat = await _atime_calls(rd, nreps)
        except Exception as e:
            raise OpError(f"read({path!r}, rev={target!r})") from e
        if got != expected:
            checks.append(f"history: read(path, rev=log(path)[{back}].id) != version written {back} writes before the last")
        res["read_rev_warm_ms"] = _med(lat) * 1e3
        # distinct revisions around `back`, each read once
        ids = [c.id for c in commits[max(0, back - 50): back + 50]]
        dl = []
        for cid in ids:
            a = perf()
            try:
                await s.read(path, rev=cid)
            except Exception as e:
                raise OpError(f"read({path!r}, rev={cid!r})") from e
            dl.append(perf() - a)
        res["read_rev_distinct_ms"] = _med(dl) * 1e3

        async def df():
            return await s.diff(prev, target, path)

        try:
            a = perf()
            d = await df()
            res["diff_first_ms"] = (perf() - a) * 1e3
            lat = await _atime_calls(df, nreps)
        except Exception as e:
            raise OpError(f"diff({prev!r}, {target!r}, {path!r})") from e
        if len(d) != 1 or d[0].status != "modified" or d[0].new != expected or not d[0].diff:
            checks.append(f"history: diff(a, b, path) returned {d!r:.300}")
        res["diff_warm_ms"] = _med(lat) * 1e3

        rev = f"HEAD~{back}"

        async def rs():
            return await s.resolve(rev)

        try:
            a = perf()
            rid = await rs()
            res["resolve_first_ms"] = (perf() - a) * 1e3
            lat = await _atime_calls(rs, nreps)
        except Exception as e:
            raise OpError(f"resolve({rev!r})") from e
        if rid != target:
            checks.append(f"history: resolve({rev!r}) = {rid!r}, expected log(path)[{back}].id = {target!r}")
        res["resolve_ms"] = _med(lat) * 1e3
        h.close()
        _fresh_reads(cfg, h.name, cfg["workdir"], target, path, expected_sha, res)
    else:
        g = s
        ids = g.first_parent_ids(min(back + 50, cfg["w1_n"] - 1))
        target, prev = ids[back], ids[back + 1]
        a = perf()
        got = g.read_at(target, path)
        res["read_rev_first_ms"] = (perf() - a) * 1e3
        if got != expected:
            checks.append("history: read at HEAD~back returned wrong content")
        res["read_rev_warm_ms"] = _med(_time_calls(lambda: g.read_at(target, path), nreps)) * 1e3
        dl = []
        for cid in ids[max(0, back - 50): back + 50]:
            a = perf()
            g.read_at(cid, path)
            dl.append(perf() - a)
        res["read_rev_distinct_ms"] = _med(dl) * 1e3
        a = perf()
        patch = g.diff(prev, target)
        res["diff_first_ms"] = (perf() - a) * 1e3
        if "@@" not in patch:
            checks.append("history: diff returned no hunks")
        res["diff_warm_ms"] = _med(_time_calls(lambda: g.diff(prev, target), nreps)) * 1e3
        rev_hex = target.decode() if isinstance(target, bytes) else str(target)
        h.close()
        _fresh_reads(cfg, h.name, cfg["workdir"], rev_hex, path, expected_sha, res)


async def scale(h, cfg, res):
    """memrev only: commit cost with N paths in the tree (built in one transaction)."""
    s = h.store
    n = cfg["scale_paths"]
    per_dir = min(1000, n)
    ndirs = max(1, n // per_dir)
    small = "x" * 64 + "\n"
    t0 = perf()
    try:
        async with s.transaction(message=f"bulk {n} paths"):
            for d in range(ndirs):
                for f in range(per_dir):
                    await s.write(f"/s/d{d:04d}/f{f:04d}.txt", small)
    except Exception as e:
        raise OpError(f"transaction(): write of path #{d * per_dir + f} of {n}") from e
    res["build_s"] = perf() - t0
    res["paths"] = ndirs * per_dir
    res["rss_after_build_kb"] = _rss_now_kb()
    rng = random.Random(11)
    rounds = []
    for r in range(cfg["scale_rounds"]):
        lat_new, lat_chg = [], []
        for i in range(cfg["scale_writes"]):
            d = rng.randrange(ndirs)
            if i % 2 == 0:
                p = f"/s/d{d:04d}/new-{r}-{i}.txt"
                body = f"new {r} {i}\n"
            else:
                p = f"/s/d{d:04d}/f{rng.randrange(per_dir):04d}.txt"
                body = f"changed {r} {i}\n"
            a = perf()
            try:
                await s.write(p, body)
            except Exception as e:
                raise OpError(f"write({p!r}) round {r} #{i}") from e
            (lat_new if i % 2 == 0 else lat_chg).append(perf() - a)
        rounds.append(
            {
                "all": _med(lat_new + lat_chg) * 1e3,
                "new": _med(lat_new) * 1e3,
                "changed": _med(lat_chg) * 1e3,
            }
        )
    res["rounds"] = rounds
    res["write_ms_median"] = _med([x["all"] for x in rounds])
    res["write_ms_new"] = _med([x["new"] for x in rounds])
    res["write_ms_changed"] = _med([x["changed"] for x in rounds])
    got = await s.read(p)
    if got != body:
        res.setdefault("check_failures", []).append("scale: read after the last write returned wrong content")
    h.close()
    res["disk_bytes"], res["disk_alloc_bytes"] = h.disk_usage()


CONC_PATH = "/conc/shared.jsonl"


def _conc_plan(cfg, w):
    """Writer w's operations in order: after every k-th append one write to a distinct path."""
    lines = data.conc_lines(w, cfg["conc_appends"])
    files = data.conc_files(w, cfg["conc_writes"])
    ops = []
    every = max(1, len(lines) // max(1, len(files)))
    fi = 0
    for i, ln in enumerate(lines):
        ops.append(("append", CONC_PATH, ln))
        if (i + 1) % every == 0 and fi < len(files):
            ops.append(("write",) + files[fi])
            fi += 1
    ops += [("write",) + f for f in files[fi:]]
    return ops


async def conc_writer(cfg, res):
    """One of N writer processes of the concurrency workload (started by ``concurrency``)."""
    w = cfg["writer"]
    ops = _conc_plan(cfg, w)
    try:
        h = open_store(cfg["store"], cfg["workdir"], create=False)
    except Exception as e:
        raise OpError(f"writer {w}: open store") from e
    s = h.store
    try:
        print("ready", flush=True)
        deadline = time.time() + 120
        while not os.path.exists(cfg["go"]):  # all writers start at the same instant
            if time.time() > deadline:
                raise OpError(f"writer {w}: no go signal")
            time.sleep(0.0005)
        offsets = []
        lat = []
        t0 = time.time()
        for k, (kind, path, body) in enumerate(ops):
            a = perf()
            try:
                if kind == "append":
                    offsets.append(await s.append(path, body))
                else:
                    await s.write(path, body)
            except Exception as e:
                raise OpError(f"writer {w}: {kind}({path!r}, <{len(body)} bytes>) op #{k}") from e
            lat.append(perf() - a)
        t1 = time.time()
    finally:
        h.close()
    res["t0"], res["t1"] = t0, t1
    res["commits"] = len(ops)
    res["offsets"] = offsets
    res["commit_ms_median"] = _med(lat) * 1e3


async def concurrency(h, cfg, res):
    """N writer processes, each with its own store handle, on one shared store; then an untimed check."""
    n = cfg["writers"]
    wd = Path(cfg["workdir"])
    # create the store and its branch before the clock (the first commit is not what we measure)
    await h.store.write("/conc/README", "concurrency benchmark\n")
    h.close()
    go = wd / "go"
    here = os.path.abspath(__file__)
    procs = []
    try:
        for w in range(n):
            wcfg = dict(cfg, workload="conc-writer", writer=w, go=str(go), out=str(wd / f"writer{w}.json"))
            errf = open(wd / f"writer{w}.stderr", "w")
            procs.append((subprocess.Popen([sys.executable, here, json.dumps(wcfg)], stdout=subprocess.PIPE,
                                           stderr=errf, text=True), errf))
        for w, (p, _) in enumerate(procs):
            line = p.stdout.readline().strip()
            if line != "ready":
                raise OpError(f"writer {w} did not start: {(wd / f'writer{w}.stderr').read_text()[-1500:]}")
        go.touch()
        for p, errf in procs:
            p.wait(timeout=cfg["child_timeout"])
            errf.close()
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
        outs.append(r)
    t0 = min(r["t0"] for r in outs)
    t1 = max(r["t1"] for r in outs)
    commits = sum(r["commits"] for r in outs)
    res["commits"] = commits
    res["elapsed_s"] = t1 - t0
    res["commits_per_s"] = commits / (t1 - t0)
    res["per_writer_commits_per_s"] = res["commits_per_s"] / n
    res["commit_ms_median"] = _med([r["commit_ms_median"] for r in outs])

    # ---- check (not timed): every line exactly once, offsets consistent, every distinct path written
    checks = res.setdefault("check_failures", [])
    h2 = open_store(cfg["store"], cfg["workdir"], create=False)
    try:
        s = h2.store
        try:
            content = await s.read(CONC_PATH) or ""
        except Exception as e:
            raise OpError(f"check: read({CONC_PATH!r})") from e
        from collections import Counter

        got = Counter(content.splitlines(keepends=True))
        expected = [ln for w in range(n) for ln in data.conc_lines(w, cfg["conc_appends"])]
        missing = sum(1 for ln in expected if got[ln] == 0)
        dup = sum(1 for ln in expected if got[ln] > 1)
        extra = sum(got.values()) - sum(min(1, got[ln]) for ln in set(expected))
        res["lines_expected"] = len(expected)
        res["lines_found"] = sum(got.values())
        if missing or dup or extra:
            checks.append(f"concurrency: {missing} lines missing, {dup} duplicated, {extra} unexpected "
                          f"(of {len(expected)})")
        bad_off = 0
        for w, r in enumerate(outs):
            for ln, off in zip(data.conc_lines(w, cfg["conc_appends"]), r["offsets"]):
                if content[off: off + len(ln)] != ln:
                    bad_off += 1
        if bad_off:
            checks.append(f"concurrency: {bad_off} append offsets do not point at their line")
        bad_files = 0
        for w in range(n):
            for p, body in data.conc_files(w, cfg["conc_writes"]):
                if await s.read(p) != body:
                    bad_files += 1
        if bad_files:
            checks.append(f"concurrency: {bad_files} distinct-path writes missing or wrong")
        res["verified"] = not (missing or dup or extra or bad_off or bad_files)
    finally:
        h2.close()


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "history": history, "scale": scale,
             "concurrency": concurrency, **speed.WORKLOADS}


async def amain(cfg, res):
    if cfg["workload"] == "conc-writer":
        await conc_writer(cfg, res)
        return
    if cfg["workload"] == "writer-proc":
        await speed.writer_proc(cfg, res)
        return
    if cfg["workload"] in speed.NO_STORE:
        await WORKLOADS[cfg["workload"]](None, cfg, res)
        return
    create = cfg["workload"] != "history"
    h = None
    try:
        try:
            h = open_store(cfg["store"], cfg["workdir"], create=create)
        except Exception as e:
            raise OpError(f"open store {cfg['store']!r}") from e
        res["rss_after_open_kb"] = _rss_now_kb()
        await WORKLOADS[cfg["workload"]](h, cfg, res)
    finally:
        if h is not None:
            try:
                h.close()
            except Exception:
                pass


def main() -> None:
    cfg = json.loads(sys.argv[1])
    res: dict = {"store": cfg["store"], "workload": cfg["workload"], "rep": cfg.get("rep")}
    t0 = perf()
    try:
        asyncio.run(amain(cfg, res))
        res["ok"] = True
    except Exception as e:
        res["ok"] = False
        cause = e.__cause__ if isinstance(e, OpError) and e.__cause__ is not None else e
        res["op"] = e.op if isinstance(e, OpError) else None
        res["error"] = f"{type(cause).__module__}.{type(cause).__qualname__}: {cause}"[:2000]
        res["traceback"] = "".join(traceback.format_exception(cause))[-6000:]
    res["wall_s"] = perf() - t0
    res["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    Path(cfg["out"]).write_text(json.dumps(res, default=str))


if __name__ == "__main__":
    main()
