"""Append runs shared by branches: two branches appending the same bytes to the same
version make the same piece (its id names base and bytes); each branch must go on
reading and appending to it. Found by test_history_properties' export property;
on 2a807bc the next append on the second branch left the file unreadable."""

from __future__ import annotations

import pytest

from memrev import VersionedStore

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("later", [["alpha\n"], ["alpha\n", "charlie\n"], []])
async def test_the_same_append_on_two_branches_then_more(tmp_path, later):
    async with VersionedStore(tmp_path, author="t") as main:
        await main.write("/a.md", "alpha\nbravo\n")
        await main.append("/a.md", "alpha\n")
        exp = await main.branch("exp")
        try:
            await exp.append("/a.md", "bravo\n")
            await main.append("/a.md", "bravo\n")
            for text in later:
                await main.append("/a.md", text)
            await exp.append("/a.md", "delta\n")
            base = "alpha\nbravo\nalpha\nbravo\n"
            assert await main.read("/a.md") == base + "".join(later)
            assert await exp.read("/a.md") == base + "delta\n"
            assert await main.read_range("/a.md", len(base)) == "".join(later)
            assert await main.fsck() == []
        finally:
            exp.close()
