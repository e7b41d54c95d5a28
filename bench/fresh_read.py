"""Fresh-process past-revision read: ``python bench/fresh_read.py STORE WORKDIR REV PATH``.

Imports happen before the clock starts; only "open the store + one read of
PATH at REV" is timed.  Prints one JSON line: {"ms": ..., "sha": sha256(text)}.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    store, workdir, rev, path = sys.argv[1:5]
    perf = time.perf_counter
    if store in ("memrev", "memrev-pg"):
        from memrev import VersionedStore

        if store == "memrev-pg":
            import memrev.backends.postgres  # noqa: F401  (import before the clock, like the other stores)
            import pgserver

            target = pgserver.database_url(os.path.basename(os.path.normpath(workdir)))
        else:
            target = os.path.join(workdir, "memrev")

        async def go():
            t0 = perf()
            s = VersionedStore(target)
            text = await s.read(path, rev=rev)
            ms = (perf() - t0) * 1e3
            s.close()
            return ms, text

        loop = asyncio.new_event_loop()
        ms, text = loop.run_until_complete(go())
        loop.close()
    elif store == "dulwich":
        import dulwich.object_store  # noqa: F401

        from stores import DulwichStore

        t0 = perf()
        g = DulwichStore(os.path.join(workdir, "dulwich.git"), create=False)
        text = g.read_at(rev.encode(), path)
        ms = (perf() - t0) * 1e3
        g.close()
    elif store == "pygit2":
        import pygit2

        from stores import Pygit2Store

        t0 = perf()
        g = Pygit2Store(os.path.join(workdir, "pygit2.git"), create=False)
        text = g.read_at(pygit2.Oid(hex=rev), path)
        ms = (perf() - t0) * 1e3
        g.close()
    else:
        raise SystemExit(f"unknown store {store}")
    sha = hashlib.sha256((text or "").encode()).hexdigest()
    print(json.dumps({"ms": ms, "sha": sha}))


if __name__ == "__main__":
    main()
