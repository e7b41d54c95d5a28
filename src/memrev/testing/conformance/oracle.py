"""The differential harness: ag2's ``MemoryKnowledgeStore`` (the oracle) and a store, driven in lock step.

``OraclePair(store).run(op)`` runs one KnowledgeStore call (``("write", path, text)``,
``("read", path)``, ..., plus ``("subscribe", prefix)`` and ``("unsubscribe", i)``) on
both and asserts the same outcome (the same value, or an error of the same type) and
the same ``on_change`` notifications, with the history of the calls so far in the
message; ``compare_trees()`` compares the whole trees at the end.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...versioned_store import VersionedStore

__all__ = ["OraclePair", "outcome", "same_outcome", "walk_tree"]


async def outcome(fn, *args) -> tuple[str, Any]:
    """``("returned", value)`` or ``("raised", exception)`` of ``await fn(*args)``."""
    try:
        return ("returned", await fn(*args))
    except Exception as e:  # noqa: BLE001 - compared by type
        return ("raised", e)


def same_outcome(oracle: tuple[str, Any], mine: tuple[str, Any]) -> bool:
    """Both returned equal values of one type, or both raised (``mine`` an instance of the oracle's error type)."""
    if oracle[0] == "raised" or mine[0] == "raised":
        return oracle[0] == mine[0] == "raised" and isinstance(mine[1], type(oracle[1]))
    return type(oracle[1]) is type(mine[1]) and oracle[1] == mine[1]


class _Recorder:
    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, path: str) -> None:
        self.paths.append(path)

    def take(self) -> Counter:
        c = Counter(self.paths)
        self.paths.clear()
        return c


class OraclePair:
    """ag2's MemoryKnowledgeStore and a VersionedStore, driven in lock step (see the module docstring)."""

    def __init__(self, store: VersionedStore) -> None:
        from ag2.knowledge import MemoryKnowledgeStore

        self.oracle = MemoryKnowledgeStore()
        self.mine = store
        self.subs: list[tuple[str, _Recorder, _Recorder, Any, Any]] = []
        self.trace: list[str] = []

    def _history(self) -> str:
        return "\n  history:\n    " + "\n    ".join(self.trace)

    async def run(self, op: tuple) -> Any:
        name, *args = op
        if name == "subscribe":
            o_rec, m_rec = _Recorder(), _Recorder()
            subs = (await self.oracle.on_change(args[0], o_rec), await self.mine.on_change(args[0], m_rec))
            self.subs.append((args[0], o_rec, m_rec, *subs))
            self.trace.append(f"on_change({args[0]!r})")
            return None
        if name == "unsubscribe":
            if self.subs:
                prefix, _, _, o_sub, m_sub = self.subs.pop(args[0] % len(self.subs))
                await o_sub.close()
                await m_sub.close()
                self.trace.append(f"close subscription on {prefix!r}")
            return None
        o = await outcome(getattr(self.oracle, name), *args)
        m = await outcome(getattr(self.mine, name), *args)
        self.trace.append(f"{name}{tuple(args)!r}: oracle {o[0]} {o[1]!r}, memrev {m[0]} {m[1]!r}")
        assert same_outcome(o, m), (
            f"{name}{tuple(args)!r}: oracle {o[0]} {o[1]!r} but memrev {m[0]} {m[1]!r}" + self._history()
        )
        for prefix, o_rec, m_rec, _, _ in self.subs:
            o_notes, m_notes = o_rec.take(), m_rec.take()
            assert o_notes == m_notes, (
                f"after {name}{tuple(args)!r}: on_change({prefix!r}) oracle got {sorted(o_notes.elements())} "
                f"but memrev got {sorted(m_notes.elements())}" + self._history()
            )
        return o[1]

    async def close(self) -> None:
        while self.subs:
            await self.run(("unsubscribe", 0))

    async def compare_trees(self) -> None:
        o_tree, m_tree = await walk_tree(self.oracle), await walk_tree(self.mine)
        assert m_tree == o_tree, f"final trees differ: oracle {o_tree!r}, memrev {m_tree!r}" + self._history()


async def walk_tree(store: Any, path: str = "/", depth: int = 0) -> dict[str, Any]:
    """Every folder's listing and every file's text under ``path`` of a KnowledgeStore (7 levels deep)."""
    entries = await store.list(path)
    out: dict[str, Any] = {path + "/": entries}
    if depth > 6:
        return out
    base = path.rstrip("/")
    for entry in entries:
        child = base + "/" + entry.rstrip("/")
        if entry.endswith("/"):
            out.update(await walk_tree(store, child, depth + 1))
        else:
            out[child] = await store.read(child)
    return out
