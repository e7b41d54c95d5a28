"""Claude's memory tool (``memory_20250818``) on a memrev store (extra ``memrev[anthropic]``).

``MemoryTool(store)`` is the ``anthropic`` package's ``BetaAsyncAbstractMemoryTool``:
pass it in ``tools=`` to ``client.beta.messages.tool_runner(...)`` (or call
``await tool.call(input)`` with a ``tool_use`` block's input) and every
``create``, ``str_replace``, ``insert``, ``delete`` and ``rename`` Claude makes
is one commit under ``/memories``, with provenance ``framework="anthropic"``,
``tool="memory"``; ``clear_all_memory()`` is one tombstone commit. What it
answers is the text the package's ``BetaAsyncLocalFilesystemMemoryTool``
answers for the same commands (tests/test_anthropic_memory.py runs both on
random command scripts), and a mistake is a ``ToolError`` with the same words.
The commands are ``memrev.frameworks.memory_files``, shared with ``memrev mcp``.

Where a store is not a folder of files, docs/claude-memory-tool.md lists the
differences kept on purpose: a folder exists while it holds a file (as in git),
a folder's size is what its files hold, a path must be ``/memories`` or below it
(the filesystem tool maps ``/memoriesX`` to ``/memories/X``), a file is never
also a folder (where the filesystem tool fails with a bare ``OSError``, this is
a ``ToolError`` saying why), and a "multiple occurrences" message is bounded.
"""

from __future__ import annotations

from typing import Any

from anthropic.lib.tools import BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from . import errors
from .frameworks.memory_files import DirView, MemoryFiles, numbered
from .repo.ops import Delete

__all__ = ["MemoryTool"]


def _size(n: int) -> str:
    """A size as Claude's filesystem tool prints it: ``0B``, ``12B``, ``1.5K``, ``3M``."""
    if n == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((n.bit_length() - 1) // 10, len(units) - 1)
    value = n / (1024**i)
    return f"{int(value)}{units[i]}" if value == int(value) else f"{value:.1f}{units[i]}"


class MemoryTool(BetaAsyncAbstractMemoryTool):
    """Claude's memory tool over ``store`` (any memrev ``Store``), its files under ``root``.

    Claude always names the folder ``/memories``; ``root`` is where it is in the store
    (``root="/agents/ada/memories"``: Claude's ``/memories/user.md`` is that folder's ``user.md``)."""

    def __init__(self, store: Any, *, root: str = "/memories", cache_control: Any = None) -> None:
        super().__init__(cache_control=cache_control)
        self.store = store
        self.files = MemoryFiles(store, root=root, shown_as="/memories")

    async def _run(self, work: Any) -> Any:
        try:
            async with self.store.provenance(framework="anthropic", tool="memory"):
                return await work
        except errors.MemrevError as e:
            raise ToolError(str(e)) from e
        finally:
            work.close()  # a coroutine refused before it ran (a path check) is not left unawaited

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        shown = await self._run(self.files.view(command.path, view_range=command.view_range))
        if isinstance(shown, DirView):
            base = shown.path.rstrip("/")
            lines = [f"{_size(shown.size)}\t{command.path}"]
            for entry in shown.entries:
                rel = entry.path[len(base) + 1 :]
                if any(part.startswith(".") for part in rel.rstrip("/").split("/")):
                    continue  # hidden, and what is under it
                lines.append(f"{_size(entry.size)}\t{command.path}/{rel}")
            header = f"Here're the files and directories up to 2 levels deep in {command.path}, excluding hidden items:"
            return header + "\n" + "\n".join(lines)
        return f"Here's the content of {command.path} with line numbers:\n" + numbered(shown.lines, shown.first)

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        message = f"memory create {command.path}"
        await self._run(self.files.create(command.path, command.file_text, expected="absent", message=message))
        return f"File created successfully at: {command.path}"

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        message = f"memory str_replace {command.path}"
        edit = await self._run(self.files.str_replace(command.path, command.old_str, command.new_str, message=message)
        )
        lines = edit.content.split("\n")
        start, end = max(0, edit.line - 2), min(len(lines), edit.line + 3)
        snippet = numbered(lines[start:end], start + 1)
        return f"The memory file has been edited. Here is the snippet showing the change (with line numbers):\n{snippet}"

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        message = f"memory insert {command.path}"
        work = self.files.insert(command.path, command.insert_line, command.insert_text, message=message)
        await self._run(work)
        return f"The file {command.path} has been edited."

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        await self._run(self.files.delete(command.path, message=f"memory delete {command.path}"))
        return f"Successfully deleted {command.path}"

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        message = f"memory rename {command.old_path} -> {command.new_path}"
        await self._run(self.files.rename(command.old_path, command.new_path, message=message))
        return f"Successfully renamed {command.old_path} to {command.new_path}"

    async def clear_all_memory(self) -> str:
        """Every file under the root deleted, in one tombstone commit (history keeps them)."""
        work = self.store.commit_ops([Delete(self.files.root)], message=f"memory clear {self.files.root}")
        await self._run(work)
        return "All memory cleared"
