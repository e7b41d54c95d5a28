"""``examples/quickstart.py`` runs offline, exits 0 and shows history + a diff."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"

pytestmark = pytest.mark.slow  # runs the example in a new process


def run_quickstart(state: Path | None, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the example (with STATE_DIR unless ``state`` is None); return (process, seconds)."""
    args = [sys.executable, str(QUICKSTART)] + ([str(state)] if state is not None else [])
    start = time.monotonic()
    proc = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    return proc, time.monotonic() - start


def check_output(out: str) -> None:
    # the three conversations happened
    assert out.count("[conversation ") == 3
    assert "chef: Noted: vegetarian from now on" in out

    # the log of /memory/working.md lists exactly three commits: short id, time
    history = out.split("History of /memory/working.md", 1)[1].split("--- version 1", 1)[0]
    rows = re.findall(r"^  ([0-9a-f]{7})  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  \S", history, re.M)
    assert len(rows) == 3 and len(set(rows)) == 3, history

    # each version's content is printed, oldest first, with matching ids
    for n, short_id in enumerate(reversed(rows), 1):
        assert f"--- version {n} ({short_id}) ---" in out
    assert "--- version 4" not in out
    v1 = out.split("--- version 1", 1)[1].split("--- version 2", 1)[0]
    assert "- Cooks for two on weeknights\n" in v1 and "Preferences" not in v1
    v3 = out.split("--- version 3", 1)[1].split("What conversation 3 changed", 1)[0]
    assert "- Vegetarian (partner too): no meat at all" in v3 and "No pork" not in v3

    # the unified diff between the last two versions
    diff = out.split("What conversation 3 changed", 1)[1]
    assert re.search(r"^\s*--- a/\S*memory/working\.md$", diff, re.M), diff
    assert re.search(r"^\s*\+\+\+ b/\S*memory/working\.md$", diff, re.M), diff
    assert re.search(r"^\s*@@ ", diff, re.M), diff
    assert re.search(r"^\s*-- No pork$", diff, re.M), diff
    assert re.search(r"^\s*\+- Vegetarian \(partner too\): no meat at all$", diff, re.M), diff
    assert re.search(r"^\s*\+- Cooks for two on weeknights, eats out on Thursdays$", diff, re.M), diff

    assert "memrev --store " in out and "log /memory/working.md" in out


def test_quickstart_runs_and_shows_history(tmp_path):
    state = tmp_path / "qs-state"
    proc, elapsed = run_quickstart(state, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 20, elapsed
    check_output(proc.stdout)
    assert f"memrev --store {state} log /memory/working.md" in proc.stdout
    assert (state / "memrev.db").is_file()

    # repeatable: a second run wipes the state and tells the same story
    again, _ = run_quickstart(state, tmp_path)
    assert again.returncode == 0, again.stderr
    check_output(again.stdout)


def test_quickstart_default_state_dir(tmp_path):
    proc, _ = run_quickstart(None, tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_output(proc.stdout)
    assert (tmp_path / ".quickstart-state" / "memrev.db").is_file()


def test_quickstart_refuses_to_wipe_a_foreign_folder(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    proc, _ = run_quickstart(precious, tmp_path)
    assert proc.returncode != 0
    assert (precious / "notes.txt").read_text() == "keep me"
