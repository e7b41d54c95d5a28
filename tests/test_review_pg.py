"""Adversarial review of the optimistic PostgreSQL commit (issue 14, review R2).

Each test is a defect found in review (it failed before its fix) or an attack
that found the commit path sound. Server-side failures are made real with a
trigger that raises the error a full disk would (SQLSTATE 53100) for one path.
"""

from __future__ import annotations

import psycopg
import pytest

from memrev import errors
from memrev.backends.postgres import PostgresBackend
from memrev.ops import Write
from memrev.repo import CommitRequest, Repository

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
