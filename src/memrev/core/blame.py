"""Line attribution over the version graph of one file.

Each version knows its lines and its parent versions (the previous versions
of the same file on each parent branch). A line is attributed to the oldest
version from which it survived unchanged: lines that match a parent version
inherit that parent's attribution (first parent first; the matching is a
longest common subsequence of lines), the rest belong to
the version itself. Only the versions of this file are read, never the
commits that did not touch it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Mapping, Sequence

from .textdiff import matching_blocks


def blame(
    versions: Mapping[Hashable, tuple[Sequence[str], Sequence[Hashable]]], target: Hashable
) -> list[Hashable]:
    """For each line of ``target``, the key of the version that introduced it."""
    done: dict[Hashable, list[Hashable]] = {}
    stack: list[tuple[Hashable, bool]] = [(target, False)]
    while stack:  # iterative post-order: parents before children, no recursion limit
        key, ready = stack.pop()
        if key in done:
            continue
        lines, parents = versions[key]
        known = [p for p in parents if p in versions]
        if not ready:
            stack.append((key, True))
            stack.extend((p, False) for p in known if p not in done)
            continue
        owners: list[Hashable | None] = [None] * len(lines)
        for p in known:
            p_lines = versions[p][0]
            for a, b, size in matching_blocks(p_lines, lines):
                for i in range(size):
                    if owners[b + i] is None:
                        owners[b + i] = done[p][a + i]
        done[key] = [key if o is None else o for o in owners]
    return done[target]


def blame_walk(
    target: int,
    lines_of: Callable[[int], Sequence[str]],
    parents_of: Callable[[int], Sequence[int]],
) -> list[int]:
    """``blame`` reading versions on demand and only as far back as a line still needs.

    Keys are commit numbers (a parent version's number is smaller than its
    child's), so versions are visited newest first with a heap and every
    child of a version is done before it. A version hands the lines it
    shares with a parent (first parent first, the same matching as
    ``blame``) down to that parent and owns the rest; the walk stops when no
    line is left to hand down, instead of reading every version of the file.
    Gives exactly ``blame``'s answer.
    """
    read: dict[int, Sequence[str]] = {}  # versions still to be handed lines; each is read once

    def version(key: int) -> Sequence[str]:
        if key not in read:
            read[key] = lines_of(key)
        return read[key]

    owners: list[int] = [target] * len(version(target))
    pending: dict[int, list[tuple[int, int]]] = {target: [(i, i) for i in range(len(owners))]}
    heap = [-target]
    while heap:
        key = -heapq.heappop(heap)
        left = sorted(pending.pop(key))
        lines = read.pop(key)  # every child of this version is done: nothing reads it again
        parents = parents_of(key)
        for parent in parents:
            if not left:
                break
            passed, left = _hand_down(left, matching_blocks(version(parent), lines))
            if passed:
                if parent not in pending:
                    pending[parent] = []
                    heapq.heappush(heap, -parent)
                pending[parent] += passed
        for _i, t in left:
            owners[t] = key
        for parent in parents:
            if parent not in pending:  # handed nothing (yet): keep memory to the versions in play
                read.pop(parent, None)
    return owners


def _hand_down(
    left: list[tuple[int, int]], blocks: list[tuple[int, int, int]]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Split ``left`` ((line here, target line), sorted) into the lines a parent
    shares, renumbered as the parent's, and the rest: one pass over both, in order."""
    passed: list[tuple[int, int]] = []
    rest: list[tuple[int, int]] = []
    k = 0
    for i, t in left:
        while k < len(blocks) and blocks[k][1] + blocks[k][2] <= i:
            k += 1
        if k < len(blocks) and blocks[k][1] <= i:
            a, b, _size = blocks[k]
            passed.append((a + i - b, t))
        else:
            rest.append((i, t))
    return passed, rest
