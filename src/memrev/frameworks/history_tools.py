"""History tools an agent can call on its own memory (opt-in; ``docs/provenance.md``).

Plain async functions bound to one store, with typed parameters and
docstrings, so each framework adapter wraps the same functions as its own
tool type: ``memrev.ag2.provenance(..., history_tools=True)`` for AG2,
``memrev.autogen.history_tools(store)`` for AutoGen ``FunctionTool``s.

They only read history or restore a path as a new commit (which carries the
calling tool's provenance); nothing here deletes or rewrites history.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from .. import errors, provenance
from ..core.paths import is_under, normalize

# Tool output goes back into a model's context: keep it bounded.
MAX_OUTPUT = 6000
SCAN_COMMITS = 500  # at most this many commits are read to find the last turns


def _clip(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + f"\n... ({len(text) - MAX_OUTPUT} more characters)"


def _label(meta: dict[str, Any]) -> str:
    record = provenance.of(meta)
    return " ".join(f"{k}={record[k]}" for k in provenance.KEYS if k in record)


def make_history_tools(store: Any) -> list[Callable[..., Awaitable[str]]]:
    """``[memory_history, read_memory_version, recent_memory_changes, restore_memory_version]`` bound to ``store``.

    Four short closures in one function: each tool must be a plain function of its
    arguments (the frameworks read its signature and docstring as the tool's schema),
    with the store bound, and each adapter wraps the same four.
    """

    async def memory_history(path: str, limit: int = 10) -> str:
        """List the versions of a memory file, newest first: version number, commit id, time, who wrote it.

        Version 0 is the current one; version 1 the one before it, and so on.
        """
        commits = await store.log(path, limit=max(1, min(limit, 100)))
        if not commits:
            return f"No history for {path}"
        lines = [
            f"version {n}: {c.id[:10]} {c.time:%Y-%m-%d %H:%M:%S} {_label(c.meta) or c.author} - {c.message}"
            for n, c in enumerate(commits)
        ]
        return _clip("\n".join(lines))

    async def read_memory_version(path: str, versions_back: int = 1, rev: str = "") -> str:
        """Read a past version of a memory file.

        versions_back=1 is the version before the current one (what it said before the last change);
        give rev (a commit id from memory_history) to read the file as of that commit instead.
        """
        if rev:
            text = await store.read(path, rev=rev)
            return f"{path} did not exist at {rev}" if text is None else _clip(text)
        if versions_back < 0:
            return "versions_back must be 0 (the current version) or more"
        commits = await store.log(path, limit=versions_back + 1)
        if len(commits) <= versions_back:
            return f"{path} has only {len(commits)} version(s)"
        c = commits[versions_back]
        text = await store.read(path, rev=c.id)
        return f"{path} was deleted at {c.id[:10]}" if text is None else _clip(f"[{c.id[:10]}]\n{text}")

    async def recent_memory_changes(turns: int = 1, path: str = "/") -> str:
        """What changed in memory during the last N turns (diffs, newest turn first), optionally under a path."""
        under = normalize(path)
        commits = await store.log(under, limit=SCAN_COMMITS)
        wanted: list[tuple[Any, Any]] = []
        picked = []
        for c in commits:
            key = (c.meta.get("session"), c.meta.get("turn"))
            if key[1] is None:
                continue
            if key not in wanted:
                if len(wanted) == max(1, turns):
                    break
                wanted.append(key)
            picked.append(c)
        if not picked:
            return "No changes made during an agent turn were found"
        out = []
        for c in picked:
            out.append(f"== {c.id[:10]} {_label(c.meta)}: {c.message}")
            parent = c.parents[0] if c.parents else None
            changes = await store.diff(parent, c.id) if parent else await store.diff_from_empty(c.id)
            out.extend(ch.diff for ch in changes if is_under(ch.path, under))
        return _clip("\n".join(out))

    async def restore_memory_version(path: str, rev: str) -> str:
        """Make a memory file (or folder) what it was at commit rev, as a new commit. History is kept."""
        try:
            new = await store.restore(path, rev)
        except errors.RevisionNotFound as e:
            return f"Error: {e}"
        return f"{path} already matches {rev}" if new is None else f"Restored {path} to {rev[:10]} as commit {new[:10]}"

    return [memory_history, read_memory_version, recent_memory_changes, restore_memory_version]


def with_provenance(func: Callable[..., Awaitable[str]], **fields: Any) -> Callable[..., Awaitable[str]]:
    """``func`` with ``fields`` set around each call, for frameworks whose tool calls have no hook
    (AutoGen ``FunctionTool``). Keeps the name, docstring and signature a tool schema is built from."""
    provenance.check_fields(fields)

    @functools.wraps(func)
    async def call(*args: Any, **kwargs: Any) -> str:
        async with provenance.provenance(**fields):
            return await func(*args, **kwargs)

    return call
