"""Turn the API's answers into rows a template draws: diff hunks with word
highlights, the lanes of the commit graph, visible control characters.

Pure functions over plain values; all escaping is left to the templates
(Jinja2 autoescape), so nothing here builds HTML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..core.textdiff import grouped_opcodes, word_diff

Segments = list[tuple[str, str]]  # (tag, text): tag "equal", "delete" or "insert"


@dataclass(slots=True)
class Line:
    kind: str  # "ctx", "del", "add"
    old_no: int | None
    new_no: int | None
    segments: Segments


@dataclass(slots=True)
class Hunk:
    header: str
    lines: list[Line] = field(default_factory=list)

    def split_rows(self) -> list[tuple[Line | None, Line | None]]:
        """Side by side: context on both sides, each deleted line beside the added line it became."""
        rows: list[tuple[Line | None, Line | None]] = []
        dels: list[Line] = []
        adds: list[Line] = []

        def flush() -> None:
            for i in range(max(len(dels), len(adds))):
                rows.append((dels[i] if i < len(dels) else None, adds[i] if i < len(adds) else None))
            dels.clear()
            adds.clear()

        for line in self.lines:
            if line.kind == "ctx":
                flush()
                rows.append((line, line))
            else:
                (dels if line.kind == "del" else adds).append(line)
        flush()
        return rows


def hunks(old: str | None, new: str | None, context: int = 3) -> list[Hunk]:
    """The hunks between two versions; a replaced line paired with its successor gets word highlights."""
    a, b = (old or "").splitlines(), (new or "").splitlines()
    out = []
    for group in grouped_opcodes(a, b, context):
        first, last = group[0], group[-1]
        hunk = Hunk(f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                hunk.lines += [Line("ctx", i + 1, j + 1, [("equal", a[i])]) for i, j in zip(range(i1, i2), range(j1, j2))]
                continue
            hunk.lines += _changed(a, b, i1, i2, j1, j2)
        out.append(hunk)
    return out


def _changed(a: list[str], b: list[str], i1: int, i2: int, j1: int, j2: int) -> list[Line]:
    """Deleted lines then added lines; the k-th deleted and k-th added line are diffed word by word."""
    pairs = min(i2 - i1, j2 - j1)
    dels = [Line("del", i + 1, None, [("delete", a[i])]) for i in range(i1, i2)]
    adds = [Line("add", None, j + 1, [("insert", b[j])]) for j in range(j1, j2)]
    for k in range(pairs):
        words = word_diff(a[i1 + k], b[j1 + k])
        dels[k].segments = [(tag, text) for tag, text in words if tag != "insert"]
        adds[k].segments = [(tag, text) for tag, text in words if tag != "delete"]
    return dels + adds


# C0 controls (but tab and newline), DEL and C1 controls are drawn as visible symbols: a
# stored value must never reach the page as an invisible or terminal-active byte.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: object) -> str:
    """``text`` with control characters shown as ``␀``-style symbols or ``\\x..``."""
    def show(m: re.Match[str]) -> str:
        code = ord(m.group(0))
        if code < 0x20:
            return chr(0x2400 + code)
        return "\u2421" if code == 0x7F else f"\\x{code:02x}"

    return _CONTROL.sub(show, str(text))


@dataclass(slots=True)
class GraphRow:
    commit: object  # repo.Commit
    lane: int
    lanes_before: list[str]
    edges: list[tuple[int, int]]  # (lane in this row, lane in the next row)


def graph_rows(commits: list) -> tuple[list[GraphRow], int]:
    """Lanes for a newest-first list of commits (as ``memrev log --graph`` draws them) and the width in lanes.

    Each lane waits for one commit id; a commit takes the lane waiting for it
    (or a new one), and hands it to its first parent, opening lanes for other
    parents nobody waits for yet. Edges join each lane to where its id sits
    in the next row.
    """
    lanes: list[str] = []
    rows = []
    width = 1
    for c in commits:
        if c.id not in lanes:
            lanes.append(c.id)
        me = lanes.index(c.id)
        before = list(lanes)
        after = lanes[:me] + [p for p in c.parents if p not in lanes] + lanes[me + 1 :]
        after = list(dict.fromkeys(after))  # a lane that two lines merged into appears once
        edges = [(me, after.index(p)) for p in c.parents if p in after]
        edges += [(i, after.index(x)) for i, x in enumerate(before) if i != me and x in after]
        rows.append(GraphRow(c, me, before, edges))
        lanes = after
        width = max(width, len(before), len(lanes))
    return rows, width
