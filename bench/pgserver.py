"""The benchmark's PostgreSQL: one throwaway server per ``bench/run.py`` run.

The server is ``memrev.testing.pgserver.PgServer`` with ``durable=True``: ``fsync``,
``full_page_writes`` and ``synchronous_commit`` on, as configured by default
(unlike the tests' server). Clients reach it over local TCP (127.0.0.1), as a
client on another host would (minus the network). Only ``initdb`` uses
``--no-sync`` (the empty cluster need not survive a crash). This module adds
the per-run databases the benchmark children use.
"""

from __future__ import annotations

import os
import re

from memrev.testing.pgserver import PgServer as _Server
from memrev.testing.pgserver import unavailable_reason

__all__ = ["PgServer", "create_database", "database_url", "drop_database", "relation_bytes", "unavailable_reason"]


def PgServer(parent_dir: str | None = None) -> _Server:  # noqa: N802 - the class, configured for the benchmark
    return _Server(durable=True, parent_dir=parent_dir, prefix="memrev-bench-pg-")


def db_name_for(tag: str) -> str:
    """A database name derived from a workdir name (deterministic: W1 and history share it)."""
    return "b_" + re.sub(r"[^a-z0-9_]", "_", tag.lower())[:55]


# ---------------------------------------------------------------- per-run databases (used by the children)


def base_url() -> str:
    url = os.environ.get("MEMREV_BENCH_PG_URL")
    if not url:
        raise RuntimeError("MEMREV_BENCH_PG_URL is not set (bench/run.py sets it when it starts the server)")
    return url


def _with_db(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


def create_database(tag: str) -> str:
    """(Re)create an empty database for ``tag``; its URL."""
    import psycopg

    name = db_name_for(tag)
    with psycopg.connect(base_url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8')
    return _with_db(base_url(), name)


def database_url(tag: str) -> str:
    return _with_db(base_url(), db_name_for(tag))


def drop_database(tag: str) -> None:
    import psycopg

    with psycopg.connect(base_url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name_for(tag)}" WITH (FORCE)')


def relation_bytes(tag: str) -> int:
    """Bytes of every table of the database incl. its indexes and TOAST (pg_total_relation_size)."""
    import psycopg

    with psycopg.connect(database_url(tag), autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchone()
    return int(row[0])
