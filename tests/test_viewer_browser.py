"""The viewer in a real browser: Playwright driving Debian's chromium (issue 12).

``memrev serve`` runs as its own process. Where chromium or Playwright is
missing these tests skip with the reason, unless ``MEMREV_REQUIRE_BROWSER=1``
(CI sets it), where they fail. Every page is watched for JavaScript dialogs,
console errors (a CSP violation is one) and uncaught exceptions.

Screenshots of the main pages are saved by ``test_screenshots``; to refresh
the committed ones:

    MEMREV_SCREENSHOTS=docs/viewer python -m pytest tests/test_viewer_browser.py -k screenshots
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from memrev import VersionedStore
from viewer_stores import (
    BIG,
    EVENT_LOG,
    HOSTILE,
    HOSTILE_PATH,
    ROOT,
    SCRIPT,
    WM,
    build_shapes,
    run_async,
    running_viewer,
)

REQUIRE = os.environ.get("MEMREV_REQUIRE_BROWSER") == "1"
CHROMIUM = os.environ.get("MEMREV_CHROMIUM", "/usr/bin/chromium")

pytestmark = pytest.mark.slow  # a real browser, and the viewer as its own process
SHOTS = [
    ("store", "/"),
    ("history", f"/history?path={WM}"),
    ("diff", f"/diff?path={WM}"),
    ("blame", f"/blame?path={WM}"),
    ("graph", "/graph"),
    ("memory", "/memory/preferences"),
    ("tree", "/tree"),
    ("file", f"/file?path={WM}&view=source#L9"),
    ("why", f"/why?path={WM}&line=9"),
]
MAX_PNG = 300_000


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"MEMREV_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(f"browser tests skipped: {reason} (apt-get install chromium; pip install playwright)")


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        _unavailable("playwright is not installed")
    if not shutil.which(CHROMIUM):
        _unavailable(f"{CHROMIUM} does not exist")
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM)
        except Error as e:
            _unavailable(f"chromium does not start: {e}")
        yield b
        b.close()


class Watched:
    """A page with everything that would betray a running script or a broken page recorded."""

    def __init__(self, browser, base: str) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 860})
        self.page = self.context.new_page()
        self.base = base
        self.problems: list[str] = []
        self.page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"), d.dismiss()))
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))

    def open(self, url: str):
        response = self.page.goto(self.base + url)
        assert response is not None
        return response

    def close(self) -> None:
        self.context.close()
        assert self.problems == []


@pytest.fixture(scope="module")
def quickstart_url(quickstart_store):
    with running_viewer(quickstart_store) as url:
        yield url


@pytest.fixture
def watched(browser, quickstart_url):
    w = Watched(browser, quickstart_url)
    yield w
    w.close()


def test_history_compare_and_step_with_the_keyboard(watched):
    page = watched.page
    watched.open("/")
    page.click(f"table.hot a:text-is('{WM}')")
    page.wait_for_url("**/history?path=*")
    rows = page.locator("table.timeline tbody tr")
    assert rows.count() == 3
    rows.nth(1).locator("input[name=a]").check()
    rows.nth(0).locator("input[name=b]").check()
    page.click("form.compare button[type=submit]")
    page.wait_for_url("**/diff?*")
    removed = page.locator("td.code.del").all_inner_texts()
    added = page.locator("td.code.add").all_inner_texts()
    assert "- No pork" in removed and "- Vegetarian (partner too): no meat at all" in added
    assert "- Cooks for two on weeknights, eats out on Thursdays" in added
    assert page.locator("td.code.add ins").first.inner_text().strip()  # word-level highlight inside the line
    # ← steps to the change before: the second version against the first
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("() => !!document.querySelector('#newer')")
    assert "- No pork" in page.locator("td.code.add").all_inner_texts()
    page.click("a:text('unified')")
    assert page.locator("table.diff.unified tr.add").count() > 0


def test_blame_shows_three_commits_linking_to_them(watched):
    page = watched.page
    watched.open(f"/blame?path={WM}")
    ids = page.locator("table.blame tr.first td.who a.id").all_inner_texts()
    assert len(set(ids)) == 3
    page.locator("table.blame tr.first td.who a.id").first.click()
    page.wait_for_url("**/commit/*")
    assert page.locator("h1 .id").inner_text().startswith(ids[0])


def test_every_main_page_renders_without_errors(watched):
    for _, url in SHOTS + [("log", "/log"), ("commit", "/commit/HEAD"), ("search", f"/search?path={WM}&text=pork")]:
        assert watched.open(url).status == 200
    assert watched.open("/commit/nope").status == 404
    assert "404" in watched.page.locator("h1").inner_text()
    # the browser logs the 404 response itself; nothing else may be logged
    assert [p for p in watched.problems if "status of 404" in p] == watched.problems[-1:]
    watched.problems.pop()


def test_hostile_values_show_as_text_and_no_script_runs(browser, hostile_store):
    p = quote(HOSTILE_PATH)
    pages = ["/", "/log", f"/history?path={p}", f"/diff?path={p}", f"/blame?path={p}", f"/file?path={p}",
             "/commit/HEAD~4", "/graph", "/memory/evil", f"/search?path={p}&text={quote(SCRIPT)}", f"/diff?path={BIG}"]
    with running_viewer(hostile_store) as url:
        w = Watched(browser, url)
        for page_url in pages:
            w.open(page_url)
            w.page.wait_for_load_state("load")
        w.open(f"/file?path={p}")
        text = w.page.locator("main").inner_text()
        for raw in HOSTILE:
            assert raw in text
        assert w.page.evaluate("document.querySelectorAll('main img, main script, main iframe').length") == 0
        w.close()  # asserts: no dialog, no console error, no page error


def test_live_updates_offer_a_refresh(browser, tmp_path):
    store_dir = tmp_path / "live"

    async def write(text: str) -> None:
        async with VersionedStore(store_dir) as s:
            await s.write("/notes.md", text)

    run_async(lambda: write("one"))
    with running_viewer(store_dir) as url:
        w = Watched(browser, url)
        w.open("/")
        banner = w.page.locator("#live")
        assert banner.is_hidden()
        w.page.wait_for_function("() => document.body.dataset.live === 'connected'")  # subscribed
        run_async(lambda: write("two"))  # another handle: the server's on_change poller sees it
        banner.wait_for(state="visible", timeout=30_000)
        w.page.click("#live-refresh")
        w.page.wait_for_load_state("load")
        assert w.page.locator("table.commits tbody tr").count() == 2
        w.close()


def test_token_in_the_browser_becomes_an_httponly_cookie(browser, quickstart_store):
    with running_viewer(quickstart_store, "--host", "127.0.0.1", token="t0ken") as url:
        w = Watched(browser, url)
        response = w.open("/log")
        assert response.status == 401
        assert w.open("/log?token=t0ken").status == 200
        assert w.page.url == url + "/log"  # the token left the address bar
        assert w.page.evaluate("document.cookie") == ""  # HttpOnly: no script can read it
        assert w.open("/graph").status == 200
        # the refused requests (the page, and the browser's own /favicon.ico) are logged; nothing else
        w.problems = [p for p in w.problems if "status of 401" not in p]
        w.close()


def test_non_loopback_bind_without_token_is_refused(quickstart_store):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("MEMREV_TOKEN", None)
    proc = subprocess.run(
        [sys.executable, "-m", "memrev.cli", "--store", str(quickstart_store), "serve", "--host", "0.0.0.0"],
        check=False, capture_output=True, text=True, timeout=60, env=env,
    )
    assert proc.returncode == 1 and "needs --token" in proc.stderr


def test_screenshots(watched, tmp_path):
    out = Path(os.environ.get("MEMREV_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    for name, url in SHOTS:
        watched.open(url)
        path = out / f"{name}.png"
        watched.page.screenshot(path=str(path))
        assert 0 < path.stat().st_size < MAX_PNG, (name, path.stat().st_size)


# ------------------------------------------------------------------ issue 25: the flows a person follows


def test_from_the_store_to_a_file_to_why_shows_the_user_message(watched):
    page = watched.page
    watched.open("/")
    page.click("header >> text=files")
    page.click("a.dir >> text=memory/")
    page.click("a.file >> text=working.md")
    page.wait_for_url("**/file?path=*")
    page.click("a.source-view")
    row = page.locator("table.file tr", has_text="Vegetarian (partner too)")
    row.locator("td.why a").click()
    page.wait_for_url("**/why?*")
    transcript = page.locator("ol.transcript").inner_text()
    assert "News: my partner went vegetarian, so no meat at all." in transcript
    assert "ModelRequest" not in page.locator("main").inner_text()


def test_the_last_sessions_conversation_shows_the_turns_memory_diff(watched):
    page = watched.page
    watched.open("/")
    page.locator("table.sessions a.conversation").first.click()  # newest first: the last session
    page.wait_for_url("**/conversation?*")
    turn = page.locator("section.turn").last
    assert "News: my partner went vegetarian" in turn.locator("ol.transcript").inner_text()
    diff = turn.locator("div.writes table.diff").inner_text()
    assert "Vegetarian (partner too): no meat at all" in diff and "No pork" in diff


def test_browse_the_tree_at_an_older_revision(watched):
    page = watched.page
    watched.open("/tree?path=/artifacts")
    assert page.locator("a.file", has_text="notes.md").count() == 1
    page.fill("input[name=rev]", "after-chat-3")
    page.click("form.search button")
    page.wait_for_url("**rev=after-chat-3**")
    assert page.locator("a.file", has_text="notes.md").count() == 0
    page.click("a.file >> text=meal-plan.md")
    assert "at after-chat-3" in page.locator("h1.crumbs").inner_text()


def test_a_line_permalink_is_highlighted(watched):
    page = watched.page
    watched.open(f"/file?path={WM}#L9")  # the rendered Markdown: a block starting at line 9, or the source view
    page.wait_for_load_state("load")
    target = page.locator(":target")
    target.wait_for()
    assert target.get_attribute("id") == "L9"
    watched.open(f"/file?path={WM}&view=source#L5")
    row = page.locator("tr#L5 td.code")
    assert row.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(255, 248, 197)"
    assert page.locator("tr#L4 td.code").evaluate("e => getComputedStyle(e).backgroundColor") != "rgb(255, 248, 197)"


@pytest.fixture(scope="module")
def shapes_url(tmp_path_factory):
    store = build_shapes(tmp_path_factory.mktemp("browser") / "shapes")
    with running_viewer(store) as url:
        yield url


def test_hostile_markdown_and_event_logs_run_no_script_and_ask_no_other_host(browser, shapes_url):
    w = Watched(browser, shapes_url)
    requests: list[str] = []
    w.page.on("request", lambda r: requests.append(r.url))
    missing: list[str] = []
    w.page.on("response", lambda r: r.status >= 400 and missing.append(r.url))
    for url in ["/", "/file?path=/notes/hostile.md", "/file?path=/notes/hostile.md&view=source",
                f"/conversation?path={EVENT_LOG}", "/why?path=/notes/hostile.md&line=1", "/tree?path=/notes",
                "/search?text=script&i=1", "/search?text=script&history=1"]:
        w.open(url)
        w.page.wait_for_load_state("load")
    w.open("/file?path=/notes/hostile.md")
    assert w.page.evaluate("document.querySelectorAll('main script, main iframe').length") == 0
    assert "<script>alert('md')</script>" in w.page.locator("article.markdown").inner_text()
    hrefs = w.page.eval_on_selector_all("main a", "els => els.map(e => e.getAttribute('href'))")
    assert not [h for h in hrefs if h and h.lower().startswith("javascript")]
    w.open(f"/conversation?path={EVENT_LOG}")
    assert f"please {SCRIPT}" in w.page.locator("ol.transcript").inner_text()
    assert all(r.startswith(shapes_url) for r in requests), [r for r in requests if not r.startswith(shapes_url)]
    assert missing == []
    w.close()  # asserts: no dialog, no console error, no page error


def test_tiered_memory_and_openai_session_render_their_items(browser, shapes_url):
    w = Watched(browser, shapes_url)
    w.open("/memory/assistant")
    text = w.page.locator("main").inner_text()
    assert "short-term" in text and "Sam is vegetarian" in text and "chat-archive" in text and "question 0" in text
    w.open("/")
    w.page.click("a[href=\"/session/chat-42\"]")
    transcript = w.page.locator("table.session").inner_text()
    assert "What should I cook tonight?" in transcript and "Try the chickpea curry." in transcript
    w.page.click("a >> text=try-tacos")
    assert "Tacos instead?" in w.page.locator("table.session").inner_text()
    w.close()


def test_screenshots_of_the_new_pages(watched, tmp_path, quickstart_store):
    out = Path(os.environ.get("MEMREV_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    watched.open("/")
    log = watched.page.locator("table.sessions a.conversation").first.get_attribute("href")
    for name, url in [("conversation", log), ("search", "/search?text=vegetarian&i=1"), ("compare", "/compare?a=after-chat-3&b=main")]:
        watched.open(url)
        path = out / f"{name}.png"
        watched.page.screenshot(path=str(path))
        assert 0 < path.stat().st_size < MAX_PNG, (name, path.stat().st_size)
