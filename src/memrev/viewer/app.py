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
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import errors
from ..core import textdiff
from ..core.paths import is_under, normalize
from ..history import browse, pickaxe
from ..repo.repository import Commit
from ..store.store import Store
from . import markdown, render
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
FILE_LINES = 5_000  # lines of a file page (the rest: the raw file)
FILE_CHARS = 2_000_000  # characters of a file page
LINE_CHARS = 20_000  # characters of one line on a page (the rest: the raw file)
TREE_PAGE = 500  # entries of a tree page
LAST_CHANGES = 200  # entries of a tree page whose last change is looked up (one indexed read each)
TURNS = 10  # turns of a conversation page
TURN_SCAN = 200  # commits read back from a turn's event-log commit to find the turn's writes
SESSION_ITEMS = 500  # items of an OpenAI session page
SESSIONS = 20  # conversations on the store page's timeline (the newest of the recent commits)
SEARCH_HITS = 200
EVENT_LOG_DIR = "/log"
OPENAI_SESSIONS = "/openai-agents/sessions"  # openai_agents.py's layout

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("memrev.viewer", "templates"),
    autoescape=True,  # every value from the store is hostile text
    undefined=jinja2.StrictUndefined,
)
_env.filters["visible"] = render.visible
_env.filters["short"] = lambda oid: oid[:10]
_env.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
_env.filters["stamp"] = lambda t: t.strftime("%Y-%m-%d %H:%M:%S")


def ago(t: datetime, now: datetime | None = None) -> str:
    """``t`` relative to now: "just now", "5 minutes ago", "3 days ago"."""
    seconds = ((now or datetime.now(timezone.utc)) - t).total_seconds()
    if seconds < 0:
        return "in the future"
    for unit, size in (("year", 365 * 86400), ("month", 30 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"


_env.filters["ago"] = ago
_env.filters["iso"] = lambda t: t.isoformat()


def _url(route: str, /, **query: Any) -> str:
    """A link to one of the viewer's pages; values are URL-encoded (then HTML-escaped by the template)."""
    kept = {k: v for k, v in query.items() if v is not None and v != ""}
    return route + ("?" + urlencode(kept) if kept else "")


_env.globals["url"] = _url


def store_label(location: str) -> str:
    """The store's location as a page names it: a database URL without its user and password."""
    parts = urlsplit(location)
    if not parts.scheme or len(parts.scheme) == 1 or "@" not in parts.netloc:  # a path (or a Windows drive)
        return location
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


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
        "sessions": [],
        "openai_sessions": [n.rstrip("/") for n in await store.list(OPENAI_SESSIONS) if n.endswith("/")][:100],
    }
    sessions = await _sessions(store, recent)
    doc["sessions"] = [s | {"first": s["first"].isoformat(), "last": s["last"].isoformat()} for s in sessions]
    ctx = doc | {"commits": recent[:RECENT], "hot": hot, "window": len(recent), "sessions": sessions}
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
    ctx = {"path": path, "rev": rev, "lines": lines[:FILE_LINES], "distinct": distinct,
           "cut": len(lines) > FILE_LINES, "ages": _ages([b.commit for b in lines])}
    return View("blame.html", ctx, doc, title=f"blame {path}")


def _ages(commits: list[Commit], steps: int = 9) -> dict[str, int]:
    """Each commit's age on a scale from 0 (the oldest here) to ``steps`` (the newest), by time."""
    if not commits:
        return {}
    times = {c.id: c.time.timestamp() for c in commits}
    old, new = min(times.values()), max(times.values())
    span = new - old
    return {cid: steps if span == 0 else round(steps * (t - old) / span) for cid, t in times.items()}


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


async def _chat_archive(store: Store, folder: str) -> list[dict[str, Any]]:
    """A TieredMemory's chat archive (tiered.py: each entry a JSON list of the chat messages one
    summary replaced, verbatim), the newest ``SESSION_ITEMS`` entries, each as the messages' text."""
    entries = await store.tree(f"{folder}/items")
    files = [e for e in entries or [] if e.kind == "file"][-SESSION_ITEMS:]
    out: list[dict[str, Any]] = []
    for e in files:
        text = await store.read(e.path) or ""
        try:
            messages = json.loads(text)
        except (ValueError, RecursionError):
            messages = None
        if isinstance(messages, list):
            shown = "\n".join(
                f"{m.get('source') or m.get('type') or '?'}: {m.get('content')}" if isinstance(m, dict) else str(m)
                for m in messages)
        else:
            shown = text
        number = e.path.rsplit("/", 1)[-1].removesuffix(".json")
        out.append({"id": int(number) if number.isdigit() else number, "path": e.path,
                    "mime_type": "chat messages (replaced by a summary)", "content": shown, "metadata": {}})
    return out


async def memory(store: Store, request: Request) -> View:
    # AutoGen is imported only when a page shows its items, not by `memrev serve` itself.
    from ..autogen import VersionedMemory
    from ..frameworks.tiered import CHAT_ARCHIVE, LONG_TERM, SHORT_TERM

    name = request.path_params["name"]
    mem = VersionedMemory(store, name, prefix=MEMORY_PREFIX)
    items = [_item_json(i) for i in await mem.items()]
    # a TieredMemory keeps its tiers as item folders under the memory (tiered.py's layout)
    tiers: dict[str, list[dict[str, Any]]] = {}
    for tier in (SHORT_TERM, LONG_TERM):
        entries = await VersionedMemory(store, tier, prefix=f"{MEMORY_PREFIX}/{name}").items()
        if entries:
            tiers[tier] = [_item_json(i) for i in entries]
    archive = await _chat_archive(store, f"{MEMORY_PREFIX}/{name}/{CHAT_ARCHIVE}")
    if archive:
        tiers[CHAT_ARCHIVE] = archive
    changes = await mem.log(limit=_page_size(request, PAGE))
    if tiers or not changes:  # a tiered memory's commits touch its tiers, not a flat items folder
        changes = (await store.log_page(f"{MEMORY_PREFIX}/{name}", limit=_page_size(request, PAGE))).commits
    if not items and not changes:
        raise NotFound(f"no memory named {name!r}")
    doc = {"name": name, "items": items, "tiers": tiers, "log": [c.to_json() for c in changes]}
    return View("memory.html", doc | {"changes": changes}, doc, title=f"memory {name}")


def _line_number(request: Request) -> int | None:
    raw = _arg(request, "line")
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError("line must be a whole number from 1")
    return int(raw)


async def _commit_or_none(store: Store, rev: str | None) -> Commit | None:
    """The commit ``rev`` names (default the head); ``None`` for an empty store's head."""
    if rev is None and await store.head() is None:
        return None
    return await store.show(rev or "HEAD")


def _crumbs(path: str) -> list[tuple[str, str]]:
    """``/a/b/c`` as (name, folder path) pairs from the root: ``("/", "/"), ("a", "/a"), ...``."""
    parts = [p for p in path.split("/") if p]
    return [("/", "/")] + [(name, "/" + "/".join(parts[: i + 1])) for i, name in enumerate(parts)]


def _offset(request: Request) -> int:
    raw = _arg(request, "cursor", "0")
    if raw is None or not raw.isdigit():
        raise errors.InvalidCursor(f"not a cursor of this page: {str(raw)[:80]!r}")
    return int(raw)


async def tree(store: Store, request: Request) -> View:
    path, rev = normalize(_arg(request, "path", "/") or "/"), _arg(request, "rev")
    at = await _commit_or_none(store, rev)
    entries = await store.tree(path, rev=rev)
    if entries is None:
        if await store.read(path, rev=rev) is not None:  # a file: its page
            raise NotFound(f"{path} is a file at {rev or 'HEAD'}: /file?path=...")
        raise NotFound(f"{path} is no folder at {rev or 'HEAD'}")
    start = _offset(request)
    shown = entries[start : start + TREE_PAGE]
    cursor = str(start + TREE_PAGE) if start + TREE_PAGE < len(entries) else None
    last: dict[str, Commit | None] = {}  # entry path: its last change
    for e in shown[:LAST_CHANGES]:  # one per-path index read each
        page = await store.log_page(e.path.rstrip("/"), limit=1, rev=None if at is None else at.id)
        last[e.path] = page.commits[0] if page.commits else None
    rows = [{"path": e.path, "kind": e.kind, "size": e.size, "last": last.get(e.path)} for e in shown]
    doc = {"path": path, "rev": None if at is None else at.id, "entries": [
        {"path": e.path, "kind": e.kind, "size": e.size,
         "last_change": None if (c := last.get(e.path)) is None else c.to_json()} for e in shown]}
    ctx = {"path": path, "rev": rev, "at": at, "rows": rows, "crumbs": _crumbs(path),
           "branches": await store.branches(), "tags": await store.tags()}
    return View("tree.html", ctx, doc, cursor, title=f"tree {path}")


@dataclass
class FileLine:
    number: int
    text: str
    cut: bool


def _file_lines(content: str) -> tuple[list[FileLine], bool]:
    """The lines a file page draws (bounded by FILE_LINES, FILE_CHARS, LINE_CHARS) and whether some were cut."""
    out: list[FileLine] = []
    budget, cut = FILE_CHARS, False
    for i, line in enumerate(content.splitlines(), 1):
        if i > FILE_LINES or budget <= 0:
            return out, True
        shown = line[: min(LINE_CHARS, budget)]
        budget -= len(shown)
        cut = cut or len(shown) < len(line)
        out.append(FileLine(i, shown, len(shown) < len(line)))
    return out, cut


async def file(store: Store, request: Request) -> View:
    path, rev = normalize(_need(request, "path")), _arg(request, "rev")
    content, version = await store.read_versioned(path, rev=rev)
    if content is None:
        if rev is not None:
            await store.resolve(rev)
        if await store.tree(path, rev=rev) is not None:
            raise NotFound(f"{path} is a folder at {rev or 'HEAD'}: /tree?path=...")
        raise NotFound(f"{path} does not exist at {rev or 'HEAD'}")
    doc = {"path": path, "rev": rev or "HEAD", "content": content}
    if _is_api(request):
        return View("file.html", doc, doc)
    lines, cut = await asyncio.to_thread(_file_lines, content)
    is_md = markdown.is_markdown(path) and len(content) <= markdown.MAX_CHARS
    source = _arg(request, "view") == "source" or not is_md
    rendered = None if source else await asyncio.to_thread(markdown.render, content, path, rev)
    last = None if version is None else await store.show(version)
    ctx = {"path": path, "rev": rev, "lines": lines, "cut": cut, "rendered": rendered, "is_md": is_md,
           "event_log": is_event_log(path),
           "last": last, "size": len(content.encode("utf-8")), "crumbs": _crumbs(path)[:-1]}
    return View("file.html", ctx, doc, title=path)


def is_event_log(path: str) -> bool:
    """An ag2 event log by its declared place (``/log/<stream>.jsonl``), never by its content."""
    return is_under(path, EVENT_LOG_DIR) and path.endswith(".jsonl")


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


async def raw(request: Request) -> Response:
    """A file as ``text/plain`` (``?download=1``: an attachment), never as HTML."""
    store: Store = request.app.state.store
    try:
        path, rev = normalize(_need(request, "path")), _arg(request, "rev")
        content = await store.read(path, rev=rev)
        if content is None:
            if rev is not None:
                await store.resolve(rev)
            raise NotFound(f"{path} is not a file at {rev or 'HEAD'}")
    except (NotFound, errors.RevisionNotFound) as e:
        return Response(str(e), status_code=404, media_type="text/plain")
    except (errors.InvalidPath, ValueError) as e:
        return Response(str(e), status_code=400, media_type="text/plain")
    headers = {"Cache-Control": "no-store"}
    if _arg(request, "download") is not None:
        name = _UNSAFE_NAME.sub("_", path.rsplit("/", 1)[-1])[:100] or "file"
        headers["Content-Disposition"] = f'attachment; filename="{name}"'
    return Response(content, media_type="text/plain; charset=utf-8", headers=headers)


def _hunk_lines(hunk: str) -> list[tuple[str, str]]:
    """A unified diff's lines as (kind, text) for a page, at most PAGE_LINES."""
    kinds = {"+": "add", "-": "del", "@": "hunk", " ": "ctx"}
    out = []
    for line in hunk.splitlines()[:PAGE_LINES]:
        if line.startswith(("+++", "---")):
            continue
        out.append((kinds.get(line[:1], "ctx"), line[:LINE_CHARS]))
    return out


def _said(entries: list[str]) -> list[browse.Said]:
    return [said for entry in entries for said in browse.event_said(entry)]


async def why(store: Store, request: Request) -> View:
    path, rev, line = normalize(_need(request, "path")), _arg(request, "rev"), _line_number(request)
    try:
        w = await store.why(path, line, rev=rev)
    except errors.RevisionNotFound:
        if rev is not None:
            await store.resolve(rev)
        raise NotFound(f"{path} is not a file with history at {rev or 'HEAD'}") from None
    except IndexError:
        raise NotFound(f"{path} has no history") from None
    doc = browse.why_json(w)
    if _is_api(request):
        return View("why.html", {}, doc)
    said = await asyncio.to_thread(_said, w.events)
    ctx = {"w": w, "rev": rev, "said": said, "hunk": await asyncio.to_thread(_hunk_lines, w.hunk),
           "conversation": w.event_log if w.event_log is not None and await store.exists(w.event_log) else None}
    return View("why.html", ctx, doc, title=f"why {path}{f':{line}' if line else ''}")


@dataclass
class Turn:
    """One turn of a conversation: the event-log commit, what it said, and the writes of the same turn."""

    commit: Commit
    events: list[str]
    said: list[browse.Said]
    writes: list[tuple[Commit, list[DrawnFile], list[dict]]]


async def _turn_writes(store: Store, c: Commit, log_path: str) -> list[Commit]:
    """The commits of ``c``'s session and turn just before it (the turn's memory writes), oldest first.
    Reads back at most TURN_SCAN commits, and stops at the session's previous turn."""
    session, turn = c.meta.get("session"), c.meta.get("turn")
    if not isinstance(session, str) or turn is None:
        return []
    out: list[Commit] = []
    for x in (await store.log_page(limit=TURN_SCAN, rev=c.id)).commits[1:]:
        if x.meta.get("session") != session:
            continue
        if x.meta.get("turn") != turn:
            break
        if log_path not in x.paths:
            out.append(x)
    return out[::-1]


async def conversation(store: Store, request: Request) -> View:
    path = normalize(_need(request, "path"))
    page = await store.log_page(path, limit=_page_size(request, TURNS), cursor=_arg(request, "cursor"))
    if not page.commits and _arg(request, "cursor") is None:
        raise NotFound(f"{path} has no history")
    api = _is_api(request)
    turns = []
    for c in page.commits:
        old = await store.read(path, rev=c.parents[0]) if c.parents else None
        new = await store.read(path, rev=c.id)
        events = await asyncio.to_thread(browse.appended_lines, old, new)
        writes = []
        for x in await _turn_writes(store, c, path):
            a = x.parents[0] if x.parents else None
            files, changes_doc = await asyncio.to_thread(_draw, await store.diff(a, x.id), a, x.id, api)
            writes.append((x, files, changes_doc))
        said = [] if api else await asyncio.to_thread(_said, events)
        turns.append(Turn(c, events, said, writes))
    turns.reverse()  # a transcript reads oldest first; the next page holds the earlier turns
    doc = {"path": path, "turns": [
        {"commit": t.commit.to_json(), "session": t.commit.meta.get("session"), "turn": t.commit.meta.get("turn"),
         "events": t.events, "writes": [{"commit": x.to_json(), "changes": d} for x, _, d in t.writes]}
        for t in turns]}
    return View("conversation.html", {"path": path, "turns": turns, "view": "unified"}, doc, page.cursor,
                title=f"conversation {path}")


def _item_said(text: str) -> list[browse.Said]:
    """An OpenAI Agents session item (``openai_agents.py`` stores each as JSON) as readable parts."""
    try:
        item = json.loads(text)
    except (ValueError, RecursionError):
        return [browse.Said("raw", text[:browse.EVENT_TEXT])]
    if not isinstance(item, dict):
        return [browse.Said("raw", text[:browse.EVENT_TEXT])]
    kind, role = item.get("type"), item.get("role")
    if role in ("user", "assistant", "system", "developer"):
        content = item.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return [browse.Said("user" if role == "user" else "agent" if role == "assistant" else str(role), str(content)[:browse.EVENT_TEXT])]
    if kind == "function_call":
        return [browse.Said("tool call", f"{item.get('name')}({item.get('arguments')})"[:browse.EVENT_TEXT])]
    if kind == "function_call_output":
        return [browse.Said("tool output", str(item.get("output"))[:browse.EVENT_TEXT], str(item.get("call_id")))]
    return [browse.Said("event", str(kind or "item"))]


async def openai_session(store: Store, request: Request) -> View:
    sid, rev = request.path_params["sid"], _arg(request, "rev")
    folder = f"{OPENAI_SESSIONS}/{sid}/items"
    entries = await store.tree(folder, rev=rev)
    if entries is None:
        if rev is not None:
            await store.resolve(rev)
        raise NotFound(f"no OpenAI session {sid!r} at {rev or 'HEAD'}")
    files = [e for e in entries if e.kind == "file"]
    start = _offset(request)
    shown = files[start : start + SESSION_ITEMS]
    cursor = str(start + SESSION_ITEMS) if start + SESSION_ITEMS < len(files) else None
    items = []
    for e in shown:
        text = await store.read(e.path, rev=rev) or ""
        items.append({"path": e.path, "content": text, "said": await asyncio.to_thread(_item_said, text)})
    forks = {}
    for name, target in (await store.branches()).items():  # a fork of the conversation is a branch
        there = await store.tree(folder, rev=target)
        if there is not None:
            forks[name] = len([e for e in there if e.kind == "file"])
    changes = (await store.log_page(f"{OPENAI_SESSIONS}/{sid}", limit=PAGE, rev=rev)).commits
    doc = {"session": sid, "rev": rev, "items": [{"path": i["path"], "content": i["content"]} for i in items],
           "branches": forks, "log": [c.to_json() for c in changes]}
    return View("session.html", doc | {"items": items, "changes": changes}, doc, cursor, title=f"session {sid}")


async def _sessions(store: Store, recent: list[Commit]) -> list[dict[str, Any]]:
    """The conversations of the recent commits, by their ``session`` provenance: when, turns, files changed."""
    by: dict[str, dict[str, Any]] = {}
    for c in recent:  # newest first
        sid = c.meta.get("session")
        if not isinstance(sid, str):
            continue
        s = by.setdefault(sid, {"session": sid, "first": c.time, "last": c.time, "turns": set(), "paths": set(),
                                "agents": set(), "commits": 0})
        s["first"] = c.time
        s["commits"] += 1
        if c.meta.get("turn") is not None:
            s["turns"].add(str(c.meta["turn"]))
        if isinstance(c.meta.get("agent"), str):
            s["agents"].add(c.meta["agent"])
        s["paths"].update(c.paths)
    out = []
    for s in list(by.values())[:SESSIONS]:
        log_path = pickaxe.EVENT_LOG.format(session=s["session"])
        try:
            has_log = await store.exists(log_path)
        except errors.InvalidPath:
            has_log = False
        out.append(s | {"turns": len(s["turns"]), "agents": sorted(s["agents"]), "log": log_path if has_log else None,
                        "paths": sorted(p for p in s["paths"] if p != log_path)})
    return out


async def search(store: Store, request: Request) -> View:
    path, text = _arg(request, "path"), _arg(request, "text")
    in_history, fold = _arg(request, "history") is not None, _arg(request, "i") is not None
    ctx: dict[str, Any] = {"path": path, "text": text, "history": in_history, "i": fold,
                           "found": None, "hits": None, "commits": None, "truncated": False}
    if text is None:
        return View("search.html", ctx, [], title="search")
    if path is not None and not in_history and not fold and await store.tree(path) is None:
        # a file: where the text appeared in and disappeared from it (the counts before and after)
        found = await store.find_text(path, text)
        doc: Any = [{"commit": t.commit.to_json(), "before": t.before, "after": t.after, "kind": t.kind} for t in found]
        return View("search.html", ctx | {"found": found}, doc, title="search")
    if in_history:  # the pickaxe over every path (or one), newest first, a bounded page at a time
        keep = browse.history_filter(store.repo, text, fold)
        page = await store.log_page(path, limit=_page_size(request, PAGE), cursor=_arg(request, "cursor"), where=keep)
        doc = [c.to_json() for c in page.commits]
        return View("search.html", ctx | {"commits": page.commits}, doc, page.cursor, title="search")
    hits, truncated = await _search_head(store, path or "/", text, fold)
    doc = {"text": text, "path": path or "/", "ignore_case": fold, "hits": hits, "truncated": truncated}
    return View("search.html", ctx | {"hits": hits, "truncated": truncated}, doc, title="search")


async def _search_head(store: Store, under: str, text: str, fold: bool) -> tuple[list[dict[str, Any]], bool]:
    """Lines holding ``text`` in the files at HEAD under ``under`` (``Store.grep``: bounded in
    files, bytes and hits; ``truncated`` says a bound was hit)."""
    try:
        found = await store.grep(text, under, ignore_case=fold, limit=SEARCH_HITS)
    except errors.PathNotFound:
        raise NotFound(f"{under} does not exist at HEAD") from None
    return [{"path": h.path, "line": h.line, "text": h.text[:500]} for h in found.hits], found.truncated


async def compare(store: Store, request: Request) -> View:
    a, b = _arg(request, "a"), _arg(request, "b")
    refs = {"branches": await store.branches(), "tags": await store.tags()}
    if a is None or b is None:
        return View("compare.html", {"a": a, "b": b, "files": [], "asked": False} | refs, {"a": a, "b": b, "changes": []},
                    title="compare")
    commit_a, commit_b = await store.show(a), await store.show(b)
    changes = await store.diff(commit_a.id, commit_b.id)
    files, changes_doc = await asyncio.to_thread(_draw, changes, commit_a.id, commit_b.id, _is_api(request))
    doc = {"a": commit_a.id, "b": commit_b.id, "changes": changes_doc}
    ctx = {"a": a, "b": b, "files": files, "asked": True, "commit_a": commit_a, "commit_b": commit_b, "view": "split"} | refs
    return View("compare.html", ctx, doc, title=f"compare {a}...{b}")


PAGES: dict[str, Handler] = {
    "/": home, "/log": log, "/history": history, "/diff": diff, "/blame": blame,
    "/commit/{rev:path}": commit, "/graph": graph, "/memory/{name:path}": memory,
    "/search": search, "/file": file, "/tree": tree, "/why": why, "/conversation": conversation,
    "/session/{sid:path}": openai_session, "/compare": compare,
}


# ------------------------------------------------------------------ plumbing


def _error(request: Request, api: bool, status: int, message: str) -> Response:
    if api:
        return JSONResponse({"error": message}, status_code=status)
    html = _env.get_template("error.html").render(
        status=status, message=message, title=f"{status}", store_branch="", store_label="")
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
            store_label=store_label(store.location),
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
    routes.append(Route("/raw", raw))
    # browsers ask for /favicon.ico on pages that name no icon (the token refusal is plain text)
    routes.append(Route("/favicon.ico", lambda request: RedirectResponse("/static/favicon.svg", status_code=301)))
    routes.append(Mount("/static", StaticFiles(packages=[("memrev.viewer", "static")]), name="static"))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(SecurityMiddleware, token=token)

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(request, request.url.path.startswith("/api"), 404, f"no page {request.url.path}")

    app.add_exception_handler(404, not_found)
    return app
