"""memrev's modules import only downwards (docs/design.md, "Layers"), never in a cycle,
and ``import memrev`` / the CLI load no agent framework.

The import graph is read from the source with ``ast`` (module level, inside
functions, under ``TYPE_CHECKING``; relative and absolute), not from what an
import happens to load, so a lazy import that would close a cycle is caught
before anybody calls the function holding it.
"""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import memrev

ROOT = Path(memrev.__file__).parent

# The layers, bottom to top, as docs/design.md's tree shows them: a folder of
# src/memrev/ is a layer, and so is each row of top-level modules. A module may
# import its own layer and those below. A new module goes into a folder (or,
# for a public framework module, the adapters row); a new folder gets a row here
# and a line in docs/design.md, or test_every_module_has_a_layer fails.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("leaves", ("errors", "provenance")),  # the error hierarchy; provenance's plain records
    ("core", ("core",)),
    ("backends", ("backends",)),
    ("repo", ("repo",)),
    ("history", ("history",)),
    ("maintenance", ("maintenance",)),
    ("folders", ("folders",)),
    ("store", ("store",)),
    ("frameworks", ("frameworks",)),
    ("adapters", ("versioned_store", "autogen", "ag2", "openai_agents", "mcp", "anthropic", "langgraph")),  # the public framework modules
    ("front ends", ("cli", "viewer")),
    ("testing", ("testing",)),
]
# Third-party agent frameworks and servers: never imported (not even lazily)
# by the store or anything below it, so the store runs without them.
FRAMEWORKS = (
    "autogen_core", "autogen_agentchat", "autogen", "ag2", "agents", "openai", "starlette", "uvicorn",
    "mcp", "anthropic", "langgraph",
)
# Loaded by none of `import memrev` and `import memrev.cli` (psycopg: only a
# postgresql:// location needs it).
NOT_ON_IMPORT = FRAMEWORKS + ("psycopg", "pydantic", "jinja2")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (a memrev module) or top-level package (third party)
    line: int
    in_function: bool


def _modules() -> dict[str, Path]:
    found = {"memrev": ROOT / "__init__.py"}
    for info in pkgutil.walk_packages([str(ROOT)], "memrev."):
        rel = info.name.split(".")[1:]
        found[info.name] = ROOT.joinpath(*rel, "__init__.py") if info.ispkg else ROOT.joinpath(*rel).with_suffix(".py")
    return found


MODULES = _modules()


def _package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _targets(node: ast.Import | ast.ImportFrom, name: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = _package_of(name).split(".")
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if not module.startswith("memrev"):
        return [module]
    # ``from . import history`` imports the module memrev.history, not an attribute of memrev.
    return sorted({f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names})


def _imports(name: str) -> list[Import]:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(child, name):
                    found.append(Import(name, target, child.lineno, in_function))
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, nested)

    visit(tree, False)
    return found


IMPORTS = {name: _imports(name) for name in MODULES}


def _internal(name: str) -> list[Import]:
    return [i for i in IMPORTS[name] if i.target.startswith("memrev") and i.target != name]


def _layer(name: str) -> int | None:
    first = name.split(".")[1] if "." in name else None
    for rank, (_, members) in enumerate(LAYERS):
        if first in members:
            return rank
    return None


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that starts and ends at the same module, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := walk(nxt)) is not None:
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)) is not None:
            return cycle
    return None


def test_the_graph_reader_sees_every_kind_of_import():
    """The reader itself: a relative, an absolute and a function-level import are all edges."""
    edges = {(i.target, i.in_function) for i in IMPORTS["memrev.versioned_store"]}
    assert ("memrev.store.store", False) in edges  # from .store.store import ...
    assert ("memrev.openai_agents", True) in edges  # imported inside VersionedStore.session
    assert ("autogen_core", False) in {(i.target, i.in_function) for i in IMPORTS["memrev.frameworks.store_memory"]}
    assert ("memrev.history.pickaxe", False) in {(i.target, i.in_function) for i in IMPORTS["memrev.history.browse"]}
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def _all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles of ``graph``, each found one by breaking its last edge and looking again."""
    graph = {node: set(targets) for node, targets in graph.items()}
    cycles = []
    while (cycle := _find_cycle(graph)) is not None and len(cycles) < 20:
        cycles.append(cycle)
        graph[cycle[-2]].discard(cycle[-1])
    return cycles


def test_no_import_cycle_inside_memrev():
    graph = {name: {i.target for i in _internal(name)} for name in MODULES}
    cycles = _all_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_every_module_has_a_layer():
    missing = sorted(name for name in MODULES if name != "memrev" and _layer(name) is None)
    assert not missing, f"add {missing} to LAYERS here and to the layer table of docs/design.md"


def test_imports_go_down_the_layers():
    """A module imports its own layer or lower ones (``memrev/__init__`` is the package face, above all)."""
    upward = []
    for name in MODULES:
        if name == "memrev":
            continue
        for imp in _internal(name):
            if imp.target != "memrev" and _layer(imp.target) > _layer(name):  # type: ignore[operator]
                upward.append(f"{name}:{imp.line} imports {imp.target} ({LAYERS[_layer(imp.target)][0]})")  # type: ignore[index]
    assert not upward, "imports going up a layer:\n" + "\n".join(upward)


def test_named_layer_rules_of_the_design():
    """The rules docs/design.md states in words, checked one by one (a cheaper regression message)."""

    def imported_by(prefix: str) -> set[str]:
        return {i.target for name in MODULES if name.startswith(prefix) for i in _internal(name)}

    core = imported_by("memrev.core")
    assert core <= {m for m in MODULES if m.startswith("memrev.core")} | {"memrev.errors"}, core
    backends = imported_by("memrev.backends")
    assert all(m.startswith(("memrev.backends", "memrev.core", "memrev.errors")) for m in backends), backends
    repo = imported_by("memrev.repo")
    assert all(m.startswith(("memrev.repo", "memrev.backends", "memrev.core", "memrev.errors", "memrev.provenance")) for m in repo), repo
    store = imported_by("memrev.store")
    assert not {m for m in store if m.startswith(("memrev.frameworks", "memrev.cli", "memrev.viewer"))}, store
    assert not store & {"memrev.autogen", "memrev.ag2", "memrev.openai_agents", "memrev.versioned_store"}, store
    # The CLI starts the viewer only in `memrev serve`, so the CLI runs without the viewer extra.
    cli_to_viewer = [i for n in MODULES if n.startswith("memrev.cli") for i in IMPORTS[n] if i.target.startswith("memrev.viewer")]
    assert cli_to_viewer and all(i.in_function for i in cli_to_viewer), cli_to_viewer
    assert not {m for m in imported_by("memrev.viewer") if m.startswith("memrev.cli")}


def test_the_store_and_below_import_no_agent_framework():
    store_rank = _layer("memrev.store.store")
    offenders = [
        f"{name}:{i.line} imports {i.target}"
        for name in MODULES
        if name != "memrev" and _layer(name) <= store_rank  # type: ignore[operator]
        for i in IMPORTS[name]
        if i.target.split(".")[0] in FRAMEWORKS
    ]
    assert not offenders, offenders


def _loaded_after(statement: str) -> list[str]:
    code = (
        f"import json, sys; {statement}; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(NOT_ON_IMPORT)!r}))))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.splitlines()[-1])  # the last line: a command may print before it


def test_import_memrev_loads_no_framework():
    assert _loaded_after("import memrev") == []
    # The errors are there at once; the classes load on first use.
    assert _loaded_after("import memrev; memrev.StoreClosed; memrev.Store; memrev.Commit") == []


def test_the_cli_loads_no_framework():
    assert _loaded_after("import memrev.cli") == []


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_cli_commands_on_a_store_load_no_framework(tmp_path):
    """Not just the import: ``log``, ``show``, ``cat`` and ``ls`` run on a store holding AutoGen items."""
    import asyncio

    from autogen_core.memory import MemoryContent, MemoryMimeType

    async def fill() -> None:
        async with memrev.VersionedStore(tmp_path / "s") as store:
            await store.write("/memory/working.md", "# notes\n")
            await store.add(MemoryContent(content="likes tea", mime_type=MemoryMimeType.TEXT))

    asyncio.run(fill())
    location = str(tmp_path / "s")
    for args in (["log", "-n", "5"], ["show"], ["cat", "/memory/working.md"], ["ls", "/"]):
        run = f"from memrev.cli import main; main(['--store', {location!r}, *{args!r}], standalone_mode=False)"
        assert _loaded_after(run) == [], args


def test_versioned_store_still_loads_on_first_use():
    """The lazy face gives the same classes as their modules, and ``dir()`` lists them."""
    from memrev import autogen, versioned_store
    from memrev.repo import repository as repo
    from memrev.store import store

    assert memrev.VersionedStore is autogen.VersionedStore is versioned_store.VersionedStore
    assert issubclass(memrev.VersionedStore, store.Store)
    assert memrev.Commit is repo.Commit and memrev.Store is store.Store
    assert {"VersionedStore", "Store", "Commit", "FileChange", "StoreClosed"} <= set(dir(memrev))
    assert set(memrev.__all__) <= set(dir(memrev))


def test_a_read_command_loads_no_whole_store_work(tmp_path):
    """``memrev log`` opens the store and reads; fsck, gc, purge and bundles load only
    when one of them runs (issue 26: a read-only command imports only what it uses)."""
    import asyncio

    async def fill() -> None:
        async with memrev.Store(tmp_path / "s") as store:
            await store.write("/notes.md", "hello\n")

    asyncio.run(fill())
    whole_store = ["memrev.maintenance.bundles", "memrev.maintenance.fsck", "memrev.maintenance.gc",
                   "memrev.maintenance.purge", "memrev.maintenance.purge_scan"]
    code = (
        "import json, sys; from memrev.cli import main; "
        f"main(['--store', {str(tmp_path / 's')!r}, 'log', '-n', '5'], standalone_mode=False); "
        f"print(json.dumps([m for m in {whole_store!r} if m in sys.modules]))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []
    # ... and they still load, and run, when asked for
    code = (
        "import json, sys; from memrev.cli import main; "
        f"main(['--store', {str(tmp_path / 's')!r}, 'fsck'], standalone_mode=False); "
        "print(json.dumps('memrev.maintenance.fsck' in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) is True


# What a read-only command (and ``import memrev``) does not load (issue 26): the event
# loop and the async store (a read runs on memrev.store.reads' Reader), the merge
# machinery, the history pages' reader, and purge (``show`` asks repo.purged); difflib
# loads with the first diff.
NOT_FOR_A_READ = [
    "asyncio", "concurrent.futures", "memrev.store.store", "memrev.store.run", "memrev.store.txn",
    "memrev.store.notify", "memrev.store.views", "memrev.core.textmerge", "merge3", "memrev.history.browse",
    "memrev.maintenance.purge", "memrev.maintenance.gc",
]


def _which_loaded(statement: str, names: list[str]) -> list[str]:
    code = f"import json, sys; {statement}; print(json.dumps([m for m in {names!r} if m in sys.modules]))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow  # eight child processes, ~1.5 s together
def test_a_read_command_runs_without_the_event_loop_or_the_merge_machinery(tmp_path):
    import asyncio

    async def fill() -> None:
        async with memrev.Store(tmp_path / "s") as store:
            await store.write("/notes.md", "hello\n")
            await store.write("/notes.md", "hello\nagain\n")

    asyncio.run(fill())
    assert _which_loaded("import memrev", NOT_FOR_A_READ) == []
    location = str(tmp_path / "s")
    for args in (["log", "-n", "5"], ["show"], ["diff"], ["history", "/notes.md"], ["cat", "/notes.md"], ["ls", "/"]):
        run = (f"from memrev.cli import main; main(['--store', {location!r}, '--no-pager', *{args!r}], "
               "standalone_mode=False)")
        # show and diff print a diff; click's parser loads difflib for a short option (``-n``: NoSuchOption's hint)
        no_diff = [] if args[0] in ("log", "show", "diff") else ["difflib"]
        assert _which_loaded(run, NOT_FOR_A_READ + no_diff) == [], args
    # ... and a command that writes still runs on the async Store, which loads them when used
    run = f"from memrev.cli import main; main(['--store', {location!r}, 'revert', 'HEAD'], standalone_mode=False)"
    assert set(_which_loaded(run, NOT_FOR_A_READ)) >= {"asyncio", "memrev.store.store", "memrev.core.textmerge"}
