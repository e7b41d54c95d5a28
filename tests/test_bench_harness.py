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
