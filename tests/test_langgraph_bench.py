"""bench/langgraph_bench.py still runs: one small round per store, every operation measured
(nothing is timed against a target here; the numbers are docs/benchmarks.md's)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_one_small_round_of_each_store(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import langgraph_bench
    finally:
        sys.path.remove(str(BENCH))
    results = {}
    for kind in langgraph_bench.KINDS:
        (tmp_path / kind).mkdir()
        results[kind] = {op: [s] for op, s in langgraph_bench.one_round(kind, 600, tmp_path / kind, seed=1).items()}
        assert set(results[kind]) == set(langgraph_bench.OPS) and all(s[0] > 0 for s in results[kind].values())
    table = langgraph_bench.report(600, 1, results)
    assert table.count("\n| ") == len(langgraph_bench.OPS) + 1 and "MemrevStore / SqliteStore" in table
