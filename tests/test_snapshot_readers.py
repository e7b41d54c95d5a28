"""Per-path readers answer for the revision asked, while another process commits (issue 20 item 25).

A per-path walk starts from the head index when the revision asked is the branch head.
The head check and the index row were two reads: a commit by another handle between
them gave ``log(path, rev=ID)`` the row of the newer commit, so the answer named a
commit after ``ID`` (43 of 15,218 answers in a race run). Both are now read in one
snapshot of the store.

Deterministic, not a race loop: the reader's first step (its head check) is hooked so
that, once, another handle commits to the same path right after it. The answer for
``rev=ID`` must equal what a fresh handle answers for ``ID`` afterwards. On SQLite and
on a real PostgreSQL server (``memrev.testing.fixtures``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from memrev import VersionedStore
from memrev.repo.ops import Write

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])  # slow: ~0.9 s each
def location(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "store")
    return request.getfixturevalue("pg_url")


Reader = Callable[[VersionedStore, str], Awaitable[Any]]

# Each reader, and the path whose walk start is hooked: a folder's walk starts at its
# directory key (docs/design.md, "Directory keys").
READERS: dict[str, tuple[Reader, str]] = {
    "log": (lambda s, rev: s.log("/d/f.md", rev=rev), "/d/f.md"),
    "log_limit": (lambda s, rev: s.log("/d/f.md", rev=rev, limit=2), "/d/f.md"),
    "log_folder": (lambda s, rev: s.log("/d", rev=rev), "/d/"),
    "log_contains": (lambda s, rev: s.log("/d/f.md", rev=rev, contains="two"), "/d/f.md"),
    "log_matching": (lambda s, rev: s.log("/d/f.md", rev=rev, matching="^t"), "/d/f.md"),
    "log_page": (lambda s, rev: s.log_page("/d/f.md", rev=rev, limit=10), "/d/f.md"),
    "log_page_folder": (lambda s, rev: s.log_page("/d", rev=rev, limit=10), "/d/"),
    "find_text": (lambda s, rev: s.find_text("/d/f.md", "two", rev=rev), "/d/f.md"),
    "blame": (lambda s, rev: s.blame("/d/f.md", rev=rev), "/d/f.md"),
}


@pytest.mark.parametrize("reader", sorted(READERS))
async def test_a_commit_between_the_head_check_and_the_index_read_is_not_in_the_answer(location, reader):
    read, hooked = READERS[reader]
    async with VersionedStore(location) as store, VersionedStore(location) as other:
        await store.write("/d/f.md", "one\n")
        await store.write("/d/f.md", "one\ntwo\n")
        rev = await store.head()
        assert rev is not None
        repo = store.repo
        real_head, real_start = repo.head, repo.path_start
        asking: list[str] = []
        injected: list[str] = []

        def start_of(path: str, commit: bytes, branch: str) -> int | None:
            asking.append(path)
            return real_start(path, commit, branch)

        def head_then_commit(branch: str) -> bytes | None:
            seen = real_head(branch)
            if asking and asking[-1] == hooked and not injected:
                # once, right after the walk start's head check: another handle commits to the path
                done = other.repo.commit(
                    branch, [Write("/d/f.md", b"one\ntwo\nthree two\n")], author="other", message="newer"
                )
                assert done.id is not None
                injected.append(done.id.hex())
            return seen

        repo.head, repo.path_start = head_then_commit, start_of  # type: ignore[method-assign]
        try:
            answer = await read(store, rev)
        finally:
            del repo.head, repo.path_start
        assert injected, "the hook ran"
        assert await store.head() == injected[0] != rev
        async with VersionedStore(location) as fresh:
            expected = await read(fresh, rev)
        assert answer == expected
