"""Adversarial review of gc, fsck, checkpoints and crash recovery (session of 2026-12-01).

Each test here failed on the code before the fix it names (docs/reliability.md, D24 on):
gc while other handles commit, kill -9 during gc / checkpoints / fsck, fsck on real
damage on both backends, the WAL guard, and the event loop during whole-store work.
Real SQLite files and the real PostgreSQL server the tests start; no mocks.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import memrev
import memrev.maintenance.fsck
from helpers import spawn
from memrev import VersionedStore
from memrev.backends import memory, open_backend
from memrev.cli import main
from memrev.repo.ops import Write
from memrev.repo.repository import Repository

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "store")
    return request.getfixturevalue("pg_url")


async def _collect_deleted(store: VersionedStore, name: str) -> dict[str, int]:
    """Delete branch ``name`` and collect at once what only it reached."""
    await store.delete_branch(name)
    time.sleep(0.002)  # the deleted ref's time must be in the past for keep_seconds=0
    return await store.gc(keep_seconds=0)


# --------------------------------------------------------------------------- D24


async def test_an_append_piece_another_handle_collected_is_stored_again(location):
    """D24: a handle that read an append piece (its row cached) and then appends the same
    bytes to the same base after another handle's gc collected that piece: the commit must
    store the piece again. Before, ``store_append`` took the cached row for proof the piece
    was stored and committed a tree naming a missing blob: the acknowledged append was lost
    to every other reader (fsck: "names blob ..., which is missing")."""
    a = VersionedStore(location)
    b = VersionedStore(location)
    try:
        await a.write("/log.md", "first line of the log\n")
        side = await a.branch("side")
        await side.append("/log.md", "done\n")
        side.close()
        assert await a.read("/log.md", rev="side") == "first line of the log\ndone\n"  # a caches the piece's row
        removed = await _collect_deleted(b, "side")
        assert removed["blobs"] == 1  # the piece only "side" reached
        await a.append("/log.md", "done\n")  # the same bytes on the same base: the same piece id
        assert await b.fsck() == []
        c = VersionedStore(location)  # a reader with nothing cached
        try:
            assert await c.read("/log.md") == "first line of the log\ndone\n"
        finally:
            c.close()
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------- D25


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def any_location(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "store")
    elif request.param == "postgres":
        yield request.getfixturevalue("pg_url")
    else:
        name = f"review-gc-{tmp_path.name}-{id(tmp_path)}"
        yield f"memory://{name}"
        memory.drop(name)


async def test_fsck_while_another_handle_commits_finds_nothing_on_every_backend(any_location, monkeypatch):
    """D25 (D17 on the other backends): fsck scans the blobs, then the change index, then
    the commits. On PostgreSQL and the memory backend each scan read the store as it was
    at that moment, so a commit another handle made in between had a tree naming a blob
    the blob scan never met, and a sound store was reported damaged ("names blob ...,
    which is missing" / "change index ... disagrees")."""
    store = VersionedStore(any_location)
    other = Repository(open_backend(any_location))
    try:
        for i in range(3):
            await store.write("/notes.md", f"version {i}\n")
        scan_commits = memrev.maintenance.fsck._Fsck._check_commits
        landed = []

        def commit_meanwhile(self):
            landed.append(other.commit("main", [Write("/late.md", b"written while fsck ran\n")], author="t").id)
            return scan_commits(self)

        monkeypatch.setattr(memrev.maintenance.fsck._Fsck, "_check_commits", commit_meanwhile)
        assert await store.fsck() == []
        assert landed and landed[0] is not None
        monkeypatch.setattr(memrev.maintenance.fsck._Fsck, "_check_commits", scan_commits)
        assert await store.read("/late.md") == "written while fsck ran\n"
        assert await store.fsck() == []  # the late commit is checked by the next run
    finally:
        other.backend.close()
        store.close()


# --------------------------------------------------------------------------- D26


class _Raw:
    """SQL straight at the store's tables (the damage a disk or a hand can do), both backends."""

    def __init__(self, location: str) -> None:
        self.location = location

    def q(self, sql: str, args: tuple = ()) -> list[tuple]:
        if self.location.startswith("postgresql://"):
            import psycopg

            with psycopg.connect(self.location, autocommit=True) as conn:
                cur = conn.execute(sql, args)
                return cur.fetchall() if cur.description else []
        conn = sqlite3.connect(Path(self.location) / "memrev.db")
        try:
            with conn:
                cur = conn.execute(sql.replace("%s", "?"), args)
                return cur.fetchall()
        finally:
            conn.close()


async def _fsck_cli(location: str) -> tuple[int, str]:
    """``memrev fsck`` (the CLI runs its own event loop: in a thread, off this one)."""
    result = await asyncio.to_thread(CliRunner().invoke, main, ["--store", location, "fsck"])
    return result.exit_code, result.output


async def test_fsck_reports_a_head_index_row_that_names_an_older_change(location):
    """D26: the head index's commit number for a path is where ``log(path)`` at the head
    starts (and what the next commit links its change row to). A row naming an older
    change of the path hid the newer versions from ``log`` while fsck (and the CLI, exit
    0) called the store sound; the next commit then wrote the wrong link."""
    async with VersionedStore(location) as s:
        for i in range(4):
            await s.write("/notes.md", f"version {i}\n")
            await s.write("/other.md", f"other {i}\n")
        assert len(await s.log("/notes.md")) == 4 and await s.fsck() == []
    raw = _Raw(location)
    older = raw.q("SELECT seq FROM changes WHERE path = '/notes.md' ORDER BY seq")[1][0]
    raw.q("UPDATE head SET seq = %s WHERE branch = 'main' AND path = '/notes.md'", (older,))
    async with VersionedStore(location) as s:
        assert len(await s.log("/notes.md")) == 2  # what the lying row does to a reader
        problems = await s.fsck()
        assert len(problems) == 1 and "head index of branch main" in problems[0] and "/notes.md" in problems[0]
    code, output = await _fsck_cli(location)
    assert code == 1 and "/notes.md" in output
    async with VersionedStore(location) as s:
        await s.reindex()  # what fsck --repair does
        assert await s.fsck() == [] and len(await s.log("/notes.md")) == 4


async def test_fsck_reports_a_directory_key_or_tombstone_row_that_lies(location):
    """D26's siblings: the head rows fsck's content check skips (a folder's directory key,
    a deleted file's tombstone) carry the same commit number, which the next commit
    under the folder, or re-creating the file, links to; they were never checked."""
    async with VersionedStore(location) as s:
        await s.write("/dir/a.md", "a\n")
        await s.write("/gone.md", "soon deleted\n")
        await s.write("/dir/b.md", "b\n")
        await s.delete("/gone.md")
        assert await s.fsck() == []
    raw = _Raw(location)
    first = raw.q("SELECT min(seq) FROM changes")[0][0]
    for path in ("/dir/", "/gone.md"):
        rows = raw.q("SELECT seq FROM head WHERE branch = 'main' AND path = %s", (path,))
        assert rows and rows[0][0] != first, path
    raw.q("UPDATE head SET seq = %s WHERE branch = 'main' AND path IN ('/dir/', '/gone.md')", (first,))
    async with VersionedStore(location) as s:
        problems = await s.fsck()
    assert len(problems) == 1 and "at 2 paths" in problems[0], problems
    assert (await _fsck_cli(location))[0] == 1


# --------------------------------------------------------------------------- D27


async def test_fsck_reports_a_first_parent_link_that_lies_and_repair_rebuilds_it(location):
    """D27: ``HEAD~n`` (and PostgreSQL's server-side history lookups) follow the commits'
    stored first-parent link, apart from the hash-checked record. A link naming another
    commit made ``HEAD~1`` the root commit: reads, diffs and reverts there silently used
    the wrong revision, while fsck called the store sound and ``fsck --repair`` kept it."""
    async with VersionedStore(location) as s:
        for i in range(4):
            await s.write("/a.md", f"version {i}\n")
        log = [c.id for c in await s.log()]
    raw = _Raw(location)
    raw.q("UPDATE commits SET parent_seq = (SELECT min(seq) FROM commits) WHERE seq = (SELECT max(seq) FROM commits)")
    async with VersionedStore(location) as s:
        assert await s.resolve("HEAD~1") == log[-1]  # what the lying link does to a reader
        problems = await s.fsck()
        assert len(problems) == 1 and "first-parent links" in problems[0] and log[0][:10] in problems[0], problems
    assert (await _fsck_cli(location))[0] == 1
    async with VersionedStore(location) as s:
        await s.reindex()
        assert await s.resolve("HEAD~1") == log[1] and await s.read("/a.md", rev="HEAD~1") == "version 2\n"
        assert await s.fsck() == []


# --------------------------------------------------------------------------- gc beside writer processes

WRITER = r"""
import asyncio, json, sys, time
from memrev import VersionedStore, revisions

async def collected(store, name):
    # until a gc (another process, keep_seconds=0) removed the deleted branch's ref
    for _ in range(3000):
        if not any(r.startswith(f"{revisions.DELETED_PREFIX}{name}@") for r in store.repo.backend.list_refs(revisions.DELETED_PREFIX)):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"no gc collected {name}")

async def main(loc, me, n):
    main_ = VersionedStore(loc)
    own = await main_.branch(f"w{me}")
    await own.write("/shared.md", f"writer {me}\n")
    for k in range(n):
        def ack(path, text, commit):
            print(json.dumps([commit, path, text]), flush=True)
        op = k % 4
        if op == 0:  # D24: the same bytes appended on a collected side branch, then here
            side = await own.branch(f"s{me}-{k}")
            await side.append("/shared.md", f"line {k}\n")
            side.close()
            await own.read("/shared.md", rev=f"s{me}-{k}")
            await own.delete_branch(f"s{me}-{k}")
            await collected(own, f"s{me}-{k}")
            await own.append("/shared.md", f"line {k}\n")
            ack("/shared.md", await own.read("/shared.md"), await own.head())
        elif op == 1:  # content of a collected branch written again here
            text = f"scratch {me} {k}\n" * 20
            b = await own.branch(f"b{me}-{k}")
            await b.write("/scratch.md", text)
            b.close()
            await own.delete_branch(f"b{me}-{k}")
            await collected(own, f"b{me}-{k}")
            await own.write("/scratch.md", text)
            ack("/scratch.md", text, await own.head())
        elif op == 2:  # the branch every writer shares
            await main_.append("/main.log", f"{me}:{k}\n")
            ack(None, None, await main_.head())
        else:
            await own.tag(f"t{me}-{k}")
    own.close(); main_.close()
    print("done", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""

COLLECTOR = r"""
import asyncio, os, sys
from memrev import VersionedStore

async def main(loc, stop):
    s = VersionedStore(loc)
    runs = 0
    while not os.path.exists(stop):
        await s.gc(keep_seconds=0)
        runs += 1
        await asyncio.sleep(0.01)
    s.close()
    print(runs, flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.slow
async def test_gc_in_a_loop_beside_writer_processes_loses_no_acknowledged_write(location, tmp_path):
    """gc (keep_seconds=0) in a loop in one process, three writer processes reusing by content
    address what gc collects (D24's append piece, a collected branch's file), sharing a
    branch, tagging; fsck in a loop in this process meanwhile. Every acknowledged write reads
    back at its commit; fsck is never wrong while they run and clean after. On PostgreSQL
    before D24/D25 this found commits naming missing blobs (gc then failed) and fsck
    reporting damage."""
    async with VersionedStore(location) as s:
        await s.write("/main.log", "start\n")
    stop = tmp_path / "stop"
    collector = spawn(COLLECTOR, location, str(stop))
    writers = [spawn(WRITER, location, str(i), "16") for i in range(3)]
    problems: list[list[str]] = []
    try:
        async with VersionedStore(location) as checker:
            while any(w.poll() is None for w in writers):
                found = await checker.fsck()
                if found:
                    problems.append(found)
        outs = []
        for w in writers:
            out, err = w.communicate(timeout=300)
            assert w.returncode == 0, err[-3000:]
            outs.append(out)
        stop.touch()
        out, err = collector.communicate(timeout=120)
        assert collector.returncode == 0, err[-3000:]
        assert int(out.strip()) > 0
    finally:
        stop.touch()
        for p in [collector, *writers]:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert problems == []
    acks = [json.loads(line) for out in outs for line in out.splitlines() if line.startswith("[")]
    assert len(acks) == 3 * 12
    async with VersionedStore(location) as s:
        for commit, path, text in acks:
            assert commit is not None
            if path is not None:
                assert await s.read(path, rev=commit) == text, (commit, path)
        assert await s.fsck() == []
        assert len((await s.read("/main.log")).splitlines()) == 1 + 3 * 4


# --------------------------------------------------------------------------- D28


async def _merged_history(location: str) -> dict[str, int]:
    """main: /a.md made, /b.md changed; side: /a.md changed twice; side merged into main.
    Returns the commit numbers of the rows the tests damage."""
    async with VersionedStore(location) as s:
        await s.write("/a.md", "first\n")
        side = await s.branch("side")
        await side.write("/a.md", "side 1\n")
        await side.write("/a.md", "side 2\n")
        side.close()
        await s.write("/b.md", "b\n")
        await s.write("/a.md", "main 2\n")
        await s.merge("side", strategy="theirs")
        assert [c.message for c in await s.log("/a.md")][1:] == ["write /a.md"] * 4
        assert await s.fsck() == []
    raw = _Raw(location)
    seqs = [r[0] for r in raw.q("SELECT seq FROM changes WHERE path = '/a.md' ORDER BY seq")]
    return {"first": seqs[0], "side1": seqs[1], "main2": seqs[3], "merge": seqs[4]}


async def test_fsck_reports_a_second_link_on_a_commit_that_is_no_merge(location):
    """D28: only a merge's change rows may link to a second line (``prev2``). fsck judged
    ``prev2`` on merges only, so a row of an ordinary commit that gained one put another
    branch's change of the path into ``log(path)`` while fsck called the store sound."""
    n = await _merged_history(location)
    raw = _Raw(location)
    raw.q("UPDATE changes SET prev2 = %s WHERE path = '/a.md' AND seq = %s", (n["side1"], n["main2"]))
    async with VersionedStore(location) as s:
        assert len(await s.log("/a.md", rev="HEAD~1")) == 3  # main's two versions, and side's first
        problems = await s.fsck()
    assert len(problems) == 1 and "per-path history links are wrong at 1 changes" in problems[0], problems


async def test_fsck_reports_a_merges_second_link_cut(location):
    """D28: a merge row's ``prev2`` is the path's last change seen from the second parent;
    fsck skipped the rows where it was empty, so a link cut (set to nothing) left the merged
    branch's versions out of ``log(path)`` while fsck called the store sound."""
    n = await _merged_history(location)
    raw = _Raw(location)
    raw.q("UPDATE changes SET prev2 = NULL WHERE path = '/a.md' AND seq = %s", (n["merge"],))
    async with VersionedStore(location) as s:
        assert len(await s.log("/a.md")) == 3  # the merge, main's two versions: side's two gone
        problems = await s.fsck()
        assert len(problems) == 1 and "per-path history links are wrong at 1 changes" in problems[0], problems
        await s.reindex()
        assert await s.fsck() == [] and len(await s.log("/a.md")) == 5


async def test_postgres_fsck_after_the_server_dropped_the_connection_reconnects(pg_url):
    """D25's snapshot starts on a connection the server may have dropped (restart,
    failover, idle timeout): nothing is read yet, so it is reopened, as every other read
    does, instead of fsck failing with a raw psycopg error."""
    import psycopg

    async with VersionedStore(pg_url) as s:
        await s.write("/a.md", "a\n")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'memrev' AND datname = current_database()"
            ).fetchall()
        assert killed
        assert await s.fsck() == []
        assert await s.read("/a.md") == "a\n"


# --------------------------------------------------------------------------- kill -9 during gc

GC_THEN_REPORT = r"""
import asyncio, sys, time
from memrev import VersionedStore
from memrev.backends import sqlite

where = sys.argv[2]
delete, after_commit = sqlite.SqliteBackend.delete_unreachable, sqlite.SqliteBackend._after_commit

def deleting(self, table, keep):
    n = delete(self, table, keep)
    if where == "deleting":  # commits deleted, trees and blobs not yet: wait here to be killed
        print("deleting", flush=True)
        time.sleep(60)
    return n

def checkpointing(self, *args, whole_store):
    if whole_store and where == "checkpointing":  # gc committed: killed during the copy or just after
        print("checkpointing", flush=True)
    return after_commit(self, *args, whole_store=whole_store)

sqlite.SqliteBackend.delete_unreachable = deleting
sqlite.SqliteBackend._after_commit = checkpointing

async def main(loc):
    s = VersionedStore(loc)
    print("ready", flush=True)
    await s.gc(keep_seconds=0)
    print("finished", flush=True)

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.slow
async def test_kill_9_during_gc_leaves_the_store_whole(tmp_path):
    """gc deletes in one transaction and then checkpoints the WAL (RESTART): a process
    killed inside its deletes, as its checkpoint starts, or at a random instant leaves the
    store as before gc or as after it, every file readable, fsck clean, and the next gc
    finishes the job. (Found sound: recorded so it stays so.)"""
    pristine = tmp_path / "pristine"
    async with VersionedStore(pristine) as s:
        repo = s.repo
        for i in range(600):
            repo.commit("main", [Write(f"/d{i % 20}/f{i % 150}.md", f"line {i}\n".encode() * 30)], author="t")
        for j in range(8):
            side = await s.branch(f"s{j}")
            for i in range(40):
                side.repo.commit(f"s{j}", [Write(f"/s/{i}.md", f"side {j} {i}\n".encode() * 40)], author="t")
            side.close()
            await s.delete_branch(f"s{j}")
        files = {f"/d{i % 20}/f{i}.md": await s.read(f"/d{i % 20}/f{i}.md") for i in range(150)}
    time.sleep(0.002)
    rnd = random.Random(20261201)
    plans = ["deleting"] * 3 + ["checkpointing"] * 3 + ["random"] * 6
    for trial, where in enumerate(plans):
        folder = tmp_path / f"t{trial}"
        shutil.copytree(pristine, folder)
        child = spawn(GC_THEN_REPORT, str(folder), where)
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        if where == "random":
            time.sleep(rnd.random() * 0.5)
        else:
            assert child.stdout.readline().strip() == where, child.stderr.read()
            time.sleep(rnd.random() * 0.01)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=20)
        async with VersionedStore(folder) as s:
            for path, text in files.items():
                assert await s.read(path) == text, (trial, path)
            assert await s.fsck() == [], trial
            left = len(s.repo.backend.list_refs("refs/deleted/"))
            assert left == {"deleting": 8, "checkpointing": 0}.get(where, left) and left in (0, 8), (trial, where, left)
            await s.gc(keep_seconds=0)
            assert s.repo.backend.list_refs("refs/deleted/") == {} and await s.fsck() == []
        shutil.rmtree(folder)


async def test_postgres_fsck_never_reads_past_its_snapshot_on_a_new_connection(pg_url, monkeypatch):
    """D25: once fsck's snapshot began, a lost connection is an error, never a new
    connection that reads the store as it is later. The connection is dropped inside one
    of fsck's checks (which reports the error and goes on) while another handle commits;
    the next scan reconnected and met that commit's trees, reported as damage ("names
    missing blob")."""
    import psycopg

    store = VersionedStore(pg_url)
    other = Repository(open_backend(pg_url))
    try:
        await store.write("/a.md", "a\n")
        check_links = memrev.maintenance.fsck._Fsck._check_first_parent_links

        def drop_then_commit(self):
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'memrev' AND pid <> pg_backend_pid() AND state = 'idle in transaction'"
                )
            other.commit("main", [Write("/late/new.md", b"written while fsck ran\n")], author="t")
            return check_links(self)

        monkeypatch.setattr(memrev.maintenance.fsck._Fsck, "_check_first_parent_links", drop_then_commit)
        try:
            problems = await store.fsck()
        except memrev.MemrevError as e:
            problems = [str(e)]
        assert problems and all("connection" in p for p in problems), problems
        monkeypatch.setattr(memrev.maintenance.fsck._Fsck, "_check_first_parent_links", check_links)
        assert await store.fsck() == []
    finally:
        other.backend.close()
        store.close()


# --------------------------------------------------------------------------- fsck against an oracle

FUZZ_PATHS = ["/a.md", "/d/b.md", "/d/c.md", "/e/f/g.md", "/log.md"]


async def _history_with_a_merge(folder: Path) -> None:
    async with VersionedStore(folder) as s:
        for i in range(3):
            await s.write("/a.md", f"a{i}\n")
            await s.append("/log.md", f"{i}\n")
        await s.write("/d/b.md", "b\n")
        await s.write("/d/c.md", "c\n")
        side = await s.branch("side")
        await side.write("/e/f/g.md", "g\n")
        await side.write("/a.md", "a-side\n")
        await side.append("/log.md", "side\n")
        await s.write("/d/b.md", "b2\n")
        await s.delete("/d/c.md")
        await s.merge("side", strategy="theirs")
        await side.write("/d/b.md", "b-side\n")
        await s.write("/a.md", "a-main\n")
        side.close()


async def _answers(folder: Path) -> tuple[dict, list[str]]:
    """What readers get from the derived indexes (logs of files and folders, reads at
    HEAD~n, listings, a range, blame, the whole log) on both branches, and fsck's verdict."""

    async def outcome(call):
        try:
            got = await call
        except memrev.MemrevError as e:
            return type(e).__name__
        return [c.id for c in got] if isinstance(got, list) and got and hasattr(got[0], "parents") else got

    out: dict = {}
    async with VersionedStore(folder, create=False) as s:
        for branch in ("main", "side"):
            h = s.on_branch(branch)
            try:
                for path in FUZZ_PATHS:
                    for rev in (None, "HEAD~1", "HEAD~2"):
                        out[branch, path, rev, "log"] = await outcome(h.log(path, rev=rev))
                        out[branch, path, rev, "read"] = await outcome(h.read(path, rev=rev))
                for folder in ("/d", "/e", "/e/f", "/"):
                    out[branch, folder, "log"] = await outcome(h.log(folder))
                    out[branch, folder, "list"] = await outcome(h.list(folder))
                out[branch, "range"] = await outcome(h.read_range("/log.md", 1, 3))
                out[branch, "blame"] = await outcome(h.blame("/a.md"))
                out[branch, "log"] = await outcome(h.log())
            finally:
                h.close()
        return out, await s.fsck()


def _damage_an_index_row(db: Path, rnd: random.Random) -> str:
    """One random lie in the derived data: a head row's number, size or presence; a
    change row's links, number, presence or an invented one; a commit's first-parent link;
    the directory keys' stale marker or the keys themselves."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            table = rnd.choice(["head", "changes", "commits", "stale"])
            if table == "stale":  # the directory keys said stale, or gone without the marker
                if rnd.random() < 0.5:
                    conn.execute("INSERT OR IGNORE INTO stale VALUES ('directory-keys')")
                    return "stale marker set"
                conn.execute("DELETE FROM changes WHERE path LIKE '%/'")
                return "directory keys gone"
            if table == "head":
                branch, path, size = rnd.choice(conn.execute("SELECT branch, path, size FROM head").fetchall())
                how = rnd.choice(["seq", "size", "delete"])
                if how == "delete":
                    conn.execute("DELETE FROM head WHERE branch=? AND path=?", (branch, path))
                elif how == "seq":
                    conn.execute("UPDATE head SET seq=? WHERE branch=? AND path=?", (rnd.randint(1, 20), branch, path))
                else:
                    conn.execute("UPDATE head SET size=? WHERE branch=? AND path=?", (size + rnd.choice([-1, 1, 5]), branch, path))
                return f"head {how} {branch}:{path}"
            if table == "changes":
                path, seq = rnd.choice(conn.execute("SELECT path, seq FROM changes").fetchall())
                how = rnd.choice(["prev", "prev2", "delete", "seq", "insert"])
                if how == "delete":
                    conn.execute("DELETE FROM changes WHERE path=? AND seq=?", (path, seq))
                elif how == "insert":
                    path = rnd.choice([*FUZZ_PATHS, "/d/", "/e/", "/zz.md"])
                    conn.execute("INSERT OR IGNORE INTO changes VALUES (?,?,NULL,NULL)", (path, rnd.randint(1, 20)))
                elif how == "seq":
                    conn.execute("UPDATE OR IGNORE changes SET seq=? WHERE path=? AND seq=?", (rnd.randint(1, 20), path, seq))
                else:
                    value = rnd.choice([None, rnd.randint(1, 20)])
                    conn.execute(f"UPDATE changes SET {how}=? WHERE path=? AND seq=?", (value, path, seq))
                return f"changes {how} {path}@{seq}"
            seq = rnd.choice(conn.execute("SELECT seq FROM commits").fetchall())[0]
            conn.execute("UPDATE commits SET parent_seq=? WHERE seq=?", (rnd.choice([None, rnd.randint(1, 20)]), seq))
            return f"commits parent_seq #{seq}"
    finally:
        conn.close()


@pytest.mark.slow
async def test_any_lie_of_the_derived_indexes_that_a_reader_sees_fsck_reports(tmp_path):
    """The oracle: a pristine store's answers. One random row of the derived data (head
    index, change index, first-parent links) is damaged at a time; whenever a reader's
    answer changed, fsck must report a problem. On main this found D26, D27 and D28
    (8 silent lies in 150 trials); none since."""
    pristine = tmp_path / "pristine"
    await _history_with_a_merge(pristine)
    want, problems = await _answers(pristine)
    assert problems == []
    rnd = random.Random(1)
    silent, reported = [], 0
    for trial in range(150):
        folder = tmp_path / f"t{trial}"
        shutil.copytree(pristine, folder)
        what = _damage_an_index_row(folder / "memrev.db", rnd)
        got, problems = await _answers(folder)
        changed = [k for k in want if got[k] != want[k]]
        if problems:
            reported += 1
        elif changed:
            silent.append((what, changed[:3]))
        shutil.rmtree(folder)
    assert silent == []
    assert reported > 100  # the damage was mostly real, and seen


async def test_blame_over_an_index_naming_a_missing_commit_is_an_integrity_error(location):
    """D29 (found by the oracle above): a head row naming a commit number that is not
    stored made ``blame`` fail with a bare ``KeyError``; damage is an ``IntegrityError``."""
    async with VersionedStore(location) as s:
        await s.write("/a.md", "one\n")
        await s.write("/a.md", "one\ntwo\n")
    _Raw(location).q("UPDATE head SET seq = 999 WHERE branch = 'main' AND path = '/a.md'")
    async with VersionedStore(location) as s:
        with pytest.raises(memrev.IntegrityError, match="#999"):
            await s.blame("/a.md")
        assert len(await s.fsck()) == 1


BLAME = r"""
import asyncio, sys
import memrev
from memrev import VersionedStore

async def main(loc):
    async with VersionedStore(loc) as s:
        try:
            await s.blame("/a.md")
        except memrev.IntegrityError as e:
            print("IntegrityError", e)
        else:
            print("answered")

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.slow  # 0.5-0.8 s each in the quick loop: blame runs in a child process
@pytest.mark.parametrize("link", ["prev", "prev2"])
async def test_blame_over_a_change_index_that_loops_ends_with_an_integrity_error(location, link):
    """D30 (found by the oracle above, widened): a change row linking to itself (or to a
    later change) made ``blame`` loop for ever at full CPU; it walks to older changes only,
    so such a link is damage: ``IntegrityError``. Run in a child process, killed if it hangs."""
    async with VersionedStore(location) as s:
        await s.write("/a.md", "one\n")
        await s.write("/a.md", "one\ntwo\n")
    raw = _Raw(location)
    last = raw.q("SELECT max(seq) FROM changes WHERE path = '/a.md'")[0][0]
    raw.q(f"UPDATE changes SET {link} = %s WHERE path = '/a.md' AND seq = %s", (last, last))
    child = spawn(BLAME, location)
    try:
        out, err = child.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("blame never ended")
    assert out.startswith("IntegrityError") and "links change" in out, (out, err[-2000:])
    async with VersionedStore(location) as s:
        assert len(await s.fsck()) == 1


# --------------------------------------------------------------------------- export under gc


async def test_an_export_reads_one_snapshot_while_another_handle_deletes_and_collects_a_branch(any_location, monkeypatch, tmp_path):
    """The export listed the refs, then read their objects: a branch another handle deleted
    and collected (gc, keep_seconds=0) in between failed it with IntegrityError (found in
    the review of gc). It now reads one snapshot: the branch is exported as it was."""
    import memrev.maintenance.bundles

    store = VersionedStore(any_location)
    other = VersionedStore(any_location)
    try:
        await store.write("/a.md", "on main\n")
        side = await store.branch("side")
        for i in range(3):
            await side.write(f"/side/{i}.md", f"only on side {i}\n")
        side.close()
        real = memrev.maintenance.bundles.export_bundle
        collected = []

        def export_after_a_collection(repo, out, refs, progress=None):
            async def delete_and_collect():
                await other.delete_branch("side")
                return await other.gc(keep_seconds=0)

            # another handle, on its own connection, while this export's refs are listed
            collected.append(asyncio.run_coroutine_threadsafe(delete_and_collect(), loop).result(timeout=60))
            return real(repo, out, refs, progress)

        loop = asyncio.get_running_loop()
        monkeypatch.setattr(memrev.maintenance.bundles, "export_bundle", export_after_a_collection)
        count = await store.export_bundle(tmp_path / "out.bundle")
        assert collected and collected[0]["commits"] == 3, collected  # side's commits were collected meanwhile
        assert count > 0
        monkeypatch.setattr(memrev.maintenance.bundles, "export_bundle", real)
        fresh = VersionedStore(tmp_path / "imported")
        try:
            await fresh.import_bundle(tmp_path / "out.bundle")
            got = fresh.on_branch("side")
            try:
                assert await got.read("/side/2.md") == "only on side 2\n"
            finally:
                got.close()
        finally:
            fresh.close()
    finally:
        other.close()
        store.close()


# --------------------------------------------------------------------------- D-branch race


async def test_a_branch_made_while_another_handle_commits_on_its_source_copies_one_moment(location):
    """``branch`` copies the source branch's head index when the source still points at the
    commit branched from. On PostgreSQL (READ COMMITTED) that check and the copy were two
    statements: a commit on the source between them gave the new branch the head rows of the
    source's *newer* commit (found by the gc loop above, once: fsck said the head index of
    ``w0`` "names the wrong last change" at ``/main.log``). Here another handle commits on the
    source exactly between the two; the source's ref stays locked until the copy is done."""
    async with VersionedStore(location) as s:
        await s.write("/main.log", "start\n")
    store = VersionedStore(location)
    other = VersionedStore(location)
    backend = store.repo.backend
    real = type(backend).head_all
    landed = threading.Event()

    def head_all(self, branch):
        if branch == "main" and not landed.is_set():
            t = threading.Thread(target=lambda: (asyncio.run(_append(other)), landed.set()), daemon=True)
            t.start()
            t.join(2)  # before the fix it landed at once; after, it waits for this transaction
        return real(self, branch)

    backend.head_all = head_all.__get__(backend)
    try:
        w = await store.branch("w0")
        for _ in range(500):  # the other handle's commit lands (after this transaction ends)
            if landed.is_set():
                break
            await asyncio.sleep(0.01)
        assert landed.is_set()
        assert await w.read("/main.log") == "start\n"
        assert await store.read("/main.log") == "start\nmore\n"
        assert await store.fsck() == []
        w.close()
    finally:
        store.close()
        other.close()


async def _append(store: VersionedStore) -> None:
    await store.append("/main.log", "more\n")
