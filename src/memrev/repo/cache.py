"""A small LRU bounded by total size, so no cache can grow with history."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class LRU:
    def __init__(self, budget: int, weigh=lambda v: 1) -> None:
        self._data: OrderedDict[Any, Any] = OrderedDict()
        self._budget = budget
        self._weigh = weigh
        self._used = 0

    def get(self, key: Any) -> Any:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        w = self._weigh(value)
        if w > self._budget // 4:
            return
        old = self._data.pop(key, None)
        if old is not None:
            self._used -= self._weigh(old)
        self._data[key] = value
        self._used += w
        while self._used > self._budget:
            _, evicted = self._data.popitem(last=False)
            self._used -= self._weigh(evicted)

    def clear(self) -> None:
        self._data.clear()
        self._used = 0
