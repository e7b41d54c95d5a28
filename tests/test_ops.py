"""``memrev.repo.ops``: a commit is made of typed records, and ``ANY_HEAD`` is "no condition on the head"."""

import pickle

import pytest

from memrev import errors
from memrev.backends import open_backend
from memrev.repo.ops import ANY_HEAD, AnyHead, Append, Delete, SetEntry, Write, set_or_delete, write_or_delete
from memrev.repo.repository import Repository


@pytest.fixture
def repo(tmp_path):
    r = Repository(open_backend(str(tmp_path / "store.db")))
    yield r
    r.backend.close()


def test_each_record_makes_its_change(repo):
    first = repo.commit("main", [Write("/a.md", b"one\n"), Append("/log", b"x")], author="t")
    assert first.offsets == [0]
    entry = repo.entry_at(first.id, "/a.md")
    second = repo.commit(
        "main", [Append("/log", b"y", offset=1), SetEntry("/copy.md", entry.oid, entry.size), Delete("/a.md")], author="t"
    )
    assert second.offsets == [1]
    head = repo.head("main")
    assert repo.content(repo.entry_at(head, "/log").oid) == b"xy"
    assert repo.content(repo.entry_at(head, "/copy.md").oid) == b"one\n"
    assert repo.entry_at(head, "/a.md") is None


def test_default_messages_name_the_kinds_as_before(repo):
    repo.commit("main", [Write("/a.md", b"1")], author="t")
    repo.commit("main", [Append("/a.md", b"2"), Write("/b.md", b"3")], author="t")
    head = repo.commit_info(repo.head("main"))
    assert head.message == "append+write 2 paths"
    first = repo.commit_info(repo.commit_data(repo.head("main"))[1].parents[0])
    assert first.message == "write /a.md"


def test_a_tuple_is_refused_before_anything_is_written(repo):
    repo.commit("main", [Write("/a.md", b"1")], author="t")
    head = repo.head("main")
    with pytest.raises(TypeError, match="memrev.repo.ops records"):
        repo.commit("main", [Write("/b.md", b"2"), ("write", "/c.md", b"3")], author="t")
    assert repo.head("main") == head
    assert repo.entry_at(head, "/b.md") is None


def test_an_append_at_a_stale_offset_writes_nothing(repo):
    repo.commit("main", [Append("/log", b"abc")], author="t")
    head = repo.head("main")
    with pytest.raises(errors.ConcurrentUpdate):
        repo.commit("main", [Write("/other", b"x"), Append("/log", b"d", offset=2)], author="t")
    assert repo.head("main") == head


def test_expect_head_any_none_or_a_commit(repo):
    # ANY_HEAD (the default): commits whatever the head is.
    made = repo.commit("main", [Write("/a.md", b"1")], author="t", expect_head=ANY_HEAD)
    # None: only onto a branch with no commit yet.
    with pytest.raises(errors.ConcurrentUpdate):
        repo.commit("main", [Write("/a.md", b"2")], author="t", expect_head=None)
    assert repo.commit("fresh", [Write("/a.md", b"2")], author="t", expect_head=None).id is not None
    # A commit id: only while the branch is still there.
    assert repo.commit("main", [Write("/a.md", b"3")], author="t", expect_head=made.id).id is not None
    with pytest.raises(errors.ConcurrentUpdate):
        repo.commit("main", [Write("/a.md", b"4")], author="t", expect_head=made.id)


def test_any_head_is_one_value_that_survives_pickling():
    assert repr(ANY_HEAD) == "ANY_HEAD"
    assert pickle.loads(pickle.dumps(ANY_HEAD)) is ANY_HEAD
    assert isinstance(ANY_HEAD, AnyHead)
    assert not isinstance(False, AnyHead)


def test_the_old_false_sentinel_is_refused(repo):
    """``expect_head=False`` meant "any head"; now it is refused, not taken as a head that never matches."""
    with pytest.raises(TypeError, match="ANY_HEAD"):
        repo.commit("main", [Write("/a.md", b"1")], author="t", expect_head=False)
    assert repo.head("main") is None


@pytest.mark.anyio
async def test_a_transaction_refuses_a_bool_expect_head(tmp_path):
    from memrev import Store

    async with Store(tmp_path / "s") as store:
        with pytest.raises(TypeError, match="ANY_HEAD"):
            async with store.transaction(expect_head=False):
                await store.write("/a.md", "1")
        assert await store.head() is None


def test_records_are_frozen_values():
    assert Write("/a", b"1") == Write("/a", b"1")
    with pytest.raises(AttributeError):
        Write("/a", b"1").path = "/b"  # type: ignore[misc]
    assert write_or_delete("/a", None) == Delete("/a")
    assert write_or_delete("/a", b"x") == Write("/a", b"x")

    class Entry:
        oid, size = b"\x01" * 20, 3

    assert set_or_delete("/a", Entry()) == SetEntry("/a", b"\x01" * 20, 3)
    assert set_or_delete("/a", None) == Delete("/a")
