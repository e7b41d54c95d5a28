"""``store.purge`` on a real, throwaway PostgreSQL server (``memrev.testing.fixtures``).

The purge rewrites history in one transaction, then the backend reclaims the
dead row versions (``VACUUM (FULL, ANALYZE)`` of every table of the store,
``VACUUM FULL pg_statistic``, ``pg_switch_wal()``, ``CHECKPOINT``). Checked here
beyond what the engine's own scan sees (on PostgreSQL ``storage_files()`` is
empty: the server's files are not the client's):

* the server's relation files (heap, TOAST, indexes, every fork and segment,
  read under the data directory) hold the purged bytes before the purge (the
  control: file versions in ``blobs``; a large ``meta`` value, stored raw out of
  line, in the commits' TOAST table) and none after, raw or inside a zstd frame
  (a frame split over TOAST chunks cannot be read back from raw bytes: the
  file versions here are small enough to stay in the heap); so do the column
  statistics (``pg_stats``, and ``pg_statistic``'s file) once ANALYZE sampled a
  payload, and every file of the database's directory;
* with ``wal_recycle=off``, no WAL segment (with recycling, the old segments are
  renamed for reuse with their bytes in them: docs/purge.md);
* a handle opened before the purge in another process, asked for an old commit
  id, returns no purged byte.

Also: the reclaim's lock waits (a reader holding a table past the wait is a
``TransientConflict`` saying the purge is committed; running the purge again
reclaims), refused inside a transaction, and by roles that are not superuser
(no ``CHECKPOINT``: skipped) or do not own the tables (``MemrevError``).
"""

from __future__ import annotations

import json
import os
import secrets
import string
import time
from pathlib import Path

import anyio
import psycopg
import pytest

from helpers import spawn
from memrev import VersionedStore
from memrev.errors import MemrevError, TransientConflict
from memrev.maintenance.purge_scan import scan_file

pytestmark = pytest.mark.anyio

WORKING = "/memory/working.md"
OTHER = "/notes/other.md"
N_COMMITS = 50
AT = 5  # the commit that writes the sentinel


def _sentinel() -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))


def _filler(n: int) -> str:
    """Letters pglz cannot shrink by a quarter: a commit carrying them is stored out of line, raw (TOAST)."""
    return "".join(secrets.choice(string.ascii_letters) for _ in range(n))


def _psql(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, args)
        return cur.fetchall() if cur.description else []


def _relations(url: str) -> dict[str, str]:
    """Every relation of the store's schema: name -> file path relative to the data directory.
    Tables, their TOAST tables and the TOAST tables' indexes, the tables' indexes."""
    rows = _psql(
        url,
        """
        WITH t AS (
            SELECT c.oid, c.reltoastrelid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND c.relkind = 'r'
        ), rel AS (
            SELECT oid FROM t
            UNION SELECT reltoastrelid FROM t WHERE reltoastrelid <> 0
            UNION SELECT x.indexrelid FROM pg_index x WHERE x.indrelid IN (SELECT oid FROM t)
            UNION SELECT x.indexrelid FROM pg_index x WHERE x.indrelid IN (SELECT reltoastrelid FROM t)
        )
        SELECT c.relname, pg_relation_filepath(c.oid) FROM pg_class c JOIN rel ON rel.oid = c.oid
        """,
    )
    return dict(rows)


def _checkpoint(pg_server) -> None:
    """What the server holds in shared buffers written to the relation files (as the superuser)."""
    _psql(pg_server.url(), "CHECKPOINT")


def _analyze(url: str) -> None:
    """What autovacuum does now and then: column statistics, sample values included, into pg_statistic."""
    _psql(url, "ANALYZE blobs, trees, commits, refs, head, changes, stale")


def _statistics_hold(url: str, needle: str) -> bool:
    """Whether the live column statistics of the store's tables (pg_stats) hold ``needle``."""
    rows = _psql(
        url,
        "SELECT coalesce(most_common_vals::text, '') || coalesce(histogram_bounds::text, '') FROM pg_stats"
        " WHERE schemaname = current_schema()",
    )
    return any(needle in text or needle.encode().hex() in text for (text,) in rows)


def _statistic_file_hits(pg_server, url: str, needle: str) -> list[str]:
    """pg_statistic's own files (the column statistics of every table of the database, dead versions too)."""
    _checkpoint(pg_server)
    (rel,) = _psql(url, "SELECT pg_relation_filepath('pg_catalog.pg_statistic')")[0]
    return [hit for f in _files_of(pg_server.data, rel) for hit in scan_file(str(f), [needle.encode()])]


def _files_of(data: Path, rel: str) -> list[Path]:
    """A relation's files: its main fork's segments (``N``, ``N.1`` ...) and other forks (``N_fsm``, ``N_vm``)."""
    path = data / rel
    return sorted(p for p in path.parent.iterdir() if p.name == path.name or p.name.startswith((path.name + ".", path.name + "_")))


def _raw_hits(pg_server, url: str, needle: str) -> dict[str, list[str]]:
    """Relation name -> places in its files holding ``needle`` (raw bytes, or inside a zstd frame)."""
    _checkpoint(pg_server)
    out: dict[str, list[str]] = {}
    relations = _relations(url)
    assert {"blobs", "trees", "commits", "refs", "head", "changes", "stale"} <= set(relations)
    assert any(name.startswith("pg_toast_") for name in relations), relations
    for name, rel in relations.items():
        files = _files_of(pg_server.data, rel)
        assert files, f"no file for {name} ({rel}) under {pg_server.data}"
        for f in files:
            found = scan_file(str(f), [needle.encode()])
            if found:
                out.setdefault(name, []).extend(found)
    return out


def _database_dir_hits(pg_server, url: str, needle: str) -> list[str]:
    """Every file of the database's directory (catalogs, old relation files awaiting unlink included)."""
    _checkpoint(pg_server)
    (oid,) = _psql(url, "SELECT oid FROM pg_database WHERE datname = current_database()")[0]
    out: list[str] = []
    for f in sorted((pg_server.data / "base" / str(oid)).iterdir()):
        if f.is_file():
            out += scan_file(str(f), [needle.encode()])
    return out


# A handle opened before the purge, in another process: asked for a revision (an old
# full commit id) and a path, it answers the file's text there and the log's messages
# and meta from that revision.
READER = """
import asyncio, json, sys
from memrev import VersionedStore

async def main():
    async with VersionedStore(sys.argv[1]) as store:
        print("ready", flush=True)
        for line in sys.stdin:
            ask = json.loads(line)
            try:
                text = await store.read(ask["path"], rev=ask["rev"])
                log = [[c.message, c.meta] for c in await store.log(rev=ask["rev"])]
                answer = {"text": text, "log": log}
            except Exception as e:
                answer = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps(answer), flush=True)

asyncio.run(main())
"""


class _Reader:
    def __init__(self, url: str) -> None:
        self.p = spawn(READER, url, stdin=True)
        assert self.p.stdout.readline().strip() == "ready", self.p.stderr.read()

    async def ask(self, rev: str, path: str) -> dict:
        self.p.stdin.write(json.dumps({"rev": rev, "path": path}) + "\n")
        self.p.stdin.flush()
        with anyio.fail_after(120):
            line = await anyio.to_thread.run_sync(self.p.stdout.readline)
        assert line, self.p.stderr.read()
        return json.loads(line)

    def close(self) -> None:
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:  # noqa: BLE001
            self.p.kill()
            self.p.wait()


def _working(i: int, secret: str | None) -> str:
    """Version ``i`` of working.md: 8 lines, one of them edited per commit; the sentinel's line from ``AT`` on."""
    lines = [f"goal {j}: revision {max(0, i - (i - j) % 8)}" for j in range(8)]
    if secret is not None and i >= AT:
        lines[3] = f"api key: {secret}"
    return "\n".join(lines) + "\n"


async def _history(url: str, secret: str, *, everywhere: bool) -> dict[str, str]:
    """50 commits by two authors on main; the sentinel in working.md from commit ``AT`` on and, when
    ``everywhere``, in commit AT's message and meta (a value large enough to be stored in TOAST).
    Then the sentinel on a second branch, a tag, a deleted branch. Returns named revisions."""
    revs: dict[str, str] = {}
    alice = VersionedStore(url, author="alice")
    bob = VersionedStore(url, author="bob")
    try:
        for i in range(1, N_COMMITS + 1):
            who = alice if i % 3 else bob
            if i % 4 == 1:  # another file, edited now and then (its blame must survive the purge)
                await who.write(OTHER, "".join(f"note {k} by {who.author} at {i}\n" for k in range(i % 7 + 1)), message=f"notes {i}")
            message, meta = f"edit {i}", {"turn": i}
            if i == AT and everywhere:
                message = f"stored the key {secret}"
                meta = {"turn": i, "tool_args": f"{_filler(40)} {secret} {_filler(3000)}"}
            await who.write(WORKING, _working(i, secret), message=message, meta=meta)
            if i == AT:
                revs["at"] = await who.resolve("HEAD")
            if i == AT + 2:
                revs["tag"] = await who.tag("v1")
                side = await who.branch("side")
                try:
                    await side.write("/side/copy.md", f"copied: {secret}\n" if everywhere else "copied\n")
                    await side.write(WORKING, _working(i, secret) + "side line\n")
                    revs["side"] = await side.resolve("HEAD")
                finally:
                    side.close()
                gone = await who.branch("gone")
                try:
                    await gone.write(WORKING, _working(i, secret) + f"gone line {secret}\n")
                    revs["gone"] = await gone.resolve("HEAD")
                finally:
                    gone.close()
                await who.delete_branch("gone")
        revs["head"] = await alice.resolve("HEAD")
    finally:
        alice.close()
        bob.close()
    return revs


def _attribution(blame) -> dict[str, tuple]:
    return {ln.text: (ln.commit.author, ln.commit.time, ln.commit.message) for ln in blame}


async def test_purge_text_leaves_no_byte_in_the_server_files(pg_server, pg_url):
    secret = _sentinel()
    revs = await _history(pg_url, secret, everywhere=True)
    reader = _Reader(pg_url)
    try:
        async with VersionedStore(pg_url, author="dpo") as s:
            # --- before: the controls find it everywhere it was put
            assert await s.verify_purged(text=[secret])
            assert [c.id for c in await s.log(WORKING, contains=secret)] == [revs["at"]]
            assert await s.log_all(contains=secret)
            assert await s.find_text(WORKING, secret)
            assert any(ref.startswith("refs/deleted/") for ref in s.repo.backend.list_refs("refs/"))
            blame_before = _attribution(await s.blame(WORKING))
            other_before = _attribution(await s.blame(OTHER))
            raw = _raw_hits(pg_server, pg_url, secret)
            assert "blobs" in raw, raw  # file versions (zstd frames, raw deltas) in the heap
            assert any(name.startswith("pg_toast_") for name in raw), raw  # the big meta value, out of line
            _analyze(pg_url)
            assert _statistics_hold(pg_url, secret)  # a small payload sampled into blobs.data's histogram
            assert _statistic_file_hits(pg_server, pg_url, secret)
            seen = await reader.ask(revs["at"], WORKING)
            assert secret in seen["text"] and secret in json.dumps(seen["log"]), seen

            report = await s.purge(text=[secret], reason="credential committed by mistake (ticket 22)")

            # --- after
            assert report.verified and report.found == (), report.found
            assert report.commits_rewritten > 0 and report.record is not None
            assert report.bytes_before > 0 and report.bytes_after > 0  # pg_total_relation_size of the tables
            assert await s.verify_purged(text=[secret]) == []
            assert await s.fsck() == []
            assert await s.log(WORKING, contains=secret) == []
            assert await s.log_all(contains=secret) == []
            assert await s.find_text(WORKING, secret) == []
            head = await s.read(WORKING)
            assert head is not None and "api key: [purged]" in head and secret not in head
            # lines that never held the sentinel keep their commit's author, time and message
            blame_after = _attribution(await s.blame(WORKING))
            kept = {t: a for t, a in blame_before.items() if secret not in t}
            assert len(kept) == 7 and {t: blame_after[t] for t in kept} == kept
            assert _attribution(await s.blame(OTHER)) == other_before
            assert blame_after["api key: [purged]"][2] == "stored the key [purged]"
            # every old id names the commit it became
            assert revs["at"] in report.id_map and revs["head"] in report.id_map
            for old, new in report.id_map.items():
                assert new is not None  # nothing was left empty: text is replaced, never removed
                assert await s.resolve(old) == new
                assert (await s.rewritten(old)).new == new
            new_at = report.id_map[revs["at"]]
            assert (await s.show(revs["at"])).message == "stored the key [purged]"
            assert (await s.show(new_at)).meta["tool_args"].count("[purged]") == 1
            assert secret not in json.dumps((await s.show(new_at)).meta)
            for name in ("tag", "side", "gone"):
                assert await s.resolve(revs[name]) == report.id_map[revs[name]]
            assert (await s.tags())["v1"] == report.id_map[revs["tag"]]
            assert (await s.branches())["side"] == report.id_map[revs["side"]]
            assert await s.read("/side/copy.md", rev="side") == "copied: [purged]\n"
            assert "gone line [purged]" in (await s.read(WORKING, rev=revs["gone"]))

        # --- the other process's handle, opened before, asked for the old id
        seen = await reader.ask(revs["at"], WORKING)
        assert "error" not in seen, seen
        assert secret not in json.dumps(seen) and "api key: [purged]" in seen["text"], seen
        seen = await reader.ask(revs["gone"], WORKING)
        assert secret not in json.dumps(seen) and "gone line [purged]" in seen["text"], seen
    finally:
        reader.close()

    # --- the server's own files
    assert _raw_hits(pg_server, pg_url, secret) == {}
    assert not _statistics_hold(pg_url, secret)
    assert _statistic_file_hits(pg_server, pg_url, secret) == []
    assert _database_dir_hits(pg_server, pg_url, secret) == []


async def test_purge_paths_leaves_no_byte_in_the_server_files(pg_server, pg_url):
    secret = _sentinel()
    revs = await _history(pg_url, secret, everywhere=False)
    reader = _Reader(pg_url)
    try:
        async with VersionedStore(pg_url, author="dpo") as s:
            assert await s.verify_purged(text=[secret])
            assert [c.id for c in await s.log(WORKING, contains=secret)] == [revs["at"]]
            other_before = _attribution(await s.blame(OTHER))
            log_before = {c.id: c for c in await s.log()}
            raw = _raw_hits(pg_server, pg_url, secret)
            assert "blobs" in raw, raw
            _analyze(pg_url)
            assert _statistics_hold(pg_url, secret) and _statistic_file_hits(pg_server, pg_url, secret)
            seen = await reader.ask(revs["at"], WORKING)
            assert secret in seen["text"], seen

            report = await s.purge(paths=[WORKING], reason="the working notes held a credential")

            assert report.verified and report.found == (), report.found
            assert report.versions_removed > 0 and report.commits_dropped > 0
            assert await s.verify_purged(text=[secret]) == []
            assert await s.fsck() == []
            assert await s.log(WORKING) == []
            assert await s.log_all(contains=secret) == []
            for rev in ("main", "side", "v1"):
                assert await s.read(WORKING, rev=rev) is None
            assert await s.read("/side/copy.md", rev="side") == "copied\n"
            assert _attribution(await s.blame(OTHER)) == other_before
            # a commit that only touched working.md is gone: its old id names its rewritten parent
            for old, new in report.id_map.items():
                assert new is not None  # the first commit wrote notes too: something is under each
                assert await s.resolve(old) == new
            kept = [c for c in (await s.log()) if c.message.startswith("notes ")]
            assert len(kept) == len([c for c in log_before.values() if c.message.startswith("notes ")])
            assert all(WORKING not in c.paths for c in await s.log())

        seen = await reader.ask(revs["at"], WORKING)
        assert "error" not in seen and seen["text"] is None, seen
        seen = await reader.ask(revs["gone"], WORKING)
        assert "error" not in seen and seen["text"] is None, seen
    finally:
        reader.close()

    assert _raw_hits(pg_server, pg_url, secret) == {}
    assert not _statistics_hold(pg_url, secret) and _statistic_file_hits(pg_server, pg_url, secret) == []
    assert _database_dir_hits(pg_server, pg_url, secret) == []


# --------------------------------------------------------------------------
# The reclaim itself
# --------------------------------------------------------------------------


async def _one_secret(url: str) -> str:
    secret = _sentinel()
    async with VersionedStore(url) as s:
        await s.write("/a.md", f"one\n{secret}\n", message="one")
        await s.write("/a.md", "two\n", message="two")
    return secret


async def test_reclaim_gives_up_on_a_reader_that_holds_a_table_and_says_the_purge_is_committed(pg_server, pg_url):
    secret = await _one_secret(pg_url)
    async with VersionedStore(pg_url) as s:
        s.repo.backend.reclaim_wait = 0.5
        with psycopg.connect(pg_url) as reader:  # a reader's open transaction: ACCESS SHARE on blobs
            reader.execute("SELECT count(*) FROM blobs").fetchone()
            with pytest.raises(TransientConflict, match="the purge is committed.*run it again"):
                await s.purge(text=[secret], reason="r")
            reader.rollback()
        # committed: the history no longer holds it, though dead rows may still be in the files
        assert await s.log(contains=secret) == []
        assert (await s.read("/a.md", rev="HEAD~1")) == "one\n[purged]\n"
        again = await s.purge(text=[secret], reason="r")  # nothing to rewrite: reclaims and verifies
        assert again.verified and again.commits_rewritten == 0 and again.record is None
    assert _raw_hits(pg_server, pg_url, secret) == {}


async def test_reclaim_waits_for_a_short_reader(pg_server, pg_url):
    secret = await _one_secret(pg_url)
    async with VersionedStore(pg_url) as s:
        with psycopg.connect(pg_url) as reader:
            reader.execute("SELECT count(*) FROM commits").fetchone()  # held until the rollback below

            async def purge():
                return await s.purge(text=[secret], reason="r")

            async with anyio.create_task_group() as tg:
                result: list = []

                async def run():
                    result.append(await purge())

                tg.start_soon(run)
                with anyio.fail_after(60):
                    while not _psql(
                        pg_url, "SELECT 1 FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'"
                    ):  # the VACUUM FULL is queued behind the reader
                        await anyio.sleep(0.01)
                await anyio.to_thread.run_sync(reader.rollback)
        assert result[0].verified
    assert _raw_hits(pg_server, pg_url, secret) == {}


async def test_reclaim_refused_inside_a_transaction(pg_url):
    async with VersionedStore(pg_url) as s:
        await s.write("/a", "x")
        backend = s.repo.backend
        with backend.write():
            with pytest.raises(MemrevError, match="outside write"):
                backend.reclaim()
        assert backend.storage_files() == []
        assert backend.storage_bytes() > 0


@pytest.fixture
def wal_unlinking_server():
    """A server of its own that unlinks old WAL segments (``wal_recycle=off``) instead of renaming
    them for reuse with their bytes in them; no archive, no replication slot, ``wal_keep_size=0``."""
    from memrev.testing.pgserver import PgServer

    server = PgServer(durable=False)
    try:
        _psql(server.url(), "ALTER SYSTEM SET wal_recycle = off")
        _psql(server.url(), "SELECT pg_reload_conf()")
        for _ in range(6000):  # the reload is asynchronous
            if _psql(server.url(), "SHOW wal_recycle") == [("off",)]:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the server never took wal_recycle=off")
        assert _psql(server.url(), "SELECT current_setting('archive_mode'), current_setting('wal_keep_size'),"
                     " (SELECT count(*) FROM pg_replication_slots)") == [("off", "0", 0)]
        yield server
    finally:
        server.stop()


def _wal_hits(server, needle: str) -> list[str]:
    return [hit for f in sorted((server.data / "pg_wal").iterdir()) if f.is_file() for hit in scan_file(str(f), [needle.encode()])]


async def test_with_wal_recycle_off_no_wal_segment_keeps_the_purged_bytes(wal_unlinking_server):
    server = wal_unlinking_server
    url = server.create_database()
    secret = await _one_secret(url)
    assert _wal_hits(server, secret)  # the inserts' WAL records
    async with VersionedStore(url) as s:
        assert (await s.purge(text=[secret], reason="r")).verified
    # the purge's own DELETEs wrote full-page images of pages holding it: pg_switch_wal() and
    # CHECKPOINT left every such segment behind the redo point, and the server unlinked them
    assert _wal_hits(server, secret) == []
    assert _raw_hits(server, url, secret) == {} and _database_dir_hits(server, url, secret) == []


def _role(pg_server, url: str, name: str) -> str:
    """A LOGIN role (not superuser) with a schema of its own; its URL on ``url``'s database."""
    _psql(url, f'CREATE ROLE "{name}" LOGIN')
    _psql(url, f'CREATE SCHEMA "{name}" AUTHORIZATION "{name}"')  # its search_path's "$user"
    return url.replace("://memrev@", f"://{name}@", 1)


async def test_an_owner_that_may_not_checkpoint_still_reclaims(pg_server, pg_url, caplog):
    owner = f"own{os.getpid()}{secrets.token_hex(3)}"
    url = _role(pg_server, pg_url, owner)
    try:
        assert _psql(url, "SELECT pg_has_role(current_user, 'pg_checkpoint', 'USAGE'), current_schema()") == [(False, owner)]
        secret = await _one_secret(url)
        _analyze(url)
        assert _statistics_hold(url, secret)
        async with VersionedStore(url) as s:
            report = await s.purge(text=[secret], reason="r")
            assert report.verified
        assert _raw_hits(pg_server, url, secret) == {}
        # the statistics are computed again from the live rows; pg_statistic's file is the
        # superuser's (or the database owner's) to rewrite, and the log says so
        assert not _statistics_hold(url, secret)
        assert "may not rewrite pg_catalog.pg_statistic" in caplog.text
    finally:
        _psql(pg_url, f'DROP SCHEMA "{owner}" CASCADE')
        _psql(pg_url, f'DROP ROLE "{owner}"')


async def test_a_role_that_does_not_own_the_tables_is_told_the_bytes_are_not_reclaimed(pg_server, pg_url):
    owner = f"own{os.getpid()}{secrets.token_hex(3)}"
    url = _role(pg_server, pg_url, owner)
    user = f"usr{os.getpid()}{secrets.token_hex(3)}"
    try:
        secret = await _one_secret(url)
        _psql(pg_url, f'CREATE ROLE "{user}" LOGIN')
        for grant in (
            f'GRANT USAGE ON SCHEMA "{owner}" TO "{user}"',
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{owner}" TO "{user}"',
            f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "{owner}" TO "{user}"',
            f'ALTER ROLE "{user}" SET search_path = "{owner}"',
        ):
            _psql(pg_url, grant)
        as_user = url.replace(f"://{owner}@", f"://{user}@", 1)
        async with VersionedStore(as_user) as s:
            with pytest.raises(MemrevError, match="may not VACUUM blobs, trees.*the purge is committed"):
                await s.purge(text=[secret], reason="r")
            assert await s.log(contains=secret) == []
        async with VersionedStore(url) as s:  # the owner runs it again: reclaimed
            assert (await s.purge(text=[secret], reason="r")).verified
        assert _raw_hits(pg_server, url, secret) == {}
    finally:
        _psql(pg_url, f'DROP SCHEMA "{owner}" CASCADE')
        if _psql(pg_url, "SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)):
            _psql(pg_url, f'DROP OWNED BY "{user}"')
            _psql(pg_url, f'DROP ROLE "{user}"')
        _psql(pg_url, f'DROP ROLE "{owner}"')
