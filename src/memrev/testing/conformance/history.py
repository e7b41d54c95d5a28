"""History through the store: log, show, diff, reads at revisions, transactions, branches, merge, blame, gc."""

from __future__ import annotations

from typing import Any

import pytest

from ... import errors
from ...versioned_store import VersionedStore
from .base import ConformanceBase


class HistoryContracts(ConformanceBase):
    """``test_history_*``: history through ``VersionedStore`` (a mixin of ``BackendConformance``)."""

    @pytest.mark.anyio
    async def test_history_log_show_diff_and_reads_at_revisions(self, memrev_location: str):
        async with VersionedStore(memrev_location, author="alice") as s:
            assert await s.log() == [] and await s.head() is None
            await s.write("/notes/a.md", "v1", message="first", meta={"k": 1, "tags": ["x"]})
            c1 = await s.resolve("HEAD")
            assert await s.append("/notes/a.md", "+more") == 2
            await s.write("/notes/b.md", "b")
            c3 = await s.resolve("HEAD")
            await s.delete("/notes/b.md", message="drop b")
            await s.write("/x", "x")
            await s.write("/x", "x")  # identical: no commit
            await s.delete("/missing")  # nothing to delete: no commit
            log = await s.log()
            assert len(log) == 5, [c.message for c in log]
            assert [c.paths for c in log] == [("/x",), ("/notes/b.md",), ("/notes/b.md",), ("/notes/a.md",),
                                              ("/notes/a.md",)]
            assert log[-1].id == c1 and log[-1].parents == () and log[-1].message == "first"
            assert log[-1].meta == {"k": 1, "tags": ["x"]} and log[-1].author == "alice"
            assert all(log[i].parents == (log[i + 1].id,) for i in range(4))
            assert log[1].message == "drop b"
            assert await s.log(limit=2) == log[:2]
            assert await s.show() == log[0] and await s.show(c1[:7]) == log[-1]
            for c in log:
                assert await s.resolve(c.id[:9]) == c.id
            assert await s.resolve("HEAD~4") == c1 and await s.resolve("main~1") == log[1].id
            # per-path and per-directory log
            assert [c.id for c in await s.log("/notes/a.md")] == [log[3].id, log[4].id]
            assert [c.id for c in await s.log("/notes")] == [c.id for c in log[1:]]
            assert [size for _, size in await s.history("/notes/b.md")] == [None, 1]
            # reads at revisions
            assert await s.read("/notes/a.md", rev=c1) == "v1"
            assert await s.read("/notes/a.md", rev="HEAD~3") == "v1+more"
            assert await s.read_range("/notes/a.md", 2, 6, rev="HEAD~3") == "+mor"
            assert await s.list("/notes", rev=c3) == ["a.md", "b.md"]
            assert await s.list("/notes") == ["a.md"]
            assert await s.exists("/notes/b.md", rev=c3) and not await s.exists("/notes/b.md")
            assert await s.read("/x", rev=c1) is None
            view = s.at(c3)
            assert await view.read("/notes/b.md") == "b" and await view.list("/") == ["notes/"]
            with pytest.raises(errors.ReadOnlyRevision):
                await view.write("/y", "y")
            for bad in ("nope", "HEAD~9", "0000000"):
                with pytest.raises(errors.RevisionNotFound):
                    await s.read("/x", rev=bad)
            # diff
            changes = await s.diff(c1, "HEAD")
            assert [(c.path, c.status) for c in changes] == [("/notes/a.md", "modified"), ("/x", "added")]
            assert changes[0].old == "v1" and changes[0].new == "v1+more" and "+v1+more" in changes[0].diff
            assert [(c.path, c.status) for c in await s.diff(c3, "HEAD~1")] == [("/notes/b.md", "deleted")]
            assert await s.diff("HEAD", "HEAD") == []
            assert [c.path for c in await s.diff_from_empty("HEAD")] == ["/notes/a.md", "/x"]
            assert await s.fsck() == []

    @pytest.mark.anyio
    async def test_history_transactions_are_atomic(self, memrev_location: str):
        async with VersionedStore(memrev_location) as s, VersionedStore(memrev_location) as other:
            await s.write("/keep", "k")
            head = await s.head()
            with pytest.raises(RuntimeError):
                async with s.transaction("doomed"):
                    await s.write("/t/a", "1")
                    await s.append("/keep", "+")
                    assert await s.read("/keep") == "k+"
                    raise RuntimeError("abandon")
            assert await s.head() == head and await s.read("/keep") == "k" and await s.read("/t/a") is None
            async with s.transaction("both", meta={"n": 3}):
                await s.write("/t/a", "1")
                await s.write("/t/b", "2")
                await s.append("/keep", "+")
                await s.delete("/t/b")
                await s.write("/t/b", "3")
                assert await s.read("/t/a") == "1" and await s.list("/t") == ["a", "b"]
                assert await other.read("/t/a") is None, "another handle saw a staged change"
            log = await other.log()
            assert len(log) == 2 and log[0].message == "both" and log[0].meta == {"n": 3}
            assert log[0].paths == ("/keep", "/t/a", "/t/b")
            assert await other.read("/t/b") == "3" and await other.read("/keep") == "k+"
            # optimistic concurrency: a stale expect_head writes nothing
            with pytest.raises(errors.ConcurrentUpdate):
                async with s.transaction(expect_head=head):
                    await s.write("/t/c", "stale")
            assert await s.read("/t/c") is None and len(await s.log()) == 2
            async with s.transaction(expect_head=await s.head()):
                await s.write("/t/c", "fresh")
            assert await other.read("/t/c") == "fresh"
            # a commit that fails inside the backend transaction leaves no trace
            backend, before = s.repo.backend, await s.head()
            commits = len(list(backend.iter_commits()))

            write_commit = backend.write_commit

            def refuse(*args: Any) -> Any:  # the whole commit handed over, then a failure
                write_commit(*args)
                raise RuntimeError("backend failure at the last step of a commit")

            backend.write_commit = refuse  # type: ignore[method-assign,assignment]
            try:
                with pytest.raises(RuntimeError, match="last step"):
                    await s.write("/t/d", "never")
            finally:
                del backend.write_commit
            assert await other.head() == before and await other.read("/t/d") is None
            assert await s.read("/t/d") is None and await s.exists("/t/d") is False
            assert len(list(backend.iter_commits())) == commits
            await s.write("/t/d", "now")
            assert await other.read("/t/d") == "now"
            assert await s.fsck() == []

    @pytest.mark.anyio
    async def test_history_the_longest_names_and_paths_memrev_takes_are_stored(self, memrev_location: str):
        """Keys of the sizes memrev lets through (docs/backends.md, "Rows"): a branch and a tag
        of ``MAX_REF_NAME_BYTES`` (its deleted ref ~50 bytes longer), a path of ``MAX_PATH_BYTES``
        in that branch's head rows and in the change index. Random text, so nothing compresses."""
        import random
        import string

        from ...core.paths import MAX_PATH_BYTES
        from ...repo.revisions import MAX_REF_NAME_BYTES

        r = random.Random(7)
        name = "".join(r.choice(string.ascii_letters + string.digits) for _ in range(MAX_REF_NAME_BYTES))
        tag = name[::-1]
        wide = "".join(chr(r.randrange(0x10000, 0x10FFFF)) for _ in range((MAX_PATH_BYTES - 4) // 4))
        path = "/d/" + wide + "x" * (MAX_PATH_BYTES - 3 - len(wide.encode()))
        assert len(path.encode()) == MAX_PATH_BYTES
        async with VersionedStore(memrev_location) as s:
            await s.write("/a", "base")
            side = await s.branch(name)
            try:
                await side.write(path, "deep")
                await side.append(path, "er")
                assert await side.read(path) == "deeper" and len(await side.history(path)) == 2
            finally:
                side.close()
            assert (await s.merge(name)).status == "merged" and await s.read(path) == "deeper"
            assert await s.tag(tag, name) == await s.resolve(name)
            assert [c.id for c in await s.log("/d")] == [c.id for c in await s.log(path)]
            await s.delete_branch(name)
            assert name not in await s.branches() and await s.resolve(tag)
            assert len(s.repo.backend.list_refs("refs/deleted/")) == 1
            await s.reindex()
            assert len(await s.history(path)) == 3 and await s.fsck() == []

    @pytest.mark.anyio
    async def test_history_branch_merge_blame_round(self, memrev_location: str):
        async with VersionedStore(memrev_location, author="alice") as s:
            await s.write("/doc", "one\ntwo\nthree\n", message="base")
            base = await s.head()
            await s.tag("v1")
            side = await s.branch("side")
            try:
                assert side.branch_name == "side" and await side.read("/doc") == "one\ntwo\nthree\n"
                await side.write("/doc", "one\ntwo\nthree (side)\n", message="side edits line 3")
                await side.write("/side-only", "s", message="side file")
                side_head = await side.head()
                await s.write("/doc", "ONE\ntwo\nthree\n", message="main edits line 1")
                await s.write("/main-only", "m", message="main file")
                assert await s.read("/side-only") is None and await side.read("/main-only") is None
                assert set(await s.branches()) == {"main", "side"}
                result = await s.merge("side")
                assert result.status == "merged" and result.commit == await s.head()
                assert await s.read("/doc") == "ONE\ntwo\nthree (side)\n"
                assert await s.read("/side-only") == "s" and await s.read("/main-only") == "m"
                merge = await s.show()
                assert len(merge.parents) == 2 and merge.parents[1] == side_head
                assert (await s.merge("side")).status == "up-to-date"
                blame = [(line.number, line.text, line.commit.message) for line in await s.blame("/doc")]
                assert blame == [(1, "ONE", "main edits line 1"), (2, "two", "base"),
                                 (3, "three (side)", "side edits line 3")], blame
                assert [c.message for c in await s.log("/doc")] == [
                    merge.message, "main edits line 1", "side edits line 3", "base"]
                # a conflict writes nothing; a strategy settles it
                await side.write("/doc", "ONE\ntwo (side)\nthree (side)\n", message="side edits line 2")
                await s.write("/doc", "ONE\ntwo (main)\nthree (side)\n", message="main edits line 2")
                before = await s.head()
                with pytest.raises(errors.MergeConflict) as info:
                    await s.merge("side")
                assert [c.path for c in info.value.conflicts] == ["/doc"]
                assert await s.head() == before and await s.read("/doc") == "ONE\ntwo (main)\nthree (side)\n"
                await s.merge("side", strategy="theirs")
                assert await s.read("/doc") == "ONE\ntwo (side)\nthree (side)\n"
                assert (await s.blame("/doc"))[1].commit.message == "side edits line 2"
            finally:
                side.close()
            # tags, revert, restore
            assert await s.resolve("v1") == base and await s.read("/doc", rev="v1") == "one\ntwo\nthree\n"
            main_file = next(c for c in await s.log() if c.message == "main file")
            await s.revert(main_file.id)
            assert await s.read("/main-only") is None
            await s.restore("/doc", "v1")
            assert await s.read("/doc") == "one\ntwo\nthree\n"
            # a deleted branch's commits go at gc
            doomed = await s.branch("doomed")
            for i in range(3):
                await doomed.write(f"/tmp/{i}", "x" * 200 + str(i))
            doomed.close()
            await s.delete_branch("doomed")
            commits_before = len(await s.log())
            removed = await s.gc(keep_seconds=0)
            assert removed["commits"] == 3 and removed["blobs"] >= 3, removed
            assert len(await s.log()) == commits_before and set(await s.branches()) == {"main", "side"}
            assert await s.fsck() == []
            assert await s.read("/side-only") == "s"


    @pytest.mark.anyio
    async def test_history_purge_rewrites_every_ref_and_keeps_the_order(self, memrev_location: str):
        """A purge on this backend: the string gone from every revision and ref (the object
        scan finds nothing), old ids resolve, commits left as they were keep their order
        (``restack_commit``), a handle opened before reads the new history, fsck is clean."""
        secret = "conformance-secret-7b1f"
        async with VersionedStore(memrev_location) as s:
            await s.write("/seed.md", "seed\n")
            side = await s.branch("side")
            await s.write("/notes.md", f"one {secret} two\n", message=f"holds {secret}")
            await side.write("/side.md", "side\n", message="side, made after")
            await s.write("/notes.md", "three\n", message="main again")
            await s.tag("t")
            old_ids = [c.id for c in await s.log()]
            async with VersionedStore(memrev_location) as before:
                assert secret in (await before.read("/notes.md", rev=old_ids[1]) or "")
                report = await s.purge(text=[secret], reason="conformance")
                assert report.verified, report.found
                assert await before.read("/notes.md", rev=old_ids[1]) == "one [purged] two\n"
            assert [c.message for c in await s.log_all()] == ["main again", "side, made after", "holds [purged]", "write /seed.md"]
            assert await s.resolve(old_ids[1]) == report.id_map[old_ids[1]]
            assert set(report.refs_moved) == {"refs/heads/main", "refs/tags/t"}
            assert await s.verify_purged(text=[secret]) == [] and await s.fsck() == []
            side.close()
