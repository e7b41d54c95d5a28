"""memrev as an MCP server: the memory files and their history as tools (extra ``memrev[mcp]``).

``create_server(store)`` returns an ``mcp.server.MCPServer`` (the official SDK,
>= 2.3) whose tools work on ``store``'s branch; ``memrev mcp`` serves it over
stdio or streamable HTTP (``memrev/cli/mcp.py``), and tests or embedders run it
in process with ``mcp.Client(server)``. docs/mcp.md is the user's guide.

- The file tools (view, create, str_replace, insert, append, delete, rename)
  are ``memrev.frameworks.memory_files`` commands, the same ones Claude's
  memory tool runs (``memrev.anthropic``): each mutating call is exactly one
  commit, made only on what it read, and ``expected_version`` makes it
  conditional (a stale one is a conflict, nothing written).
- The history tools (search, log, diff, why, restore; with ``tools="all"``
  branch, merge, revert, tag) are the store's own methods. Purge is never a tool.
- Provenance is stamped here, never taken from the model: ``framework="mcp"``,
  the client's name and version from the handshake as ``agent``, the MCP
  session id (the HTTP session header, else one id per connection) as
  ``session``, and the tool's name as ``tool``.
- A memrev error (a bad path, a stale version, an edit that cannot be made, a
  missing revision, content too large) is a tool result with ``isError`` and
  one line, never a protocol error; the server keeps serving.
- Resources: ``memrev://file/{+path}`` (a file at the head) and
  ``memrev://log`` (the newest commits). A commit that touches a path, made by
  any handle or process, is announced as ``resources/updated`` for the file
  and the log, to ``subscriptions/listen`` streams and to ``resources/subscribe``
  sessions of older protocol versions.
"""

import contextlib
import hmac
import json
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.subscriptions import ResourceUpdated
from mcp.types import CallToolResult, SubscribeRequestParams, TextContent, ToolAnnotations, UnsubscribeRequestParams
from pydantic import BaseModel, Field, ValidationError

from . import errors, provenance
from .frameworks.memory_files import DirView, MemoryFiles, numbered

MAX_CONTENT = 4 << 20  # bytes a create, append, str_replace or insert may carry
MAX_LIMIT = 200  # commits or matches one call returns at most
MAX_OUTPUT = 64 << 10  # characters of a diff, a why hunk or a resource's text: the rest is cut, and said so
LOG_URI = "memrev://log"
FILE_URI = "memrev://file/"
FIELD_CHARS = 200  # of a client's name or version kept in provenance
SESSIONLESS_SINCE = "2026-07-28"  # the protocol version from which each request stands alone (no handshake)

ToolSet = Literal["core", "all"]
READ_ONLY_TOOLS = ("memory_view", "memory_search", "memory_log", "memory_diff", "memory_why")
CORE_TOOLS = READ_ONLY_TOOLS[:1] + (
    "memory_create", "memory_str_replace", "memory_insert", "memory_append", "memory_delete", "memory_rename",
) + READ_ONLY_TOOLS[1:] + ("memory_restore",)
ALL_TOOLS = CORE_TOOLS + ("memory_branch", "memory_merge", "memory_revert", "memory_tag")


# ------------------------------------------------------------------ results


class Entry(BaseModel):
    path: str = Field(description="a folder's path ends in '/'")
    kind: Literal["file", "dir"]
    size: int = Field(description="bytes; a folder's: every file below it")


class ViewResult(BaseModel):
    path: str
    kind: Literal["file", "directory"]
    version: str | None = Field(description="a file: the commit that last changed it; a folder: the commit read")
    text: str = Field(description="a file's lines, numbered; a folder's entries with sizes")
    entries: list[Entry] = Field(default_factory=list)
    first_line: int | None = None
    total_lines: int | None = None


class WriteResult(BaseModel):
    path: str
    version: str | None = Field(description="the path's version after the call (the commit made, or the one it had)")
    offset: int | None = Field(default=None, description="memory_append: where the text landed, in UTF-8 bytes")
    paths: list[str] = Field(default_factory=list, description="memory_rename, memory_delete: the files moved or removed")


class CommitInfo(BaseModel):
    id: str
    time: str
    author: str
    message: str
    provenance: dict[str, str | int]
    paths: list[str]


class Match(BaseModel):
    path: str
    line: int
    text: str


class SearchResult(BaseModel):
    matches: list[Match] = Field(default_factory=list, description="history=False: lines at the head")
    commits: list[CommitInfo] = Field(default_factory=list, description="history=True: commits that added or removed the text")
    truncated: bool = Field(default=False, description="more matched than limit, or the search stopped at its bound")


class LogResult(BaseModel):
    commits: list[CommitInfo]


class DiffFile(BaseModel):
    path: str
    status: str
    left_out: bool = False


class DiffResult(BaseModel):
    from_rev: str | None
    to_rev: str
    files: list[DiffFile]
    diff: str
    truncated: bool = False


class WhyResult(BaseModel):
    path: str
    line: int | None
    text: str | None
    commit: CommitInfo
    hunk: str
    events: list[str] = Field(description="the event-log lines of the same turn, when the commit names one")


class RevResult(BaseModel):
    version: str | None = Field(description="the commit made; null when nothing changed")


class BranchResult(BaseModel):
    name: str
    version: str


class Conflict(BaseModel):
    path: str
    kind: str
    content: str | None = Field(description="a text conflict: the file with conflict markers")


class MergeResult(BaseModel):
    version: str | None
    conflicts: list[Conflict] = Field(default_factory=list, description="non-empty: nothing was merged")


# ------------------------------------------------------------------ helpers


def _commit(c: Any) -> CommitInfo:
    return CommitInfo(
        id=c.id, time=c.time.isoformat(), author=c.author, message=c.message,
        provenance=provenance.of(c.meta), paths=list(c.paths)[:MAX_LIMIT],
    )


def _cut(text: str) -> tuple[str, bool]:
    if len(text) <= MAX_OUTPUT:
        return text, False
    return text[:MAX_OUTPUT] + f"\n... ({len(text) - MAX_OUTPUT} more characters)", True


def _limit(limit: int) -> int:
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise errors.InvalidArgument(f"limit is an int from 1 to {MAX_LIMIT}, not {limit!r:.40}")
    return limit



def error_line(e: BaseException) -> str:
    """A memrev error as the one line a tool result carries."""
    if isinstance(e, errors.WriteConflict) and e.path:
        return f"conflict: {e.path} is at {e.actual or 'absent'}, not {e.expected}; nothing was written"
    return " ".join(str(e).split()) or type(e).__name__


def _failed(e: BaseException) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=error_line(e))], is_error=True)


def _invalid_arguments(tool: str, e: ValidationError) -> CallToolResult:
    """Arguments that do not match a tool's schema, as one line naming each field and what is
    wrong with it (never the value given: it may be large, or the caller's secret)."""
    said = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in e.errors()[:10])
    return CallToolResult(content=[TextContent(type="text", text=f"invalid arguments for {tool}: {said}")], is_error=True)


class _Server(MCPServer):
    """``MCPServer`` whose argument errors are one line, as every other tool error here (the SDK
    reports them as pydantic's multi-line text under an "Error executing tool" prefix)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                return _invalid_arguments(name, e.__cause__)
            raise


def _file_uri(path: str) -> str:
    return FILE_URI + path.lstrip("/")


def _dir_text(view: DirView) -> str:
    lines = [f"{view.size}\t{view.path}"]
    lines += [f"{e.size}\t{e.path}" for e in view.entries]
    return "\n".join(lines)


def _connection_key(ctx: Any) -> Any:
    """What stays the same for every request of one handshake connection: its ``initialize``
    params (each request gets its own ``ServerSession`` object; the params are the connection's)."""
    return ctx.session.client_params


class _Sessions:
    """The ``session`` of a call's provenance: the transport's session id (the HTTP
    ``mcp-session-id`` header) when it names one; else, on a connection with a handshake
    (protocol versions before 2026-07-28), one id per connection; else (the sessionless
    protocol: each request stands alone) one id for this server, which on stdio is one client."""

    def __init__(self) -> None:
        self._ids: dict[int, tuple[weakref.ref[Any], str]] = {}
        self._server = uuid.uuid4().hex

    def of(self, ctx: Context) -> str:
        named = (ctx.headers or {}).get("mcp-session-id")
        if named:
            return str(named)[:FIELD_CHARS]
        key = _connection_key(ctx)
        if (ctx.protocol_version or "") >= SESSIONLESS_SINCE or key is None:
            return self._server
        known = self._ids.get(id(key))
        if known is None or known[0]() is not key:
            number = id(key)
            known = (weakref.ref(key, lambda _ref: self._ids.pop(number, None)), uuid.uuid4().hex)
            self._ids[number] = known
        return known[1]


def _agent(ctx: Context) -> str:
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    if info is None:
        return "mcp client"
    return f"{info.name[:FIELD_CHARS]} {info.version[:FIELD_CHARS]}".strip()


class _Updates:
    """``resources/updated`` for every commit: to listen streams (the bus) and to the sessions
    that asked with ``resources/subscribe`` (protocol versions before 2026-07-28)."""

    def __init__(self, store: Any, bus: InMemorySubscriptionBus) -> None:
        self.store, self.bus = store, bus
        self.legacy: dict[str, dict[int, Any]] = {}  # uri -> {connection: a session to send on}

    def subscribe(self, ctx: Any, uri: str) -> None:
        self.legacy.setdefault(uri, {})[id(_connection_key(ctx))] = ctx.session

    def unsubscribe(self, ctx: Any, uri: str) -> None:
        self.legacy.get(uri, {}).pop(id(_connection_key(ctx)), None)

    async def changed(self, path: str) -> None:
        for uri in (_file_uri(path), LOG_URI):
            await self.bus.publish(ResourceUpdated(uri=uri))
            listeners = self.legacy.get(uri, {})
            for key, session in list(listeners.items()):
                try:
                    await session.send_resource_updated(uri)
                except Exception:  # noqa: BLE001 - the client went away: forget it, the others still hear
                    listeners.pop(key, None)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        subscription = await self.store.on_change("/", self.changed)
        try:
            yield
        finally:
            await subscription.close()


# ------------------------------------------------------------------ the server


def create_server(
    store: Any,
    *,
    tools: ToolSet = "core",
    read_only: bool = False,
    name: str = "memrev",
    max_content: int = MAX_CONTENT,
) -> MCPServer:
    """An MCP server over ``store`` (a ``memrev.Store`` handle; its branch is the one worked on).

    ``tools``: ``"core"`` (the file tools, search, log, diff, why, restore) or
    ``"all"`` (also branch, merge, revert, tag); ``read_only``: only view,
    search, log, diff and why. The caller keeps ``store`` open while the server runs.
    """
    if tools not in ("core", "all"):
        raise errors.InvalidArgument(f"tools is 'core' or 'all', not {tools!r:.40}")
    files = MemoryFiles(store)
    sessions = _Sessions()
    bus = InMemorySubscriptionBus()
    updates = _Updates(store, bus)

    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[None]:
        async with updates.running():
            yield

    server: MCPServer = _Server(
        name,
        version=_version(),
        instructions=(
            "Versioned memory: files under paths like /memory/notes.md. Every change is a commit; "
            "pass expected_version (from memory_view) to change a file only if nobody changed it since."
        ),
        subscriptions=bus,
        lifespan=lifespan,
    )

    def sized(content: str, what: str) -> str:
        if isinstance(content, str) and len(content) > max_content // 4 and len(content.encode("utf-8", "surrogatepass")) > max_content:
            raise errors.InvalidArgument(f"{what} is over {max_content} bytes, the most this server takes; nothing was written")
        return content

    async def run(ctx: Context, tool: str, call: Callable[[], Awaitable[BaseModel]]) -> Any:
        try:
            fields = {"framework": "mcp", "agent": _agent(ctx), "session": sessions.of(ctx), "tool": tool}
            async with store.provenance(**fields):
                return await call()
        except errors.MemrevError as e:
            return _failed(e)

    reading = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    adding = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
    changing = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)

    async def memory_view(
        ctx: Context, path: str = "/", rev: str | None = None, view_range: list[int] | None = None
    ) -> ViewResult:
        """Show a folder's files with their sizes (two levels deep), or a file's lines numbered from 1.
        view_range [first, last] shows only those lines (last -1: to the end). rev: a commit id (7+ hex
        digits), branch or tag to look at instead of the head. The version returned is what
        expected_version takes."""

        async def call() -> ViewResult:
            seen = await files.view(path, rev=rev, view_range=view_range)
            if isinstance(seen, DirView):
                entries = [Entry(path=e.path, kind="dir" if e.kind == "dir" else "file", size=e.size) for e in seen.entries]
                return ViewResult(path=seen.path, kind="directory", version=seen.version, text=_dir_text(seen), entries=entries)
            shown: list[str] = []
            size = 0
            for line in seen.lines:  # numbered only as far as the output can go
                size += len(line) + 8
                if size > MAX_OUTPUT and shown:
                    break
                shown.append(line)
            text, _ = _cut(numbered(shown, seen.first))
            if len(shown) < len(seen.lines):
                text += f"\n... ({len(seen.lines) - len(shown)} more lines: view_range shows them)"
            return ViewResult(
                path=seen.path, kind="file", version=seen.version, text=text, first_line=seen.first, total_lines=seen.total
            )

        return await run(ctx, "memory_view", call)

    async def memory_create(ctx: Context, path: str, content: str, expected_version: str | None = None) -> WriteResult:
        """Create or overwrite the file at path with content (one commit). expected_version: only if the
        file is still at that version ("absent": only if it does not exist yet); else a conflict and
        nothing written."""

        async def call() -> WriteResult:
            made = await files.create(path, sized(content, "content"), expected=expected_version,
                                      message=f"memory_create {path}"[:200])
            return WriteResult(path=made.path, version=made.version)

        return await run(ctx, "memory_create", call)

    async def memory_str_replace(
        ctx: Context, path: str, old_str: str, new_str: str, expected_version: str | None = None
    ) -> WriteResult:
        """Replace old_str, which must occur exactly once in the file, with new_str (one commit)."""

        async def call() -> WriteResult:
            made = await files.str_replace(path, sized(old_str, "old_str"), sized(new_str, "new_str"),
                                           expected=expected_version, message=f"memory_str_replace {path}"[:200])
            return WriteResult(path=made.path, version=made.version)

        return await run(ctx, "memory_str_replace", call)

    async def memory_insert(
        ctx: Context, path: str, insert_line: int, insert_text: str, expected_version: str | None = None
    ) -> WriteResult:
        """Insert insert_text after line insert_line of the file (0: at the top), one commit."""

        async def call() -> WriteResult:
            made = await files.insert(path, insert_line, sized(insert_text, "insert_text"),
                                      expected=expected_version, message=f"memory_insert {path}"[:200])
            return WriteResult(path=made.path, version=made.version)

        return await run(ctx, "memory_insert", call)

    async def memory_append(ctx: Context, path: str, content: str) -> WriteResult:
        """Add content at the end of the file (creating it), one commit; never conflicts."""

        async def call() -> WriteResult:
            made = await files.append(path, sized(content, "content"), message=f"memory_append {path}"[:200])
            return WriteResult(path=made.path, version=made.version, offset=made.offset)

        return await run(ctx, "memory_append", call)

    async def memory_delete(ctx: Context, path: str, expected_version: str | None = None) -> WriteResult:
        """Delete a file, or a folder with everything in it (one commit; history keeps every version)."""

        async def call() -> WriteResult:
            made = await files.delete(path, expected=expected_version, message=f"memory_delete {path}"[:200])
            return WriteResult(path=made.path, version=made.version, paths=made.paths)

        return await run(ctx, "memory_delete", call)

    async def memory_rename(ctx: Context, old_path: str, new_path: str) -> WriteResult:
        """Move a file, or a folder with everything in it, to a path that does not exist (one commit)."""

        async def call() -> WriteResult:
            made = await files.rename(old_path, new_path, message=f"memory_rename {old_path} -> {new_path}"[:200])
            return WriteResult(path=made.path, version=made.version, paths=made.paths)

        return await run(ctx, "memory_rename", call)

    async def memory_search(
        ctx: Context, query: str, path: str = "/", history: bool = False, limit: int = 20
    ) -> SearchResult:
        """Find text. history=False: the lines holding query in the files under path now. history=True:
        the commits where query appeared in or disappeared from a file under path, newest first."""

        async def call() -> SearchResult:
            if not isinstance(query, str) or not query:
                raise errors.InvalidArgument("query is a non-empty string")
            root, most = files.path(path), _limit(limit)
            if history:
                found = await store.log(None if root == "/" else root, limit=most + 1, contains=query)
                return SearchResult(commits=[_commit(c) for c in found[:most]], truncated=len(found) > most)
            found = await store.grep(query, root, limit=most)
            return SearchResult(matches=[Match(path=h.path, line=h.line, text=h.text) for h in found.hits],
                                truncated=found.truncated)

        return await run(ctx, "memory_search", call)

    async def memory_log(
        ctx: Context, path: str | None = None, limit: int = 20, agent: str | None = None, tool: str | None = None
    ) -> LogResult:
        """The newest commits (of path, if given) with who made each and why; agent and tool filter by
        the provenance fields."""

        async def call() -> LogResult:
            norm = None if path is None else files.path(path)
            found = await store.log(norm, limit=_limit(limit), agent=agent, tool=tool)
            return LogResult(commits=[_commit(c) for c in found])

        return await run(ctx, "memory_log", call)

    async def memory_diff(
        ctx: Context, path: str | None = None, from_rev: str | None = None, to_rev: str = "HEAD"
    ) -> DiffResult:
        """A unified diff from from_rev to to_rev (of path, if given). Without from_rev: the path's last
        change (without path: what to_rev changed)."""

        async def call() -> DiffResult:
            norm = None if path is None else files.path(path)
            after = await store.resolve(to_rev)
            if from_rev is not None:
                before: str | None = await store.resolve(from_rev)
            elif norm is not None:
                before, after = await store.last_change(norm, rev=after)
            else:
                parents = (await store.show(after)).parents
                before = parents[0] if parents else None
            changes = await store.diff(before, after, norm)
            text, cut = _cut("".join(c.diff if c.diff.endswith("\n") or not c.diff else c.diff + "\n" for c in changes))
            listed = [DiffFile(path=c.path, status=c.status, left_out=c.left_out) for c in changes[: MAX_LIMIT * 5]]
            return DiffResult(from_rev=before, to_rev=after, files=listed, diff=text, truncated=cut or len(changes) > len(listed))

        return await run(ctx, "memory_diff", call)

    async def memory_why(ctx: Context, path: str, line: int) -> WhyResult:
        """Why line `line` (from 1) of the file is there: the commit that introduced it, who made it
        (agent, session, turn, tool) and the conversation events of that turn."""

        async def call() -> WhyResult:
            norm = files.path(path)
            if await store.read(norm) is None:
                raise errors.PathNotFound(f"The path {path} does not exist. Please provide a valid path.")
            found = await store.why(norm, line)
            hunk, _ = _cut(found.hunk)
            events = [_cut(e)[0] for e in found.events[:MAX_LIMIT]]
            return WhyResult(path=found.path, line=found.line, text=found.text, commit=_commit(found.commit), hunk=hunk, events=events)

        return await run(ctx, "memory_why", call)

    async def memory_restore(ctx: Context, path: str, rev: str) -> RevResult:
        """Make the file or folder at path what it was at rev, as a new commit (history keeps the rest)."""

        async def call() -> RevResult:
            return RevResult(version=await store.restore(files.path(path), await store.resolve(rev)))

        return await run(ctx, "memory_restore", call)

    async def memory_branch(ctx: Context, name: str, at: str = "HEAD") -> BranchResult:
        """Create branch name at revision at (this server keeps working on its own branch)."""

        async def call() -> BranchResult:
            handle = await store.branch(name, at=at)
            try:
                version = await handle.head()
            finally:
                handle.close()
            return BranchResult(name=name, version=version or "")

        return await run(ctx, "memory_branch", call)

    async def memory_merge(ctx: Context, source: str, strategy: Literal["ours", "theirs"] | None = None) -> MergeResult:
        """Merge source (a branch, tag or commit) into this branch. A conflict comes back as data
        (paths, kinds, the text with markers) and nothing is merged; strategy settles every conflict."""

        async def call() -> MergeResult:
            try:
                merged = await store.merge(source, strategy=strategy)
            except errors.MergeConflict as e:
                return MergeResult(version=None, conflicts=[
                    Conflict(path=c.path, kind=c.kind, content=None if c.marked is None else _cut(c.marked)[0])
                    for c in e.conflicts[:MAX_LIMIT]
                ])
            return MergeResult(version=merged.commit)

        return await run(ctx, "memory_merge", call)

    async def memory_revert(ctx: Context, rev: str) -> RevResult:
        """A new commit undoing commit rev (null version: it changed nothing still there)."""

        async def call() -> RevResult:
            return RevResult(version=await store.revert(await store.resolve(rev)))

        return await run(ctx, "memory_revert", call)

    async def memory_tag(ctx: Context, name: str, rev: str = "HEAD") -> BranchResult:
        """Name revision rev with tag name (a tag never moves)."""

        async def call() -> BranchResult:
            return BranchResult(name=name, version=await store.tag(name, rev))

        return await run(ctx, "memory_tag", call)

    table: dict[str, tuple[Callable[..., Any], ToolAnnotations]] = {
        "memory_view": (memory_view, reading),
        "memory_create": (memory_create, changing),
        "memory_str_replace": (memory_str_replace, changing),
        "memory_insert": (memory_insert, adding),
        "memory_append": (memory_append, adding),
        "memory_delete": (memory_delete, changing),
        "memory_rename": (memory_rename, changing),
        "memory_search": (memory_search, reading),
        "memory_log": (memory_log, reading),
        "memory_diff": (memory_diff, reading),
        "memory_why": (memory_why, reading),
        "memory_restore": (memory_restore, changing),
        "memory_branch": (memory_branch, adding),
        "memory_merge": (memory_merge, changing),
        "memory_revert": (memory_revert, changing),
        "memory_tag": (memory_tag, adding),
    }
    chosen = READ_ONLY_TOOLS if read_only else (CORE_TOOLS if tools == "core" else ALL_TOOLS)
    for tool_name in chosen:
        fn, annotations = table[tool_name]
        server.add_tool(fn, name=tool_name, annotations=annotations, structured_output=True)

    @server.resource(FILE_URI + "{+path}", name="file", mime_type="text/plain",
                     security=ResourceSecurity(exempt_params={"path"}))
    async def file_resource(path: str) -> str:
        """A memory file at the head of the branch."""
        try:
            norm = files.path("/" + path)
            content = await store.read(norm)
        except errors.MemrevError as e:
            raise ResourceError(error_line(e)) from None
        if content is None:
            raise ResourceNotFoundError(f"no file {norm}")
        return content

    @server.resource(LOG_URI, name="log", mime_type="application/json")
    async def log_resource() -> str:
        """The newest commits of the branch, with provenance."""
        found = await store.log(None, limit=50)
        return json.dumps([_commit(c).model_dump() for c in found], ensure_ascii=False)

    _legacy_subscriptions(server, updates)
    return server


def _legacy_subscriptions(server: MCPServer, updates: _Updates) -> None:
    """``resources/subscribe`` for clients of protocol versions before 2026-07-28 (the SDK serves only
    ``subscriptions/listen`` through ``MCPServer``; its low-level server takes the old method)."""
    lowlevel = server._lowlevel_server  # noqa: SLF001 - the only way to serve the old method

    async def subscribe(ctx: Any, params: SubscribeRequestParams) -> Any:
        updates.subscribe(ctx, str(params.uri))
        from mcp.types import EmptyResult

        return EmptyResult()

    async def unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> Any:
        updates.unsubscribe(ctx, str(params.uri))
        from mcp.types import EmptyResult

        return EmptyResult()

    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memrev")
    except PackageNotFoundError:
        return "0"


# ------------------------------------------------------------------ HTTP


def http_app(server: MCPServer, *, host: str = "127.0.0.1", port: int = 8000, token: str | None = None) -> Any:
    """The streamable HTTP app (path ``/mcp``) with DNS-rebinding protection on: the ``Host``
    header must name ``host:port`` (and loopback names when ``host`` is loopback); with
    ``token``, every request needs ``Authorization: Bearer <token>`` (else 401)."""
    names = {host}
    if host in ("127.0.0.1", "localhost", "::1"):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    allowed = sorted({f"{h}:{port}" for h in names} | names)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=allowed,
        allowed_origins=[f"http://{h}" for h in allowed],
    )
    app = server.streamable_http_app(transport_security=security, host=host)
    return app if token is None else _Bearer(app, token)


class _Bearer:
    """ASGI: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"a token is required: Authorization: Bearer <token>\n"})
                return
        await self.app(scope, receive, send)


__all__ = [
    "ALL_TOOLS", "CORE_TOOLS", "READ_ONLY_TOOLS", "create_server", "error_line", "http_app",
]
