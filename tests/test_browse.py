"""Paged log and text search (``store.log_page``, ``store.find_text``) for the viewer (issue 12).

Every page chain must equal the full log exactly, merges included, and
``find_text`` must agree with a brute-force scan over every version.
"""

from __future__ import annotations

import pytest

from memrev import VersionedStore
from memrev.errors import InvalidCursor

pytestmark = pytest.mark.anyio
F = "/memory/working.md"


async def all_pages(store, path=None, limit=3, where=None):
    ids, cursor, pages = [], None, 0
    while True:
        page = await store.log_page(path, limit=limit, cursor=cursor, where=where)
        assert len(page.commits) <= limit
        ids += [c.id for c in page.commits]
        pages += 1
        cursor = page.cursor
        if cursor is None:
            return ids, pages


@pytest.fixture
async def store(tmp_path):
    s = VersionedStore(tmp_path / "s", author="alice")
    for i in range(5):
        await s.write(F, f"# mem\n- fact {i}\n" + ("- vegetarian\n" if 1 <= i <= 2 else ""))
        await s.write(f"/notes/{i}.md", f"note {i}")
    side = await s.branch("side", at="HEAD~4")
    for i in range(4):
        await side.write(F, f"side {i}\n", meta={"agent": "bob"})
        await side.write("/notes/side.md", f"side note {i}")
    await s.merge("side", strategy="ours")
    await s.write(F, "# mem\n- vegetarian again\n")
    side.close()
    yield s
    s.close()


async def test_pages_of_the_whole_log_equal_the_log(store):
    for limit in (1, 2, 3, 7, 100):
        ids, _ = await all_pages(store, limit=limit)
        assert ids == [c.id for c in await store.log()]


async def test_pages_of_a_path_log_equal_the_path_log(store):
    for limit in (1, 2, 5):
        ids, _ = await all_pages(store, F, limit=limit)
        assert ids == [c.id for c in await store.log(F)]


async def test_pages_of_a_directory_and_filtered_pages(store):
    ids, _ = await all_pages(store, "/notes", limit=2)
    assert ids == [c.id for c in await store.log("/notes")]
    def by_bob(c):
        return c.meta.get("agent") == "bob"

    ids, _ = await all_pages(store, limit=2, where=by_bob)
    assert ids == [c.id for c in await store.log() if by_bob(c)] and len(ids) == 4


async def test_a_cursor_for_another_query_is_refused(store):
    page = await store.log_page(limit=1)
    with pytest.raises(InvalidCursor):
        await store.log_page(F, cursor=page.cursor)
    for bad in ("c:zz", "c:", "nonsense", "p:1,x", "c:" + "ab" * 19):
        with pytest.raises(InvalidCursor):
            await store.log_page(cursor=bad)
    with pytest.raises(ValueError):
        await store.log_page(limit=0)


async def test_find_text_matches_a_brute_force_scan(store):
    changes = await store.find_text(F, "vegetarian")
    expected = []
    for c in reversed(await store.log(F)):  # each version against its first parent, as git's pickaxe
        before = ((await store.read(F, rev=c.parents[0])) or "") if c.parents else ""
        after = (await store.read(F, rev=c.id)) or ""
        if before.count("vegetarian") != after.count("vegetarian"):
            expected.append((c.id, before.count("vegetarian"), after.count("vegetarian")))
    assert [(t.commit.id, t.before, t.after) for t in changes] == expected
    assert [t.kind for t in changes][:2] == ["appeared", "disappeared"]
    assert await store.find_text("/nowhere.md", "x") == []
    with pytest.raises(ValueError):
        await store.find_text(F, "")


def test_appended_lines_of_an_event_log_version():
    from memrev.history.browse import appended_lines

    assert appended_lines(None, "a\nb\n") == ["a", "b"]
    assert appended_lines("a\n", "a\nb\nc\n") == ["b", "c"]
    assert appended_lines("a", "a\nb") == ["b"]  # grew by a line after one without its newline
    assert appended_lines("a\nb\n", "a\nx\nb\n") == ["x"]  # not an append: the diff's added lines
    assert appended_lines("a\nb\n", "b\n") == []


def test_event_said_reads_ag2_events_and_keeps_anything_else_as_text():
    import json

    from memrev.history.browse import Said, event_said

    request = {"type": "ag2.events.input_events.ModelRequest", "data": {"parts": [{"content": "hi"}]}}
    assert event_said(json.dumps(request)) == [Said("user", "hi")]
    result = {"type": "x.ToolResultEvent", "data": {"name": "k", "result": {"data": {"parts": [{"content": "done"}]}}}}
    assert event_said(json.dumps(result)) == [Said("tool output", "done", "k")]
    assert event_said(json.dumps(result))[0].line() == "tool output (k): done"
    assert event_said("not json <b>") == [Said("raw", "not json <b>")]
    assert event_said("[" * 100_000)[0].role == "raw"  # too deep to parse: shown, cut
    assert len(event_said("x" * 1_000_000)[0].text) <= 20_000
    assert event_said(json.dumps({"type": "a.Other", "data": {}})) == [Said("event", "Other")]


async def test_ignore_case_pickaxe_on_appends_equals_a_brute_force_scan(tmp_path):
    """-S -i reads only the added bytes of an append when they cannot hold the text; the
    commits it keeps are exactly those whose casefolded count changed."""
    from memrev.history.browse import history_filter

    log = "/log/s.jsonl"
    pieces = ["plain\n", "Straße\n", "STRASSE and strasse\n", "str", "asse\n", "nothing\n", "ſtrasse\n", "x" * 50 + "\n"]
    async with VersionedStore(tmp_path / "s") as s:
        await s.write(log, "start\n")
        for piece in pieces:
            await s.append(log, piece)
        await s.write("/other.md", "STRASSE\n")  # not an append: compared whole
        commits = await s.log()
        for needle in ("strasse", "STRASSE", "e\ns"):
            keep = history_filter(s.repo, needle, ignore_case=True)
            got = [c.id for c in (await s.log_page(limit=100, where=keep)).commits]
            want = []
            for c in commits:
                old_rev = c.parents[0] if c.parents else None
                changed = False
                for p in c.paths:
                    old = (await s.read(p, rev=old_rev) if old_rev else None) or ""
                    new = await s.read(p, rev=c.id) or ""
                    changed |= old.casefold().count(needle.casefold()) != new.casefold().count(needle.casefold())
                if changed:
                    want.append(c.id)
            assert got == want, needle
            assert [c.id for c in await s.log(contains=needle, ignore_case=True)] == want
