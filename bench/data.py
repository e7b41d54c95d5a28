"""Deterministic workload data (seeded RNG, identical for every store)."""

from __future__ import annotations

import json
import random
import string

_ALPHA = string.ascii_lowercase + "      "


def _line(rng: random.Random, n: int = 40) -> str:
    return "".join(rng.choice(_ALPHA) for _ in range(n)).strip().ljust(n, "x")


def working_md_versions(n_versions: int, seed: int = 1) -> list[str]:
    """W1: ~50 lines of ~40 chars (~2 KB); each version replaces 2-3 random lines (~5%)."""
    rng = random.Random(seed)
    lines = [_line(rng) for _ in range(50)]
    out = []
    for _ in range(n_versions):
        for _ in range(rng.choice((2, 3))):
            lines[rng.randrange(len(lines))] = _line(rng)
        out.append("\n".join(lines) + "\n")
    return out


def json_line(rng: random.Random, seq: int, size: int = 300) -> str:
    """One JSON line of exactly ``size`` bytes including the trailing newline (ASCII)."""
    rec = {"seq": seq, "type": "ag2.events.ModelResponse", "stream": "s-bench", "payload": ""}
    base = len(json.dumps(rec, separators=(",", ":"))) + 1
    rec["payload"] = "".join(rng.choice(string.ascii_letters + " ") for _ in range(size - base))
    s = json.dumps(rec, separators=(",", ":")) + "\n"
    assert len(s.encode()) == size, len(s)
    return s


def append_lines(n: int, seed: int = 2) -> list[str]:
    rng = random.Random(seed)
    return [json_line(rng, i) for i in range(n)]


def artifact_files(n: int, seed: int = 3, size: int = 1024) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body = "".join(rng.choice(_ALPHA) for _ in range(size - 1)) + "\n"
        out.append((f"/artifacts/f{i:04d}.txt", body))
    return out


def two_kb_file(seed: int = 4) -> str:
    rng = random.Random(seed)
    return "\n".join(_line(rng) for _ in range(50)) + "\n"


def event_log_chunks(n: int, seed: int = 5) -> list[str]:
    """W5: per rewrite ~2 KB of new JSON lines (7 lines of ~290 B, no trailing newline)."""
    rng = random.Random(seed)
    chunks = []
    seq = 0
    for _ in range(n):
        lines = []
        for _ in range(7):
            lines.append(json_line(rng, seq, 290).rstrip("\n"))
            seq += 1
        chunks.append("\n".join(lines))
    return chunks


def conc_lines(writer: int, n: int) -> list[str]:
    """Concurrency workload: writer ``writer``'s n distinct 300-byte JSON lines (seq = writer * 10**6 + i)."""
    rng = random.Random(1000 + writer)
    return [json_line(rng, writer * 1_000_000 + i) for i in range(n)]


def conc_files(writer: int, n: int) -> list[tuple[str, str]]:
    """Concurrency workload: writer ``writer``'s n (distinct path, 300-byte body) pairs."""
    rng = random.Random(2000 + writer)
    return [(f"/conc/w{writer}/f{i:04d}.json", json_line(rng, i)) for i in range(n)]
