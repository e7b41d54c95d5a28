"""History readers: bounded time and memory (issue 20, items 13 and 14)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from memrev import VersionedStore, errors
from memrev.core import textdiff


@pytest.mark.anyio
async def test_catastrophic_regex_is_linear(tmp_path):
    # `(a+)+$` backtracks exponentially in Python's `re`: 41 a's and a `!` never ended.
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/x", "start\n")
        await store.write("/x", "a" * 41 + "!\n")
        assert await store.log("/x", matching="(a+)+$") == []
        assert len(await store.log("/x", matching="(?i)A{41}!")) == 1


@pytest.mark.anyio
async def test_unsupported_regex_is_a_typed_error_naming_why(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/x", "aa\n")
        for pattern, why in ((r"(a)\1", "backreferences"), (r"a(?=b)", "lookaround")):
            with pytest.raises(errors.InvalidPattern, match=why):
                await store.log(matching=pattern)


def test_line_diff_opcodes_are_a_valid_edit_script():
    a = [f"{i % 7}\n" for i in range(500)]
    b = a[:100] + ["new\n"] + a[150:400] + a[:20]
    out: list[str] = []
    for tag, i1, i2, j1, j2 in textdiff.opcodes(a, b):
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
        out.extend(b[j1:j2])
    assert out == b


@pytest.mark.slow
def test_200k_line_diff_under_a_memory_cap():
    # The n×m LCS matrix needed >2 GB here (MemoryError); the linear-space diff fits in 1 GiB.
    code = textwrap.dedent(
        """
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from memrev.core import textdiff
        a = [f"line {i}\\n" for i in range(200_000)]
        b = [f"other {i}\\n" if i % 3 else f"line {i}\\n" for i in range(200_000)]
        out = textdiff.unified(a, b, "a", "b")
        print(sum(1 for line in out if line.startswith("+") and not line.startswith("+++")))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) == 133_333
