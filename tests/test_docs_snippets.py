"""Every ```python block of README.md runs, on a fresh copy of the quick-start store.

Each block is the body of an ``async def`` (snippets ``await``), run with the
current folder holding the quick-start store's files as in
tests/test_docs_commands.py (``.quickstart-state``, ``notes``,
``journal-state``), and with ``store`` open on ``.quickstart-state`` and
``memrev`` and ``VersionedStore`` imported. A block that cannot run in a test
(it needs a model or a network) is preceded by
``<!-- docs-snippet: not run: REASON -->``; the reason is required, and
test_few_blocks_are_marked_not_run keeps such blocks rare.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from test_docs_commands import ROOT, build_quickstart, build_workdir

DOCS = [ROOT / "README.md"]
MARKER = re.compile(r"<!-- docs-snippet: not run: (?P<why>\S.*?) -->")


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line of the ```python fence, code, reason it is not run or None), in order."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        if lines[i].strip() != "```python":
            i += 1
            continue
        marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
        j = i + 1
        while lines[j].strip() != "```":
            j += 1
        out.append((i + 1, "\n".join(lines[i + 1 : j]), marker["why"] if marker else None))
        i = j + 1
    return out


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    return build_quickstart(tmp_path_factory.mktemp("snippets"))


def _cases() -> list:
    return [pytest.param(doc, line, code, id=f"{doc.name}:{line}")
            for doc in DOCS for line, code, why in python_blocks(doc.read_text()) if why is None]


async def _run(code: str, where: str) -> None:
    import memrev
    from memrev import VersionedStore

    store = VersionedStore(".quickstart-state", create=False)
    scope = {"memrev": memrev, "VersionedStore": VersionedStore, "store": store}
    body = "async def snippet():\n" + "".join(f"    {ln}\n" for ln in code.splitlines()) + "    pass\n"
    try:
        exec(compile(body, where, "exec"), scope)
        await scope["snippet"]()
    finally:
        for value in list(scope.values()):  # every store a snippet opened
            if isinstance(value, VersionedStore):
                value.close()


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "line", "code"), _cases())
def test_every_python_snippet_runs(doc, line, code, quickstart, tmp_path):
    work = build_workdir(tmp_path, quickstart)
    before = os.getcwd()
    os.chdir(work)
    try:
        asyncio.run(_run(code, f"{doc.name}:{line}"))
    finally:
        os.chdir(before)


def test_few_blocks_are_marked_not_run():
    blocks = [(doc, b) for doc in DOCS for b in python_blocks(doc.read_text())]
    skipped = [(doc.name, line, why) for doc, (line, _, why) in blocks if why is not None]
    assert len(blocks) >= 5
    assert len(skipped) * 2 < len(blocks), skipped
    assert all(len(why) > 10 for _, _, why in skipped)
