"""Word-level diffs stay fast on huge lines (issue 12).

``memrev diff --word-diff`` on a 1 MB line with one word changed used to run
a ``difflib.SequenceMatcher`` over ~200,000 word tokens (minutes). The core
``word_diff`` trims the common prefix and suffix first, so the LCS sees only
the tokens that differ. The bound is checked by counting what reaches a
matcher, never by timing.
"""

from __future__ import annotations

import asyncio
import difflib

from click.testing import CliRunner
from rapidfuzz.distance import Indel

from memrev import VersionedStore
from memrev.cli import main
from memrev.core import textdiff
from memrev.core.textdiff import word_diff

MAX_PAIRS_SEEN = 100  # token pairs a matcher may see for a one-word change


def huge_line(changed: str = "middle") -> str:
    words = [f"w{i}" for i in range(180_000)]
    words[90_000] = changed
    return " ".join(words)


class PairCounter:
    """Records len(a) * len(b) of every sequence pair handed to difflib or rapidfuzz's LCS."""

    def __init__(self, monkeypatch) -> None:
        self.seen: list[int] = []
        real_set_seqs, real_opcodes = difflib.SequenceMatcher.set_seqs, Indel.opcodes

        def set_seqs(matcher, a, b):
            self._check(len(a) * len(b))
            return real_set_seqs(matcher, a, b)

        def opcodes(a, b, **kw):
            self._check(len(a) * len(b))
            return real_opcodes(a, b, **kw)

        monkeypatch.setattr(difflib.SequenceMatcher, "set_seqs", set_seqs)
        monkeypatch.setattr(Indel, "opcodes", staticmethod(opcodes))

    def _check(self, pairs: int) -> None:
        self.seen.append(pairs)
        # fail at once rather than run the quadratic matcher for minutes
        assert pairs <= MAX_PAIRS_SEEN, f"a matcher was handed {pairs} token pairs"


def test_word_diff_segments():
    assert word_diff("the quick brown fox", "the slow brown fox jumps") == [
        ("equal", "the "),
        ("delete", "quick"),
        ("insert", "slow"),
        ("equal", " brown fox"),
        ("insert", " jumps"),
    ]
    assert word_diff("", "") == []
    assert word_diff("same", "same") == [("equal", "same")]


def test_word_diff_rebuilds_both_sides():
    old, new = "a b c d e f", "a x c d y f g"
    segments = word_diff(old, new)
    assert "".join(t for tag, t in segments if tag != "insert") == old
    assert "".join(t for tag, t in segments if tag != "delete") == new


def test_word_diff_of_1mb_line_is_bounded(monkeypatch):
    old, new = huge_line(), huge_line("CHANGED")
    assert len(old) > 1_000_000
    counter = PairCounter(monkeypatch)
    segments = word_diff(old, new)
    assert [tag for tag, _ in segments] == ["equal", "delete", "insert", "equal"]
    assert segments[1][1] == "middle" and segments[2][1] == "CHANGED"
    assert max(counter.seen, default=0) <= MAX_PAIRS_SEEN


def test_word_diff_beyond_the_bound_is_one_replacement(monkeypatch):
    monkeypatch.setattr(textdiff, "WORD_DIFF_MAX_PAIRS", 4)
    assert word_diff("a b c", "x b y") == [("delete", "a b c"), ("insert", "x b y")]


def test_cli_word_diff_on_1mb_line(tmp_path, monkeypatch):
    async def build():
        async with VersionedStore(tmp_path / "s") as s:
            await s.write("/big.txt", huge_line() + "\n")
            await s.write("/big.txt", huge_line("CHANGED") + "\n")

    asyncio.run(build())
    counter = PairCounter(monkeypatch)
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "s"), "diff", "--word-diff", "HEAD~1", "HEAD"])
    assert result.exit_code == 0, (result.output, result.exception)
    header, body = result.output.splitlines()[2:4]
    assert header == "@@ -1 +1 @@"
    assert " w89999 [-middle-]{+CHANGED+} w90001 " in body
    assert body.startswith("w0 w1 ") and body.endswith(" w179999")
    assert max(counter.seen) <= MAX_PAIRS_SEEN
