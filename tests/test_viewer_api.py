"""Every route of the viewer through Starlette's ASGI test client (issue 12).

HTML pages and their ``/api/`` twins, the twins equal to the CLI's ``--json``
output, pages chained by ``Link: rel="next"``, 404 pages (not tracebacks) for
unknown revisions, paths, memories and routes, 400 for bad parameters, live
updates by server-sent events, and no route that writes.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from memrev import VersionedStore
from memrev.cli import main as cli
from memrev.viewer import create_app
from viewer_stores import ROOT, WM

pytestmark = pytest.mark.slow  # builds the quick start store (a real AG2 agent, three turns) first

PAGES = [
    "/", "/log", f"/log?path={WM}", "/log?branch=trial", "/log?path=/artifacts", f"/history?path={WM}",
    f"/diff?path={WM}", "/diff", f"/diff?a=HEAD~3&b=HEAD&path={WM}&view=unified", f"/blame?path={WM}",
    f"/blame?path={WM}&rev=after-chat-3", "/graph", "/memory/preferences", f"/search?path={WM}&text=vegetarian",
    "/search", f"/file?path={WM}", f"/file?path={WM}&rev=HEAD~2", "/commit/HEAD",
]


@pytest.fixture(scope="module")
def client(quickstart_store):
    with TestClient(create_app(str(quickstart_store)), base_url="http://localhost") as c:
        yield c


def cli_json(store, *args):
    result = CliRunner().invoke(cli, ["--store", str(store), *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def api(client, url):
    r = client.get("/api" + url if url != "/" else "/api")
    assert r.status_code == 200, (url, r.text)
    assert r.headers["content-type"] == "application/json"
    return r.json()


@pytest.mark.parametrize("url", PAGES)
def test_every_page_and_its_json_twin(client, url):
    r = client.get(url)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "<main>" in r.text and "Traceback" not in r.text
    api(client, url)


def test_json_twins_equal_the_cli(client, quickstart_store):
    s = quickstart_store
    assert api(client, f"/log?path={WM}") == cli_json(s, "log", WM, "--json")
    assert api(client, "/log?limit=1000") == cli_json(s, "log", "--json")
    assert api(client, f"/history?path={WM}") == cli_json(s, "history", WM, "--json")
    assert api(client, f"/blame?path={WM}") == cli_json(s, "blame", WM, "--json")
    head = cli_json(s, "log", "-n", "1", "--json")[0]["id"]
    assert api(client, f"/commit/{head}") == cli_json(s, "show", head, "--json")
    assert api(client, f"/diff?a=HEAD~4&b=HEAD&path={WM}") == cli_json(s, "diff", "HEAD~4", "HEAD", "--json", "--", WM)
    assert api(client, f"/diff?path={WM}") == cli_json(s, "diff", WM, "--json")
    assert api(client, f"/file?path={WM}") == cli_json(s, "cat", WM, "--json")
    home = api(client, "/")
    assert home["branches"] == cli_json(s, "branch", "--json")
    assert home["tags"] == cli_json(s, "tag", "--json")


def follow(client, url):
    """Every item of a paged list, following ``Link: rel="next"``; and the number of pages."""
    items, pages = [], 0
    while url:
        r = client.get(url)
        assert r.status_code == 200
        items += r.json()
        pages += 1
        m = re.match(r'<([^>]+)>; rel="next"', r.headers.get("link", ""))
        url = m.group(1) if m else None
    return items, pages


def test_log_and_history_are_paged(client, quickstart_store):
    everything = cli_json(quickstart_store, "log", "--json")
    items, pages = follow(client, "/api/log?limit=3")
    assert items == everything and pages == -(-len(everything) // 3)
    items, pages = follow(client, f"/api/history?path={WM}&limit=1")
    assert items == cli_json(quickstart_store, "history", WM, "--json") and pages == 3
    html = client.get("/log?limit=2").text
    assert 'rel="next"' in html  # the page links to the next one too


def test_log_filters_by_author_and_provenance(client):
    by_planner = api(client, "/log?agent=planner&branch=trial")
    assert len(by_planner) == 2 and all(c["meta"]["agent"] == "planner" for c in by_planner)
    assert api(client, "/log?author=nobody") == []
    sam = api(client, "/log?author=sam")
    assert sam and all(c["author"] == "sam" for c in sam)


def test_memory_page_shows_items_and_their_history(client):
    doc = api(client, "/memory/preferences")
    assert [i["content"] for i in doc["items"]] == ["Vegetarian (partner too)", "Loves spicy food", {"max_minutes": 30}]
    assert len(doc["log"]) == 3
    assert "Loves spicy food" in client.get("/memory/preferences").text


def test_search_finds_where_text_appeared(client, quickstart_store):
    found = api(client, f"/search?path={WM}&text=Vegetarian")
    assert [f["kind"] for f in found] == ["appeared"]
    last = cli_json(quickstart_store, "log", WM, "-n", "1", "--json")[0]
    assert found[0]["commit"] == last
    pork = api(client, f"/search?path={WM}&text=No pork")
    assert [f["kind"] for f in pork] == ["appeared", "disappeared"]


def test_diff_of_working_memory_defaults_to_the_last_aggregate(client):
    html = client.get(f"/diff?path={WM}").text
    assert "<del>" in html and "<ins>" in html  # word-level highlights inside changed lines
    assert 'rel="prev"' in html  # an older change to step to


@pytest.mark.parametrize("url", [
    "/commit/0123456789abcdef", "/commit/nope", f"/diff?a=nope&b=HEAD&path={WM}", f"/blame?path={WM}&rev=nope",
    "/blame?path=/no/such.md", "/history?path=/no/such.md", "/file?path=/no/such.md", f"/file?path={WM}&rev=zzz",
    "/memory/nobody", "/log?branch=nobranch", "/no/such/page",
])
def test_unknown_revisions_and_paths_are_404_pages(client, url):
    r = client.get(url)
    assert r.status_code == 404, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "404" in r.text and "Traceback" not in r.text and "<main>" in r.text
    r = client.get("/api" + url)
    assert r.status_code == 404 and "error" in r.json()


@pytest.mark.parametrize("url", ["/log?cursor=nonsense", "/log?limit=0", "/log?limit=x", "/history", "/blame",
                                 f"/history?path={WM}&cursor=c:00", "/file?path=/a/../b"])
def test_bad_parameters_are_400(client, url):
    r = client.get(url)
    assert r.status_code == 400, r.text
    assert "Traceback" not in r.text
    assert client.get("/api" + url).status_code == 400


def test_nothing_writes(client, quickstart_store):
    before = cli_json(quickstart_store, "log", "--json")
    for url in PAGES:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert client.request(method, url).status_code == 405
            assert client.request(method, "/api" + url if url != "/" else "/api").status_code == 405
        client.get(url)
    assert cli_json(quickstart_store, "log", "--json") == before


def test_static_files_ship_in_the_package(client):
    assert "EventSource" in client.get("/static/viewer.js").text
    assert client.get("/static/viewer.css").status_code == 200
    html = client.get("/").text
    assert "http://" not in html.split("<main>")[0] and "https://" not in html  # no CDN


def test_live_updates_by_server_sent_events(tmp_path):
    """A commit made by another process reaches an open /events stream (on_change's poller)."""
    store_dir = tmp_path / "live"

    async def first():
        async with VersionedStore(store_dir) as s:
            await s.write("/a.md", "one")

    asyncio.run(first())
    app = create_app(str(store_dir), poll_interval=0.05)
    writer = ("import asyncio, sys\nfrom memrev import VersionedStore\n"
              "async def go():\n    async with VersionedStore(sys.argv[1]) as s:\n        await s.write('/a.md', 'two')\n"
              "asyncio.run(go())\n")
    with TestClient(app, base_url="http://localhost") as c, c.stream("GET", "/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        assert next(lines) == ": connected"
        threading.Thread(target=subprocess.run, args=([sys.executable, "-c", writer, str(store_dir)],),
                         kwargs={"env": {"PYTHONPATH": str(ROOT / "src")}, "check": True}).start()
        for line in lines:
            if line.startswith("data:"):
                head = json.loads(line[5:])["head"]
                break
    assert head == cli_json(store_dir, "log", "-n", "1", "--json")[0]["id"]


def test_graph_lanes_of_a_merge():
    from types import SimpleNamespace as C

    from memrev.viewer.render import graph_rows

    # m merges s2 (side) into a2 (main); newest first, as the log gives them
    log = [C(id="m", parents=("a2", "s2")), C(id="a2", parents=("a1",)), C(id="s2", parents=("s1",)),
           C(id="s1", parents=("a1",)), C(id="a1", parents=())]
    rows, width = graph_rows(log)
    assert width == 2
    assert [r.lane for r in rows] == [0, 0, 1, 1, 0]
    assert rows[0].edges == [(0, 0), (0, 1)]  # the merge: into both lanes
    assert rows[1].edges == [(0, 0), (1, 1)]  # main goes on, the side lane passes by
    assert rows[3].edges == [(1, 0), (0, 0)]  # the side branch joins a1's lane
    assert rows[4].edges == []


def test_graph_page_draws_the_quickstart_merge(client):
    page = client.get("/graph").text
    assert page.count("<circle") == len(api(client, "/graph"))
    assert 'class="node lane1"' in page  # the trial branch has its own lane
