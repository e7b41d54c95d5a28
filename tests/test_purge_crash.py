"""kill -9 during a purge (issue 22), and a purge among other processes' writes and reads.

A child process runs ``store.purge(...)`` on a copy of a prepared SQLite store
(a sentinel string on main, a second branch, a tag, a deleted branch, in file
contents, an append run and a commit message; a purged folder of its own
commits, the first ones among them, with a branch and a tag that the purge
deletes) and ``SIGKILL``s itself at a chosen instant: before or after the Nth
call of a backend method (a commit, blob or tree stored; a ref moved; the
unreachable rows deleted; the indexes cleared and rebuilt; the ``COMMIT``'s
checkpoint; ``reclaim``; the verification scan), inside ``VACUUM`` (a SQLite
progress handler), or the parent kills it after a random delay.

After every kill the store opens, ``fsck()`` is clean, and it is wholly before
the purge (the same refs as before, no purge record, the sentinel readable at
its revision) or wholly after it (the refs an uncrashed purge of the same store
gives, its record on ``refs/purges``, the sentinel nowhere: ``verify_purged``
is ``[]``). Running the same purge again then finishes the job: ``verified``,
``verify_purged`` ``[]``, ``fsck`` clean, the refs of the uncrashed purge, one
record.

Then a purge while another process commits in a loop and a third reads in a
loop: no acknowledged commit is lost (those before the purge are rewritten with
their content kept, those after it are on the branch as they were made), and
the reader reads throughout, each read the whole old or the whole new version,
never the old one again once it saw the new.
"""

from __future__ import annotations

import ast
import json
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import spawn
from memrev import Store, errors
from memrev.maintenance import purge_scan
from memrev.repo.revisions import PURGES_REF
from test_reliability import _Child

pytestmark = pytest.mark.anyio

SENTINEL = "SENTINEL-7f3a9c2e41b8d6-crash"
PATHS = ["/private/**"]
TEXT = [SENTINEL]
SECRET = "/memory/secret.md"
SEED = int(os.environ.get("MEMREV_PURGE_CRASH_SEED", "20261202"))

# --------------------------------------------------------------------------- the store

BUILD = r"""
import asyncio, json, sys
from memrev import Store, errors

loc, s, n = sys.argv[1], sys.argv[2], int(sys.argv[3])


async def build():
    st = Store(loc, author="builder")
    out = {}
    for i in range(n):
        if i < 2:  # the first commits hold only purged files: a branch and a tag there are left with nothing
            await st.write(f"/private/early-{i}.md", f"early {i}\n", message=f"early {i}")
            if i == 1:
                (await st.branch("early")).close()
                await st.tag("t-early")
        elif i == 5:
            await st.write("/memory/secret.md", f"top\nkey: {s}\nbottom\n", message=f"saw {s}")
            out["sentinel_commit"] = await st.resolve("HEAD")
        elif i % 3 == 0:
            await st.append("/log/run.jsonl", json.dumps({"i": i, "pad": "x" * (i % 40)}) + "\n")
        elif i % 3 == 1:
            await st.write(f"/notes/{i % 5}.md", f"note {i}\n" * (i % 7 + 1))
        else:
            await st.write(f"/private/diary-{i % 2}.md", f"diary {i}\n" * (i % 5 + 1), message=f"diary {i}")
        if i == 7:
            await st.append("/log/run.jsonl", json.dumps({"out": s}) + "\n")
            await st.tag("v7")
            side = await st.branch("side")
            await side.write("/side/plan.md", f"plan {s}\n")
            await side.write("/side/other.md", "other\n")
            await side.write("/private/side.md", "side diary\n")
            side.close()
            gone = await st.branch("gone")
            await gone.write("/gone.md", f"gone {s}\n")
            gone.close()
            await st.delete_branch("gone")
    st.close()
    print(json.dumps(out), flush=True)


asyncio.run(build())
"""

# --------------------------------------------------------------------------- the child

# Backend methods a purge calls, in the order it first calls them; a kill "before" or
# "after" the Nth call of one of them. "_after_commit" runs right after the write
# transaction's COMMIT (before its checkpoint); "secure_delete" is called before the
# transaction and after its COMMIT; "iter_blobs" is the verification scan's.
METHODS = [
    "secure_delete",
    "put_tree",
    "put_blob",
    "put_commit",
    "set_ref_if_equals",
    "delete_ref",
    "delete_unreachable",
    "clear_indexes",
    "change_put",
    "head_put",
    "relink_first_parent",
    "set_index_fresh",
    "_after_commit",
    "reclaim",
    "iter_blobs",
]

CHILD = r"""
import asyncio, json, os, signal, sys, time
from memrev import Store, errors
from memrev.backends import sqlite as sq

loc, target, n, when = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
paths, text, methods = json.loads(sys.argv[5]), json.loads(sys.argv[6]), json.loads(sys.argv[7])
counts = {}
armed = [False]  # hooks count only during the purge, not while the store opens


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def hook(name):
    real = getattr(sq.SqliteBackend, name)

    def hooked(*a, **k):
        if not armed[0]:
            return real(*a, **k)
        counts[name] = counts.get(name, 0) + 1
        hit = name == target and counts[name] == n
        if hit and when == "before":
            die()
        out = real(*a, **k)
        if hit:
            die()
        return out

    setattr(sq.SqliteBackend, name, hooked)


for name in methods:
    hook(name)
real_reclaim = sq.SqliteBackend.reclaim


def reclaim(self):
    # SQLite calls this every 100 virtual-machine steps of VACUUM and the checkpoint
    def tick():
        counts["vacuum"] = counts.get("vacuum", 0) + 1
        if target == "vacuum" and counts["vacuum"] == n:
            die()
        return 0

    self._conn.set_progress_handler(tick, 100)
    try:
        return real_reclaim(self)
    finally:
        self._conn.set_progress_handler(None, 0)


sq.SqliteBackend.reclaim = reclaim


async def main():
    store = Store(loc)
    print("ready", flush=True)
    armed[0] = True
    t0 = time.monotonic()
    report = await store.purge(paths=paths or None, text=text or None, reason="crash test")
    armed[0] = False
    print(json.dumps({"counts": counts, "seconds": time.monotonic() - t0, "verified": report.verified}), flush=True)
    store.close()


asyncio.run(main())
"""


def run_child(script: str, *args: str, timeout: float = 120) -> tuple[int, list[str], str]:
    p = spawn(script, *args)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.splitlines(), err


def build_store(folder: Path, commits: int) -> dict[str, Any]:
    rc, lines, err = run_child(BUILD, str(folder), SENTINEL, str(commits))
    assert rc == 0, err
    return json.loads(lines[-1])


def all_refs(store: Store) -> dict[str, str]:
    """Every ref but the purge records' (branches, tags, deleted branches)."""
    return {k: v.hex() for k, v in store.repo.backend.list_refs("refs/").items() if k != PURGES_REF}


def refs_at(loc: Path) -> dict[str, str]:
    store = Store(str(loc))
    try:
        return all_refs(store)
    finally:
        store.close()


class Prepared:
    """A built store (never purged itself; each trial purges a copy) and what an uncrashed purge of it gives."""

    def __init__(self, root: Path, commits: int) -> None:
        self.root = root
        self.pristine = root / "pristine"
        self.info = build_store(self.pristine, commits)
        self.copies = 0
        self.before = refs_at(self.pristine)
        assert {"refs/heads/main", "refs/heads/side", "refs/tags/v7"} <= set(self.before)
        assert any(k.startswith("refs/deleted/") for k in self.before)
        # The reference run: the same child, nothing killed; it also counts every hooked call.
        ref = self.copy()
        rc, lines, err = run_child(CHILD, str(ref), "none", "0", "none", json.dumps(PATHS), json.dumps(TEXT), json.dumps(METHODS))
        assert rc == 0, err
        result = json.loads(lines[-1])
        assert result["verified"] is True
        self.counts: dict[str, int] = result["counts"]
        self.seconds: float = result["seconds"]
        self.after = refs_at(ref)
        assert {"refs/heads/early", "refs/tags/t-early"} <= set(self.before)
        assert not {"refs/heads/early", "refs/tags/t-early"} & set(self.after)  # deleted: nothing was left on them
        assert self.after["refs/heads/main"] != self.before["refs/heads/main"]
        assert self.after["refs/heads/side"] != self.before["refs/heads/side"]

    def copy(self) -> Path:
        self.copies += 1
        dest = self.root / f"copy{self.copies}"
        shutil.copytree(self.pristine, dest)
        return dest


async def check_after_kill(prep: Prepared, loc: Path, label: str, *, reclaimed: bool) -> str:
    """The store a kill left: open, fsck-clean, wholly before or wholly after; then the purge
    run again finishes the job. Returns "before" or "after". ``reclaimed``: the kill came
    after ``reclaim()`` returned (the bytes must be gone too, not only the objects)."""
    old = prep.info["sentinel_commit"]
    async with Store(str(loc)) as store:
        assert await store.fsck() == [], label
        refs = all_refs(store)
        record = store.repo.backend.get_ref(PURGES_REF)
        if refs == prep.before:
            state = "before"
            assert record is None, f"{label}: the refs are as before, but a purge record was committed"
            assert SENTINEL in (await store.read(SECRET, rev=old) or ""), label
            assert await store.rewritten(old) is None, label
            assert await store.verify_purged(text=TEXT) != [], label  # the control: the scan finds it
        else:
            state = "after"
            assert refs == prep.after, f"{label}: the refs are neither before ({prep.before}) nor after ({prep.after}) the purge: {refs}"
            assert record is not None, f"{label}: the refs moved with no purge record"
            assert purge_scan.scan_objects(store.repo, [SENTINEL.encode()]) == [], label
            found = await store.verify_purged(text=TEXT)
            if reclaimed:
                assert found == [], label
            else:
                # Killed between the COMMIT and the end of reclaim(): nothing memrev reads holds
                # the sentinel, but the database file's old pages may (the WAL was not copied
                # in, VACUUM did not run): the purge run again reclaims them (docs/purge.md).
                assert all(f.startswith("file ") for f in found), (label, found)
            moved = await store.rewritten(old)
            assert moved is not None and moved.new is not None, label
            assert await store.read(SECRET, rev=old) == "top\nkey: [purged]\nbottom\n", label
            assert await store.read("/private/diary-0.md") is None, label
        # Run the same purge again: it finishes the job.
        report = await store.purge(paths=PATHS, text=TEXT, reason="crash test, again")
        assert report.verified, f"{label}: {report.found}"
        if state == "after":
            assert (report.commits_rewritten, report.commits_dropped, report.record) == (0, 0, None), label
        assert await store.verify_purged(text=TEXT) == [], label
        assert await store.fsck() == [], label
        assert all_refs(store) == prep.after, label
        records = await store.log(rev=PURGES_REF)
        assert len(records) == 1, f"{label}: {len(records)} purge records"
        assert await store.read(SECRET, rev=old) == "top\nkey: [purged]\nbottom\n", label
    return state


def kill_plans(counts: dict[str, int], per_method: int | None) -> list[tuple[str, int, str]]:
    """(method, n, before|after) for the first, the last and up to ``per_method`` evenly spread calls."""
    plans = []
    for name in [*METHODS, "vacuum"]:
        total = counts.get(name, 0)
        if not total:
            continue
        ns = {1, total}
        if per_method is None:
            ns = set(range(1, total + 1))
        else:
            ns |= {1 + (total - 1) * k // max(1, per_method - 1) for k in range(per_method)}
        for n in sorted(ns):
            for when in ("before", "after") if name != "vacuum" else ("at",):
                plans.append((name, n, when))
    return plans


async def run_kills(prep: Prepared, plans: list[tuple[str, int, str]], parallel: int = 4) -> dict[str, int]:
    states = {"before": 0, "after": 0}
    for start in range(0, len(plans), parallel):
        batch = plans[start : start + parallel]
        running = []
        for name, n, when in batch:
            loc = prep.copy()
            args = (str(loc), name, str(n), when, json.dumps(PATHS), json.dumps(TEXT), json.dumps(METHODS))
            reclaimed = name == "iter_blobs" or (name, when) == ("reclaim", "after")
            running.append((loc, f"kill {when} {name} #{n}", reclaimed, spawn(CHILD, *args)))
        for loc, label, reclaimed, p in running:
            _out, err = p.communicate(timeout=120)
            assert p.returncode == -signal.SIGKILL, f"{label}: the child was not killed (exit {p.returncode}):\n{err}"
            states[await check_after_kill(prep, loc, label, reclaimed=reclaimed)] += 1
            shutil.rmtree(loc)
    return states


# --------------------------------------------------------------------------- the kills


async def test_kill_9_right_before_and_right_after_the_purge_commits(tmp_path: Path):
    """The two instants that matter most: the last write inside the transaction, and the COMMIT done."""
    prep = Prepared(tmp_path, 30)
    assert prep.counts["set_index_fresh"] == 1 and prep.counts["_after_commit"] == 1
    plans = [("set_index_fresh", 1, "after"), ("_after_commit", 1, "before"), ("reclaim", 1, "after")]
    states = await run_kills(prep, plans, parallel=3)
    assert states == {"before": 1, "after": 2}


@pytest.mark.slow
async def test_kill_9_at_every_backend_call_of_a_purge(tmp_path: Path):
    """Before and after the first, last and 6 spread calls of every backend method a purge
    calls, and at spread instants of VACUUM."""
    prep = Prepared(tmp_path, 60)
    must = {"put_tree", "put_blob", "put_commit", "set_ref_if_equals", "delete_ref", "delete_unreachable",
            "clear_indexes", "change_put", "_after_commit", "reclaim", "vacuum", "iter_blobs"}
    assert must <= set(prep.counts), prep.counts  # every phase is hit
    plans = kill_plans(prep.counts, per_method=6)
    assert len(plans) > 60, prep.counts
    states = await run_kills(prep, plans)
    assert states["before"] and states["after"], states
    assert sum(states.values()) == len(plans)


@pytest.mark.slow
async def test_kill_9_at_random_instants_of_a_purge(tmp_path: Path):
    """The parent kills the child at seeded random delays over the purge's duration.

    The window is the prepared purge's duration, shrunk after each trial whose purge finished
    first: on a machine whose load changes, a purge that ran slower in the preparation than in
    the trials left most kills after the end (CI: 15 of 24 finished)."""
    prep = Prepared(tmp_path, 400)
    rng = random.Random(f"{SEED}-timer")
    states = {"before": 0, "after": 0, "finished": 0}
    window = prep.seconds * 1.1
    for trial in range(24):
        loc = prep.copy()
        p = spawn(CHILD, str(loc), "none", "0", "none", json.dumps(PATHS), json.dumps(TEXT), json.dumps(METHODS))
        assert p.stdout is not None
        assert p.stdout.readline() == "ready\n", p.stderr.read() if p.stderr else ""
        time.sleep(rng.uniform(0, window))
        os.kill(p.pid, signal.SIGKILL)
        _out, err = p.communicate(timeout=60)
        label = f"timer trial {trial}"
        if p.returncode == 0:
            states["finished"] += 1
            window *= 0.7
        else:
            assert p.returncode == -signal.SIGKILL, f"{label}: exit {p.returncode}\n{err}"
        state = await check_after_kill(prep, loc, label, reclaimed=p.returncode == 0)
        if p.returncode != 0:
            states[state] += 1
        shutil.rmtree(loc)
    assert states["before"] + states["after"] >= 12, states


# --------------------------------------------------------------------------- other processes

WRITER = r"""
import asyncio, os, sys
from memrev import Store, errors

loc, stop = sys.argv[1], sys.argv[2]


async def main():
    store = Store(loc, author="writer")
    print("ready", flush=True)
    n = 0
    while not os.path.exists(stop):
        if n % 2:  # onto the log that held the sentinel (its append base: a version the purge rewrote)
            await store.append("/log/run.jsonl", f"writer {n}\n")
        else:
            await store.write(f"/w/{n}.md", f"writer {n}\n", message=f"writer {n}")
        print(f"ack {n} {await store.resolve('HEAD')}", flush=True)
        n += 1
    store.close()


asyncio.run(main())
"""

READER = r"""
import asyncio, os, sys
from memrev import Store, errors

loc, stop, path, old = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


async def main():
    store = Store(loc, author="reader")  # opened before the purge, its caches warm
    print("ready", flush=True)
    while not os.path.exists(stop):
        print(repr((await store.read(path), await store.read(path, rev=old))), flush=True)
    store.close()


asyncio.run(main())
"""


def wait_lines(child: _Child, count: int, timeout: float = 60) -> list[str]:
    """The child's first ``count`` output lines, once it has printed them."""
    deadline = time.monotonic() + timeout
    with child._cv:
        while len(child.lines) < count and not child.eof and time.monotonic() < deadline:
            child._cv.wait(max(0.0, deadline - time.monotonic()))
        assert len(child.lines) >= count, f"the child printed {len(child.lines)} lines, not {count}:\n{child.stderr}"
        return [line.rstrip("\n") for line in child.lines[:count]]


async def test_a_purge_among_a_writer_and_a_reader_loses_no_acknowledged_commit(tmp_path: Path):
    loc = tmp_path / "store"
    info = build_store(loc, 60)
    stop = tmp_path / "stop"
    # what the reader prints: the file at the head and at the revision that wrote it
    old_text, new_text = f"top\nkey: {SENTINEL}\nbottom\n", "top\nkey: [purged]\nbottom\n"
    old = repr((old_text, old_text))
    writer = _Child(WRITER, str(loc), str(stop))
    reader = _Child(READER, str(loc), str(stop), SECRET, info["sentinel_commit"])
    try:
        # both are going: the writer has committed, the reader has read
        assert [line.split()[:2] for line in wait_lines(writer, 3)[1:]] == [["ack", "0"], ["ack", "1"]]
        assert wait_lines(reader, 2) == ["ready", old]
        async with Store(str(loc), author="purger") as store:
            # Inside the purge's write transaction, once the history is rewritten: the reader
            # reads on (the old version; nothing is committed yet) while the writer waits.
            backend = store.repo.backend
            real_delete = backend.delete_unreachable
            during: list[str] = []

            def delete_unreachable(table, keep):
                if not during:
                    with reader._cv:
                        seen = len(reader.lines)
                    during.extend(wait_lines(reader, seen + 5)[seen:])
                return real_delete(table, keep)

            backend.delete_unreachable = delete_unreachable
            report = await store.purge(paths=PATHS, text=TEXT, reason="while others work")
            backend.delete_unreachable = real_delete
            assert during == [old] * 5
            assert report.verified, report.found
            purged_head = await store.resolve("HEAD")
            # the writer makes a few commits after the purge, the reader reads the new version
            with writer._cv:
                acks = len(writer.lines)
            wait_lines(writer, acks + 5)
            with reader._cv:
                reads = len(reader.lines)
            wait_lines(reader, reads + 5)
            stop.touch()
            assert writer.reap() == 0, writer.stderr
            assert reader.reap() == 0, reader.stderr
            assert writer.stderr == reader.stderr == ""
            acked = [int(line.split()[1]) for line in writer.lines[1:]]
            assert acked == list(range(len(acked)))

            log = await store.log()
            messages = [c.message for c in log]
            files = await store.list("/w")
            appended = [line for line in (await store.read("/log/run.jsonl") or "").splitlines() if line.startswith("writer ")]
            assert appended == [f"writer {n}" for n in acked if n % 2], "acknowledged appends lost or out of order"
            for n in acked:
                if n % 2:
                    assert "append /log/run.jsonl" in messages
                    continue
                assert f"writer {n}" in messages, f"acknowledged commit {n} is lost"
                assert f"{n}.md" in files and await store.read(f"/w/{n}.md") == f"writer {n}\n"
            # the commits made after the purge sit on the purged head, as they were made
            ids = [c.id for c in log]
            assert purged_head in ids
            after = log[: ids.index(purged_head)]
            assert after and all(c.author == "writer" for c in after)
            before = [c for c in log[ids.index(purged_head) :] if c.author == "writer"]
            assert len(before) >= 2, "the writer's commits before the purge are not in the purged history"
            assert len(after) + len(before) == len(acked)
            # the id each write reported resolves to its commit (through the purge map if rewritten)
            by_id = {c.id: c for c in log}
            rewritten = 0
            for line in writer.lines[1:]:
                _ack, n, made = line.split()
                now = await store.resolve(made)
                want = "append /log/run.jsonl" if int(n) % 2 else f"writer {n}"
                assert by_id[now].message == want, (n, made, now)
                rewritten += now != made
            assert rewritten >= 1, "no id reported before the purge was rewritten"
            assert await store.verify_purged(text=TEXT) == []
            assert await store.fsck() == []

        # The reads in the order they were made (each line: the head's, then the old revision's):
        # each the whole old or the whole new version, and never the old one once one saw the new.
        reads = [text for line in reader.lines[1:] for text in ast.literal_eval(line)]
        assert set(reads) <= {old_text, new_text}, set(reads) - {old_text, new_text}
        assert new_text in reads, "the reader never read after the purge"
        assert old_text not in reads[reads.index(new_text) :], "the reader read the purged version after it saw the new one"
        assert reads[-2:] == [new_text, new_text]
    finally:
        stop.touch()
        for c in (writer, reader):
            if c.p.poll() is None:
                c.kill()


async def test_a_reader_holding_its_snapshot_delays_only_the_reclaiming(tmp_path: Path):
    """Another connection keeps a read snapshot open through the purge: the history is rewritten
    and committed, the WAL cannot be cut (``TransientConflict`` once the busy timeout, shortened
    here, is over; it says the purge is committed), and the same purge run again, once the
    reader is done, reclaims and verifies."""
    loc = tmp_path / "store"
    info = build_store(loc, 30)
    old = info["sentinel_commit"]
    async with Store(str(loc)) as purger, Store(str(loc)) as reader:
        before = all_refs(purger)
        assert SENTINEL in (await reader.read(SECRET, rev=old) or "")
        purger.repo.backend._busy_ms = 300
        snapshot = reader.repo.backend.read_snapshot()
        snapshot.__enter__()
        try:
            reader.repo.backend.get_ref("refs/heads/main")  # the snapshot starts with its first read
            with pytest.raises(errors.TransientConflict, match="the purge is committed"):
                await purger.purge(paths=PATHS, text=TEXT, reason="a reader in the way")
        finally:
            snapshot.__exit__(None, None, None)
        assert all_refs(purger) != before
        assert purge_scan.scan_objects(purger.repo, [SENTINEL.encode()]) == []
        assert await purger.fsck() == []
        assert await reader.read(SECRET, rev=old) == "top\nkey: [purged]\nbottom\n"
        report = await purger.purge(paths=PATHS, text=TEXT, reason="a reader in the way, again")
        assert report.verified, report.found
        assert (report.commits_rewritten, report.commits_dropped, report.record) == (0, 0, None)
        assert await purger.verify_purged(text=TEXT) == []
        assert await purger.fsck() == []


@pytest.mark.slow
async def test_kill_9_during_a_purge_while_another_process_commits(tmp_path: Path):
    """A writer commits in a loop (files of its own, appends to the sentinel's log) while the
    purge is killed: the store is wholly before or after the purge as far as the purge goes
    (the side branch, which only the purge moves; the sentinel's objects), no acknowledged
    commit is lost, and the purge run again finishes the job with the writer's work kept."""
    prep = Prepared(tmp_path, 40)
    plans = [
        ("put_commit", 3, "after"),
        ("delete_unreachable", 1, "before"),
        ("set_index_fresh", 1, "after"),
        ("_after_commit", 1, "before"),
        ("secure_delete", 2, "after"),
        ("vacuum", max(1, prep.counts["vacuum"] // 2), "at"),
        ("reclaim", 1, "after"),
        ("iter_blobs", 1, "before"),
    ]
    states = {"before": 0, "after": 0}
    for name, n, when in plans:
        label = f"kill {when} {name} #{n} with a writer"
        loc = prep.copy()
        stop = loc.parent / f"{loc.name}.stop"
        writer = _Child(WRITER, str(loc), str(stop))
        try:
            wait_lines(writer, 3)  # it commits
            args = (str(loc), name, str(n), when, json.dumps(PATHS), json.dumps(TEXT), json.dumps(METHODS))
            p = spawn(CHILD, *args)
            _out, err = p.communicate(timeout=120)
            assert p.returncode == -signal.SIGKILL, f"{label}: exit {p.returncode}\n{err}"
            with writer._cv:
                acks = len(writer.lines)
            wait_lines(writer, acks + 3)  # and goes on committing after the kill
            async with Store(str(loc)) as store:
                assert await store.fsck() == [], label
                purged = store.repo.backend.get_ref(PURGES_REF) is not None
                side = all_refs(store)["refs/heads/side"]
                left = purge_scan.scan_objects(store.repo, [SENTINEL.encode()])
                if purged:
                    assert side == prep.after["refs/heads/side"] and left == [], label
                else:
                    assert side == prep.before["refs/heads/side"] and left != [], label
                states["after" if purged else "before"] += 1
                report = await store.purge(paths=PATHS, text=TEXT, reason="crash test, again")
                assert report.verified, (label, report.found)
            stop.touch()
            assert writer.reap() == 0 and writer.stderr == "", f"{label}: {writer.stderr}"
            async with Store(str(loc)) as store:
                acked = [int(line.split()[1]) for line in writer.lines[1:]]
                assert acked == list(range(len(acked))) and len(acked) >= 6, label
                log = await store.read("/log/run.jsonl") or ""
                assert [ln for ln in log.splitlines() if ln.startswith("writer ")] == [f"writer {k}" for k in acked if k % 2], label
                for k in acked:
                    if not k % 2:
                        assert await store.read(f"/w/{k}.md") == f"writer {k}\n", (label, k)
                assert await store.verify_purged(text=TEXT) == [], label
                assert await store.fsck() == [], label
                assert all_refs(store)["refs/heads/side"] == prep.after["refs/heads/side"], label
        finally:
            stop.touch()
            if writer.p.poll() is None:
                writer.kill()
        shutil.rmtree(loc)
    assert states["before"] and states["after"], states
