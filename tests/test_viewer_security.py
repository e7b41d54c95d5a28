"""The viewer treats every stored value as hostile text (issue 12).

A store full of ``<script>``, ``"><img src=x onerror=...>``, ``javascript:``
URLs in meta, control characters and a 1 MB line: every page shows them as
text (escaped), no page carries a script or event handler of its own making,
a Content-Security-Policy forbidding inline script is on every response, and
the token rule holds (loopback by default; elsewhere a token, as a Bearer
header or a ``?token=`` that becomes an HttpOnly cookie).
"""

from __future__ import annotations

import asyncio
import html
import json
from html.parser import HTMLParser
from urllib.parse import quote, urlencode

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from memrev.cli import main as cli
from memrev.viewer import TokenRequired, check_bind, create_app
from memrev.viewer.security import CSP
from viewer_stores import BIG, CONTROL, HOSTILE, HOSTILE_PATH, IMG, JS_URL, SCRIPT, WM

P = quote(HOSTILE_PATH)
HOSTILE_PAGES = [
    "/", "/log", f"/log?path={P}", f"/history?path={P}", f"/diff?path={P}", f"/diff?path={P}&view=unified",
    f"/blame?path={P}", f"/file?path={P}", "/graph", "/memory/evil", f"/search?path={P}&text={quote(SCRIPT)}",
    f"/diff?path={BIG}", f"/history?path={WM}", f"/blame?path={WM}", "/commit/HEAD", "/commit/HEAD~4",
    f"/search?path={quote(IMG)}&text={quote(IMG)}", f"/commit/{quote(SCRIPT)}", f"/history?path={quote(SCRIPT)}",
]


class Markup(HTMLParser):
    """Every tag and attribute the browser would build from a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Markup:
    m = Markup()
    m.feed(page)
    return m


@pytest.fixture(scope="module")
def client(hostile_store):
    with TestClient(create_app(str(hostile_store)), base_url="http://localhost") as c:
        yield c


@pytest.mark.parametrize("url", HOSTILE_PAGES)
def test_hostile_values_are_text_never_markup(client, url):
    r = client.get(url)
    assert r.status_code in (200, 404), r.text[:500]
    m = parse(r.text)
    scripts = [a for t, a in m.tags if t == "script"]
    assert scripts == [{"src": "/static/viewer.js", "defer": None}]
    for tag, attrs in m.tags:
        assert tag not in ("img", "iframe", "object", "embed", "base", "meta") or (tag == "meta" and "charset" in attrs or attrs.get("name") == "viewport"), (tag, attrs)
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, attrs)
            if name in ("href", "src", "action", "xlink:href"):
                assert value is not None and (value.startswith(("/", "#")) or value == ""), (tag, attrs)  # this site, or a line of this page
    for raw in HOSTILE:
        assert raw not in r.text or raw == JS_URL  # a javascript: URL is harmless as text; never as a link
    for ch in "\x00\x01\x07\x1b\x7f":
        assert ch not in r.text, (url, repr(ch))


def test_hostile_values_are_shown_as_they_are(client):
    text = "".join(parse(client.get(f"/file?path={P}").text).text)
    for raw in HOSTILE:
        assert raw in text
    commit = "".join(parse(client.get("/commit/HEAD~4").text).text)
    assert SCRIPT in commit and IMG in commit and JS_URL in commit  # message, author, meta
    assert "\u2407" in commit and "\u241b" in commit  # BEL and ESC drawn as visible symbols
    memory = "".join(parse(client.get("/memory/evil").text).text)
    assert SCRIPT in memory and json.dumps(JS_URL) in memory  # metadata is shown as JSON


def test_json_twins_keep_values_exact(client):
    [c] = client.get(f"/api/log?path={P}&limit=1").json()
    assert c["meta"]["link"] == JS_URL and c["meta"]["session"] == CONTROL and c["message"] == CONTROL
    assert client.get(f"/api/file?path={P}").json()["content"].count(SCRIPT) == 1


def test_a_1mb_line_changed_by_one_word_is_highlighted_as_one_word(client):
    page = client.get(f"/diff?path={BIG}").text
    assert len(page) > 2_000_000  # both sides of the line are shown
    assert "<del>before</del>" in page and "<ins>after</ins>" in page
    assert page.count("<del>") == 1 and page.count("<ins>") == 1


@pytest.mark.parametrize("url", ["/", "/log", "/no/such", "/api/log", "/static/viewer.js", f"/blame?path={P}&rev=nope"])
def test_every_response_carries_the_csp(client, url):
    r = client.get(url)
    assert r.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP and "default-src 'none'" in CSP
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"


def test_without_a_token_only_loopback_names_are_answered(hostile_store):
    with TestClient(create_app(str(hostile_store)), base_url="http://localhost") as c:
        assert c.get("/").status_code == 200
        assert c.get("/", headers={"Host": "127.0.0.1:8765"}).status_code == 200
        assert c.get("/", headers={"Host": "[::1]:8765"}).status_code == 200
        # a page elsewhere that points its own name at 127.0.0.1 (DNS rebinding) gets nothing
        r = c.get("/api/log", headers={"Host": "attacker.example:8765"})
        assert r.status_code == 421 and "memrev" not in r.text.lower().replace("memrev serve", "")
        assert c.get("/", headers={"Host": "127.0.0.1.attacker.example"}).status_code == 421


def test_token_rule(hostile_store):
    app = create_app(str(hostile_store), token="s3cret")
    with TestClient(app, base_url="http://viewer.example:8765", follow_redirects=False) as c:
        assert c.get("/").status_code == 401
        assert c.get("/api/log").status_code == 401
        assert c.get("/static/viewer.js").status_code == 401
        assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/log", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/?token=wrong").status_code == 401
        r = c.get(f"/log?token=s3cret&path={P}")
        assert r.status_code == 303
        assert r.headers["location"] == "/log?" + urlencode({"path": HOSTILE_PATH})  # the token leaves the URL
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "s3cret" not in cookie
        assert c.get(f"/log?path={P}").status_code == 200  # the cookie from now on
        c.cookies.clear()
        assert c.get("/").status_code == 401
        c.cookies.set("memrev_token", "s3cret")  # the token itself is not the cookie
        assert c.get("/").status_code == 401
    # a path starting with // must never turn the login redirect into an off-site one
    status, headers = asyncio.run(raw_get(app, "//attacker.example/x", b"token=s3cret"))
    assert status == 303 and headers[b"location"] == b"/attacker.example/x"


async def raw_get(app, path: str, query: bytes) -> tuple[int, dict[bytes, bytes]]:
    """One request with exactly this path (an HTTP client would read //host as a host)."""
    sent: list[dict] = []
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": query,
             "headers": [(b"host", b"viewer.example")], "scheme": "http", "http_version": "1.1",
             "server": ("viewer.example", 80), "client": ("10.0.0.2", 1234), "root_path": ""}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"])


def test_non_loopback_bind_without_token_is_refused(hostile_store, monkeypatch):
    with pytest.raises(TokenRequired):
        check_bind("0.0.0.0", None)
    with pytest.raises(TokenRequired):
        check_bind("192.168.1.10", "")
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("localhost", None)
    check_bind("0.0.0.0", "t")
    monkeypatch.delenv("MEMREV_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["--store", str(hostile_store), "serve", "--host", "0.0.0.0", "--port", "1"])
    assert result.exit_code == 1 and "needs --token" in result.output


def test_error_pages_escape_what_they_echo(client):
    r = client.get(f"/history?path={quote('/x/' + SCRIPT)}")
    assert r.status_code == 404
    assert SCRIPT not in r.text and html.escape(SCRIPT, quote=False) in r.text.replace("&#34;", '"')
