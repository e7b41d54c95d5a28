"""Purge (issue 22): a sentinel spread through history, every ref and every framework's
files is erased from every revision and every byte of the store, with the receipt.

The scenario of the issue on the SQLite default: a random 32-character sentinel written
at commit 5 of 50, spread to a second branch, a tag, a deleted branch, a commit message, a
provenance field, an AutoGen memory item, an OpenAI session item and a working-tree file.
Before the purge a raw scan of the store's files and ``log -S`` find it (the control);
after it neither does, fsck is clean, blame of the other lines keeps its commits' author,
time and message, old ids resolve to their new ones, a handle another process opened
before the purge does not return it, and a bundle exported before cannot bring it back.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import textwrap
from pathlib import Path

import pytest
from autogen_core.memory import MemoryContent, MemoryMimeType

from helpers import spawn
from memrev import VersionedStore, errors
from memrev.maintenance import purge_scan

pytestmark = pytest.mark.anyio


def raw_hits(folder: Path, needle: str) -> list[str]:
    """Every file under ``folder`` whose bytes (raw, or inside a zstd frame) hold ``needle``."""
    out = []
    for top, _dirs, files in os.walk(folder):
        for f in files:
            p = os.path.join(top, f)
            if purge_scan.scan_file(p, [needle.encode()]):
                out.append(os.path.relpath(p, folder))
    return out


async def build(folder: Path, s: str) -> dict:
    """50 commits on main with the sentinel at commit 5, spread everywhere; returns what was seen."""
    store = VersionedStore(str(folder), worktree=True, author="builder")
    seen: dict = {"main": []}
    for i in range(1, 51):
        if i == 5:
            async with store.provenance(agent="planner", tool=f"copy {s}"):
                await store.write(
                    "/memory/working.md",
                    f"# Working memory\nkeep line one\napi key: {s}\nkeep line two {i}\n",
                    message=f"commit 5 saw {s}",
                )
        elif i % 2:
            old = await store.read("/memory/working.md") or "# Working memory\nkeep line one\n"
            await store.write("/memory/working.md", old + f"note {i}\n")
        else:
            await store.write(f"/notes/{i % 4}.md", f"note file {i}\n")
        if i == 6:
            await store.tag("v6")
            side = await store.branch("side")
            await side.write("/side/plan.md", f"side plan with {s}\n")
            gone = await store.branch("gone")
            await gone.write("/gone.md", f"gone {s}\n")
            gone.close()
            await store.delete_branch("gone")
            side.close()
    await store.add(MemoryContent(content=f"user said {s}", mime_type=MemoryMimeType.TEXT))
    session = store.session("chat-1")
    await session.add_items([{"role": "user", "content": f"remember {s}"}])
    await store.append("/log/run.jsonl", json.dumps({"event": "tool", "out": s}) + "\n")
    seen["log"] = [c.id for c in await store.log()]
    seen["blame"] = [(b.text, b.commit.author, b.commit.time, b.commit.message) for b in await store.blame("/memory/working.md")]
    store.close()
    return seen


OLD_HANDLE = textwrap.dedent(
    """
    import asyncio, sys
    from memrev import Store
    async def main():
        store = Store(sys.argv[1])
        old = sys.argv[2]
        first = await store.read("/memory/working.md", rev=old)  # caches filled before the purge
        print("ready", "S" in (first or "") and sys.argv[3] in first, flush=True)
        sys.stdin.readline()  # the purge ran
        again = await store.read("/memory/working.md", rev=old)
        print("after", sys.argv[3] in (again or ""), flush=True)
        store.close()
    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_purge_text_erases_the_sentinel_everywhere(tmp_path: Path) -> None:
    s = secrets.token_hex(16)
    folder = tmp_path / "mem"
    seen = await build(folder, s)
    store = VersionedStore(str(folder), worktree=True, author="dpo")
    try:
        # the control: found in history, in the files, in the working tree
        assert await store.log("/memory/working.md", contains=s)
        assert raw_hits(folder, s)
        assert await store.verify_purged(text=s)
        at5 = seen["log"][-5]
        assert s in (await store.read("/memory/working.md", rev=at5) or "")
        bundle = tmp_path / "before.bundle"
        await store.export_bundle(bundle)
        other = spawn(OLD_HANDLE, str(folder / ".memrev" / "memrev.db"), at5, s, stdin=True)
        assert other.stdout is not None and other.stdin is not None
        assert other.stdout.readline().split()[0] == "ready"

        report = await store.purge(text=[s], reason="user asked to forget (ticket 7)")

        assert report.verified, report.found
        assert report.commits_rewritten > 40 and report.versions_redacted > 0
        assert {"refs/heads/main", "refs/heads/side", "refs/tags/v6"} <= set(report.refs_moved)
        assert any(r.startswith("refs/deleted/gone@") for r in report.refs_moved)
        assert report.bytes_before > 0 and report.bytes_after > 0  # a redaction stores new versions: it need not shrink
        assert await store.verify_purged(text=s) == []
        assert raw_hits(folder, s) == []
        assert await store.log("/memory/working.md", contains=s) == []
        assert await store.fsck() == []
        # the rest of the file stays, and so does its attribution
        text = await store.read("/memory/working.md")
        assert "api key: [purged]" in text and "keep line two 5" in text
        after = {b.text: (b.commit.author, b.commit.time, b.commit.message) for b in await store.blame("/memory/working.md")}
        for line, author, when, message in seen["blame"]:
            if s not in line:
                assert after[line] == (author, when, message.replace(s, "[purged]"))
        # old ids resolve to their new commits, the log is as long as before
        assert len(await store.log()) == len(seen["log"])
        for old in seen["log"]:
            new = await store.resolve(old)
            assert report.id_map.get(old, old) == new
        assert await store.resolve(at5[:10]) == report.id_map[at5]
        rewritten = await store.rewritten(at5)
        assert rewritten is not None and rewritten.new == report.id_map[at5] and "ticket 7" in rewritten.reason
        # commit messages, provenance, memory items, sessions: redacted, not removed
        c5 = await store.show(report.id_map[at5])
        assert c5.message == "commit 5 saw [purged]" and c5.meta["tool"] == "copy [purged]"
        items = (await store.query("user said")).results
        assert [i.content for i in items] == ["user said [purged]"]
        session = store.session("chat-1")
        assert [i["content"] for i in await session.get_items()] == ["remember [purged]"]
        # the working tree file was rewritten
        assert s not in (folder / "memory" / "working.md").read_text()
        # a handle opened in another process before the purge does not return it
        other.stdin.write("go\n")
        other.stdin.flush()
        assert other.stdout.readline().split() == ["after", "False"]
        assert other.wait(30) == 0
        # an earlier bundle cannot bring it back, and writes nothing
        head = await store.head()
        with pytest.raises(errors.PurgedContent) as caught:
            await store.import_bundle(bundle)
        assert caught.value.commits and await store.head() == head
        assert await store.verify_purged(text=s) == []
        # the record holds the reason and the map, never the string
        records = await store.log(rev="refs/purges")
        assert len(records) == 1 and "ticket 7" in records[0].message
        assert raw_hits(folder, s) == []
        # running it again finds nothing to do and still verifies
        again = await store.purge(text=[s], reason="again")
        assert again.verified and again.commits_rewritten == 0 and again.record is None
        # a later write of the same text is an ordinary commit
        await store.write("/new.md", s)
        assert await store.read("/new.md") == s
    finally:
        store.close()


@pytest.mark.slow
async def test_purge_paths_removes_every_version_of_the_paths(tmp_path: Path) -> None:
    s = secrets.token_hex(16)
    folder = tmp_path / "mem"
    seen = await build(folder, s)
    store = VersionedStore(str(folder), worktree=True, author="dpo")
    try:
        n_notes = len(await store.log("/notes/2.md"))
        assert n_notes > 5
        report = await store.purge(paths=["/memory/working.md", "/side/*", "/gone.md"], reason="drop working memory")
        assert report.verified, report.found
        assert report.versions_removed > 20 and report.commits_dropped > 20
        assert await store.read("/memory/working.md") is None
        assert not (folder / "memory" / "working.md").exists()
        assert await store.log("/memory/working.md") == []
        assert len(await store.log("/notes/2.md")) == n_notes
        # commits that only touched the purged path are gone; the others keep their changes
        kept = {report.id_map.get(old, old) for old in seen["log"]} - {None}
        assert [c.id for c in await store.log()] == sorted(kept, key=[report.id_map.get(o, o) for o in seen["log"]].index)
        assert len(kept) < len(seen["log"]) - 20
        side = store.on_branch("side")
        try:
            assert await side.list("/") and await side.read("/side/plan.md") is None
        finally:
            side.close()
        assert await store.fsck() == []
        for old, new in report.id_map.items():
            if new is None:
                with pytest.raises(errors.RevisionNotFound, match="removed by a purge"):
                    await store.resolve(old)
            else:
                assert await store.resolve(old) == new
        # the file's own bytes (its sentinel line) are nowhere; the sentinel elsewhere
        # (a commit message, a memory item) was not asked for and stays
        assert await store.log(contains="api key") == []
        assert s in (await store.query("user said")).results[0].content
    finally:
        store.close()


async def test_purge_dry_run_changes_nothing(tmp_path: Path) -> None:
    store = VersionedStore(str(tmp_path / "s"))
    try:
        for i in range(5):
            await store.write("/a.md", f"version {i} secret-token-{i % 2}\n")
            await store.write("/b.md", f"b {i}\n")
        before = [c.id for c in await store.log()]
        size = os.path.getsize(tmp_path / "s" / "memrev.db")
        report = await store.purge(text="secret-token-1", reason="check", dry_run=True)
        assert report.dry_run and not report.verified and report.commits_rewritten > 0 and report.versions_redacted == 2
        assert report.id_map and report.record is None
        assert [c.id for c in await store.log()] == before
        assert await store.log(contains="secret-token-1")
        assert os.path.getsize(tmp_path / "s" / "memrev.db") == size
        assert (await store.purge(paths="/b.md", reason="check", dry_run=True)).versions_removed == 5
        assert [c.id for c in await store.log()] == before
    finally:
        store.close()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"reason": "x"}, "paths=|text="),
        ({"text": "abcdef", "reason": ""}, "reason"),
        ({"text": "abcdef", "reason": "   "}, "reason"),
        ({"text": "", "reason": "x"}, "empty"),
        ({"text": "purge", "reason": "x"}, "marker"),
        ({"text": "d] and", "reason": "x"}, "marker"),
        ({"text": [b"bytes"], "reason": "x"}, "strings"),
        ({"paths": ["relative/*"], "reason": "x"}, "pattern"),
        ({"text": "\ud800abc", "reason": "x"}, "surrogate"),
    ],
)
async def test_bad_purge_arguments_are_typed_errors_and_write_nothing(tmp_path: Path, kwargs: dict, match: str) -> None:
    store = VersionedStore(str(tmp_path / "s"))
    try:
        await store.write("/a.md", "abcdef purge d] and\n")
        head = await store.head()
        with pytest.raises(errors.InvalidArgument, match=match):
            await store.purge(**kwargs)
        assert await store.head() == head
        with pytest.raises(errors.RevisionNotFound):
            await store.resolve("refs/purges")
    finally:
        store.close()


async def test_a_branch_with_nothing_left_is_deleted_and_merges_survive(tmp_path: Path) -> None:
    store = VersionedStore(str(tmp_path / "s"))
    try:
        await store.write("/keep.md", "keep\n")
        only = await store.branch("only-secret")
        await only.write("/secret.md", "s1\n")
        await only.write("/secret.md", "s2\n")
        feature = await store.branch("feature")
        await feature.write("/secret.md", "feature secret\n")
        await feature.write("/feature.md", "feature work\n")
        await store.write("/main.md", "main work\n")
        await store.merge("feature")
        only.close()
        feature.close()
        report = await store.purge(paths=["/secret.md"], reason="x")
        assert report.verified
        assert sorted(await store.list("/")) == ["feature.md", "keep.md", "main.md"]
        branches = await store.branches()
        # only-secret now holds just /keep.md's commit: it stays, at that commit
        assert branches["only-secret"] == (await store.log())[-1].id
        merge = (await store.log())[0]
        assert len(merge.parents) == 2
        assert await store.fsck() == []
    finally:
        store.close()


async def test_old_handles_in_this_process_forget_their_caches(tmp_path: Path) -> None:
    a = VersionedStore(str(tmp_path / "s"))
    b = VersionedStore(str(tmp_path / "s"))
    try:
        await a.write("/a.md", "the secret-value-1234 here\n")
        await a.write("/a.md", "gone now\n")
        first = (await a.log())[-1].id
        view = b.at(first)
        assert "secret-value-1234" in (await view.read("/a.md") or "")
        assert "secret-value-1234" in (await b.read("/a.md", rev=first) or "")
        report = await a.purge(text="secret-value-1234", reason="x")
        assert report.verified
        assert await b.read("/a.md", rev=first) == "the [purged] here\n"
        assert await view.read("/a.md") == "the [purged] here\n"
        assert [c.id for c in await b.log()] == [c.id for c in await a.log()]
    finally:
        a.close()
        b.close()


def test_the_viewer_never_exposes_purge() -> None:
    """The viewer is read-only: no route, form or import reaches the purge."""
    import memrev.viewer

    sources = list(Path(memrev.viewer.__file__).parent.rglob("*.py"))
    assert sources
    assert not [p.name for p in sources if "purge" in p.read_text()]


async def test_subscribers_hear_of_the_files_a_purge_changed(tmp_path: Path) -> None:
    """A sibling handle of this process hears at once; a handle that only polls (another
    location string for the same file, as another process would) at its next look, though
    the commit it saw last is gone."""
    folder = tmp_path / "s"
    a = VersionedStore(str(folder))
    sibling = VersionedStore(str(folder))
    poller = VersionedStore(f"sqlite://{folder / 'memrev.db'}", poll_interval=0.05)
    heard: dict[str, list[str]] = {"sibling": [], "poller": []}
    try:
        await a.write("/notes/a.md", "token-zyxwvut-987 here\n")
        await a.write("/notes/b.md", "nothing\n")

        async def on_sibling(path: str) -> None:
            heard["sibling"].append(path)

        async def on_poller(path: str) -> None:
            heard["poller"].append(path)

        await sibling.on_change("/", on_sibling)
        await poller.on_change("/", on_poller)
        report = await a.purge(text="token-zyxwvut-987", reason="x")
        assert report.paths_changed == {"refs/heads/main": ("/notes/a.md",)}
        assert heard["sibling"] == ["/notes/a.md"]
        for _ in range(200):
            if heard["poller"]:
                break
            await asyncio.sleep(0.02)
        assert heard["poller"] == ["/notes/a.md"]
        assert await poller.read("/notes/a.md") == "[purged] here\n"
    finally:
        for s in (a, sibling, poller):
            s.close()


async def test_a_pattern_naming_a_folder_purges_what_is_in_it(tmp_path: Path) -> None:
    store = VersionedStore(str(tmp_path / "s"))
    try:
        await store.write("/users/sam/notes.md", "sam's notes\n")
        await store.write("/users/sam/deep/x.md", "deep\n")
        await store.write("/users/samantha.md", "another user\n")
        await store.write("/users/ann/notes.md", "ann\n")
        report = await store.purge(paths=["/users/sam"], reason="right to be forgotten")
        assert report.verified and report.versions_removed == 2 and report.commits_dropped == 2
        assert sorted(await store.list("/users")) == ["ann/", "samantha.md"]
        assert len(await store.log()) == 2
    finally:
        store.close()


async def test_the_report_and_the_record_never_hold_a_purged_string(tmp_path: Path) -> None:
    store = VersionedStore(str(tmp_path / "s"))
    try:
        await store.write("/people/jane-doe.md", "jane-doe's notes\n")
        await store.write("/other.md", "mentions jane-doe too\n")
        report = await store.purge(paths=["/people/jane-doe.md"], text=["jane-doe"], reason="jane-doe asked")
        assert report.verified and report.patterns == ("/people/[purged].md",)
        assert "jane-doe" not in json.dumps(report.as_dict())
        record = (await store.log(rev="refs/purges"))[0]
        body = await store.at(record.id).read(record.paths[0])
        assert "jane-doe" not in body and "jane-doe" not in record.message
        assert await store.read("/other.md") == "mentions [purged] too\n"
    finally:
        store.close()


async def test_commits_left_as_they_were_keep_their_order_and_old_handles_see_it(tmp_path: Path) -> None:
    """A commit the purge leaves as it was but made after one it rewrote is stored again with
    a new number (the log keeps the order commits were made in); a handle that cached the
    old numbers reads the same log, per-path log and ancestry as a new handle."""
    folder = tmp_path / "s"
    a = VersionedStore(str(folder))
    old = VersionedStore(str(folder))
    try:
        await a.write("/seed.md", "seed\n")
        side = await a.branch("side")
        await a.write("/main.md", "main holds pw-1234567 once\n", message="main 1")
        await side.write("/side.md", "side 1\n", message="side 1")
        await a.write("/main.md", "main 2\n", message="main 2")
        await side.write("/side.md", "side 2\n", message="side 2")
        side_old = old.on_branch("side")
        seen = [c.message for c in await side_old.log("/side.md")] + [c.message for c in await old.log()]
        assert await side_old.resolve("HEAD~1")
        report = await a.purge(text="pw-1234567", reason="x")
        assert report.verified and "refs/heads/side" not in report.refs_moved
        fresh = VersionedStore(str(folder))
        fresh_side = fresh.on_branch("side")
        try:
            assert [c.message for c in await a.log_all()] == ["side 2", "main 2", "side 1", "main 1", "write /seed.md"]
            for h, s in ((old, side_old), (fresh, fresh_side)):
                assert [c.message for c in await s.log("/side.md")] + [c.message for c in await h.log()] == seen
                assert await s.resolve("HEAD~1") == await fresh_side.resolve("HEAD~1")
                assert [b.text for b in await s.blame("/side.md")] == ["side 2"]
            assert await fresh.fsck() == []
        finally:
            fresh_side.close()
            fresh.close()
        side_old.close()
        side.close()
    finally:
        a.close()
        old.close()


async def test_a_working_tree_that_cannot_follow_leaves_an_honest_report(tmp_path: Path, monkeypatch, caplog) -> None:
    """The rewrite is committed and the database's bytes reclaimed even when the working
    tree's write-out fails: the report says which plain file still holds the string, and the
    next open of the tree follows the purge."""
    from memrev.folders.worktree import WorkTree

    folder = tmp_path / "wt"
    store = VersionedStore(str(folder), worktree=True)
    try:
        await store.write("/a.md", "key sk-test-0123456789\n")
        await store.write("/a.md", "key sk-test-0123456789\nmore\n")

        def broken(self) -> None:
            raise OSError("disk went away")

        monkeypatch.setattr(WorkTree, "follow_purge", broken)
        report = await store.purge(text="sk-test-0123456789", reason="leaked")
        assert not report.verified and [f for f in report.found if "a.md" in f]
        assert all(f.startswith("file a.md") for f in report.found), report.found
        assert "not all rewritten" in caplog.text
        assert await store.read("/a.md") == "key [purged]\nmore\n"
    finally:
        store.close()
    monkeypatch.undo()
    again = VersionedStore(str(folder), worktree=True)
    try:
        assert (folder / "a.md").read_text() == "key [purged]\nmore\n"
        assert await again.verify_purged(text="sk-test-0123456789") == []
        assert await again.log(contains="sk-test-0123456789") == []
    finally:
        again.close()


async def test_purge_and_its_scan_never_run_on_the_event_loop(tmp_path: Path, monkeypatch) -> None:
    """Whole-store work: the rewrite, the VACUUM and the scan run in the handle's worker
    thread, so the agent's loop keeps running (a task ticks meanwhile)."""
    import threading

    from memrev.maintenance import purge as purge_mod

    where: list[str] = []
    real_purge, real_scan = purge_mod.purge, purge_scan.scan

    def purge_spy(*a, **k):
        where.append(threading.current_thread().name)
        return real_purge(*a, **k)

    def scan_spy(*a, **k):
        where.append(threading.current_thread().name)
        return real_scan(*a, **k)

    monkeypatch.setattr(purge_mod, "purge", purge_spy)
    monkeypatch.setattr(purge_scan, "scan", scan_spy)
    store = VersionedStore(str(tmp_path / "s"))
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    try:
        for i in range(30):
            await store.write(f"/n/{i % 5}.md", f"note {i} secret-zz-{i % 2}\n")
        ticker = asyncio.create_task(tick())
        await store.purge(text="secret-zz-1", reason="x")
        await store.verify_purged(text="secret-zz-1")
        ticker.cancel()
        loop_thread = threading.current_thread().name
        assert where and loop_thread not in where, (where, loop_thread)
        assert ticks > 1
    finally:
        store.close()
