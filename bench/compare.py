"""Targets of two benchmark runs side by side (before / after a change).

    python bench/compare.py bench/results/raw-BEFORE.json bench/results/raw-AFTER.json

Reads the raw results bench/run.py writes and prints one Markdown table: every
target with its measured value in each run and the result of the second run.
Runs of different sizes (--quick vs full) compare targets of the same name only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fmt import table  # noqa: E402
from run import compute_targets  # noqa: E402


def load(path: str) -> tuple[dict, list[dict]]:
    raw = json.loads(Path(path).read_text())
    return raw, compute_targets(raw["results"], raw["params"])


def describe(raw: dict) -> str:
    m = raw["machine"]
    return f"{raw['command']} — memrev {m.get('memrev_src', '?')} at git {m.get('git', '?')}"


def main(before_path: str, after_path: str) -> None:
    before_raw, before = load(before_path)
    after_raw, after = load(after_path)
    old = {t["name"]: t for t in before}
    rows = []
    for t in after:
        b = old.get(t["name"])
        rows.append([t["name"], b["measured"] if b else "—", f"{b['a']} / {b['b']}" if b else "—",
                     t["measured"], f"{t['a']} / {t['b']}", t["threshold"], f"**{t['result']}**"])
    print(f"- before: {describe(before_raw)}\n- after: {describe(after_raw)}\n")
    print(table(["target", "before", "before (memrev / reference)", "after", "after (memrev / reference)",
                 "threshold", "after result"], rows))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
