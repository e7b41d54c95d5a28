"""Numbered item folders and optimistic commits, shared by the framework adapters.

AutoGen memories (``memrev.autogen``), OpenAI Agents sessions
(``memrev.openai_agents``) and tiered memory (``memrev.frameworks.tiered``) all keep
one file per item under ``<folder>/items/`` named by a 12-digit number
(:func:`memrev.frameworks.memory.item_name`), with the last number handed out in
``<folder>/last-id``, so a number is never reused and ``memrev log`` of an
item path always means one item.

Several processes may add to the same folder at once. Each change is
planned from the branch head it read and committed with ``expect_head``;
if another writer moved the branch in between, the plan is made again
from the new head. That is how no add is lost and no number is handed out
twice, without a lock held across the caller's ``await``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import errors
from ..repo.ops import Write
from ..store.txn import ATTEMPTS, Change, PlannedOp

if TYPE_CHECKING:
    from ..store.store import Store

__all__ = [
    "ATTEMPTS",
    "COUNTER_FILE",
    "Change",
    "ID_WIDTH",
    "ITEMS_DIR",
    "ITEM_NAME",
    "MAX_ID",
    "PlannedOp",
    "commit_planned",
    "item_name",
    "item_paths",
    "next_item_id",
    "write_text",
]

ID_WIDTH = 12
MAX_ID = 10**ID_WIDTH - 1
ITEMS_DIR = "items"
COUNTER_FILE = "last-id"
ITEM_NAME = re.compile(rf"([0-9]{{{ID_WIDTH}}})\.json")
_COUNTER_TEXT = re.compile(rf"[0-9]{{1,{ID_WIDTH}}}")



def write_text(path: str, text: str) -> Write:
    """A write of ``text``: encoded once here, the store keeps the bytes as they are."""
    return Write(path, text.encode("utf-8"))


def item_name(item_id: int) -> str:
    """``3`` -> ``"000000000003.json"``: fixed width, so names sort as numbers."""
    return f"{item_id:0{ID_WIDTH}d}.json"


async def item_paths(store: Store, items_dir: str, rev: str | None) -> list[tuple[int, str]]:
    """(id, path) of every item file in ``items_dir`` as of ``rev``, in id order."""
    out = []
    for name in await store.list(items_dir, rev=rev):
        m = ITEM_NAME.fullmatch(name)
        if m:
            out.append((int(m.group(1)), f"{items_dir}/{name}"))
    return out


async def next_item_id(store: Store, items_dir: str, counter: str) -> int:
    """The next unused item number at the head (or in the caller's open transaction)."""
    last = None
    text = await store.read(counter)
    if text is not None and _COUNTER_TEXT.fullmatch(text.strip()):
        last = int(text.strip())
    if last is None:  # no counter (items written by hand, or it was deleted): fall back to a scan
        listing = await item_paths(store, items_dir, None)
        last = listing[-1][0] if listing else 0
    n = last + 1
    while await store.exists(f"{items_dir}/{item_name(n)}"):  # never overwrite an item
        n += 1
    if n > MAX_ID:
        raise errors.MemrevError(f"{items_dir} is full: item numbers have at most {ID_WIDTH} digits")
    return n


async def commit_planned(
    store: Store, plan: Callable[[], Awaitable[Change | None]], *, what: str = "change"
) -> Any:
    """Make the commit ``plan()`` describes, planned from the head it is committed on
    (:meth:`memrev.store.Store.commit_planned`, the one place that plans, commits
    with ``expect_head`` and retries).

    ``plan`` reads the store at its head and returns a :class:`Change`, or
    ``None`` when there is nothing to commit (then ``None`` is returned).
    Inside the caller's open transaction the ops join that transaction.
    """
    return await store.commit_planned(plan, give_up=f"the branch kept moving; {what} not committed")
