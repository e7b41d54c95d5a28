"""The benchmark harness (bench/speed.py, bench/speed_report.py, bench/run.py) still
runs against the library: its issue 14 workloads on tiny stores, in process.

Other branches change the APIs these workloads call (log, history, blame,
fsck, gc, transactions); this catches a harness they broke before a long
benchmark run does. Nothing here is timed: the checks are the answers the
workloads verify and the keys the report reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import fmt  # noqa: E402
import run  # noqa: E402
import speed  # noqa: E402
import speed_report  # noqa: E402
from stores import open_store  # noqa: E402

pytestmark = pytest.mark.anyio

P = dict(run.QUICK, w1_n=6, conc_w_n=3, conc_w_n_pg=3, hs_sizes=[120, 300], hs_file_n=40, hs_reps=1, cli_runs=1)


def _result(workload: str, **fields) -> dict:
    return {"workload": workload, "store": "memrev", "rep": 0, "ok": True, "check_failures": [], **fields}


async def _run(fn, h, cfg: dict, **fields) -> dict:
    res = _result(cfg["workload"], **fields)
    await fn(h, cfg, res)
    assert res["check_failures"] == [], res["check_failures"]
    return res


async def test_floor_and_writers_measure_and_verify(tmp_path):
    results = []
    cfg = dict(P, store="memrev", workload="floor", workdir=str(tmp_path / "floor"))
    results.append(await _run(speed.floor, open_store("memrev", cfg["workdir"]), cfg))
    for n in (1, 4):
        cfg = dict(P, store="memrev", workload="writers", workdir=str(tmp_path / f"w{n}"), writers=n, conc_mode="tasks")
        results.append(await _run(speed.writers, open_store("memrev", cfg["workdir"]), cfg, writers=n, conc_mode="tasks"))
    floor = results[0]
    assert floor["n"] == 6 and floor["ratio"] > 0
    assert floor["disk_open_bytes"] >= floor["wal_open_bytes"] > 0  # measured while the store was open
    assert [r["commits"] for r in results[1:]] == [3, 12]
    assert speed_report.mval(results, "commits_per_s", workload="writers", writers=4, conc_mode="tasks") > 0


@pytest.mark.slow  # 1.1 s in the quick loop: builds two stores and runs four workloads on them
async def test_history_at_scale_workloads_on_built_stores(tmp_path):
    results = []
    for kind, n, workloads in (("file", 40, [speed.hfile]), ("spread", 120, [speed.hquery, speed.hfsck, speed.hgc])):
        store_dir = tmp_path / f"{kind}-{n}"
        cfg = dict(P, store="memrev", build_kind=kind, build_n=n, store_dir=str(store_dir), workdir=str(tmp_path / "wd"))
        build = await _run(speed.hbuild, None, dict(cfg, workload="hbuild"))
        assert build["cached"] is False and store_dir.is_dir()
        again = await _run(speed.hbuild, None, dict(cfg, workload="hbuild"))
        assert again["cached"] is True  # a built store is reused
        for fn in workloads:
            wl = fn.__name__
            results.append(await _run(fn, None, dict(cfg, workload=wl), build_kind=kind, build_n=n))
    by = {r["workload"]: r for r in results}
    assert set(by["hfile"]) >= {"log_first_ms", "history_first_ms", "blame_first_ms", "old_read_first_ms"}
    assert set(by["hquery"]) >= {"log_dir_first_ms", "log_page_first_ms", "list_txn_first_ms"}
    assert "resolve_first_ms" not in by["hquery"]  # HEAD~5000 does not exist in 120 commits
    assert by["hfsck"]["objects"] >= 3 * 120  # a commit, its root tree and its blob at least
    assert all(by["hgc"]["gc_result"].get(k, 0) == 0 for k in ("commits", "trees", "blobs"))  # nothing unreachable
    # the staged write was rolled back: the cached store still has 120 commits
    s = speed._open_built(dict(store_dir=str(tmp_path / "spread-120")))
    try:
        assert len(await s.log()) == 120
        assert "staged/" not in await s.list("/")
    finally:
        s.close()


def test_report_targets_pass_and_fail_on_thresholds():
    R = [
        _result("floor", memrev_ms=0.3, floor_ms=0.1, ratio=3.0),
        _result("floor", store="memrev-full", memrev_ms=1.0, floor_ms=0.5, ratio=2.0),
        _result("hfile", build_n=P["hs_file_n"], log_first_ms=19.0, history_first_ms=51.0, blame_first_ms=1.0),
    ]
    T = run.compute_targets(R, P)

    def result(start: str) -> str:
        (t,) = [t for t in T if t["name"].startswith(start)]
        return t["result"]

    assert result('W1 median write, SQLite, `durability="normal"`') == "PASS"  # 3.0 <= 3
    assert result('W1 median write, SQLite, `durability="full"`') == "FAIL"  # 2.0 > 1.5
    assert result("W1 median write, PostgreSQL") == "NO DATA"
    assert result("`log(path)` of a file") == "PASS"
    assert result("`history(path)` of a file") == "FAIL"
    report = "\n".join(speed_report.sections(R, P))
    assert "| SQLite, `durability=\"normal\"` | 0.300 ms |" in report
    assert fmt.f_ratio(3.0) in report


def test_regenerating_the_report_keeps_the_viewer_section(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text("# memrev benchmarks\n\nold\n\n## Viewer — page loads\n\nhand-made table\n")
    assert run.kept_sections(out) == "\n## Viewer — page loads\n\nhand-made table\n"
    assert run.kept_sections(tmp_path / "missing.md") == ""


# ---------------------------------------------------------------- issue 26: bench/long_runs.py

import long_runs  # noqa: E402

ISSUE26_ROWS = ["1 · 4 writer processes vs 1, SQLite", "1 · 4 writer processes vs 1, PostgreSQL",
                "1 · 8 writer processes vs 1, PostgreSQL", "2 · 4 asyncio tasks vs 1", "3 · append 120 B vs",
                "3 · append 120 B on PostgreSQL", "4 · write 2 KB vs bare SQLite", "5 ·", "5 · largest `-wal`",
                "6 · RSS of one process", "7 · fsck, per object", "7 · fsck peak RSS", "7 · gc seconds",
                "8 · bytes after", "8 · bytes after", "9 · `memrev log -n 5`"]


def _rows(section: str) -> list[list[str]]:
    lines = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| row |")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]


def test_long_runs_section_replaces_itself_and_keeps_the_others(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text("# memrev benchmarks\n\nmain\n\n" + long_runs.HEADING + "\n\nold table\n\n## Viewer — pages\n\nkept\n")
    long_runs.put_section(out, long_runs.HEADING + "\n\nnew table\n")
    assert out.read_text() == ("# memrev benchmarks\n\nmain\n\n" + long_runs.HEADING + "\n\nnew table\n"
                               "\n## Viewer — pages\n\nkept\n")
    long_runs.put_section(tmp_path / "new.md", long_runs.HEADING + "\n\nfirst\n")  # absent: appended
    assert (tmp_path / "new.md").read_text().endswith(long_runs.HEADING + "\n\nfirst\n")


def test_long_runs_rows_read_targets_and_show_errors_in_cells():
    R = [
        {"side": s, "case": f"procs-sqlite-{n}", "rep": 0, "ok": True, "commits_per_s": cps, "commit_ms_median": 1.0}
        for s, n, cps in (("before", 1, 1000.0), ("before", 4, 460.0), ("after", 1, 1000.0), ("after", 4, 1500.0))
    ] + [{"side": "after", "case": "floor", "rep": 0, "ok": False, "error": "OpError: write | boom"},
         {"side": "after", "case": "tasks", "rep": 0, "ok": True, "commits_per_s_1": 10.0, "commits_per_s_4": 9.0,
          "commit_ms_median_1": 1.0, "commit_ms_median_4": 4.0, "check_failures": ["4 tasks: log has 3 commits"]},
         {"side": "after", "case": "append-sqlite", "rep": 0, "ok": True}]  # a result the report cannot read
    for n, secs in ((1000, 1.0), (5000, 6.0)):  # a store format speed.count_objects cannot count: per commit
        R += [{"side": "after", "case": f"build-{n}", "rep": 0, "ok": True},
              {"side": "after", "case": f"fsck-{n}", "rep": 0, "ok": True, "fsck_s": secs, "us_per_commit": secs / n * 1e6,
               "peak_rss_kb": 90 * 1024, "rss_before_kb": 30 * 1024, "objects_error": "OperationalError: no such table"}]
    rows = {r[0].split(" (")[0]: r for r in long_runs.build_rows(R, long_runs.QUICK, {"ok": True, "bytes": 1000}, {}, ["before", "after"])}
    sqlite = rows["1 · 4 writer processes vs 1, SQLite"]
    assert sqlite[4:] == ["0.46", "1.50", "≥ 1×", "yes (before: no)"]
    floor = rows["4 · write 2 KB vs bare SQLite `BEGIN; INSERT; COMMIT`"]
    assert floor[2] == "error: OpError: write \\| boom" and floor[7] == "no data (before: no data)"
    assert "check failed" in rows["2 · 4 asyncio tasks vs 1, one handle, SQLite"][2]
    assert rows["3 · append 120 B vs `DiskKnowledgeStore.append`"][2].startswith("error: report: KeyError")
    assert rows["3 · append 120 B vs `DiskKnowledgeStore.append`"][1] == "not run"
    fsck = rows["7 · fsck, per object 5k / 1k"]
    assert "µs/commit 1000.0 · 1200.0" in fsck[2] and "no such table" in fsck[3]
    assert fsck[5:] == ["1.20", "≤ 1.5×", "yes (before: no data)"]
    assert rows["7 · fsck peak RSS at 5k"][7] == "yes (before: no data)"
    assert len(rows) == len(ISSUE26_ROWS)


@pytest.mark.slow  # ~2 min: some 40 child processes, a PostgreSQL server, the quick-start store twice
def test_long_runs_quick_produces_every_row_before_and_after(tmp_path):
    import os
    import subprocess

    out = tmp_path / "benchmarks.md"
    out.write_text("# memrev benchmarks\n\n## Viewer — pages\n\nkept\n")
    src = str(BENCH.parent / "src")
    env = dict(os.environ, MEMREV_LONG_RUNS_TINY="1", PYTHONPATH=src)
    p = subprocess.run([sys.executable, str(BENCH / "run.py"), "--long-runs", "--quick", "--before-src", src,
                        "--out", str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# memrev benchmarks\n\n## Viewer — pages\n\nkept\n")
    section = text[text.index(long_runs.HEADING):]
    rows = _rows(section)
    assert [r[0][: len(want)] for r, want in zip(rows, ISSUE26_ROWS)] == ISSUE26_ROWS
    pg = long_runs.pgserver.unavailable_reason() is None
    for r in rows:
        assert len(r) == 8, r
        if pg or "PostgreSQL" not in r[0]:
            assert "error" not in r[1] + r[2] and "check failed" not in r[1] + r[2], r
            assert r[2] != "—" and "no data" not in r[7], r
    assert "Problems: none" in section or not pg, section
