"""PostgreSQL: the commit's statements are prepared statements, and stay usable after
a statement of a pipeline failed (a stale guessed head refused by the server).

psycopg queues a statement's preparation in the pipeline with its first prepared use;
when an earlier statement of that pipeline fails, the server skips the preparation, and
psycopg may still take the statement for prepared ("prepared statement _pg3_1 does not
exist" on its next use). The backend then resets psycopg's prepared statements with the
rollback (PostgresBackend._rollback).
"""

from __future__ import annotations

import pytest

from memrev.backends.postgres import _COMMIT_WITH_OBJECTS, _LOCK_READ, PostgresBackend
from memrev.repo.ops import Append, Write
from memrev.repo.repository import CommitRequest, Repository


@pytest.mark.slow  # 0.5-0.6 s in the quick loop: about 240 commits on the server
def test_commits_go_on_after_a_pipeline_failed_while_preparing(pg_url):
    mine, other = Repository(PostgresBackend(pg_url)), Repository(PostgresBackend(pg_url))
    try:
        other.commit("main", [Write("/o", b"0")], author="other")
        mine.head("main")  # what this handle saw: its next commit guesses it
        for i in range(40):
            other.commit("main", [Write("/o", f"v{i}".encode())], author="other")  # the guess goes stale
            mine.backend._stale_streak.clear()  # guess every time (no backing off to locking)
            mine.commit("main", [Write(f"/m{i % 3}", f"{i}\n".encode() * 30)], author="me")
            mine.commit("main", [Append(f"/log{i % 2}", f"{i}\n".encode())], author="me")
            results = mine.commit_group(
                [CommitRequest("main", [Write(f"/g{k}", f"{i}:{k}".encode())], author="me") for k in range(3)]
            )
            assert not any(isinstance(r, Exception) for r in results), results
        prepared = mine.backend._hot_prepared
        assert _COMMIT_WITH_OBJECTS in prepared and _LOCK_READ in prepared  # the commits did use prepared statements
        _assert_prepared_exist(mine.backend)
        log = mine.log(mine.head("main"))
        assert len(log) == 1 + 40 + 40 * 5
        assert mine.entry_at(mine.head("main"), "/g2") is not None
    finally:
        mine.backend.close()
        other.backend.close()


def test_a_pipeline_that_fails_while_preparing_resets_the_prepared_statements(pg_url):
    """The commit's statements are prepared on their second use. Here that use is a
    commit whose guessed head went stale: the first statement fails, the server skips
    the preparations queued after it, and the rollback resets psycopg's and the server's
    prepared statements (one round trip more, only then). Every statement psycopg then
    takes for prepared exists on the server, and the commits go on."""
    mine, other = Repository(PostgresBackend(pg_url)), Repository(PostgresBackend(pg_url))
    try:
        other.commit("main", [Write("/o", b"0")], author="other")
        mine.head("main")
        mine.commit("main", [Write("/m", b"first")], author="me")  # each statement sent once
        backend = mine.backend
        assert not backend._hot_prepared
        other.commit("main", [Write("/o", b"moved")], author="other")
        mine.commit("main", [Write("/m", b"second")], author="me")  # refused, then locked
        assert backend._flush_failures == 1 and not backend._unsure_prepared
        for i in range(20):
            mine.commit("main", [Write("/m", f"v{i}".encode())], author="me")
        assert _COMMIT_WITH_OBJECTS in backend._hot_prepared
        _assert_prepared_exist(backend)
        assert len(mine.log(mine.head("main"))) == 2 + 2 + 20
    finally:
        mine.backend.close()
        other.backend.close()


def _assert_prepared_exist(backend: PostgresBackend) -> None:
    """What psycopg takes for prepared on the connection is there on the server."""
    conn = backend._conn
    believed = set(conn._prepared._names.values())  # psycopg's own record (no public reader)
    on_server = {row[0].encode() for row in conn.execute("SELECT name FROM pg_prepared_statements", prepare=False)}
    assert believed <= on_server, (believed, on_server)
