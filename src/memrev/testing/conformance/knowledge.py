"""The KnowledgeStore semantics, against ag2's ``MemoryKnowledgeStore`` (literal prefixes, random sequences)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ...versioned_store import VersionedStore
from .base import ConformanceBase, fresh_branch
from .oracle import OraclePair

EXAMPLES = int(os.environ.get("MEMREV_CONFORMANCE_EXAMPLES", "20"))

# Few segments so files, directories and prefixes collide, with the characters
# that break naive backends: LIKE wildcards, case, "a-"/"a." sorting before
# "a/", multi-byte UTF-8.
_SEGMENTS = ["a", "a", "a", "b", "ab", "a_", "A", "%", "a-", "a.b", "é"]


@st.composite
def _path(draw: st.DrawFn, allow_root: bool = False) -> str:
    if allow_root and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["", "/", "//"]))
    segs = draw(st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=3))
    return draw(st.sampled_from(["/", "/", "", "//"])) + "/".join(segs) + draw(st.sampled_from(["", "", "/"]))


_content = st.one_of(
    st.sampled_from(["", "x", "é", "日本", "😀", "line\n"]),
    st.text(alphabet=st.sampled_from(["x", "\n", "é", "日", "😀"]), max_size=5),
)

_op = st.one_of(
    st.tuples(st.just("write"), _path(), _content),
    st.tuples(st.just("write"), _path(), _content),
    st.tuples(st.just("append"), _path(), _content),
    st.tuples(st.just("append"), _path(), _content),
    st.tuples(st.just("delete"), _path(allow_root=True)),
    st.tuples(st.just("read"), _path(allow_root=True)),
    st.tuples(st.just("list"), _path(allow_root=True)),
    st.tuples(st.just("exists"), _path(allow_root=True)),
    st.tuples(st.just("read_range"), _path(), st.integers(-2, 12), st.one_of(st.none(), st.integers(-2, 14))),
    st.tuples(st.just("subscribe"), _path(allow_root=True)),
    st.tuples(st.just("unsubscribe"), st.integers(0, 5)),
)


class KnowledgeStoreContracts(ConformanceBase):
    """``test_knowledge_*``: the KnowledgeStore contract, differential against ag2 (a mixin of ``BackendConformance``)."""

    @pytest.mark.anyio
    async def test_knowledge_literal_prefixes_files_and_directories_match_oracle(self, memrev_location: str):
        async with VersionedStore(memrev_location) as store:
            pair = OraclePair(store)
            ops: list[tuple] = [("subscribe", p) for p in ("/a_", "/a%", "/A", "/a", "/")]
            files = ["/ab/x", "/a_/y", "/AB/z", "/a%/w", "/a/v", "/a/b/c", "/aXb/u", "/a", "/a-b", "/a.b", "/é/1"]
            ops += [("write", f, f) for f in files]
            for path in ["/", "/a_", "/a%", "/AB", "/ab", "/a", "/A", "/a%b", "/é", "/a-", "/a/b", "/a-b"]:
                ops += [("list", path), ("exists", path), ("read", path)]
            ops += [
                ("append", "/a_/y", "2é"),
                ("append", "/new.log", "one\n"),
                ("append", "/new.log", "日本😀\n"),
                ("read_range", "/new.log", 4, None),
                ("read_range", "/new.log", 5, 7),  # cuts a character: UnicodeDecodeError on both
                ("write", "/a_/y", "2é"),  # identical content
                ("delete", "/a_"), ("delete", "/A"), ("delete", "/a"), ("delete", "/missing"),
                ("list", "/"), ("exists", "/a-b"), ("delete", "/"), ("exists", "/"), ("list", "/"),
            ]
            for op in ops:
                await pair.run(op)
            await pair.compare_trees()
            await pair.close()
            assert await store.fsck() == []

    @pytest.mark.anyio
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
    @given(ops=st.lists(_op, min_size=1, max_size=25))
    async def test_knowledge_random_sequences_match_oracle(self, memrev_location: str, ops: list[tuple]):
        # A branch with no commits is an empty store: one per example.
        async with VersionedStore(memrev_location, branch=fresh_branch("ex")) as store:
            pair = OraclePair(store)
            for op in ops:
                await pair.run(op)
            await pair.compare_trees()
            await pair.close()

