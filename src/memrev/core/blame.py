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

from collections.abc import Hashable, Mapping, Sequence

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
