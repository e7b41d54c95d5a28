"""Small LRUs bounded by total size, and the one byte budget a repository's caches share,
so no cache, and not all of them together, can grow with history.

A cache weighs each entry when it is put (``weigh``; by count when none is given) and
keeps that weight beside it (a dict of ints, not a pair per entry: a pair holding a
tracked value is one more object for the garbage collector), so what it accounts is
what it added, however the value changes later (a ``Commit`` decodes itself lazily).
A byte-weighed cache adds ``ENTRY_BYTES`` per entry for its own bookkeeping (measured:
an ``OrderedDict`` slot ~105 B, the weight's slot and int ~85 B).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["ENTRY_BYTES", "LRU", "Budget"]

ENTRY_BYTES = 190


def _one(value: Any) -> int:
    return 1


class Budget:
    """Bytes shared by several byte-weighed LRUs: each stays within its own cap, and when
    together they hold more than ``total``, the one fullest for its cap gives way (its
    least recently used entries), so a walk of history can borrow the room recent
    commits do not need and never adds to what the process holds."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._members: list[LRU] = []

    def join(self, cache: LRU) -> None:
        self._members.append(cache)

    @property
    def members(self) -> tuple[LRU, ...]:
        return tuple(self._members)

    def settle(self, keep: LRU) -> None:
        """Evict until the members together fit ``total`` with a little room to spare (so
        a steady stream of commits settles once in many puts, not at every one);
        ``keep``'s newest entry stays."""
        goal = self.total - self.total // 32
        while self.used > goal:
            # The fullest gives way until it is a little below the next fullest: one
            # ranking per run of evictions (ranking at each one was most of a commit's
            # cache work). One that cannot (only ``keep``'s newest entry) passes it on.
            ranked = sorted(self._members, key=_fullness, reverse=True)
            for i, victim in enumerate(ranked):
                after = _fullness(ranked[i + 1]) if i + 1 < len(ranked) else 0.0
                level = (after - 1 / 64) * victim.budget
                evicted = False
                while victim.evict_oldest(keep is victim):
                    evicted = True
                    if self.used <= goal or victim.used <= level:
                        break
                if evicted:
                    break
            else:
                return


def _fullness(cache: LRU) -> float:
    return cache.used / cache.budget


class LRU:
    """A least-recently-used map of at most ``budget`` in weight (weighed by bytes, one entry
    at most a quarter of it)."""

    def __init__(
        self, budget: int, weigh: Callable[[Any], int] | None = None, *, shared: Budget | None = None
    ) -> None:
        self._data: OrderedDict[Any, Any] = OrderedDict()
        self._weights: dict[Any, int] = {}
        self.budget = budget
        self._weigh = _one if weigh is None else weigh
        self._extra = 0 if weigh is None else ENTRY_BYTES
        self.used = 0
        self._shared = shared
        if shared is not None:
            shared.join(self)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def get(self, key: Any) -> Any:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        # Inline, not through _add: a path's log puts thousands of Commits at once.
        w = self._weigh(value) + self._extra
        if self._extra and w > self.budget // 4:  # by bytes: one big value never flushes the rest
            return
        if key in self._data:
            self._drop(key)
        self._data[key] = value
        self._weights[key] = w
        self.used += w
        shared = self._shared
        if shared is not None:
            shared.used += w
        while self.used > self.budget:
            self.evict_oldest(True)
        if shared is not None and shared.used > shared.total:
            shared.settle(self)

    def pop(self, key: Any) -> Any:
        """Remove ``key``; its value, or ``None``."""
        return self._drop(key)

    def evict_oldest(self, keep_newest: bool = False) -> bool:
        """Drop the least recently used entry (not the only one when ``keep_newest``)."""
        if not self._data or keep_newest and len(self._data) == 1:
            return False
        key, _ = self._data.popitem(last=False)
        self._add(-self._weights.pop(key))
        return True

    def clear(self) -> None:
        self._data.clear()
        self._weights.clear()
        self._add(-self.used)

    def _drop(self, key: Any) -> Any:
        value = self._data.pop(key, None)
        if value is not None:
            self._add(-self._weights.pop(key))
        return value

    def _add(self, w: int) -> None:
        self.used += w
        if self._shared is not None:
            self._shared.used += w
