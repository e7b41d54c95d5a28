"""Aggregation and formatting shared by bench/run.py and bench/speed_report.py."""

from __future__ import annotations

import statistics


def collect(results: list[dict], wl: str, store: str) -> list[dict]:
    return [r for r in results if r.get("workload") == wl and r.get("store") == store]


def med(results: list[dict], wl: str, store: str, key: str):
    xs = [r[key] for r in collect(results, wl, store) if r.get("ok") and isinstance(r.get(key), (int, float))]
    return statistics.median(xs) if xs else None


def conc_med(results, store, n, key):
    xs = [r[key] for r in results if r.get("workload") == "concurrency" and r.get("store") == store
          and r.get("writers") == n and r.get("ok") and isinstance(r.get(key), (int, float))]
    return statistics.median(xs) if xs else None


def conc_nreps(results, store, n) -> str:
    rs = [r for r in results if r.get("workload") == "concurrency" and r.get("store") == store and r.get("writers") == n]
    return f"{sum(1 for r in rs if r.get('ok'))}/{len(rs)}"


def nreps(results, wl, store) -> str:
    rs = collect(results, wl, store)
    ok = sum(1 for r in rs if r.get("ok"))
    return f"{ok}/{len(rs)}"


def f_rate(x) -> str:
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:,.1f}"


def f_ms(x) -> str:
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def f_bytes(x) -> str:
    """Decimal units (1 KB = 1,000 bytes), as the targets are stated."""
    if x is None:
        return "—"
    if x >= 10_000_000:
        return f"{x / 1e6:,.1f} MB"
    return f"{x / 1e3:,.1f} KB"


def f_ratio(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def f_mb(kb) -> str:
    return "—" if kb is None else f"{kb / 1024:.0f}"


def div(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)
