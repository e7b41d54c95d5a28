"""The pages a person opens to understand an agent (issue 25): browse a revision's
files, line permalinks, raw files, safe Markdown, why a line is there (the turn's
messages as text), conversations with each turn's writes, TieredMemory and OpenAI
sessions, search at HEAD and in history, compare, and the bounds of each page.

Through Starlette's test client on real stores: the quick start (a real AG2 agent),
and one written here by a real ``TieredMemory`` (AutoGen's replay client as its
summariser), a real OpenAI Agents ``Session`` (forked on a branch) and hostile
Markdown and event logs.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from memrev import VersionedStore
from memrev.cli import main as cli
from memrev.viewer import app as viewer_app
from memrev.viewer import create_app, markdown
from test_viewer_security import parse
from viewer_stores import EVENT_LOG, SCRIPT, WM, build_shapes, run_async

pytestmark = pytest.mark.slow  # builds the quick start store (a real AG2 agent) and a framework store

@pytest.fixture(scope="module")
def shapes_store(tmp_path_factory) -> Path:
    return build_shapes(tmp_path_factory.mktemp("viewer") / "shapes")


@pytest.fixture(scope="module")
def client(quickstart_store):
    with TestClient(create_app(str(quickstart_store)), base_url="http://localhost") as c:
        yield c


@pytest.fixture(scope="module")
def shapes(shapes_store):
    with TestClient(create_app(str(shapes_store)), base_url="http://localhost") as c:
        yield c




def get(c, url, status=200):
    r = c.get(url)
    assert r.status_code == status, (url, r.text[:500])
    return r


def api(c, url, status=200):
    r = get(c, "/api" + url, status)
    assert r.headers["content-type"] == "application/json"
    return r.json()


def cli_json(store, *args):
    result = CliRunner().invoke(cli, ["--store", str(store), *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def sessions_of(client) -> list[dict]:
    return api(client, "/")["sessions"]


def last_log(client) -> str:
    """The event log of the newest session (the quick start's third chat)."""
    return next(s["log"] for s in sessions_of(client) if s["log"])


# ------------------------------------------------------------------ browse


def test_tree_lists_a_revisions_folders_and_files_with_sizes_and_last_change(client, quickstart_store):
    doc = api(client, "/tree")
    by = {e["path"]: e for e in doc["entries"]}
    assert {"/memory/", "/log/", "/artifacts/", "/SKILL.md"} <= set(by)
    assert by["/memory/"]["kind"] == "dir" and by["/SKILL.md"]["kind"] == "file"
    assert by["/memory/"]["size"] == sum(e["size"] for e in api(client, "/tree?path=/memory")["entries"])
    wm = {e["path"]: e for e in api(client, "/tree?path=/memory")["entries"]}[WM]
    assert wm["last_change"]["id"] == cli_json(quickstart_store, "log", WM, "-n", "1", "--json")[0]["id"]
    assert wm["size"] == len(api(client, f"/file?path={WM}")["content"].encode())
    page = parse(get(client, "/tree?path=/memory").text)
    assert ("a", {"class": "file", "href": f"/file?path={quote(WM, safe='')}"}) in page.tags


def test_tree_at_an_older_revision_shows_that_revisions_files(client):
    now = {e["path"] for e in api(client, "/tree?path=/artifacts")["entries"]}
    then = api(client, "/tree?path=/artifacts&rev=after-chat-3")
    assert "/artifacts/notes.md" in now and "/artifacts/notes.md" not in {e["path"] for e in then["entries"]}
    assert then["rev"] == api(client, "/commit/after-chat-3")["id"]
    html = get(client, "/tree?path=/artifacts&rev=after-chat-3").text
    assert "rev=after-chat-3" in html  # links stay at that revision
    assert api(client, "/tree?path=/nope", 404)["error"]
    assert api(client, "/tree?rev=nope", 404)["error"]


def test_tree_pages_its_entries(tmp_path, monkeypatch):
    async def fill() -> None:
        async with VersionedStore(tmp_path / "s") as s:
            async with s.transaction():
                for i in range(7):
                    await s.write(f"/many/f{i}.txt", "x")

    run_async(fill)
    monkeypatch.setattr(viewer_app, "TREE_PAGE", 3)
    with TestClient(create_app(str(tmp_path / "s")), base_url="http://localhost") as c:
        seen, url = [], "/api/tree?path=/many"
        while url:
            r = get(c, url)
            seen += [e["path"] for e in r.json()["entries"]]
            m = re.match(r'<([^>]+)>; rel="next"', r.headers.get("link", ""))
            url = m.group(1).replace("/tree", "/api/tree", 1) if m and not m.group(1).startswith("/api") else (m.group(1) if m else None)
        assert seen == [f"/many/f{i}.txt" for i in range(7)]


def test_file_lines_are_permalinks_with_a_why_link_each(client):
    page = parse(get(client, f"/file?path={WM}&view=source").text)
    rows = [a["id"] for t, a in page.tags if t == "tr" and a.get("id")]
    content = api(client, f"/file?path={WM}")["content"]
    assert rows == [f"L{i}" for i in range(1, len(content.splitlines()) + 1)]
    hrefs = [a.get("href") for t, a in page.tags if t == "a"]
    assert "#L3" in hrefs
    assert f"/why?path={quote(WM, safe='')}&line=3" in hrefs


def test_raw_is_plain_text_or_an_attachment_never_html(client, hostile_store):
    r = get(client, f"/raw?path={WM}")
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.text == api(client, f"/file?path={WM}")["content"]
    assert "content-disposition" not in r.headers
    d = get(client, f"/raw?path={WM}&download=1&rev=HEAD~3")
    assert d.headers["content-disposition"] == 'attachment; filename="working.md"'
    assert d.text == api(client, f"/file?path={WM}&rev=HEAD~3")["content"]
    assert get(client, "/raw?path=/nope", 404).headers["content-type"].startswith("text/plain")
    assert get(client, "/raw", 400).text
    with TestClient(create_app(str(hostile_store)), base_url="http://localhost") as h:
        r = get(h, f"/raw?path={WM}")
        assert SCRIPT in r.text and r.headers["content-type"] == "text/plain; charset=utf-8"
        assert r.headers["x-content-type-options"] == "nosniff"


def test_markdown_renders_without_raw_html_scripts_or_foreign_requests(shapes):
    html = get(shapes, "/file?path=/notes/hostile.md").text
    m = parse(html)
    article = html[html.index('<article class="markdown">'):html.index("</article>")]
    assert "<script" not in article and "<iframe" not in article and "onerror=" not in article.replace("onerror=alert", "")
    assert "&lt;script&gt;" in article and "&lt;img src=x onerror" in article  # raw HTML shows as text
    links = {a.get("href"): a for t, a in m.tags if t == "a"}
    assert not any(h and h.lower().startswith("javascript") for h in links)
    assert links["https://example.com/x"]["rel"] == "noopener noreferrer nofollow"
    assert "/file?path=%2Fnotes%2Fother.md#L2" in links
    imgs = [a for t, a in m.tags if t == "img"]
    assert imgs == [{"src": "/raw?path=%2Fnotes%2Fpic.png", "alt": "local"}]  # the remote one is its alt text
    assert "[image: remote]" in html
    source = get(shapes, "/file?path=/notes/hostile.md&view=source").text
    assert "<article" not in source and "&lt;script&gt;alert(&#39;md&#39;)&lt;/script&gt;" in source


def test_markdown_blocks_carry_their_line_and_a_why_link():
    out = markdown.render("# Title\n\ntext\n\n- a\n- b\n", "/m/w.md", "HEAD~1")
    assert '<h1 id="L1">' in out and '<p id="L3">' in out
    assert 'href="/why?path=%2Fm%2Fw.md&amp;line=5&amp;rev=HEAD~1"' in out


def test_a_huge_line_is_cut_on_the_page_and_whole_in_raw(shapes):
    html = get(shapes, "/file?path=/notes/hostile.md&view=source").text
    assert "x" * viewer_app.LINE_CHARS in html and "x" * (viewer_app.LINE_CHARS + 1) not in html
    assert "(cut: raw)" in html
    assert "x" * 50_000 in get(shapes, "/raw?path=/notes/hostile.md").text


# ------------------------------------------------------------------ why and blame


def test_why_shows_the_user_message_of_the_turn_as_text(client, quickstart_store):
    content = api(client, f"/file?path={WM}")["content"].splitlines()
    line = content.index("- Vegetarian (partner too): no meat at all") + 1
    html = get(client, f"/why?path={WM}&line={line}").text
    text = "".join(parse(html).text)
    assert "News: my partner went vegetarian, so no meat at all." in text  # the user's message
    assert "Noted: vegetarian from now on" in text  # the agent's reply
    assert '"type"' not in text and "ModelRequest" not in text  # as text, not JSON
    assert api(client, f"/why?path={WM}&line={line}") == cli_json(quickstart_store, "why", f"{WM}:{line}", "--json")


def test_why_shows_a_tool_call_and_its_output(client):
    plan = "/artifacts/meal-plan.md"
    text = "".join(parse(get(client, f"/why?path={plan}&line=1").text).text)
    assert "tool call" in text and "knowledge(action='write'" in text
    assert "tool output (knowledge)" in text and "Written to /artifacts/meal-plan.md" in text


def test_why_errors_are_pages(client):
    assert "no line 999" in api(client, f"/why?path={WM}&line=999", 400)["error"]
    assert api(client, f"/why?path={WM}&line=x", 400)["error"]
    assert api(client, "/why?path=/nope&line=1", 404)["error"]
    assert api(client, f"/why?path={WM}&line=1&rev=nope", 404)["error"]


def test_blame_links_every_line_to_why_and_shows_message_and_age(client):
    html = get(client, f"/blame?path={WM}").text
    m = parse(html)
    n = len(api(client, f"/file?path={WM}")["content"].splitlines())
    whys = [a["href"] for t, a in m.tags if t == "a" and (a.get("href") or "").startswith("/why?")]
    assert whys == [f"/why?path={quote(WM, safe='')}&line={i}" for i in range(1, n + 1)]
    ages = {a["class"] for t, a in m.tags if t == "td" and "age" in (a.get("class") or "")}
    assert {"age age0", "age age9"} <= ages  # oldest and newest commit at the two ends of the scale
    firsts = [a for t, a in m.tags if t == "tr" and a.get("class") == "first"]
    doc = api(client, f"/blame?path={WM}")
    runs = sum(1 for i, x in enumerate(doc["lines"]) if i == 0 or doc["lines"][i - 1]["commit"] != x["commit"])
    assert len(firsts) == runs  # one header per run of lines
    assert "write /memory/working.md" in "".join(m.text)


def test_why_cli_prints_the_turn_readably(quickstart_store):
    result = CliRunner().invoke(cli, ["--store", str(quickstart_store), "why", "/artifacts/meal-plan.md:1"])
    assert result.exit_code == 0, result.output
    assert "user: We don't eat pork" in result.output
    assert "tool call: knowledge(action='write'" in result.output
    assert "tool output (knowledge): Written to /artifacts/meal-plan.md" in result.output
    assert '{"type"' not in result.output


# ------------------------------------------------------------------ conversations


def test_store_page_has_a_session_timeline(client):
    sessions = sessions_of(client)
    assert len(sessions) == 3  # the quick start's three chats
    assert all(s["turns"] == 1 and s["agents"] == ["chef"] and s["log"] for s in sessions)
    assert any("/artifacts/meal-plan.md" in s["paths"] for s in sessions)
    html = get(client, "/").text
    assert html.count('class="conversation"') == 3


def test_conversation_shows_each_turn_and_the_memory_diff_it_made(client):
    log = last_log(client)
    doc = api(client, f"/conversation?path={quote(log)}")
    [turn] = doc["turns"]
    assert turn["session"] in log and turn["turn"] == 1
    [write] = turn["writes"]
    assert write["commit"]["paths"] == [WM] and write["commit"]["meta"]["session"] == turn["session"]
    assert "+- Vegetarian (partner too): no meat at all" in write["changes"][0]["diff"]
    html = get(client, f"/conversation?path={quote(log)}").text
    text = "".join(parse(html).text)
    assert "News: my partner went vegetarian" in text and "Vegetarian (partner too): no meat at all" in text
    assert f'href="/commit/{write["commit"]["id"]}"' in html


def test_conversation_pages_its_turns(tmp_path):
    async def chat() -> None:
        async with VersionedStore(tmp_path / "s") as s:
            log = ""
            for turn in range(1, 6):
                meta = {"session": "s1", "turn": turn}
                await s.write("/memory/working.md", f"fact {turn}\n", meta=meta)
                log += json.dumps({"type": "ag2.events.input_events.ModelRequest",
                                   "data": {"parts": [{"content": f"message {turn}"}]}}) + "\n"
                await s.write("/log/s1.jsonl", log, meta=meta)

    run_async(chat)
    with TestClient(create_app(str(tmp_path / "s")), base_url="http://localhost") as c:
        first = get(c, "/api/conversation?path=/log/s1.jsonl&limit=2")
        assert [t["turn"] for t in first.json()["turns"]] == [4, 5]  # the newest, oldest first
        assert [len(t["writes"]) for t in first.json()["turns"]] == [1, 1]
        assert first.json()["turns"][1]["events"][0].endswith('"message 5"}]}}')
        nxt = re.match(r'<([^>]+)>; rel="next"', first.headers["link"]).group(1)
        assert [t["turn"] for t in get(c, nxt).json()["turns"]] == [2, 3]


def test_hostile_event_log_renders_as_text(shapes):
    html = get(shapes, f"/conversation?path={EVENT_LOG}").text
    m = parse(html[html.index("<main>"):])
    assert not [(t, a) for t, a in m.tags if t in ("script", "img", "b", "iframe")]
    text = "".join(m.text)
    assert f"please {SCRIPT}" in text and "not json at all <img src=x onerror=alert(1)>" in text
    assert "ok <b>bold</b>" in text and "(<script>)" not in text and "<script>" in text
    [turn] = api(shapes, f"/conversation?path={EVENT_LOG}")["turns"]
    assert [w["commit"]["paths"] for w in turn["writes"]] == [["/notes/hostile.md"]]
    assert len(html) < 200_000  # the 100k-character line is cut on the page


# ------------------------------------------------------------------ memories of every shape


def test_tiered_memory_shows_each_tier_and_its_promotions(shapes):
    doc = api(shapes, "/memory/assistant")
    assert [i["content"] for i in doc["tiers"]["short-term"]][:1] == ["Sam is vegetarian"]
    assert any("question 0" in str(i["content"]) for i in doc["tiers"]["chat-archive"])
    assert any("Sam asked about curry and tacos" in str(i["content"]) for tier in doc["tiers"].values() for i in tier)
    text = "".join(parse(get(shapes, "/memory/assistant").text).text)
    assert "chat-archive" in text and "Sam is vegetarian" in text and "question 0" in text
    assert "assistant" in api(shapes, "/")["memories"]


def test_openai_session_renders_its_transcript_and_forks(shapes):
    assert api(shapes, "/")["openai_sessions"] == ["chat-42"]
    doc = api(shapes, "/session/chat-42")
    assert len(doc["items"]) == 4 and doc["branches"] == {"main": 4, "try-tacos": 5}
    text = "".join(parse(get(shapes, "/session/chat-42").text).text)
    for said in ("What should I cook tonight?", "lookup(", "curry, tacos", "Try the chickpea curry."):
        assert said in text
    fork = "".join(parse(get(shapes, "/session/chat-42?rev=try-tacos").text).text)
    assert "Tacos instead?" in fork and "Tacos instead?" not in text
    assert api(shapes, "/session/nope", 404)["error"]


# ------------------------------------------------------------------ search and compare


def test_search_at_head_finds_lines_case_insensitive_on_request(client):
    hits = api(client, "/search?text=Vegetarian")["hits"]
    line = api(client, f"/file?path={WM}")["content"].splitlines().index("- Vegetarian (partner too): no meat at all") + 1
    assert {"path": WM, "line": line, "text": "- Vegetarian (partner too): no meat at all"} in hits
    assert not any(h["path"] == WM for h in api(client, "/search?text=VEGETARIAN")["hits"])
    folded = api(client, "/search?text=VEGETARIAN&i=1")
    assert any(h["path"] == WM for h in folded["hits"]) and folded["ignore_case"] is True
    under = api(client, "/search?text=vegetarian&i=1&path=/memory")["hits"]
    assert {h["path"] for h in under} == {WM}
    assert {h["path"] for h in api(client, "/search?text=Vegetarian&path=/memory")["hits"]} == {WM}  # a folder: at HEAD
    assert api(client, f"/search?text=Vegetarian&path={WM}")[0]["kind"] == "appeared"  # a file: its history


def test_search_in_history_is_the_pickaxe_over_all_paths(client, quickstart_store):
    doc = api(client, "/search?text=pork&history=1")
    assert [c["id"] for c in doc] == [c["id"] for c in cli_json(quickstart_store, "log", "-S", "pork", "--json")]
    folded = api(client, "/search?text=PORK&history=1&i=1")
    assert [c["id"] for c in folded] == [c["id"] for c in cli_json(quickstart_store, "log", "-S", "PORK", "-i", "--json")]
    assert folded and api(client, "/search?text=PORK&history=1") == []


def test_compare_two_revisions_shows_every_differing_file(client, quickstart_store):
    doc = api(client, "/compare?a=after-chat-3&b=main")
    assert doc == api(client, "/diff?a=after-chat-3&b=main")
    paths = {c["path"] for c in doc["changes"]}
    assert {"/artifacts/notes.md", "/artifacts/shopping.md"} <= paths
    html = get(client, "/compare?a=after-chat-3&b=main").text
    assert all(p in html for p in paths)
    assert get(client, "/compare").status_code == 200
    assert api(client, "/compare?a=nope&b=main", 404)["error"]


# ------------------------------------------------------------------ small things


def test_times_are_relative_with_the_absolute_time_on_hover(client):
    now = datetime(2026, 1, 2, 12, 0, tzinfo=timezone.utc)
    assert viewer_app.ago(now - timedelta(seconds=5), now) == "just now"
    assert viewer_app.ago(now - timedelta(hours=3), now) == "3 hours ago"
    assert viewer_app.ago(now - timedelta(days=1), now) == "1 day ago"
    m = parse(get(client, "/log").text)
    times = [a for t, a in m.tags if t == "time"]
    assert times and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", a["title"]) for a in times)
    ids = [a for t, a in m.tags if t == "a" and a.get("class") == "id"]
    assert all(len(a["title"]) == 40 for a in ids)  # the full id on hover


def test_every_page_names_its_store_and_branch(client, quickstart_store):
    text = "".join(parse(get(client, "/tree").text).text)
    assert str(quickstart_store) in text and "branch main" in text
    assert viewer_app.store_label("postgresql://me:secret@db.example/memrev") == "postgresql://db.example/memrev"
    assert viewer_app.store_label("/srv/state") == "/srv/state"


def test_new_pages_never_write(client, quickstart_store):
    before = cli_json(quickstart_store, "log", "--json")
    log = quote(last_log(client))
    for url in ["/tree", f"/file?path={WM}", f"/raw?path={WM}", f"/why?path={WM}&line=1", f"/conversation?path={log}",
                "/search?text=x&history=1", "/compare?a=HEAD~1&b=HEAD"]:
        get(client, url)
    assert cli_json(quickstart_store, "log", "--json") == before


def test_an_event_log_file_links_to_its_transcript(client):
    log = last_log(client)
    m = parse(get(client, f"/file?path={quote(log)}").text)
    assert ("a", {"class": "conversation", "href": f"/conversation?path={quote(log, safe='')}"}) in m.tags
    assert not [a for t, a in parse(get(client, f"/file?path={WM}").text).tags if a.get("class") == "conversation"]
