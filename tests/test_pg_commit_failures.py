"""Adversarial review of the optimistic PostgreSQL commit (issue 14, review R2).

Each test is a defect found in review (it failed before its fix) or an attack
that found the commit path sound. Server-side failures are made real with a
trigger that raises the error a full disk would (SQLSTATE 53100) for one path.
"""

from __future__ import annotations

import psycopg
import pytest

from helpers import RoundTripRelay
from memrev import errors
from memrev.backends.postgres import PostgresBackend
from memrev.repo.ops import Write
from memrev.repo.repository import CommitRequest, Repository

_FAIL_ON_PATH = """
CREATE FUNCTION review_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'review: no space left for %', NEW.path USING ERRCODE = '53100';
END $$;
CREATE TRIGGER review_disk_full BEFORE INSERT ON changes FOR EACH ROW
    WHEN (NEW.path = '/boom') EXECUTE FUNCTION review_disk_full();
"""


def _fail_writes_of_boom(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_FAIL_ON_PATH)


def test_a_group_member_failing_at_the_server_does_not_become_the_next_members_parent(pg_url):
    """Request 1 of a group fails when its queued statements reach the server (disk full
    on its change row): its savepoint is rolled back. Request 2, on the same branch, must
    be built on the head before request 1, not on request 1's rolled-back commit (which
    the handle had recorded as the branch's new head when it queued it)."""
    repo = Repository(PostgresBackend(pg_url))
    try:
        base = repo.commit("main", [Write("/a", b"0")], author="me").id
        _fail_writes_of_boom(pg_url)
        results = repo.commit_group(
            [
                CommitRequest("main", [Write("/boom", b"1")], author="me"),
                CommitRequest("main", [Write("/fine", b"2")], author="me"),
            ]
        )
        assert isinstance(results[0], errors.StoreFull), results
        assert not isinstance(results[1], Exception), results
        assert results[1].parent == base
        assert repo.head("main") == results[1].id
        assert repo.backend.get_commit(results[1].id) is not None
        # and the handle's next commit is not refused for guessing the rolled-back commit
        after = repo.commit("main", [Write("/after", b"3")], author="me")
        assert after.parent == results[1].id
    finally:
        repo.backend.close()


def test_a_group_whose_branch_stays_locked_past_lock_timeout_is_retried_not_a_raw_error(pg_url, monkeypatch):
    """Another session holds the branch's ref row past ``lock_timeout`` while a group
    commit starts: the group's first pipeline (BEGIN, the guessed ref's lock, the first
    request's SAVEPOINT ...) fails before the savepoint exists. That is a lock timeout
    like a single commit's (``TransientConflict``, retried with back-off), so once the
    other session lets go every request commits, not a raw psycopg error from rolling
    back to a savepoint that was never made."""
    import threading

    from memrev.backends import postgres

    monkeypatch.setitem(postgres._SESSION, "lock_timeout", "150ms")
    repo = Repository(PostgresBackend(pg_url))
    blocker = psycopg.connect(pg_url)
    try:
        base = repo.commit("main", [Write("/a", b"0")], author="me").id
        blocker.execute("SELECT target FROM refs WHERE name = 'refs/heads/main' FOR UPDATE")
        release = threading.Timer(0.4, blocker.rollback)
        release.start()
        results = repo.commit_group(
            [CommitRequest("main", [Write(f"/g{i}", b"x")], author="me") for i in range(2)]
        )
        release.join()
        assert not any(isinstance(r, Exception) for r in results), results
        assert results[0].parent == base and results[1].parent == results[0].id
        assert repo.head("main") == results[1].id
    finally:
        blocker.close()
        repo.backend.close()


def test_a_group_member_whose_guessed_branch_stays_locked_does_not_lose_the_members_before_it(
    pg_url, monkeypatch
):
    """Request 1 (branch main) commits and is settled; request 2 guesses branch side,
    whose ref row another session holds past ``lock_timeout``. Request 2's guessed-ref
    lock goes in its pipeline before its SAVEPOINT, so the lock timeout aborts the
    transaction with no savepoint to roll back to. Request 1 must not then be reported
    committed while COMMIT of the aborted transaction silently rolls it back: the group
    is retried as a whole, and once the other session lets go both requests land."""
    import threading

    from memrev.backends import postgres

    monkeypatch.setitem(postgres._SESSION, "lock_timeout", "150ms")
    repo = Repository(PostgresBackend(pg_url))
    blocker = psycopg.connect(pg_url)
    try:
        repo.commit("main", [Write("/a", b"0")], author="me")
        repo.commit("side", [Write("/s", b"0")], author="me")
        blocker.execute("SELECT target FROM refs WHERE name = 'refs/heads/side' FOR UPDATE")
        release = threading.Timer(0.4, blocker.rollback)
        release.start()
        try:
            results = repo.commit_group(
                [
                    CommitRequest("main", [Write("/m1", b"1")], author="me"),
                    CommitRequest("side", [Write("/s1", b"1")], author="me"),
                ]
            )
        finally:
            release.join()
        for r in results:
            if not isinstance(r, Exception):  # acknowledged: it must be there
                assert repo.backend.get_commit(r.id) is not None, results
        assert not any(isinstance(r, Exception) for r in results), results
        assert repo.head("main") == results[0].id and repo.head("side") == results[1].id
    finally:
        blocker.close()
        repo.backend.close()


def test_commit_of_a_transaction_the_server_aborted_is_an_error_not_a_silent_rollback(pg_url):
    """A statement of the transaction failed and the caller's block went on (it caught
    the error): the server has aborted the transaction, and ``COMMIT`` there answers
    ``ROLLBACK`` without an error. Leaving ``write()`` must then raise, never return as
    if the block's writes were committed."""
    backend = PostgresBackend(pg_url)
    try:
        with pytest.raises(errors.MemrevError):
            with backend.write():
                assert backend.set_ref_if_equals("refs/heads/t", None, b"\x01" * 20)
                with pytest.raises(psycopg.Error):
                    backend._one("SELECT 1 / 0", ())
        assert backend.get_ref("refs/heads/t") is None
    finally:
        backend.close()


def test_an_append_on_a_stale_guess_returns_the_offset_where_its_bytes_landed(pg_url):
    """Attack that found the path sound: this handle last saw /log at 3 bytes; another
    handle appended 2 more. An append without an offset is computed on the stale guess,
    refused (HeadMoved) and computed again: the offset returned is 5, the bytes are
    after the other writer's, and the per-path history link is the other commit's change."""
    from memrev.repo.ops import Append

    mine, other = Repository(PostgresBackend(pg_url)), Repository(PostgresBackend(pg_url))
    try:
        mine.commit("main", [Append("/log", b"abc")], author="me")
        theirs = other.commit("main", [Append("/log", b"de")], author="other")
        result = mine.commit("main", [Append("/log", b"fg")], author="me")
        assert result.offsets == [5] and result.parent == theirs.id
        assert mine.content(mine.entry_at(result.id, "/log").oid) == b"abcdefg"
        seq, theirs_seq = mine.commit_data(result.id)[0], mine.commit_data(theirs.id)[0]
        assert mine.backend.change_prev("/log", seq) == (theirs_seq, None)
    finally:
        mine.backend.close()
        other.backend.close()


def test_a_group_on_a_stale_head_with_a_member_failing_on_its_own_commits_the_others(pg_url):
    """Attack that found the path sound: the head is stale and request 1 of the group
    fails on its own (its ``expect_head`` is not the head): it alone is refused, the
    others land on the moved head, each after the one before."""
    mine, other = Repository(PostgresBackend(pg_url)), Repository(PostgresBackend(pg_url))
    try:
        old = mine.commit("main", [Write("/a", b"0")], author="me").id
        moved = other.commit("main", [Write("/b", b"1")], author="other").id
        results = mine.commit_group(
            [
                CommitRequest("main", [Write("/x", b"x")], author="me"),
                CommitRequest("main", [Write("/y", b"y")], author="me", expect_head=old),
                CommitRequest("main", [Write("/z", b"z")], author="me"),
            ]
        )
        assert isinstance(results[1], errors.ConcurrentUpdate), results
        assert results[0].parent == moved and results[2].parent == results[0].id
        assert mine.head("main") == results[2].id
        assert mine.entry_at(results[2].id, "/y") is None
    finally:
        mine.backend.close()
        other.backend.close()


def test_a_commit_whose_answer_is_lost_is_never_acknowledged_nor_committed_twice(pg_url):
    """The connection drops after the pipeline holding the commit and COMMIT was sent,
    before the answer came: the caller gets an error saying the outcome is unknown (not
    a result, and not a HeadMoved that would compute and commit it again), and the
    handle's next commit builds on whatever the branch really holds."""
    relay = RoundTripRelay(pg_url)
    repo = Repository(PostgresBackend(relay.url))
    try:
        base = repo.commit("main", [Write("/a", b"0")], author="me").id
        relay.armed = True
        with pytest.raises(errors.MemrevError) as caught:
            repo.commit("main", [Write("/a", b"1")], author="me")
        assert not isinstance(caught.value, errors.TransientConflict)
        relay.armed = False
        landed = repo.head("main")
        log = repo.log(landed)
        assert len(log) == (1 if landed == base else 2)
        after = repo.commit("main", [Write("/b", b"2")], author="me")
        assert after.parent == landed
    finally:
        repo.backend.close()
        relay.close()


def test_a_server_error_at_commit_is_the_callers_typed_error_and_writes_nothing(pg_url):
    """Attack that found the path sound: the commit's queued statements fail on the
    server (disk full on its change row) in the pipeline that ends with COMMIT: the
    caller gets ``StoreFull``, the branch and its head rows are as before, and the
    handle's next commit (which locks, its guesses forgotten) lands on the old head."""
    repo = Repository(PostgresBackend(pg_url))
    try:
        base = repo.commit("main", [Write("/a", b"0")], author="me").id
        _fail_writes_of_boom(pg_url)
        with pytest.raises(errors.StoreFull):
            repo.commit("main", [Write("/boom", b"1")], author="me")
        assert repo.head("main") == base
        assert repo.backend.head_get("main", "/boom") is None
        after = repo.commit("main", [Write("/fine", b"2")], author="me")
        assert after.parent == base and repo.head("main") == after.id
    finally:
        repo.backend.close()


def test_a_server_error_at_a_guessed_refs_lock_does_not_undo_the_request_before_it(pg_url):
    """Request 1 (main) is settled; request 2 guesses branch side, and the lock of that
    guessed ref fails on the server with an error memrev names (here made a full disk by
    replacing ``memrev_lock_ref`` for that ref). The lock goes in the pipeline before the
    request's own SAVEPOINT, after request 1's savepoint (not yet released): rolling back
    "to the savepoint" then undid request 1, which was still reported committed. The
    error must be request 2's alone, and request 1 must be in the store."""
    repo = Repository(PostgresBackend(pg_url))
    try:
        repo.commit("main", [Write("/a", b"0")], author="me")
        repo.commit("side", [Write("/s", b"0")], author="me")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                """
                CREATE OR REPLACE FUNCTION memrev_lock_ref(p_ref text, p_old bytea, p_lock bigint) RETURNS void
                LANGUAGE plpgsql AS $$
                BEGIN
                    IF p_ref = 'refs/heads/side' THEN
                        RAISE EXCEPTION 'review: no space left' USING ERRCODE = '53100';
                    END IF;
                    PERFORM target FROM refs WHERE name = p_ref FOR UPDATE;
                END $$
                """
            )
        results = repo.commit_group(
            [
                CommitRequest("main", [Write("/m1", b"1")], author="me"),
                CommitRequest("side", [Write("/s1", b"1")], author="me"),
            ]
        )
        # The group fails at the server as a whole and is committed again with each request
        # in its own savepoint and round trip (Repository.commit_group), where request 2 locks
        # its branch instead of guessing: it may then commit. Either way request 1 stays.
        assert isinstance(results[1], errors.StoreFull) or repo.head("side") == results[1].id, results
        assert not isinstance(results[0], Exception), results
        assert repo.backend.get_commit(results[0].id) is not None
        assert repo.head("main") == results[0].id
    finally:
        repo.backend.close()


def test_a_server_refusal_memrev_has_no_name_for_is_a_memrev_error_and_writes_nothing(pg_url):
    """A branch name longer than a NOTIFY payload (8,000 bytes) makes the server refuse
    the commit with an error memrev does not translate (``payload string too long``):
    the caller gets a ``MemrevError``, not a raw ``psycopg`` exception, and nothing is
    written."""
    repo = Repository(PostgresBackend(pg_url))
    try:
        long_name = "b" * 9000
        with pytest.raises(errors.MemrevError, match="payload string too long"):
            repo.commit(long_name, [Write("/a", b"0")], author="me")
        assert repo.head(long_name) is None
        assert repo.commit("main", [Write("/a", b"0")], author="me").id is not None
    finally:
        repo.backend.close()
