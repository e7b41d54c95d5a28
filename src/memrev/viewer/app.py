"""The viewer's ASGI app: read-only pages over ``Store``'s async API.

Every page has a JSON twin under ``/api/`` in the shape of the matching
``memrev ... --json`` output (``Commit.to_json``, ``FileChange.to_json``);
long lists are pages, the next one named by a ``Link: <...>; rel="next"``
header (and a link on the HTML page). No route writes to the store.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import errors
from ..core import textdiff
from ..core.paths import is_under, normalize
from ..history import browse
from ..repo.repository import Commit
from ..store.store import Store
from . import render
from .security import SecurityMiddleware

PAGE = 50  # commits per log page
HISTORY_PAGE = 200  # versions per timeline page
GRAPH_PAGE = 100
RECENT = 15  # commits on the front page
HOT_WINDOW = 500  # the front page's most-changed paths are counted over this many recent commits
MEMORY_PREFIX = "/autogen"  # where store.memory(name) keeps its items by default
PROVENANCE_FILTERS = ("agent", "tool")  # documented provenance keys in a commit's meta (docs/provenance.md)
# A page's bound: a file whose two versions together have more than
# DIFF_LINES lines or DIFF_CHARS characters is not diffed on the page (it links to the raw
# versions), and a page draws at most PAGE_LINES diff lines in all (the rest is cut, with
# the same links).
DIFF_LINES = textdiff.DIFF_LINES  # the one bound (core/textdiff.py), as store.diff applies it
DIFF_CHARS = textdiff.DIFF_CHARS
PAGE_LINES = 5_000

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("memrev.viewer", "templates"),
    autoescape=True,  # every value from the store is hostile text
    undefined=jinja2.StrictUndefined,
)
_env.filters["visible"] = render.visible
_env.filters["short"] = lambda oid: oid[:10]
_env.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
_env.filters["stamp"] = lambda t: t.strftime("%Y-%m-%d %H:%M:%S")


def _url(route: str, /, **query: Any) -> str:
    """A link to one of the viewer's pages; values are URL-encoded (then HTML-escaped by the template)."""
    kept = {k: v for k, v in query.items() if v is not None and v != ""}
    return route + ("?" + urlencode(kept) if kept else "")


_env.globals["url"] = _url


class NotFound(errors.MemrevError):
    """A path, memory or page that does not exist (rendered as a 404 page)."""


@dataclass
class View:
    """What a handler answers: a template and its values for the page, a document for ``/api/``."""

    template: str
    context: dict[str, Any]
    doc: Any
    cursor: str | None = None  # the next page's cursor, if there is one
    title: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[Store, Request], Awaitable[View]]


def _arg(request: Request, name: str, default: str | None = None) -> str | None:
    value = request.query_params.get(name)
    return default if value is None or value == "" else value


def _need(request: Request, name: str) -> str:
    value = _arg(request, name)
    if value is None:
        raise ValueError(f"the {name!r} parameter is required")
    return value


def _page_size(request: Request, default: int) -> int:
    raw = _arg(request, "limit")
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise ValueError("limit must be a whole number from 1 to 1000")
    return int(raw)


def _where(request: Request) -> tuple[Callable[[Commit], bool] | None, dict[str, str]]:
    """The author/provenance filter of a log query, and the filters for links."""
    wanted = {k: v for k in ("author", *PROVENANCE_FILTERS) if (v := _arg(request, k)) is not None}
    if not wanted:
        return None, {}

    def keep(c: Commit) -> bool:
        return all((c.author if k == "author" else c.meta.get(k)) == v for k, v in wanted.items())

    return keep, wanted


# ------------------------------------------------------------------ pages


async def home(store: Store, request: Request) -> View:
    recent = (await store.log_page(limit=HOT_WINDOW)).commits
    hot = collections.Counter(p for c in recent for p in c.paths).most_common(15)
    doc = {
        "branch": store.branch_name,
        "branches": await store.branches(),
        "tags": await store.tags(),
        "commits": [c.to_json() for c in recent[:RECENT]],
        "paths": [{"path": p, "changes": n} for p, n in hot],
        "memories": [n.rstrip("/") for n in await store.list(MEMORY_PREFIX) if n.endswith("/")],
    }
    ctx = doc | {"commits": recent[:RECENT], "hot": hot, "window": len(recent)}
    return View("home.html", ctx, doc, title="memrev")


async def log(store: Store, request: Request) -> View:
    path, branch = _arg(request, "path"), _arg(request, "branch")
    keep, filters = _where(request)
    page = await store.log_page(
        path, limit=_page_size(request, PAGE), cursor=_arg(request, "cursor"), rev=branch, where=keep
    )
    ctx = {"commits": page.commits, "path": path, "branch": branch, "filters": filters,
           "branches": await store.branches()}
    return View("log.html", ctx, [c.to_json() for c in page.commits], page.cursor, title=f"log {path or ''}")


async def history(store: Store, request: Request) -> View:
    path = normalize(_need(request, "path"))
    versions, cursor = await store.history_page(path, limit=_page_size(request, HISTORY_PAGE), cursor=_arg(request, "cursor"))
    if not versions and _arg(request, "cursor") is None:
        raise NotFound(f"{path} has no history")
    inside = sorted({p for c, _ in versions for p in c.paths if p != path and is_under(p, path)})
    if inside:  # a folder has no versions of its own: each file's, by the commits that changed it
        sizes = {}
        for p in inside:
            sizes.update({(c.id, p): size for c, size in await store.history(p)})
        files = [(c, p, sizes.get((c.id, p))) for c, _ in versions for p in sorted(c.paths) if p in inside]
        doc = [c.to_json() | {"path": p, "size": size} for c, p, size in files]
        return View("history.html", {"path": path, "versions": [], "files": files}, doc, cursor, title=f"history {path}")
    doc = [c.to_json() | {"size": size} for c, size in versions]
    return View("history.html", {"path": path, "versions": versions, "files": []}, doc, cursor, title=f"history {path}")


async def _neighbours(store: Store, path: str, a: str | None, b: str) -> tuple[dict | None, dict | None]:
    """The previous and next change of ``path`` around the pair (a, b), for ← → stepping."""
    older = newer = None
    if a is not None:
        before = (await store.log_page(path, limit=2, rev=a)).commits
        if len(before) == 2:
            older = {"path": path, "a": before[1].id, "b": before[0].id}
    b_id = await store.resolve(b)
    prev_id, page = None, await store.log_page(path, limit=HISTORY_PAGE)
    while True:
        for c in page.commits:
            if c.id == b_id:
                return older, (None if prev_id is None else {"path": path, "a": b_id, "b": prev_id})
            prev_id = c.id
        if page.cursor is None:
            return older, newer
        page = await store.log_page(path, limit=HISTORY_PAGE, cursor=page.cursor)


async def _last_change(store: Store, path: str) -> tuple[str | None, str]:
    """The two revisions of ``path``'s last change (``store.last_change``); no history is a 404."""
    try:
        return await store.last_change(path)
    except errors.RevisionNotFound:
        raise NotFound(f"{path} has no history") from None


@dataclass
class DrawnFile:
    """One file of a diff page: its hunks, or why they were cut (``cut``), with the raw versions' revisions."""

    change: Any
    hunks: list[render.Hunk]
    cut: str | None
    old_rev: str | None
    new_rev: str


def _draw(changes: list[Any], old_rev: str | None, new_rev: str, api: bool) -> tuple[list[DrawnFile], list[dict]]:
    """The page's files (bounded by DIFF_CHARS and PAGE_LINES) or the API's changes; run in a
    thread, never on the event loop: a line diff of a large file takes seconds."""
    if api:  # the JSON twin is the CLI's --json, whole
        return [], [c.to_json() for c in changes]
    drawn, budget = [], PAGE_LINES
    for c in changes:
        over = textdiff.too_large_to_diff(c.old, c.new)
        if over is not None:
            lines, size = over
            drawn.append(DrawnFile(c, [], f"too large to show here ({lines:,} lines, {size:,} characters)", old_rev, new_rev))
            continue
        if budget <= 0:
            drawn.append(DrawnFile(c, [], "not shown: the page size limit is reached", old_rev, new_rev))
            continue
        kept, cut = [], None
        for h in render.hunks(c.old, c.new):
            if len(h.lines) > budget:
                h.lines = h.lines[:budget]
                kept.append(h)
                cut = "cut short at the page size limit"
                budget = 0
                break
            budget -= len(h.lines)
            kept.append(h)
        drawn.append(DrawnFile(c, kept, cut, old_rev, new_rev))
    return drawn, []


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api")


async def _exists(store: Store, path: str, rev: str | None) -> bool:
    """Whether ``path`` is a file or a folder at ``rev`` (``None``: nothing exists)."""
    if rev is None:
        return False
    return await store.read(path, rev=rev) is not None or bool(await store.list(path, rev=rev))


async def diff(store: Store, request: Request) -> View:
    path, a, b = _arg(request, "path"), _arg(request, "a"), _arg(request, "b")
    path = None if path is None else normalize(path)
    if a is None and b is None:
        a, b = await _last_change(store, path) if path else ("HEAD~1", "HEAD")
    b = b or "HEAD"
    changes = await store.diff(a, b, path)
    if path is not None and not changes and not (await _exists(store, path, a) or await _exists(store, path, b)):
        raise NotFound(f"{path} exists at neither {a} nor {b}")  # as every other unknown path
    one_file = path is not None and [c.path for c in changes] == [path]  # not a directory's changes
    older, newer = await _neighbours(store, path, a, b) if one_file and path is not None else (None, None)
    view = "unified" if _arg(request, "view") == "unified" else "split"
    commit_a, commit_b = (await store.show(a) if a else None), await store.show(b)
    files, changes_doc = await asyncio.to_thread(
        _draw, changes, commit_a.id if commit_a else None, commit_b.id, _is_api(request))
    ctx = {"a": a, "b": b, "path": path, "files": files, "view": view, "older": older, "newer": newer,
           "commit_a": commit_a, "commit_b": commit_b}
    doc = {"a": commit_a.id if commit_a else None, "b": commit_b.id, "changes": changes_doc}
    return View("diff.html", ctx, doc, title=f"diff {path or ''}")


async def blame(store: Store, request: Request) -> View:
    path, rev = normalize(_need(request, "path")), _arg(request, "rev")
    try:
        lines = await store.blame(path, rev=rev)
    except errors.RevisionNotFound:
        if rev is not None:
            await store.resolve(rev)  # an unknown revision says so; a missing file below
        raise NotFound(f"{path} is not a file at {rev or 'HEAD'}") from None
    doc = browse.blame_json(path, lines)
    distinct = len({b.commit.id for b in lines})
    return View("blame.html", {"path": path, "rev": rev, "lines": lines, "distinct": distinct}, doc, title=f"blame {path}")


async def commit(store: Store, request: Request) -> View:
    c = await store.show(request.path_params["rev"])
    a = c.parents[0] if c.parents else None
    changes = await store.diff(a, c.id)
    files, changes_doc = await asyncio.to_thread(_draw, changes, a, c.id, _is_api(request))
    doc = c.to_json() | {"a": a, "b": c.id, "changes": changes_doc}
    return View("commit.html", {"c": c, "files": files, "view": "unified"}, doc, title=f"commit {c.id[:10]}")


async def graph(store: Store, request: Request) -> View:
    page = await store.log_page(limit=_page_size(request, GRAPH_PAGE), cursor=_arg(request, "cursor"))
    rows, width = render.graph_rows(page.commits)
    heads: dict[str, list[str]] = collections.defaultdict(list)
    for name, target in (await store.branches()).items():
        heads[target].append(name)
    for name, target in (await store.tags()).items():
        heads[target].append(f"tag: {name}")
    ctx = {"rows": rows, "width": width, "heads": heads}
    return View("graph.html", ctx, [c.to_json() for c in page.commits], page.cursor, title="graph")


def _item_json(item: Any) -> dict[str, Any]:
    content = item.content
    body = content.content
    return {
        "id": item.id,
        "path": item.path,
        "mime_type": str(getattr(content.mime_type, "value", content.mime_type)),
        "content": body if isinstance(body, (str, dict)) else f"<{type(body).__name__}>",
        "metadata": content.metadata,
    }


async def memory(store: Store, request: Request) -> View:
    # AutoGen is imported only when a page shows its items, not by `memrev serve` itself.
    from ..autogen import VersionedMemory
    from ..frameworks.tiered import CHAT_ARCHIVE, LONG_TERM, SHORT_TERM

    name = request.path_params["name"]
    mem = VersionedMemory(store, name, prefix=MEMORY_PREFIX)
    items = [_item_json(i) for i in await mem.items()]
    # a TieredMemory keeps its tiers as item folders under the memory (tiered.py's layout)
    tiers: dict[str, list[dict[str, Any]]] = {}
    for tier in (SHORT_TERM, LONG_TERM, CHAT_ARCHIVE):
        entries = await VersionedMemory(store, tier, prefix=f"{MEMORY_PREFIX}/{name}").items()
        if entries:
            tiers[tier] = [_item_json(i) for i in entries]
    changes = await mem.log(limit=_page_size(request, PAGE))
    if tiers or not changes:  # a tiered memory's commits touch its tiers, not a flat items folder
        changes = (await store.log_page(f"{MEMORY_PREFIX}/{name}", limit=_page_size(request, PAGE))).commits
    if not items and not changes:
        raise NotFound(f"no memory named {name!r}")
    doc = {"name": name, "items": items, "tiers": tiers, "log": [c.to_json() for c in changes]}
    return View("memory.html", doc | {"changes": changes}, doc, title=f"memory {name}")


async def search(store: Store, request: Request) -> View:
    path, text = _arg(request, "path"), _arg(request, "text")
    found = None
    if path is not None and text is not None:
        found = await store.find_text(path, text)
    doc: list[dict] = [] if found is None else [
        {"commit": t.commit.to_json(), "before": t.before, "after": t.after, "kind": t.kind} for t in found
    ]
    return View("search.html", {"path": path, "text": text, "found": found}, doc, title="search")


async def file(store: Store, request: Request) -> View:
    path, rev = normalize(_need(request, "path")), _arg(request, "rev")
    content = await store.read(path, rev=rev)
    if content is None:
        if rev is not None:
            await store.resolve(rev)
        raise NotFound(f"{path} does not exist at {rev or 'HEAD'}")
    doc = {"path": path, "rev": rev or "HEAD", "content": content}
    return View("file.html", doc | {"lines": content.splitlines()}, doc, title=path)


PAGES: dict[str, Handler] = {
    "/": home, "/log": log, "/history": history, "/diff": diff, "/blame": blame,
    "/commit/{rev:path}": commit, "/graph": graph, "/memory/{name:path}": memory,
    "/search": search, "/file": file,
}


# ------------------------------------------------------------------ plumbing


def _error(request: Request, api: bool, status: int, message: str) -> Response:
    if api:
        return JSONResponse({"error": message}, status_code=status)
    html = _env.get_template("error.html").render(status=status, message=message, title=f"{status}", store_branch="")
    return HTMLResponse(html, status_code=status)


def _respond(handler: Handler, api: bool) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        store: Store = request.app.state.store
        try:
            view = await handler(store, request)
        except (NotFound, errors.RevisionNotFound) as e:
            return _error(request, api, 404, str(e))
        except (errors.InvalidPath, errors.InvalidCursor, ValueError) as e:
            return _error(request, api, 400, str(e))
        headers = {}
        next_url = None
        if view.cursor is not None:  # the same query, one page on
            next_url = request.url.path + "?" + urlencode(dict(request.query_params) | {"cursor": view.cursor})
            headers["Link"] = f'<{next_url}>; rel="next"'
        if api:  # encoded in a thread: a large document takes a while
            body = await asyncio.to_thread(
                json.dumps, view.doc, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
            return Response(body, media_type="application/json", headers=headers)
        html = await asyncio.to_thread(
            _env.get_template(view.template).render,
            **view.context, title=view.title, next_url=next_url, store_branch=store.branch_name,
            api_url="/api" + request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        )
        return HTMLResponse(html, headers=headers)

    return endpoint


async def events(request: Request) -> Response:
    """Server-sent events: ``commit`` with the new head id whenever the branch moves (``on_change``)."""
    store: Store = request.app.state.store
    moved = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def changed(_path: str) -> None:
        # a commit through another handle in this process may call back from its own loop
        loop.call_soon_threadsafe(moved.set)

    # subscribed before the response starts: once the browser sees the stream open, no commit is missed
    sub = await store.on_change("/", changed)

    async def stream() -> AsyncIterator[str]:
        try:
            yield ": connected\n\n"
            while True:
                try:
                    await asyncio.wait_for(moved.wait(), timeout=15)
                except asyncio.TimeoutError:
                    yield ": keep-alive\n\n"  # lets proxies and the browser see a live connection
                    continue
                moved.clear()
                yield f"event: commit\ndata: {json.dumps({'head': await store.head()})}\n\n"
        finally:
            await sub.close()

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


def create_app(location: str, *, branch: str = "main", token: str | None = None, poll_interval: float = 1.0) -> Starlette:
    """The viewer for the store at ``location``. With ``token``, every request must carry it."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.store = Store(location, branch=branch, poll_interval=poll_interval, create=False)  # never creates
        try:
            yield
        finally:
            app.state.store.close()

    routes: list[Any] = []
    for path, handler in PAGES.items():
        routes.append(Route(path, _respond(handler, api=False)))
        routes.append(Route("/api" + path.rstrip("/") if path != "/" else "/api", _respond(handler, api=True)))
    routes.append(Route("/events", events))
    # browsers ask for /favicon.ico on pages that name no icon (the token refusal is plain text)
    routes.append(Route("/favicon.ico", lambda request: RedirectResponse("/static/favicon.svg", status_code=301)))
    routes.append(Mount("/static", StaticFiles(packages=[("memrev.viewer", "static")]), name="static"))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(SecurityMiddleware, token=token)

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(request, request.url.path.startswith("/api"), 404, f"no page {request.url.path}")

    app.add_exception_handler(404, not_found)
    return app
