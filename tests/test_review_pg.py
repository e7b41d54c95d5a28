"""Adversarial review of the optimistic PostgreSQL commit (issue 14, review R2).

Each test is a defect found in review (it failed before its fix) or an attack
that found the commit path sound. Server-side failures are made real with a
trigger that raises the error a full disk would (SQLSTATE 53100) for one path.
"""

from __future__ import annotations

import psycopg

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
