"""How fast the ``memrev`` command starts (issue 10: under 150 ms on this machine).

Runs each command in a fresh subprocess, ``RUNS`` times, interleaved (one run
of each command per round, so machine noise hits them alike), and reports the
median wall time. Commands: ``--help``, ``--version`` and ``log -n 5`` on the
quick-start store (built by ``examples/quickstart.py`` into a temporary
folder), plus ``python -c pass`` as the floor no Python command can beat.

The console script next to ``sys.executable`` is run directly: a version
manager's shim in front of it (pyenv's adds ~70 ms of bash) is not memrev's
start time.

    python bench/cli_start.py [--runs 20] [--store DIR]

``measure()`` is what ``bench/run.py`` calls.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = 20


def memrev_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m memrev.cli``."""
    script = Path(sys.executable).with_name("memrev")
    return [str(script)] if script.exists() else [sys.executable, "-m", "memrev.cli"]


def build_quickstart(into: Path) -> Path:
    """The quick-start store (an AG2 agent's three conversations) in ``into``."""
    store = into / "quickstart-state"
    subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), str(store)],
                   check=True, stdout=subprocess.DEVNULL, env=_env())
    return store


def _env() -> dict[str, str]:
    """This checkout's source first on the path, so the script imports the code being measured."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env.pop("MEMREV_STORE", None)
    return env


def _wall_ms(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - t0) * 1000


def measure(store: Path | None = None, runs: int = RUNS) -> dict[str, float]:
    """Median wall time in ms of each command, ``runs`` interleaved rounds (one warm-up round first)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = store or build_quickstart(Path(tmp))
        memrev = memrev_command()
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "memrev --help": [*memrev, "--help"],
            "memrev --version": [*memrev, "--version"],
            "memrev log -n 5": [*memrev, "--store", str(store), "--no-pager", "log", "-n", "5"],
        }
        env = _env()
        times: dict[str, list[float]] = {name: [] for name in commands}
        for round_ in range(runs + 1):
            for name, argv in commands.items():
                ms = _wall_ms(argv, env)
                if round_:  # the first round warms the page cache and writes .pyc files
                    times[name].append(ms)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--store", type=Path, default=None,
                        help="a store to run `log -n 5` on (default: build the quick-start store)")
    args = parser.parse_args()
    if shutil.which(memrev_command()[0]) is None:
        sys.exit("memrev is not installed")
    print(f"median of {args.runs} runs, ms ({' '.join(memrev_command())})")
    for name, ms in measure(args.store, args.runs).items():
        print(f"{name:<20} {ms:8.1f}")


if __name__ == "__main__":
    main()
