"""gc and export against the length of an append run (issue 8 item 9): both
must grow linearly. Builds a store of N appends to one file (each append one
commit), then times ``export_bundle`` and ``gc``.

    PYTHONPATH=src python bench/gc_scale.py 1000 2000 4000 100000
"""

from __future__ import annotations

import io
import sys
import tempfile
import time
from pathlib import Path

from memrev.bundles import export_bundle
from memrev.gc import gc
from memrev.ops import Append

from memrev.backends import open_backend
from memrev.repo import Repository


def measure(n: int, folder: Path) -> dict:
    repo = Repository(open_backend(str(folder / f"s{n}")))
    t0 = time.perf_counter()
    for i in range(n):
        repo.commit("main", [Append("/log/run.jsonl", f'{{"turn": {i}}}\n'.encode())], author="bench")
    built = time.perf_counter() - t0
    repo.forget()
    t0 = time.perf_counter()
    export_bundle(repo, io.BytesIO(), repo.backend.list_refs("refs/heads/"))
    export_s = time.perf_counter() - t0
    repo.forget()
    t0 = time.perf_counter()
    gc(repo)
    gc_s = time.perf_counter() - t0
    repo.backend.close()
    return {"appends": n, "build_s": built, "export_s": export_s, "gc_s": gc_s}


def main(sizes: list[int]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            row = measure(n, Path(tmp))
            rows.append(row)
            print(f"{n:>7} appends: export {row['export_s']:.2f} s, gc {row['gc_s']:.2f} s (build {row['build_s']:.1f} s)", flush=True)
    return rows


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 2000, 4000])
