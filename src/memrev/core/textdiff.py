"""Line diffs: unified text and matching blocks, on patiencediff (linear space).

``difflib`` spends ~80 µs in Python loops on a 50-line file; rapidfuzz's
``Indel`` (longest common subsequence) opcodes take ~4 µs. The output format
is difflib's: same hunk grouping, same ``@@`` ranges, ``-`` lines of a
replaced region before its ``+`` lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def opcodes(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib-style opcodes; adjacent deletes and inserts merge into one ``replace``."""
    # patiencediff (C): linear space, near-linear time on text; rapidfuzz's
    # LCS kept an n×m bit matrix (200k lines: MemoryError). Imported on first use.
    from patiencediff import PatienceSequenceMatcher

    out: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in PatienceSequenceMatcher(None, a, b).get_opcodes():
        if tag != "equal" and out and out[-1][0] != "equal":
            _, pi1, _, pj1, _ = out[-1]
            out[-1] = ("replace", pi1, i2, pj1, j2)
            continue
        out.append((tag, i1, i2, j1, j2))
    return [("replace" if t != "equal" and i2 > i1 and j2 > j1 else t, i1, i2, j1, j2) for t, i1, i2, j1, j2 in out]


def matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int, int]]:
    """``(i, j, n)``: ``a[i:i+n] == b[j:j+n]``, in order."""
    return [(i1, j1, i2 - i1) for tag, i1, i2, j1, j2 in opcodes(a, b) if tag == "equal"]


def _grouped(codes: list[tuple[str, int, int, int, int]], n: int) -> list[list[tuple[str, int, int, int, int]]]:
    """difflib's hunk grouping over opcodes computed elsewhere."""
    import difflib  # with the first diff, not at import: a command that prints no diff pays nothing (issue 26)

    matcher: difflib.SequenceMatcher[str] = difflib.SequenceMatcher(None, [], [])
    matcher.get_opcodes = lambda: list(codes)  # type: ignore[method-assign, arg-type]
    return [list(group) for group in matcher.get_grouped_opcodes(n)]


def _range(start: int, length: int) -> str:
    beginning = start + 1
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def unified(a: Sequence[str], b: Sequence[str], fromfile: str, tofile: str, n: int = 3) -> list[str]:
    """The lines of a unified diff (each ending as its source line did), like ``difflib.unified_diff``."""
    codes = opcodes(a, b)
    if all(tag == "equal" for tag, *_ in codes):
        return []
    out = [f"--- {fromfile}\n", f"+++ {tofile}\n"]
    for group in _grouped(codes, n):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2] - first[1])} +{_range(first[3], last[4] - first[3])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in a[i1:i2])
                continue
            out.extend("-" + line for line in a[i1:i2])
            out.extend("+" + line for line in b[j1:j2])
    return out


# The bound of a line diff, the same for store.diff, the CLI and the viewer: two versions
# of a file with more than DIFF_LINES lines or DIFF_CHARS characters together are not
# diffed line by line (a 16 MiB file took 1.4 s and 340 MB; writes allow 256 MiB).
DIFF_LINES = 20_000
DIFF_CHARS = 4_000_000


def too_large_to_diff(old: str | None, new: str | None) -> tuple[int, int] | None:
    """``(lines, characters)`` of the two versions together when they are over the bound, else ``None``."""
    chars = len(old or "") + len(new or "")
    lines = (old or "").count("\n") + (new or "").count("\n")
    return (lines, chars) if chars > DIFF_CHARS or lines > DIFF_LINES else None


# Word diffs: the middle that differs after trimming is matched with rapidfuzz's
# bit-parallel LCS; past this many token pairs it is shown as one replacement
# (a rewritten paragraph reads as well that way, and the cost stays bounded).
WORD_DIFF_MAX_PAIRS = 25_000_000
_WORD = re.compile(r"\s+|\S+")


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def word_diff(old: str, new: str) -> list[tuple[str, str]]:
    """``old`` -> ``new`` as ``(tag, text)`` segments; tag is ``equal``, ``delete`` or ``insert``.

    Words and runs of whitespace are the tokens. The common prefix and
    suffix are trimmed first (a 1 MB line with one word changed leaves one
    token per side), so the LCS only sees the part that differs.
    """
    a, b = _WORD.findall(old), _WORD.findall(new)
    head = _common_prefix(a, b)
    tail = _common_prefix(a[head:][::-1], b[head:][::-1])
    mid_a, mid_b = a[head : len(a) - tail], b[head : len(b) - tail]
    out: list[tuple[str, str]] = []
    _emit(out, "equal", a[:head])
    if len(mid_a) * len(mid_b) > WORD_DIFF_MAX_PAIRS:
        _emit(out, "delete", mid_a)
        _emit(out, "insert", mid_b)
    else:
        for tag, i1, i2, j1, j2 in opcodes(mid_a, mid_b):
            if tag == "equal":
                _emit(out, "equal", mid_a[i1:i2])
                continue
            _emit(out, "delete", mid_a[i1:i2])
            _emit(out, "insert", mid_b[j1:j2])
    _emit(out, "equal", a[len(a) - tail :])
    return out


def _emit(out: list[tuple[str, str]], tag: str, tokens: Sequence[str]) -> None:
    if not tokens:
        return
    if out and out[-1][0] == tag:
        out[-1] = (tag, out[-1][1] + "".join(tokens))
    else:
        out.append((tag, "".join(tokens)))


def grouped_opcodes(a: Sequence[str], b: Sequence[str], n: int = 3) -> list[list[tuple[str, int, int, int, int]]]:
    """The hunks of a unified diff as opcode groups with ``n`` lines of context (``[]``: equal)."""
    codes = opcodes(a, b)
    if all(tag == "equal" for tag, *_ in codes):
        return []
    return _grouped(codes, n)


def word_diff_hunks(old: str, new: str, n: int = 3) -> list[tuple[str, list[tuple[str, str]]]]:
    """Only the changed parts of ``old`` -> ``new``, as word diffs: ``(header, segments)`` per hunk.

    The hunks are the unified diff's (``n`` lines of context, the same
    ``@@ -l,s +l,s @@`` header); each hunk's old and new lines are word-diffed
    as ``word_diff`` does, so a one-word change in a long file shows a few
    lines, as ``git diff --word-diff`` does, not the whole file.
    """
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out = []
    for group in grouped_opcodes(a, b, n):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        header = f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@"
        out.append((header, word_diff("".join(a[i1:i2]), "".join(b[j1:j2]))))
    return out
