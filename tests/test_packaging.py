"""What the package ships and what it needs at run time.

The test tools (pytest, hypothesis, anyio) are the ``test`` extra, not
dependencies: only ``memrev.testing`` may import them, and importing
``memrev`` must not import ``memrev.testing``. ``py.typed`` tells type
checkers that memrev's annotations are its public types.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import memrev
from helpers import SRC

PACKAGE = Path(memrev.__file__).resolve().parent
TEST_TOOLS = ("anyio", "hypothesis", "pytest", "_pytest")


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_only_memrev_testing_imports_the_test_tools():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "testing":
            continue
        tools = sorted(n for n in _imported_modules(path) if n.split(".")[0] in TEST_TOOLS)
        if tools:
            offenders[str(path.relative_to(PACKAGE))] = tools
    assert offenders == {}, "the test tools are the 'test' extra, not memrev's dependencies"


def test_importing_memrev_imports_no_test_code():
    probe = (
        "import sys, memrev; "
        "print(sorted(m for m in sys.modules if m.startswith('memrev.testing') or m.split('.')[0] in "
        f"{TEST_TOOLS!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env={"PYTHONPATH": SRC}
    ).stdout
    assert out.strip() == "[]"


def test_the_package_is_marked_typed():
    assert (PACKAGE / "py.typed").is_file()


@pytest.mark.slow  # 0.8 s in the quick loop: parses every module of the package
def test_no_call_uses_a_keyword_newer_than_the_oldest_python_supported():
    """``requires-python`` is >=3.10: ``create_task(..., context=...)`` is 3.11+ and raised
    TypeError on 3.10 when a store started its on_change poller or delivery task."""
    newer = {("create_task", "context")}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                found += [
                    f"{path.name}:{node.lineno} {node.func.attr}({kw.arg}=)"
                    for kw in node.keywords
                    if (node.func.attr, kw.arg) in newer
                ]
    assert found == []


TYPING_311 = {"Self", "LiteralString", "Never", "assert_never", "reveal_type", "Required", "NotRequired",
              "TypeVarTuple", "Unpack", "dataclass_transform", "assert_type", "clear_overloads", "get_overloads"}


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_no_module_imports_at_run_time_what_typing_has_only_from_3_11():
    """``from typing import Self`` at module level raised ImportError on Python 3.10 (store.py);
    such names belong under ``if TYPE_CHECKING:`` (from typing_extensions)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:  # module level, not under an if
            if isinstance(node, ast.ImportFrom) and node.module == "typing":
                found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if a.name in TYPING_311]
    assert found == []
