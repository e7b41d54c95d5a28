"""Every public import path still works: each dotted ``memrev.…`` name the README
and the docs mention resolves, and each module's old path (before the code moved
into one folder per layer) is the very same module as its new one."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import memrev

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
# Backticked names that are files, not Python (the SQLite file a store keeps).
NOT_PYTHON = {"memrev.db"}
NAME = re.compile(r"`(memrev(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\)|\([^`]*\))?`")


def _documented() -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for doc in DOCS:
        for name in NAME.findall(doc.read_text(encoding="utf-8")):
            if name not in NOT_PYTHON:
                found.setdefault(name, doc.name)
    return sorted(found.items())


def _resolve(dotted: str) -> object:
    """Import the longest module prefix of ``dotted``, then read the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            value = getattr(value, attr)
        return value
    raise ModuleNotFoundError(dotted)


DOCUMENTED = _documented()


def test_the_docs_name_many_things():
    """The scan finds what it should (a broken pattern would pass every check below)."""
    names = {name for name, _ in DOCUMENTED}
    assert {"memrev.VersionedStore", "memrev.autogen.TieredMemory", "memrev.testing.conformance"} <= names
    assert len(names) > 30


@pytest.mark.parametrize(("name", "doc"), DOCUMENTED, ids=[n for n, _ in DOCUMENTED])
def test_each_documented_name_resolves(name, doc):
    assert _resolve(name) is not None, f"{doc} names {name}"


@pytest.mark.parametrize("old", sorted(memrev._MOVED))
def test_an_old_module_path_is_the_moved_module(old):
    new = importlib.import_module(f"memrev.{memrev._MOVED[old]}")
    aliased = importlib.import_module(f"memrev.{old}")
    assert aliased is new
    assert aliased.__spec__.name == new.__name__  # the module keeps its own spec
    exported = getattr(new, "__all__", [n for n in vars(new) if not n.startswith("_")])
    for name in exported:
        assert getattr(aliased, name) is getattr(new, name)


def test_from_an_old_path_import_a_name():
    from memrev.adopt import MAX_FILES
    from memrev.ops import ANY_HEAD, Write
    from memrev.tiered import TieredMemory

    from memrev.folders.adopt import MAX_FILES as new_max
    from memrev.frameworks.tiered import TieredMemory as new_tiered
    from memrev.repo.ops import ANY_HEAD as new_any

    assert (MAX_FILES, ANY_HEAD, TieredMemory) == (new_max, new_any, new_tiered)
    assert Write.__module__ == "memrev.repo.ops"


def test_an_unknown_module_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("memrev.no_such_module")


def test_the_console_entry_point_and_python_dash_m():
    from memrev.cli import main

    assert callable(main)
    assert importlib.util.find_spec("memrev.cli.__main__") is not None
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'memrev = "memrev.cli:main"' in text


def test_the_component_providers_dumped_configs_name():
    """Saved AutoGen component configs name these providers: they must load."""
    for provider in ("memrev.autogen.VersionedMemory", "memrev.autogen.TieredMemory"):
        module, _, name = provider.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert cls.component_provider_override == provider
