"""PostgreSQL backend: one store shared by many processes on many hosts (psycopg 3).

One module of ~1,300 lines on purpose: the schema, its migrations, the
server-side functions (``memrev_commit``, ``memrev_lock_ref``) and the pipelined
statements that call them change together (a column touches all four), and much
of the length is SQL text shared in shape with the SQLite backend.

The rows and their meaning are those of the SQLite backend; what differs is
how writers are kept apart, because PostgreSQL has no database-wide write
lock and must not get one:

* Every transaction runs at READ COMMITTED, so each statement sees what other
  writers committed before it started. ``lock_ref`` reads the ref row
  ``FOR UPDATE``; while the branch does not exist yet there is no row to
  lock, so it takes a transaction-level advisory lock on a hash of the ref
  name and looks again (two first commits cannot race). Once the lock is
  granted, every later read of the transaction (head index, blobs) sees the
  previous writer's commit.
* ``set_ref_if_equals`` is a real compare-and-swap (``UPDATE ... WHERE
  target = old`` / ``INSERT ... ON CONFLICT DO NOTHING``) and, when it moves
  the ref, sends ``NOTIFY memrev_refs, '<ref name>'`` in the same statement,
  so the notification is delivered exactly when the move commits.
* Writers of *different* branches run in parallel. Objects are immutable and
  content-addressed, so inserting one twice is harmless, except append runs:
  two branches extending the same run would both claim ``(lineage, start)``.
  ``lineage_has`` therefore locks the run (advisory, transaction-level) before
  it looks, and ``put_blob`` only ignores a duplicate *id*: a clash on the run
  index is an error, never a silently dropped blob.
* A commit is one round trip when the handle's last view of the branch head
  is current (``guess_ref`` / ``write_commit``, docs/design.md "optimistic
  commit"): the store lock and the guessed ref's lock and check
  (``memrev_lock_read``), then the new objects with one call of
  ``memrev_commit`` (the compare-and-swap, commit row, history links looked up
  server-side, head and change rows; the objects as data-modifying ``WITH``
  queries, ``_COMMIT_WITH_OBJECTS``): two statements in one pipeline, sent as
  its implicit transaction (no ``BEGIN``/``COMMIT``: the server commits at the
  pipeline's sync, durably, or rolls all of it back there when a statement
  fails, so a refusal needs no ``ROLLBACK``).
* A stale guess costs one round trip, not several: when the ref is not at the
  guess, ``memrev_lock_read`` returns the new head's commit row, the tree nodes
  along the commit's paths (``prefetch_paths``; ``memrev_path_nodes`` walks the
  tree objects on the server) and the blob rows of the files there; the
  compare-and-swap then fails (``HeadMoved``) and frees the lock at once. The
  commit is computed again on that head without a read, the lock never held
  while this client works. Under steady contention (writer processes) nearly
  every guess is stale, so after a refusal the ref's next 1, 2, 4 ... 64
  commits lock first (``lock_ref``), which reads the same rows with the lock in
  its one round trip: two round trips, the lock held across one (the client
  computing the commit). PostgreSQL releases the row lock only after the
  commit's WAL flush, so commits of one branch are never faster than one
  flush each, however many writers.
* The statements every commit sends (the store lock, ``memrev_lock_read``, the
  objects with ``memrev_commit``; ``_HOT``) are prepared statements
  from their second use on a connection; nothing else is (psycopg's automatic
  preparation is off). A round trip that failed while it prepared one is
  followed by psycopg's ``rollback()``, which forgets every prepared statement
  on both sides (``DEALLOCATE ALL``), so psycopg never names one the server
  skipped.
* A group commit (``Repository.commit_group``) on current heads is one round
  trip too: a request's ``savepoint()`` that sent nothing is not sent at all,
  and the commits' numbers are read with ``COMMIT``.
* Every write transaction holds a shared advisory lock on the store, which
  ``write(exclusive=True)`` (gc) holds exclusively: a commit may reuse an
  object gc is about to delete, so the two must never overlap.

A deadlock or serialization failure (possible only between writers of
different branches, and rare) rolls the transaction back and raises
``memrev.ConcurrentUpdate``. It is not retried here: ``write()`` is a context
manager around the caller's code, which a backend cannot run a second time.

Durability: ``synchronous_commit=on`` for ``"normal"`` and ``"full"`` alike.
A commit has returned only once its WAL is flushed on the server (and on any
synchronous standby the server is configured with), so it survives a crash of
the client, of the server and of the server's machine. ``off`` would make
``"normal"`` lose the last acknowledged commits when the *server* crashes,
which other hosts may already have read; the saving on a round trip that is
already a network hop is not worth that.

Change notification: ``wait_for_change`` blocks on a second, dedicated
connection that ``LISTEN``s on ``memrev_refs``; ``VersionedStore`` calls it
(in a worker thread) instead of sleeping between checks of its branch head.
"""

from __future__ import annotations

import hashlib
import logging
import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql as pg_sql
    from psycopg.conninfo import conninfo_to_dict
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("memrev's PostgreSQL backend needs psycopg 3: pip install 'memrev[postgres]'") from e

from ..core.paths import is_directory_key
from ..errors import (
    ConcurrentUpdate,
    HeadMoved,
    MemrevError,
    NoStore,
    NotAMemrevStore,
    ReadOnlyStore,
    SchemaTooNew,
    StoreFull,
    TransientConflict,
)
from .base import (
    BackendBase,
    BlobRow,
    ChangeCommit,
    ChangeLinkLike,
    ChangeRow,
    ChangeRowLike,
    CommitRow,
    CommitWrite,
    FirstParentNumber,
    HeadRow,
)

log = logging.getLogger("memrev")

CHANNEL = "memrev_refs"
VERSION_TABLE = "memrev_schema"

# Position in this list is the schema version (recorded in ``memrev_schema``).
# Statements are separated by ";" and hold none inside, except in $$-quoted
# function bodies (_statements). Paths, branches and
# ref names compare as bytes (COLLATE "C", like SQLite's BINARY), which the
# prefix matches (``list_refs``) rely on. Payloads are compressed by memrev
# already, so TOAST stores them out of line without compressing them again.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE blobs(
        id bytea PRIMARY KEY, kind text NOT NULL, base bytea, lineage bytea,
        start bigint NOT NULL, size bigint NOT NULL, depth integer NOT NULL,
        data bytea NOT NULL
    );
    ALTER TABLE blobs ALTER COLUMN data SET STORAGE EXTERNAL;
    CREATE UNIQUE INDEX blobs_lineage ON blobs(lineage, start) WHERE lineage IS NOT NULL;
    CREATE TABLE trees(id bytea PRIMARY KEY, data bytea NOT NULL);
    ALTER TABLE trees ALTER COLUMN data SET STORAGE EXTERNAL;
    CREATE TABLE commits(
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id bytea NOT NULL UNIQUE,
        parent bytea, data bytea NOT NULL
    );
    CREATE TABLE refs(name text COLLATE "C" PRIMARY KEY, target bytea NOT NULL);
    CREATE TABLE head(
        branch text COLLATE "C" NOT NULL, path text COLLATE "C" NOT NULL, blob bytea,
        size bigint NOT NULL, seq bigint NOT NULL, PRIMARY KEY(branch, path)
    );
    CREATE TABLE changes(
        path text COLLATE "C" NOT NULL, seq bigint NOT NULL, prev bigint, prev2 bigint,
        PRIMARY KEY(path, seq)
    );
    CREATE INDEX changes_by_seq ON changes(seq)
    """,
    # As in the SQLite backend: first-parent walks by commit number; directory
    # keys of the change index are "stale" until reindex fills older commits.
    """
    ALTER TABLE commits ADD COLUMN parent_seq bigint;
    UPDATE commits SET parent_seq = p.seq FROM commits p WHERE p.id = commits.parent;
    CREATE TABLE stale(name text COLLATE "C" PRIMARY KEY);
    INSERT INTO stale(name) SELECT 'directory-keys' WHERE EXISTS (SELECT 1 FROM commits)
    """,
    # One round trip per commit (write_commit): the compare-and-swap, the commit
    # row, its change rows (history links looked up here, after the swap locked
    # the ref, so the head index is the old head's) and head rows, in one call.
    # memrev_lock_ref locks a guessed ref (guess_ref) first in the transaction's
    # first pipeline, so locks are taken in the order a locked commit takes them.
    # memrev_last_change is Repository.last_change for a directory key the branch
    # has no head row for: the first change on the first-parent line of p_seq.
    """
    CREATE OR REPLACE FUNCTION memrev_last_change(p_path text, p_seq bigint) RETURNS bigint
    LANGUAGE plpgsql STABLE AS $$
    DECLARE cur bigint := p_seq; cand bigint;
    BEGIN
        FOR cand IN SELECT seq FROM changes WHERE path = p_path AND seq <= p_seq ORDER BY seq DESC LOOP
            WHILE cur > cand LOOP
                SELECT parent_seq INTO cur FROM commits WHERE seq = cur;
                IF cur IS NULL THEN RETURN NULL; END IF;
            END LOOP;
            IF cur = cand THEN RETURN cand; END IF;
        END LOOP;
        RETURN NULL;
    END $$;
    CREATE OR REPLACE FUNCTION memrev_lock_ref(p_ref text, p_old bytea, p_lock bigint) RETURNS void
    LANGUAGE plpgsql AS $$
    DECLARE v_target bytea;
    BEGIN
        IF p_old IS NULL THEN
            PERFORM pg_advisory_xact_lock(p_lock);
        END IF;
        SELECT target INTO v_target FROM refs WHERE name = p_ref FOR UPDATE;
        IF v_target IS DISTINCT FROM p_old THEN
            RAISE EXCEPTION 'memrev: % moved', p_ref USING ERRCODE = 'MR001';
        END IF;
    END $$;
    CREATE OR REPLACE FUNCTION memrev_commit(
        p_ref text, p_branch text, p_old bytea, p_id bytea, p_data bytea, p_lock bigint,
        p_paths text[], p_blobs bytea[], p_sizes bigint[], p_keys boolean[], p_prev2 bigint[]
    ) RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE v_seq bigint; v_old_seq bigint;
    BEGIN
        IF p_old IS NULL THEN
            PERFORM pg_advisory_xact_lock(p_lock);
            INSERT INTO refs(name, target) VALUES (p_ref, p_id) ON CONFLICT (name) DO NOTHING;
        ELSE
            UPDATE refs SET target = p_id WHERE name = p_ref AND target = p_old;
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'memrev: % moved', p_ref USING ERRCODE = 'MR001';
        END IF;
        PERFORM pg_notify('memrev_refs', p_ref);
        SELECT seq INTO v_old_seq FROM commits WHERE id = p_old;
        INSERT INTO commits(id, parent, data, parent_seq) VALUES (p_id, p_old, p_data, v_old_seq)
            ON CONFLICT (id) DO NOTHING RETURNING seq INTO v_seq;
        IF v_seq IS NULL THEN
            SELECT seq INTO v_seq FROM commits WHERE id = p_id;
        END IF;
        INSERT INTO changes(path, seq, prev, prev2)
            SELECT t.path, v_seq,
                   CASE WHEN h.path IS NOT NULL THEN h.seq
                        WHEN t.key AND v_old_seq IS NOT NULL THEN memrev_last_change(t.path, v_old_seq) END,
                   t.prev2
            FROM unnest(p_paths, p_keys, p_prev2) AS t(path, key, prev2)
            LEFT JOIN head h ON h.branch = p_branch AND h.path = t.path
            ON CONFLICT (path, seq) DO UPDATE SET prev = excluded.prev, prev2 = excluded.prev2;
        INSERT INTO head(branch, path, blob, size, seq)
            SELECT p_branch, t.path, t.blob, t.size, v_seq FROM unnest(p_paths, p_blobs, p_sizes) AS t(path, blob, size)
            ON CONFLICT (branch, path) DO UPDATE SET blob = excluded.blob, size = excluded.size, seq = excluded.seq;
        RETURN v_seq;
    END $$
    """,
    # A stale guess costs one round trip, not several (write_commit on a busy branch):
    # memrev_lock_read takes the store lock and the ref's row lock like memrev_lock_ref,
    # and when the ref is not at the guess returns what the commit computed again on
    # the new head reads: the head's commit row, then the tree nodes along the commit's
    # paths and the blob rows of the files there, the bases of its new versions
    # (memrev_path_nodes; a blob only when its payload is small). The statement after it (memrev_commit's compare-and-swap,
    # or memrev_lock_ref) then fails the transaction, which frees the lock at once.
    # memrev_path_nodes walks tree objects (core/objects.py: a leaf "T" of entries
    # varint(len) name kind id(20) varint(size); a hash-split "H" varint(level), then
    # bucket byte + id(20) each) down each path: p_names are the paths' segments in
    # order, p_depths their index in their path (0 starts a path), p_hashes the
    # BLAKE2b-128 of each name, whose byte level%16 mod 16 is its bucket at a split node
    # (core/trees.py). Only reads: the client verifies what it decodes against its id.
    """
    CREATE OR REPLACE FUNCTION memrev_path_nodes(p_root bytea, p_names text[], p_hashes bytea[], p_depths integer[])
    RETURNS TABLE(r_tree boolean, r_id bytea, r_data bytea) LANGUAGE plpgsql STABLE AS $$
    DECLARE
        seen bytea[] := '{}'; node bytea; d bytea; want bytea; found bytea;
        i integer; n integer; pos integer; len integer; b integer; shift integer; v integer;
        bucket integer; hops integer;
    BEGIN
        n := coalesce(array_length(p_names, 1), 0);
        FOR i IN 1 .. n LOOP
            IF p_depths[i] = 0 THEN node := p_root; END IF;
            CONTINUE WHEN node IS NULL;
            want := convert_to(p_names[i], 'UTF8');
            found := NULL;
            hops := 0;
            LOOP
                hops := hops + 1;
                d := NULL;
                SELECT t.data INTO d FROM trees t WHERE t.id = node;
                IF d IS NULL OR hops > 17 THEN node := NULL; EXIT; END IF;
                IF NOT (node = ANY(seen)) THEN
                    seen := seen || node; r_tree := true; r_id := node; r_data := d; RETURN NEXT;
                END IF;
                len := length(d);
                IF get_byte(d, 0) = 72 THEN
                    pos := 1; v := 0; shift := 0;
                    LOOP
                        b := get_byte(d, pos); pos := pos + 1; v := v | ((b & 127) << shift);
                        EXIT WHEN b < 128; shift := shift + 7;
                    END LOOP;
                    bucket := get_byte(p_hashes[i], v % 16) % 16;
                    node := NULL;
                    WHILE pos + 21 <= len LOOP
                        IF get_byte(d, pos) = bucket THEN node := substring(d FROM pos + 2 FOR 20); EXIT; END IF;
                        pos := pos + 21;
                    END LOOP;
                    EXIT WHEN node IS NULL;
                ELSE
                    pos := 1;
                    WHILE pos < len LOOP
                        v := 0; shift := 0;
                        LOOP
                            b := get_byte(d, pos); pos := pos + 1; v := v | ((b & 127) << shift);
                            EXIT WHEN b < 128; shift := shift + 7;
                        END LOOP;
                        IF v = length(want) AND substring(d FROM pos + 1 FOR v) = want THEN
                            IF get_byte(d, pos + v) = 100 THEN
                                found := substring(d FROM pos + v + 2 FOR 20);
                            ELSIF i = n OR p_depths[i + 1] = 0 THEN  -- the path's file: its blob
                                r_tree := false; r_id := substring(d FROM pos + v + 2 FOR 20); r_data := NULL;
                                RETURN NEXT;
                            END IF;
                        END IF;
                        pos := pos + v + 21;
                        LOOP
                            b := get_byte(d, pos); pos := pos + 1; EXIT WHEN b < 128;
                        END LOOP;
                    END LOOP;
                    node := found;
                    EXIT;
                END IF;
            END LOOP;
            -- the last segment names a directory too (a delete of it): its top node
            IF node IS NOT NULL AND (i = n OR p_depths[i + 1] = 0) AND NOT (node = ANY(seen)) THEN
                d := NULL;
                SELECT t.data INTO d FROM trees t WHERE t.id = node;
                IF d IS NOT NULL THEN seen := seen || node; r_tree := true; r_id := node; r_data := d; RETURN NEXT; END IF;
            END IF;
        END LOOP;
    END $$;
    CREATE OR REPLACE FUNCTION memrev_path_rows(p_root bytea, p_names text[], p_hashes bytea[], p_depths integer[])
    RETURNS TABLE(
        r_id bytea, r_seq bigint, r_data bytea, r_kind text, r_base bytea, r_lineage bytea, r_start bigint,
        r_size bigint, r_depth integer
    ) LANGUAGE sql STABLE AS $$
        SELECT n.r_id, NULL::bigint, coalesce(n.r_data, b.data), b.kind, b.base, b.lineage, b.start, b.size, b.depth
        FROM memrev_path_nodes(p_root, p_names, p_hashes, p_depths) n
        LEFT JOIN blobs b ON NOT n.r_tree AND b.id = n.r_id
        WHERE n.r_tree OR octet_length(b.data) <= 8192
    $$;
    CREATE OR REPLACE FUNCTION memrev_lock_read(
        p_store bigint, p_ref text, p_old bytea, p_lock bigint, p_names text[], p_hashes bytea[], p_depths integer[]
    ) RETURNS TABLE(
        r_id bytea, r_seq bigint, r_data bytea, r_kind text, r_base bytea, r_lineage bytea, r_start bigint,
        r_size bigint, r_depth integer
    ) LANGUAGE plpgsql AS $$
    DECLARE v_target bytea; v_seq bigint; v_data bytea;
    BEGIN
        IF p_store IS NOT NULL THEN
            PERFORM pg_advisory_xact_lock_shared(p_store);
        END IF;
        IF p_old IS NULL THEN
            PERFORM pg_advisory_xact_lock(p_lock);
        END IF;
        SELECT r.target INTO v_target FROM refs r WHERE r.name = p_ref FOR UPDATE;
        IF v_target IS NOT DISTINCT FROM p_old OR v_target IS NULL THEN
            RETURN;
        END IF;
        SELECT c.seq, c.data INTO v_seq, v_data FROM commits c WHERE c.id = v_target;
        r_id := v_target; r_seq := v_seq; r_data := v_data;
        RETURN NEXT;
        IF v_data IS NOT NULL AND p_names IS NOT NULL THEN
            RETURN QUERY SELECT * FROM memrev_path_rows(substring(v_data FROM 2 FOR 20), p_names, p_hashes, p_depths);
        END IF;
    END $$
    """,
]

# memrev_commit's error when the ref was not at the commit's parent any more.
_MOVED = "MR001"
_LOCK_CALL = "SELECT memrev_lock_ref(%s, %s, %s)"
# A guessed ref locked and checked, what a commit computed again needs returned when it
# moved (memrev_lock_read); the store lock is taken first when its key is given.
_LOCK_READ = "SELECT * FROM memrev_lock_read(%s, %s, %s, %s, %s::text[], %s::bytea[], %s::integer[])"
_PATH_NODES = (
    "SELECT * FROM memrev_path_rows((SELECT substring(c.data FROM 2 FOR 20) FROM commits c"
    " WHERE c.id = (SELECT target FROM refs WHERE name = %s)), %s::text[], %s::bytea[], %s::integer[])"
)
_COMMITS = ("SELECT memrev_commit(", "WITH b AS (INSERT INTO blobs(")  # how the statements of write_commit start
# Stale guesses of a ref in a row after which the commit locks first (lock_ref: the head
# read with the lock, in one round trip) instead of trying again on the head the refusal
# returned. Under steady contention from other handles (writer processes) nearly every
# guess is stale, so after a refusal the ref's next 1, 2, 4 ... 64 commits lock first
# (_lock_next): a refused attempt costs a round trip and a commit computed for nothing,
# a locked one the client's work with the lock held (one round trip).
_GUESSES = 2
_PREFETCH_SEGMENTS = 256  # the most path segments a commit's reads are fetched along (prefetch_paths)
_STORE_LOCK = "SELECT pg_advisory_xact_lock"
_SAVEPOINT, _RELEASE = "SAVEPOINT memrev_one", "RELEASE SAVEPOINT memrev_one"
_PUT_TREES = "INSERT INTO trees(id, data) SELECT * FROM unnest(%s::bytea[], %s::bytea[]) ON CONFLICT (id) DO NOTHING"
_BLOB_COLS = "id, kind, base, lineage, start, size, depth, data"
_SCAN_PAGE = 500  # rows per page of a scan (keyset pages: nothing is held open between pages)
_PUT_BLOB = f"INSERT INTO blobs({_BLOB_COLS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (id) DO NOTHING"
_COMMIT_CALL = (
    "SELECT memrev_commit(%s, %s, %s, %s, %s, %s, %s::text[], %s::bytea[], %s::bigint[], %s::boolean[], %s::bigint[])"
)
# A commit's new objects and its memrev_commit call in ONE statement (write_commit): the
# inserts are data-modifying WITH queries, run with the call (memrev_commit reads neither
# table). A statement costs the client a send and the server a parse, bind and
# executor start, whatever it holds.
_COMMIT_WITH_OBJECTS = (
    f"WITH b AS (INSERT INTO blobs({_BLOB_COLS}) SELECT * FROM unnest(%s::bytea[], %s::text[], %s::bytea[],"
    " %s::bytea[], %s::bigint[], %s::bigint[], %s::integer[], %s::bytea[]) ON CONFLICT (id) DO NOTHING),"
    " t AS (INSERT INTO trees(id, data) SELECT * FROM unnest(%s::bytea[], %s::bytea[]) ON CONFLICT (id) DO NOTHING) "
    + _COMMIT_CALL
)
# The statements of every commit, sent as prepared statements (the server parses and
# plans them once per connection, not once per commit); with the store lock (per store).
# No other statement is prepared: psycopg's automatic preparation is off (see _connect).
_HOT = frozenset({_LOCK_CALL, _LOCK_READ, _PUT_BLOB, _PUT_TREES, _COMMIT_CALL, _COMMIT_WITH_OBJECTS})
# psycopg's prepared statements "never" (prepare_threshold None disables prepare=True too)
_NEVER = 2**62


def _statements(script: str) -> list[str]:
    """The statements of a migration: split at ";", except inside a $$-quoted function body."""
    out, current = [], ""
    for i, part in enumerate(script.split("$$")):
        if i % 2:  # a function body, kept whole
            current += f"$${part}$$"
            continue
        first, *rest = part.split(";")
        current += first
        for piece in rest:
            out.append(current)
            current = piece
    out.append(current)
    return [stmt for stmt in out if stmt.strip()]

# Session settings of every connection this backend opens. ``lock_timeout``
# matches SQLite's 60 s busy timeout: a writer waits that long for a branch
# before it gets ConcurrentUpdate. ``idle_in_transaction_session_timeout``
# ends the session of a client that stopped (SIGSTOP, a paused VM) while it
# held a branch lock, so one frozen host cannot stall every writer forever;
# its transaction rolls back, which the commit protocol makes harmless.
_SESSION = {
    "synchronous_commit": "on",
    "lock_timeout": "60s",
    "idle_in_transaction_session_timeout": "60s",
    "default_transaction_isolation": "read committed",
}
# The tables of a store that hold rows of its content (purge's reclaim rewrites them).
_TABLES = ("blobs", "trees", "commits", "refs", "head", "changes", "stale")
_RECLAIM_TRY = 2.0  # seconds one VACUUM FULL waits for its lock before it lets queued sessions by
_RECLAIM_PAUSE = 0.2  # seconds between two tries
_CONNECT_DEFAULTS = {"application_name": "memrev", "connect_timeout": "10"}
# Failures that mean "another writer got in the way": the transaction is rolled
# back whole and may simply be tried again. With every insert ignoring duplicate
# ids, the only unique index left to violate is an append run's (lineage, start).
_CONFLICTS = (
    pg_errors.SerializationFailure,
    pg_errors.DeadlockDetected,
    pg_errors.LockNotAvailable,
    pg_errors.UniqueViolation,
)


def _commit_ref(sql: str, args: tuple) -> str:
    """The ref a queued write_commit statement moves (its first argument of memrev_commit)."""
    return args[0] if sql == _COMMIT_CALL else args[10]


def _skipped_preparing(queued: list, preparing: set[str], e: psycopg.Error) -> bool:
    """Whether a statement prepared in a round trip that failed with ``e`` may have been
    skipped by the server (psycopg may then take it for prepared). A stale guess fails at
    its ref's first compare-and-swap (memrev_lock_read raises nothing): only statements
    after that one are skipped; after any other failure every one may have been."""
    if not preparing:
        return False
    if e.sqlstate != _MOVED:
        return True
    first = next((i for i, (sql, *_) in enumerate(queued) if sql.startswith(_COMMITS) or sql == _LOCK_CALL), -1)
    return first < 0 or any(sql in preparing for sql, *_ in queued[first + 1 :])


def _nothing(conn: psycopg.Connection) -> None:
    return None


def _blob(row: tuple | None) -> BlobRow | None:
    return None if row is None else BlobRow(*row)


def _conflict(e: Exception) -> ConcurrentUpdate:
    return TransientConflict(f"a concurrent writer got in the way; nothing was written ({e})".strip())


def _refusal(e: Exception) -> MemrevError | None:
    """The server refusing writes for good (read-only database or standby, full disk), in memrev's terms."""
    if isinstance(e, pg_errors.ReadOnlySqlTransaction):
        return ReadOnlyStore(f"the PostgreSQL store is read-only; nothing was written ({e})".strip())
    if isinstance(e, pg_errors.DiskFull):
        return StoreFull(f"the PostgreSQL server's disk is full; nothing of this call was written ({e})".strip())
    return None


def _name_hash(name: str) -> bytes:
    """``core.trees``' hash of a name (its bucket at hash-split level L: byte L % 16, mod 16),
    sent to memrev_path_nodes, which cannot compute BLAKE2b."""
    return hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()


def _lock_key(*parts: str | bytes) -> int:
    """A signed 64-bit advisory lock key; a collision only serializes more than needed."""
    h = hashlib.blake2b(b"memrev-lock", digest_size=8)
    for part in parts:
        h.update(b"\0" + (part.encode() if isinstance(part, str) else part))
    return int.from_bytes(h.digest(), "big", signed=True)


class PostgresBackend(BackendBase):
    """Rows in one PostgreSQL schema (the first of the connection's ``search_path``)."""

    local = False  # every call is a network round trip: VersionedStore runs them in a worker thread
    notifies = True  # wait_for_change is woken by NOTIFY memrev_refs
    computes_links = True  # memrev_commit looks up each row's history link server-side

    def __init__(self, url: str, *, durability: str = "normal", create: bool = True) -> None:
        if durability not in ("normal", "full"):
            raise ValueError("durability must be 'normal' or 'full'")
        self.durability = durability  # both mean synchronous_commit=on; see the module docstring
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as e:
            raise MemrevError(f"not a valid PostgreSQL URL: {e}") from None
        self._params: dict[str, Any] = {**_CONNECT_DEFAULTS, **params}
        self._lock = threading.RLock()
        self._closed = False
        self._in_write = False
        self._in_snapshot = False  # inside read_snapshot(): no read may move to a new connection
        self._exclusive = False
        # Inside write(): statements whose result nobody reads (new objects, index
        # rows, savepoints), sent with the next statement that is read (see _defer).
        # An entry's last item, when not None, is given the statement's cursor once sent.
        self._queued: list[tuple[str, Any, bool, Callable[[psycopg.Cursor], None] | None]] = []
        self._flushes = 0  # how many times the queue was sent (savepoint() needs to know)
        self._flush_failures = 0  # ... and how many of those the server refused
        # The commit statements (_HOT) on the connection _hot_conn: sent before in a round
        # trip that succeeded (then sent prepared), and prepared in one that did.
        self._hot_conn: psycopg.Connection | None = None
        self._hot_sent: set[str] = set()
        self._hot_prepared: set[str] = set()
        self._unsure_prepared = False  # a round trip that prepared a statement failed (see _rollback)
        # What this handle last saw each ref point to (None: absent), committed:
        # guess_ref's answer. Refs moved by the open transaction, applied at COMMIT.
        self._seen_refs: dict[str, bytes | None] = {}
        self._txn_refs: dict[str, bytes | None] = {}
        self._guessed: dict[str, bytes | None] = {}  # guessed and not yet locked (see _with_queued)
        self._guessing: set[str] = set()  # refs the open transaction guessed
        # Refs whose guesses went stale in a row, and how many commits of each lock
        # rather than guess meanwhile: under steady contention from other handles
        # (writer processes) nearly every guess is stale, and a refused attempt costs
        # two round trips more than locking at once.
        self._stale_streak: dict[str, int] = {}
        self._lock_next: dict[str, int] = {}
        self._fresh_guess: set[str] = set()  # refs the open transaction guessed from a refusal's answer
        # What a commit computed again on a ref's new head reads, fetched with the
        # ref's lock (memrev_lock_read when a guess was stale, lock_ref): that head's
        # commit row and the tree nodes along the commit's paths (prefetch_paths).
        # Immutable objects, answered inside write() only, one answer at a time.
        self._want: tuple[str, list[str], list[bytes], list[int]] | None = None
        self._pre_commits: dict[bytes, tuple[int, bytes]] = {}
        self._pre_trees: dict[bytes, bytes] = {}
        self._pre_blobs: dict[bytes, BlobRow] = {}
        self._fresh: tuple[str, bytes] | None = None  # (ref, new head) a stale guess learned
        self._head_commit: dict[bytes, tuple[int, bytes]] = {}  # read with lock_ref, for this transaction
        # Work counted per handle (tests and the benchmark read it; never reset here):
        # ``round_trips`` to the server; ``locked_round_trips``, those begun while the
        # transaction held a ref's row lock taken in an earlier one (the lock held across
        # the client's work: the serial part of a commit on a busy branch); ``head_moved``,
        # stale guesses; ``prefetched_rows``, commit, tree and blob rows fetched with a
        # ref's lock; ``tree_reads``, ``blob_reads``, ``commit_reads``: reads of one.
        self.counters: Counter[str] = Counter()
        self._ref_locked = False  # the open transaction holds a ref's row lock
        self._listen_lock = threading.Lock()
        self._listener: psycopg.Connection | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._conn: psycopg.Connection | None = None
        try:
            self._conn = self._connect()
            self._open(create)
        except BaseException:
            self.close()
            raise

    def _where(self) -> str:
        """The server and database, without credentials."""
        p = self._params
        return f"{p.get('host', 'localhost')}:{p.get('port', 5432)}/{p.get('dbname', '')}"

    def __repr__(self) -> str:
        return f"PostgresBackend({self._where()!r}, schema={getattr(self, 'schema', None)!r})"

    # ------------------------------------------------------------ connections

    def _connect(self) -> psycopg.Connection:
        try:
            conn = psycopg.connect(**self._params, autocommit=True)
        except psycopg.OperationalError as e:
            raise MemrevError(f"cannot connect to PostgreSQL: {e}".strip()) from e
        try:
            settings = ", ".join(f"set_config('{k}', %s, false)" for k in _SESSION)
            conn.execute(f"SELECT {settings}", tuple(_SESSION.values()))
            conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            # No automatic prepared statements, only the commit's own (_HOT, prepared
            # with prepare=True in _with_queued). When a statement of a pipeline fails
            # (a guessed head that moved), psycopg 3.3 may count a statement whose
            # preparation was queued after it as prepared though the server skipped it
            # ("prepared statement _pg3_1 does not exist" on its next use): _with_queued
            # notices, and the rollback then resets what psycopg and the server hold.
            conn.prepare_threshold = _NEVER
        except BaseException:
            conn.close()
            raise
        return conn

    def _live(self) -> psycopg.Connection:
        """The main connection, reopened if the server dropped it (never inside ``write()``)."""
        conn = self._conn
        if conn is None or conn.closed:
            if self._closed:
                raise MemrevError("this PostgreSQL backend is closed")
            if self._in_write:
                raise MemrevError("lost the PostgreSQL connection during a commit")
            if self._in_snapshot:  # a new connection would read a later moment of the store
                raise MemrevError("lost the PostgreSQL connection during a read of one snapshot (fsck)")
            conn = self._conn = self._connect()
        return conn

    def _open(self, create: bool) -> None:
        conn = self._live()
        row = conn.execute("SELECT current_setting('server_encoding'), current_schema()").fetchone()
        encoding, schema = cast(tuple[str, "str | None"], row)  # a SELECT of two values: one row
        if schema is None:
            raise NotAMemrevStore("the connection's search_path names no existing schema to hold a memrev store")
        self.schema: str = schema
        self._store_key = _lock_key("store", schema)
        self._store_lock = f"SELECT pg_advisory_xact_lock_shared({self._store_key})"  # queued by _begin
        version = self._version()
        if version is not None and version > len(MIGRATIONS):
            raise SchemaTooNew(
                f"schema {schema!r} holds memrev schema version {version}; this memrev reads up to "
                f"{len(MIGRATIONS)}. Upgrade memrev."
            )
        if version is None and not create:
            raise NoStore(f"no memrev store at {self._where()} (schema {schema!r})")
        if version is None or version < len(MIGRATIONS):
            if encoding != "UTF8":
                raise NotAMemrevStore(f"the database encoding is {encoding}; a memrev store needs UTF8")
            try:
                self._migrate()
            except (pg_errors.DiskFull, pg_errors.ReadOnlySqlTransaction) as e:
                raise cast(MemrevError, _refusal(e)) from e  # DiskFull, ReadOnlySqlTransaction: never None

    def _version(self) -> int | None:
        conn = self._live()
        exists = conn.execute(
            "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = %s",
            (VERSION_TABLE,),
        ).fetchone()
        if exists is None:
            return None
        row = conn.execute(f"SELECT version FROM {VERSION_TABLE}").fetchone()
        return 0 if row is None else row[0]

    def _migrate(self) -> None:
        conn = self._live()
        with conn.transaction():
            # One migrator per schema at a time; the others wait, then find it done.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key("migrate", self.schema),))
            version = self._version()
            if version is None:
                counted = conn.execute(
                    """
                    SELECT count(*) FROM pg_catalog.pg_class c
                    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
                    """
                ).fetchone()
                others = cast(tuple[int], counted)[0]  # count(*): one row
                if others:
                    raise NotAMemrevStore(
                        f"schema {self.schema!r} of this database holds {others} tables or views of another "
                        "application and no memrev store; use an empty database or schema"
                    )
                conn.execute(f"CREATE TABLE {VERSION_TABLE}(version integer NOT NULL)")
                conn.execute(f"INSERT INTO {VERSION_TABLE}(version) VALUES (0)")
                version = 0
            if version > len(MIGRATIONS):
                raise SchemaTooNew(f"memrev schema version {version} is newer than this memrev ({len(MIGRATIONS)})")
            for script in MIGRATIONS[version:]:
                for stmt in _statements(script):
                    conn.execute(stmt)
            conn.execute(f"UPDATE {VERSION_TABLE} SET version = %s", (len(MIGRATIONS),))

    def close(self) -> None:
        """Close both connections; wakes a ``wait_for_change`` in another thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        with self._listen_lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            self._wake_r.close()
            self._wake_w.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()

    @contextmanager
    def write(self, *, exclusive: bool = False, wait: bool = True) -> Iterator[None]:
        """One transaction. ``exclusive``: no other write transaction on this store runs meanwhile (gc).
        ``wait`` is for local backends only; this one always waits (up to ``lock_timeout``).

        ``BEGIN`` is queued like the block's writes and ``COMMIT`` ends the last
        pipeline: a commit whose reads were all answered from caches (a writer
        whose guessed head is current) is one round trip, ``BEGIN`` to ``COMMIT``.
        """
        with self._lock:
            self._begin(exclusive)
            self._in_write = True
            self._exclusive = exclusive
            try:
                yield
            except BaseException as e:
                self._abandon()
                if isinstance(e, _CONFLICTS):
                    raise _conflict(e) from e
                if isinstance(e, psycopg.Error):  # a refusal memrev has no name for: still one of its errors
                    raise MemrevError(f"PostgreSQL refused the transaction; nothing was written ({e})".strip()) from e
                raise
            self._in_write = False
            self._commit()

    def _commit(self) -> None:
        """Send what is queued and ``COMMIT``, in one round trip."""
        conn = self._conn
        if conn is not None and conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            # A statement failed and the caller's block went on: the server aborted the
            # transaction, and COMMIT would answer ROLLBACK without an error.
            self._abandon()
            raise MemrevError("a statement of this transaction failed, so none of it was committed")
        try:
            if self._queued:
                self._with_queued(lambda c: c.execute("COMMIT"), end=True)
            else:
                self._trip()
                cast(psycopg.Connection, conn).execute("COMMIT")  # inside write(): connected
        except psycopg.Error as e:
            translated = self._translated(e)
            self._abandon()
            if translated is not e:
                raise translated from e
            if isinstance(e, psycopg.OperationalError):
                unknown = MemrevError(
                    f"lost the PostgreSQL connection while committing: the commit is either wholly there or "
                    f"not at all; read the branch to know ({e})".strip()
                )
                unknown.outcome_unknown = True  # type: ignore[attr-defined]  # never to be retried (commit_group)
                raise unknown from e
            raise MemrevError(f"PostgreSQL refused the commit; nothing was written ({e})".strip()) from e
        self._ref_locked = False
        self._seen_refs.update(self._txn_refs)
        for name in self._guessing - self._fresh_guess:  # the handle's own guess was right
            self._stale_streak.pop(name, None)
        self._fresh_guess.clear()
        self._txn_refs.clear()
        self._guessed.clear()
        self._head_commit.clear()
        self._guessing.clear()
        self._want = None
        self._pre_commits, self._pre_trees, self._pre_blobs, self._fresh = {}, {}, {}, None

    def _abandon(self) -> None:
        """Roll back the open transaction and forget what it queued and guessed."""
        self._in_write = False
        self._ref_locked = False
        self._queued.clear()
        self._guessed.clear()
        self._guessing.clear()
        self._fresh_guess.clear()
        self._head_commit.clear()
        self._txn_refs.clear()
        self._seen_refs.clear()  # a guess may have been what failed; the next commit locks
        self._want = None
        if self._fresh is not None:  # ... unless it learned the new head: computed again on that
            name, head = self._fresh
            self._seen_refs[name] = head
            self._fresh = None
        else:
            self._pre_commits, self._pre_trees, self._pre_blobs = {}, {}, {}
        self._rollback()  # nothing to send when no transaction is open (an implicit one, rolled back whole)

    def _translated(self, e: psycopg.Error) -> Exception:
        """A database error in memrev's terms (the error itself when it has none)."""
        if e.sqlstate == _MOVED:
            self.counters["head_moved"] += 1
            for name in self._guessing:  # lock the next 1, 2, 4 ... 64 commits of the ref
                streak = self._stale_streak[name] = self._stale_streak.get(name, 0) + 1
                self._lock_next[name] = min(64, 2 ** (streak - 1))
            return HeadMoved(f"the branch moved since this handle last saw it; nothing was written ({e})".strip())
        if isinstance(e, _CONFLICTS):
            return _conflict(e)
        return _refusal(e) or e

    savepoints = True

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside ``write()``: undo only what runs inside on an exception (one request of a group commit).

        The ``SAVEPOINT`` is queued like the block's writes; if the block ends
        before anything was sent, the server never hears of it: on a failure its
        statements are dropped from the queue, on success only the ``SAVEPOINT``.
        """
        mark, flushes, failures = len(self._queued), self._flushes, self._flush_failures
        # Statements of earlier blocks still queued (a group that settles at COMMIT): a
        # failure of the round trip that sends them may be theirs, not this block's.
        earlier = any(sql not in ("BEGIN", _RELEASE) and not sql.startswith(_STORE_LOCK) for sql, *_ in self._queued)
        # The refs this transaction moved, as they were before the block: a block whose
        # commit is rolled back must not leave it as the head the group's next commit
        # of that branch is built on (guess_ref), nor as what the handle saw at COMMIT.
        moved = dict(self._txn_refs)
        self._defer(_SAVEPOINT, ())
        try:
            yield
        except (HeadMoved, psycopg.Error):
            # A guessed head moved: the whole transaction is lost, and write() rolls it
            # back. So is it after an error memrev has no name for (a lock timeout, a
            # deadlock: write() makes it TransientConflict, retried whole), which may come
            # from a statement sent before this SAVEPOINT in the same pipeline (the store
            # lock queued with BEGIN): rolling back to "memrev_one" would fail there.
            self._txn_refs = moved
            self._queued.clear()
            raise
        except BaseException:
            self._txn_refs = moved
            if earlier and self._flush_failures != failures:
                # The server refused a round trip that also held earlier blocks' statements
                # (and maybe never ran this SAVEPOINT): the whole transaction is lost, and
                # rolling back "to the savepoint" could undo an earlier block instead.
                self._queued.clear()
                raise
            if self._flushes == flushes:
                del self._queued[mark:]
            else:  # the savepoint reached the server; what is queued now is all the block's
                self._queued.clear()
                self._exec("ROLLBACK TO SAVEPOINT memrev_one", ())
                self._exec("RELEASE SAVEPOINT memrev_one", ())
            raise
        if self._flushes == flushes:
            # Nothing of the block reached the server, and it succeeded: it needs no
            # savepoint there (an error of its statements, sent later with the group's
            # COMMIT, fails the whole transaction anyway). A group on a current head so
            # costs no SAVEPOINT and RELEASE per commit (a subtransaction each).
            del self._queued[mark]
        else:
            self._defer(_RELEASE, ())

    def _defer(
        self, sql: str, args: Any, *, many: bool = False, on_result: Callable[[psycopg.Cursor], None] | None = None
    ) -> None:
        """Send a statement whose result nobody reads with the next one that is read.

        Inside ``write()`` only: the queue and that statement go in one round
        trip (psycopg pipeline mode; the read forces the sync), so a commit
        costs a round trip per answer it needs (the ref, the history link, the
        commit number, the CAS), not one per row it writes. An error of a
        queued statement is raised by the call that sends it, still inside the
        transaction, which then rolls back as before. Outside ``write()`` the
        statement runs at once.
        """
        if not self._in_write:
            if many:
                self._many(sql, args)
            else:
                self._exec(sql, args)
            return
        if not many or args:
            self._queued.append((sql, args, many, on_result))

    def _flush(self) -> None:
        """Send what is queued (one round trip), if anything."""
        if self._queued:
            self._run(lambda c: None, idempotent=False)

    def _with_queued(self, job: Callable[[psycopg.Connection], Any], *, end: bool = False) -> Any:
        # One function: the order in which the queued statements reach the server is the
        # locking order other writers rely on (deadlock freedom), and it is kept in one place.
        conn = self._live()
        queued, self._queued = self._queued, []
        taking = False  # a guessed ref's lock is taken in this round trip
        if self._guessed:
            # Lock each guessed ref (checking it is still the guess) before anything else
            # of the transaction reaches the server, as lock_ref would have: a row lock
            # taken after an append run's or a new object's would invert the order other
            # writers take them in (deadlock).
            # Also after the open request's SAVEPOINT (and the previous one's RELEASE), which
            # take no lock: a failing lock is then that request's to roll back, where
            # before it "ROLLBACK TO SAVEPOINT" undid the previous request of a group.
            at = 2 if queued and queued[0][0] == "BEGIN" else 0
            while at < len(queued) and queued[at][0] in (_SAVEPOINT, _RELEASE):
                at += 1
            # The store lock, then the first guessed ref's, in one statement.
            store = at == 2 and queued[1][0] == self._store_lock
            if store:
                del queued[1]
                at = 1
            swapped = {_commit_ref(sql, args) for sql, args, *_ in queued if sql.startswith(_COMMITS)}
            locks: list[tuple[str, Any, bool, Callable[[psycopg.Cursor], None] | None]] = []
            for name, old in self._guessed.items():
                key = _lock_key("ref", self.schema, name)
                want = self._want if self._want is not None and self._want[0] == name else (name, None, None, None)
                args = (self._store_key if store else None, name, old, key, *want[1:])
                store = False
                locks.append((_LOCK_READ, args, False, self._stale_reader(name)))
                if name not in swapped:
                    # No compare-and-swap follows to fail the transaction when the guess is
                    # stale: this does (the lock is ours already), so it ends at once.
                    locks.append((_LOCK_CALL, (name, old, key), False, None))
            queued[at:at] = locks
            self._guessed.clear()
            taking = True
        if end and queued and queued[0][0] == "BEGIN" and not any(sql in (_SAVEPOINT, _RELEASE) for sql, *_ in queued):
            # The whole transaction is in this round trip (``end``: with its COMMIT): sent
            # as the pipeline's implicit transaction, without BEGIN and COMMIT. The server
            # commits it at the pipeline's sync, durably as a COMMIT (synchronous_commit),
            # or, when a statement fails (a stale guess), rolls all of it back there, so
            # no ROLLBACK follows. (SAVEPOINT needs an explicit transaction block.)
            del queued[0]
            job = _nothing
        self._flushes += 1
        self._trip()
        self._ref_locked = self._ref_locked or taking  # from the end of this round trip
        answers = []
        stale: list[tuple[Callable[[psycopg.Cursor], None], psycopg.Cursor]] = []
        failed: psycopg.Error | None = None
        if self._hot_conn is not conn:
            self._hot_conn = conn
            self._hot_sent, self._hot_prepared = set(), set()
        hot = [sql for sql, *_ in queued if sql in _HOT or sql == self._store_lock]
        # Prepared from its second use on (a statement sent once, by a handle that never
        # commits again, is not worth a prepared statement on the server). None at all
        # until the rollback after a failed preparation: psycopg's names are unsure then.
        unsure = self._unsure_prepared
        preparing = set() if unsure else {s for s in hot if s in self._hot_sent and s not in self._hot_prepared}
        try:
            with conn.pipeline():
                # Nothing in here may raise: psycopg would log the pipeline's own abort
                # as a warning. The first error the server returned ends the sending and
                # is what is raised; leaving the block then reports only "aborted".
                try:
                    for sql, args, many, on_result in queued:
                        if many:
                            conn.cursor().executemany(sql, args)
                        else:
                            prepare = not unsure and (sql in self._hot_prepared or sql in preparing)
                            cursor = conn.cursor(binary=True).execute(sql, args, prepare=prepare)
                            if on_result is not None:
                                answers.append((on_result, cursor))
                                if sql == _LOCK_READ:
                                    stale.append((on_result, cursor))
                    result = job(conn)
                except psycopg.Error as e:
                    failed = e
        except psycopg.Error as e:
            if failed is None:
                self._flush_failures += 1
                self._unsure_prepared |= _skipped_preparing(queued, preparing, e)
                self._read_stale(stale, e)
                raise
        if failed is not None:
            self._flush_failures += 1
            self._unsure_prepared |= _skipped_preparing(queued, preparing, failed)
            self._read_stale(stale, failed)
            raise failed
        self._hot_sent.update(hot)
        self._hot_prepared |= preparing
        for on_result, cursor in answers:  # the pipeline is synced: every result is in
            on_result(cursor)
        return result

    def _stale_reader(self, name: str) -> Callable[[psycopg.Cursor], None]:
        """What reads memrev_lock_read's answer for ref ``name``: nothing when the guess held;
        else the new head, its commit row and the tree nodes along the commit's paths."""

        def read(cursor: psycopg.Cursor) -> None:
            rows = cursor.fetchall()
            if not rows:
                return
            head, seq, data = rows[0][:3]
            self._pre_commits = {head: (seq, data)} if seq is not None else {}
            self._prefetched(rows[1:])
            self._fresh = (name, head)

        return read

    def _prefetched(self, rows: list[tuple]) -> None:
        """Keep memrev_path_rows' answer: tree nodes (no kind) and blob rows."""
        self.counters["prefetched_rows"] += len(rows)
        self._pre_trees = {r[0]: r[2] for r in rows if r[3] is None}
        self._pre_blobs = {r[0]: BlobRow(r[0], r[3], r[4], r[5], r[6], r[7], r[8], r[2]) for r in rows if r[3] is not None}

    def _read_stale(self, stale: list[tuple[Callable[[psycopg.Cursor], None], psycopg.Cursor]], e: psycopg.Error) -> None:
        """After a round trip failed on a stale guess: keep what its memrev_lock_read returned."""
        if e.sqlstate != _MOVED:
            return
        for read, cursor in stale:
            try:
                read(cursor)
            except psycopg.Error:
                pass  # no answer came (the statement itself failed): the next attempt reads

    def prefetch_paths(self, ref: str, paths: Sequence[str]) -> None:
        """The paths the commit about to be computed on ``ref`` reads: their tree nodes come
        with the ref's lock (``lock_ref``; a stale guess's answer) instead of a round trip
        per node. A hint: nodes not fetched are read as before."""
        names: list[str] = []
        hashes: list[bytes] = []
        depths: list[int] = []
        for path in dict.fromkeys(paths):
            segments = [] if path == "/" else path[1:].split("/")
            for depth, name in enumerate(segments):
                names.append(name)
                hashes.append(_name_hash(name))
                depths.append(depth)
        self._want = (ref, names, hashes, depths) if 0 < len(names) <= _PREFETCH_SEGMENTS else None

    def _begin(self, exclusive: bool) -> None:
        # Every write transaction holds the store lock shared (gc holds it
        # exclusively); sent with BEGIN in one round trip.
        lock = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        if not exclusive and self._idle_and_sound():
            # Queued: sent with the transaction's first read, or with COMMIT.
            self._queued += [("BEGIN", None, False, None), (self._store_lock, None, False, None)]
            return
        sql = f"BEGIN; SELECT {lock}({self._store_key})"
        try:
            self._trip()
            self._live().execute(sql)
        except _CONFLICTS as e:  # lock_timeout: gc held the store for too long
            self._rollback()
            raise ConcurrentUpdate(f"the store stayed locked; nothing was written ({e})".strip()) from e
        except psycopg.OperationalError as e:
            # Nothing was sent yet but BEGIN: on a connection the server dropped
            # (restart, failover, idle timeout) it is safe to start again.
            if self._closed or not cast(psycopg.Connection, self._conn).closed:
                self._rollback()
                raise MemrevError(f"PostgreSQL: {e}".strip()) from e
            self._live().execute(sql)

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """fsck's reads all see one snapshot (REPEATABLE READ, read only) while other
        hosts commit: a commit landing between its scans looked like damage. A
        lost connection inside is an error, never a silent reconnect to a later moment."""
        with self._lock:
            if self._in_write:
                raise MemrevError("read_snapshot() is not for inside write()")
            # Through _run: a dropped connection is reopened once (nothing read yet),
            # a server that is down is a MemrevError, not a raw psycopg one.
            self._run(lambda c: c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"), idempotent=True)
            self._in_snapshot = True
            try:
                yield
            finally:
                self._in_snapshot = False
                self._rollback()

    def _trip(self) -> None:
        """Count one round trip to the server (``counters``)."""
        self.counters["round_trips"] += 1
        if self._ref_locked:
            self.counters["locked_round_trips"] += 1

    def _idle_and_sound(self) -> bool:
        """Whether the connection is open, outside a transaction, with nothing from the server
        waiting to be read. A server that ended the session (restart, idle timeout) has sent
        its notice or closed the socket: then ``BEGIN`` goes alone, where a failure is safe
        to retry on a new connection, not queued with a commit whose fate it would blur."""
        conn = self._conn
        if conn is None or conn.closed or conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return False
        try:
            readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        except (OSError, ValueError, psycopg.OperationalError):
            return False
        return not readable

    def _rollback(self) -> None:
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                idle = conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
                if self._unsure_prepared:
                    # A round trip that prepared a statement failed: psycopg may take one
                    # the server never made for prepared. Every prepared statement is
                    # forgotten on both sides: psycopg's rollback() does (ROLLBACK, then
                    # DEALLOCATE ALL), inside a transaction only: with none open (an implicit
                    # one, rolled back at its sync) one is begun for it.
                    self._unsure_prepared = False
                    self._hot_prepared.clear()
                    self.counters["deallocations"] += 1
                    if idle:
                        self._trip()
                        conn.execute("BEGIN")
                    self._trip()
                    conn.rollback()
                elif not idle:
                    self._trip()
                    conn.execute("ROLLBACK")
            except psycopg.Error:
                pass  # the connection is gone, and the transaction with it

    def _run(self, job, *, idempotent: bool):
        """Run ``job(connection)``; a pure read outside ``write()`` is retried once on a new connection."""
        with self._lock:
            try:
                if self._queued:
                    return self._with_queued(job)
                self._trip()
                return job(self._live())
            except _CONFLICTS:
                raise
            except (pg_errors.DiskFull, pg_errors.ReadOnlySqlTransaction) as e:
                raise cast(MemrevError, _refusal(e)) from e  # DiskFull, ReadOnlySqlTransaction: never None
            except psycopg.Error as e:
                if e.sqlstate == _MOVED:  # a queued write_commit found its guessed head moved
                    raise self._translated(e) from e
                if not isinstance(e, psycopg.OperationalError):
                    raise
                if not (idempotent and not self._in_write and not self._in_snapshot and not self._closed and cast(psycopg.Connection, self._conn).closed):
                    raise MemrevError(f"PostgreSQL: {e}".strip()) from e
            try:
                self._trip()
                return job(self._live())
            except psycopg.OperationalError as e:
                raise MemrevError(f"PostgreSQL: {e}".strip()) from e

    # A job only sends; its cursor is read once _run returned (in a pipeline, after the sync).

    def _one(self, sql: str, args: tuple, *, idempotent: bool = True) -> tuple | None:
        return self._run(lambda c: c.cursor(binary=True).execute(sql, args), idempotent=idempotent).fetchone()

    def _all(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self._run(lambda c: c.cursor(binary=True).execute(sql, args), idempotent=True).fetchall()

    def _exec(self, sql: str, args: tuple) -> int:
        # rowcount read after _run: in a pipeline it is known once the round trip is over
        return self._run(lambda c: c.execute(sql, args), idempotent=False).rowcount

    def _many(self, sql: str, rows: list[tuple]) -> None:
        if rows:
            self._run(lambda c: c.cursor().executemany(sql, rows), idempotent=False)

    # ------------------------------------------------------------ objects

    def get_blob(self, oid: bytes) -> BlobRow | None:
        if self._in_write and oid in self._pre_blobs:  # fetched with the ref's lock (immutable)
            return self._pre_blobs[oid]
        self.counters["blob_reads"] += 1
        return _blob(self._one(f"SELECT {_BLOB_COLS} FROM blobs WHERE id = %s", (oid,)))

    def put_blob(self, row: BlobRow) -> None:
        # ON CONFLICT (id) only: a clash on (lineage, start) must fail, not drop the blob.
        self._defer(
            _PUT_BLOB,
            (row.id, row.kind, row.base, row.lineage, row.start, row.size, row.depth, row.data),
        )

    def lineage_has(self, lineage: bytes, start: int) -> bool:
        if self._in_write:
            # Held to the end of the transaction: another branch extending the
            # same run waits here, then sees this piece and starts a new run.
            key = _lock_key("lineage", self.schema, lineage)
            self._one("SELECT pg_advisory_xact_lock(%s)", (key,), idempotent=False)
        return self._one("SELECT 1 FROM blobs WHERE lineage = %s AND start = %s", (lineage, start)) is not None

    def append_probe(self, oid: bytes, lineage: bytes | None, start: int) -> tuple[BlobRow | None, bool]:
        """The piece, the run's lock and its tip in one pipeline (one round trip, with
        whatever the transaction queued before). Each statement of a pipeline reads
        its own snapshot (READ COMMITTED), taken when it starts: the tip is looked up
        after the lock is granted, so it sees the run as the previous holder left it."""
        if lineage is None or not self._in_write:
            return super().append_probe(oid, lineage, start)
        found: list[tuple | None] = []
        self._defer(f"SELECT {_BLOB_COLS} FROM blobs WHERE id = %s", (oid,), on_result=lambda c: found.append(c.fetchone()))
        self._defer("SELECT pg_advisory_xact_lock(%s)", (_lock_key("lineage", self.schema, lineage),))
        taken = self._one("SELECT 1 FROM blobs WHERE lineage = %s AND start = %s", (lineage, start), idempotent=False)
        same = _blob(found[0]) if found else None
        return same, same is None and taken is not None

    def lineage_pieces(self, lineage: bytes, lo: int, hi: int) -> list[BlobRow]:
        """Pieces of a run that hold bytes in ``[lo, hi)``, in order."""
        first = self._one("SELECT max(start) FROM blobs WHERE lineage = %s AND start <= %s", (lineage, lo))
        floor = first[0] if first and first[0] is not None else lo
        rows = self._all(
            f"SELECT {_BLOB_COLS} FROM blobs WHERE lineage = %s AND start >= %s AND start < %s ORDER BY start",
            (lineage, floor, hi),
        )
        return [BlobRow(*r) for r in rows]

    def get_tree(self, oid: bytes) -> bytes | None:
        if self._in_write and oid in self._pre_trees:  # fetched with the ref's lock (immutable)
            return self._pre_trees[oid]
        self.counters["tree_reads"] += 1
        row = self._one("SELECT data FROM trees WHERE id = %s", (oid,))
        return None if row is None else row[0]

    def blob_chain(self, oid: bytes, limit: int) -> list[BlobRow]:
        # One recursive query down the delta bases instead of a statement per link.
        self.counters["blob_reads"] += 1
        rows = self._all(
            "WITH RECURSIVE chain(n, id, kind, base, lineage, start, size, depth, data) AS ("
            f" SELECT 1, {_BLOB_COLS} FROM blobs WHERE id = %s"
            " UNION ALL SELECT chain.n + 1, b.id, b.kind, b.base, b.lineage, b.start, b.size, b.depth, b.data"
            " FROM chain JOIN blobs b ON b.id = chain.base WHERE chain.kind = 'D' AND chain.n < %s)"
            f" SELECT {_BLOB_COLS} FROM chain ORDER BY n",
            (oid, limit),
        )
        return [BlobRow(*r) for r in rows]

    def get_trees(self, oids: list[bytes]) -> dict[bytes, bytes]:
        have = {oid: self._pre_trees[oid] for oid in oids if oid in self._pre_trees} if self._in_write else {}
        rest = [oid for oid in oids if oid not in have]
        if rest:
            have.update(self._all("SELECT id, data FROM trees WHERE id = ANY(%s::bytea[])", (rest,)))
        return have

    def put_tree(self, oid: bytes, data: bytes) -> None:
        self._defer("INSERT INTO trees(id, data) VALUES (%s,%s) ON CONFLICT (id) DO NOTHING", (oid, data))

    def put_trees(self, rows: list[tuple[bytes, bytes]]) -> None:
        """A commit's new tree nodes (one per level) in one statement."""
        if rows:
            self._defer(_PUT_TREES, ([oid for oid, _ in rows], [data for _, data in rows]))

    def get_commit(self, oid: bytes) -> tuple[int, bytes] | None:
        if self._in_write and oid in self._head_commit:  # read with lock_ref (commits never change)
            return self._head_commit[oid]
        self.counters["commit_reads"] += 1
        return self._one("SELECT seq, data FROM commits WHERE id = %s", (oid,))

    def commit_at(self, seq: int) -> tuple[bytes, bytes] | None:
        return self._one("SELECT id, data FROM commits WHERE seq = %s", (seq,))

    def put_commit(self, oid: bytes, parent: bytes | None, data: bytes) -> int:
        row = self._one(
            "INSERT INTO commits(id, parent, data, parent_seq) VALUES (%s,%s,%s, (SELECT seq FROM commits WHERE id = %s))"
            " ON CONFLICT (id) DO NOTHING RETURNING seq",
            (oid, parent, data, parent),
            idempotent=False,
        )
        if row is not None:
            return row[0]
        return cast(tuple[int, bytes], self.get_commit(oid))[0]  # ON CONFLICT: it is there

    def commits_with_prefix(self, prefix: bytes, limit: int) -> list[bytes]:
        hi = (int.from_bytes(prefix, "big") + 1).to_bytes(len(prefix) + 1, "big")[-len(prefix) :]
        if hi <= prefix:  # prefix was all 0xff
            rows = self._all("SELECT id FROM commits WHERE id >= %s ORDER BY id LIMIT %s", (prefix, limit))
        else:
            rows = self._all(
                "SELECT id FROM commits WHERE id >= %s AND id < %s ORDER BY id LIMIT %s", (prefix, hi, limit)
            )
        return [r[0] for r in rows]

    def first_parent(self, oid: bytes, steps: int) -> bytes | None:
        row = self._one(
            """
            WITH RECURSIVE walk(seq, n) AS (
                SELECT seq, 0 FROM commits WHERE id = %s
                UNION ALL
                SELECT c.parent_seq, walk.n + 1 FROM walk JOIN commits c ON c.seq = walk.seq
                WHERE walk.n < %s AND c.parent_seq IS NOT NULL
            )
            SELECT id FROM commits WHERE seq = (SELECT seq FROM walk WHERE n = %s)
            """,
            (oid, steps, steps),
        )
        return None if row is None else row[0]

    # ------------------------------------------------------------ refs

    def get_ref(self, name: str) -> bytes | None:
        row = self._one("SELECT target FROM refs WHERE name = %s", (name,))
        target = None if row is None else row[0]
        if not self._in_write:  # committed, so a fair guess for the next commit
            self._seen_refs[name] = target
        return target

    def get_refs(self, names: Sequence[str]) -> dict[str, bytes]:
        found = {name: target for name, target in self._all("SELECT name, target FROM refs WHERE name = ANY(%s)", (list(names),))}
        if not self._in_write:
            for name in names:
                self._seen_refs[name] = found.get(name)
        return found

    def guess_ref(self, name: str) -> bytes | None:
        """The target this handle saw last, without a round trip or a lock; ``write_commit``'s
        compare-and-swap checks it. Unknown (first commit, after a rollback): ``lock_ref``."""
        if self._in_write and not self._exclusive:
            if name in self._txn_refs:  # moved earlier in this transaction (a group)
                return self._txn_refs[name]
            if name in self._seen_refs:
                target = self._seen_refs[name]
                fresh = target is not None and target in self._pre_commits  # learned from a refusal
                if fresh and self._stale_streak.get(name, 0) < _GUESSES:
                    # The commit again at once on the head the refusal returned (with what
                    # it reads): one round trip, no lock held while this client computes.
                    self._head_commit[cast(bytes, target)] = self._pre_commits[cast(bytes, target)]
                    self._fresh_guess.add(name)
                elif self._lock_next.get(name, 0) > 0:
                    self._lock_next[name] -= 1
                    return self.lock_ref(name)
                self._guessed[name] = target
                self._guessing.add(name)
                return target
        return self.lock_ref(name)

    def write_commit(self, c: CommitWrite) -> Callable[[], int]:
        """The whole commit in one call of ``memrev_commit``, queued: it goes with ``COMMIT``."""
        answer: list[int] = []
        args: tuple[Any, ...] = (
            c.ref, c.branch, c.old, c.id, c.data, _lock_key("ref", self.schema, c.ref),
            [r.path for r in c.rows], [r.blob for r in c.rows], [r.size for r in c.rows],
            [is_directory_key(r.path) for r in c.rows], [c.prev2.get(r.path) for r in c.rows],
        )
        # The commit's blobs and tree nodes, queued just before (nothing read since),
        # go in the same statement.
        blobs: list[tuple] = []
        trees: list[tuple[bytes, bytes]] = []
        queued = self._queued
        while queued and queued[-1][0] in (_PUT_BLOB, _PUT_TREES) and queued[-1][3] is None:
            sql, row, _, _ = queued.pop()
            if sql == _PUT_BLOB:
                blobs.insert(0, row)
            else:
                trees[:0] = zip(*row, strict=True)
        sql = _COMMIT_CALL
        if blobs or trees:
            sql = _COMMIT_WITH_OBJECTS
            columns = [list(col) for col in zip(*blobs, strict=True)] if blobs else [[] for _ in range(8)]
            args = (*columns, [oid for oid, _ in trees], [data for _, data in trees], *args)
        self._defer(sql, args, on_result=lambda cursor: answer.append(cast(tuple[int], cursor.fetchone())[0]))
        self._txn_refs[c.ref] = c.id
        self.counters["commit_attempts"] += 1

        def seq() -> int:
            if not answer:  # still queued (a group's next commit wants it): send it now
                self._flush()
            return answer[0]

        return seq

    def lock_ref(self, name: str) -> bytes | None:
        """The ref's target, with the ref locked until the transaction ends (even if it does not exist)."""
        cursors = self._run(lambda c: self._lock_and_read_head(c, name), idempotent=False)
        self._ref_locked = self._ref_locked or self._in_write
        row = cursors[0].fetchone()
        head = cursors[1].fetchone() if len(cursors) > 1 else None
        if head is not None:
            self._head_commit[head[0]] = (head[1], head[2])
        if len(cursors) > 2:
            self._prefetched(cursors[2].fetchall())
        if row is not None:
            # Row lock granted: a writer that held it has committed, FOR UPDATE
            # returned its target, and our next statements see its rows.
            self._seen_refs[name] = row[0]
            return row[0]
        # No row to lock: serialize the creators of this ref on an advisory lock,
        # then look again in a new statement (at READ COMMITTED a statement's
        # snapshot is taken when it starts, which must be after the lock).
        self._one("SELECT pg_advisory_xact_lock(%s)", (_lock_key("ref", self.schema, name),), idempotent=False)
        row = self._one("SELECT target FROM refs WHERE name = %s FOR UPDATE", (name,), idempotent=False)
        self._seen_refs[name] = None if row is None else row[0]
        return self._seen_refs[name]

    def _lock_and_read_head(self, conn: psycopg.Connection, name: str) -> tuple[psycopg.Cursor, ...]:
        """``FOR UPDATE`` on the ref and, when it goes in the queue's pipeline anyway (the
        transaction's first round trip), the head commit's row, read once the lock is granted
        (a new statement: at READ COMMITTED it sees the commit of the writer it waited for).
        The commit about to be computed on that head needs it: one round trip fewer."""
        lock = conn.cursor(binary=True).execute("SELECT target FROM refs WHERE name = %s FOR UPDATE", (name,))
        if conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF:
            return (lock,)
        head = conn.cursor(binary=True).execute(
            "SELECT id, seq, data FROM commits WHERE id = (SELECT target FROM refs WHERE name = %s)", (name,)
        )
        want = self._want
        if want is None or want[0] != name:
            return lock, head
        nodes = conn.cursor(binary=True).execute(_PATH_NODES, (name, *want[1:]))
        return lock, head, nodes

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        if old is None:
            if self._in_write:  # the lock lock_ref takes for a missing ref (no-op after lock_ref)
                self._one("SELECT pg_advisory_xact_lock(%s)", (_lock_key("ref", self.schema, name),), idempotent=False)
            moved = "INSERT INTO refs(name, target) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING RETURNING name"
            args: tuple = (name, new)
        else:
            moved = "UPDATE refs SET target = %s WHERE name = %s AND target = %s RETURNING name"
            args = (new, name, old)
        notify = f"WITH moved AS ({moved}) SELECT pg_notify('{CHANNEL}', name) FROM moved"
        row = self._one(notify, args, idempotent=False)
        if row is not None:
            (self._txn_refs if self._in_write else self._seen_refs)[name] = new
        return row is not None

    def delete_ref(self, name: str) -> None:
        (self._txn_refs if self._in_write else self._seen_refs)[name] = None
        self._one(
            "WITH gone AS (DELETE FROM refs WHERE name = %s RETURNING name)"
            f" SELECT pg_notify('{CHANNEL}', name) FROM gone",
            (name,),
            idempotent=False,
        )

    def list_refs(self, prefix: str) -> dict[str, bytes]:
        return dict(self._all("SELECT name, target FROM refs WHERE starts_with(name, %s)", (prefix,)))

    # ------------------------------------------------------------ derived indexes

    def head_get(self, branch: str, path: str) -> HeadRow | None:
        row = self._one("SELECT path, blob, size, seq FROM head WHERE branch = %s AND path = %s", (branch, path))
        return None if row is None else HeadRow(*row)

    def head_put(self, branch: str, rows: list[HeadRow]) -> None:
        self._defer(
            """
            INSERT INTO head(branch, path, blob, size, seq) VALUES (%s,%s,%s,%s,%s)
            ON CONFLICT (branch, path) DO UPDATE SET blob = excluded.blob, size = excluded.size, seq = excluded.seq
            """,
            [(branch, r.path, r.blob, r.size, r.seq) for r in rows],
            many=True,
        )

    def head_all(self, branch: str) -> list[HeadRow]:
        """Every head row of ``branch``, tombstones included."""
        rows = self._all("SELECT path, blob, size, seq FROM head WHERE branch = %s", (branch,))
        return [HeadRow(*r) for r in rows]

    def scan_head(self, branch: str, tombstones: bool = False) -> Iterator[HeadRow]:
        """The branch's head rows that hold a file (all of them with ``tombstones``), a page
        at a time (keyset on the primary key)."""
        last = ""  # sorts before every path (COLLATE "C")
        while rows := self._all(
            "SELECT path, blob, size, seq FROM head WHERE branch = %s AND path > %s ORDER BY path LIMIT %s",
            (branch, last, _SCAN_PAGE),
        ):
            yield from (HeadRow(*r) for r in rows if tombstones or r[1] is not None)
            last = rows[-1][0]

    def head_rows(self, branch: str) -> list[HeadRow]:
        rows = self._all("SELECT path, blob, size, seq FROM head WHERE branch = %s AND blob IS NOT NULL", (branch,))
        return [HeadRow(*r) for r in rows]

    def head_clear(self, branch: str) -> None:
        self._exec("DELETE FROM head WHERE branch = %s", (branch,))

    def change_put(self, rows: Sequence[ChangeRowLike]) -> None:
        self._defer(
            "INSERT INTO changes(path, seq, prev, prev2) VALUES (%s,%s,%s,%s)"
            " ON CONFLICT (path, seq) DO UPDATE SET prev = excluded.prev, prev2 = excluded.prev2",
            list(rows),
            many=True,
        )

    def change_prev(self, path: str, seq: int) -> tuple[int | None, int | None] | None:
        """The previous changes of ``path`` before commit ``seq``: first parent's, merged side's."""
        return self._one("SELECT prev, prev2 FROM changes WHERE path = %s AND seq = %s", (path, seq))

    def change_chain(self, path: str, start: int) -> list[int]:
        """Every change of ``path`` reachable from change ``start`` (both parents), newest first."""
        rows = self._all(
            """
            WITH RECURSIVE v(seq) AS (
                SELECT %s::bigint
                UNION
                SELECT x.seq FROM changes c JOIN v ON c.path = %s AND c.seq = v.seq
                CROSS JOIN LATERAL (VALUES (c.prev), (c.prev2)) AS x(seq)
                WHERE x.seq IS NOT NULL
            )
            SELECT seq FROM v ORDER BY seq DESC
            """,
            (start, path),
        )
        return [r[0] for r in rows]

    def change_rows(self, path: str, upto: int) -> list[ChangeLinkLike]:
        """``(seq, prev, prev2)`` of every change of ``path`` up to commit ``upto``, in one range read."""
        return [tuple(r) for r in self._all("SELECT seq, prev, prev2 FROM changes WHERE path = %s AND seq <= %s", (path, upto))]

    def change_commits(self, path: str, upto: int) -> list[ChangeCommit]:
        rows = self._all(
            "SELECT ch.seq, ch.prev, ch.prev2, c.id, c.data FROM changes ch LEFT JOIN commits c ON c.seq = ch.seq"
            " WHERE ch.path = %s AND ch.seq <= %s",
            (path, upto),
        )
        return list(map(ChangeCommit._make, rows))

    def change_paths(self, path: str, upto: int) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        rows = self._all(
            "SELECT other.seq, other.path FROM changes ch JOIN changes other ON other.seq = ch.seq"
            " WHERE ch.path = %s AND ch.seq <= %s",
            (path, upto),
        )
        for seq, key in rows:
            out.setdefault(seq, []).append(key)
        return out

    def stale_indexes(self) -> set[str]:
        return {r[0] for r in self._all("SELECT name FROM stale", ())}

    def set_index_fresh(self, name: str) -> None:
        self._exec("DELETE FROM stale WHERE name = %s", (name,))

    def commits_at(self, seqs: list[int]) -> list[CommitRow]:
        if not seqs:
            return []
        rows = self._all("SELECT seq, id, data FROM commits WHERE seq = ANY(%s::bigint[])", (list(seqs),))
        return list(map(CommitRow._make, rows))

    def paths_at(self, seqs: list[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        if seqs:
            for seq, path in self._all("SELECT seq, path FROM changes WHERE seq = ANY(%s::bigint[])", (list(seqs),)):
                out.setdefault(seq, []).append(path)
        return out

    def change_before(self, path: str, seq: int) -> int | None:
        row = self._one("SELECT max(seq) FROM changes WHERE path = %s AND seq <= %s", (path, seq))
        return None if row is None else row[0]

    # ------------------------------------------------------------ scans

    def delete_unreachable(self, table: str, keep: set[bytes]) -> int:
        """Delete rows of ``table`` (commits, trees, blobs) whose id is not in ``keep``.

        Only safe while no commit can land between computing ``keep`` and this
        delete: a commit may reuse an unreachable blob (ids are content
        hashes), and its new objects are not in ``keep``. Inside
        ``write(exclusive=True)`` that holds. Inside a plain ``write()`` the
        store lock is taken exclusively here, and then, for ``commits``, every
        ref must still point into ``keep`` (else a commit landed meanwhile:
        ``ConcurrentUpdate``, nothing deleted); ``trees`` and ``blobs`` are
        refused unless ``commits`` was checked first in the same transaction.
        """
        if table not in ("commits", "trees", "blobs"):
            raise ValueError(f"not an object table: {table!r}")
        if not self._in_write:
            raise MemrevError("delete_unreachable runs inside write()")
        if not self._exclusive:
            if table != "commits":
                raise MemrevError("on PostgreSQL, gc deletes commits first, or runs in write(exclusive=True)")
            self._one(f"SELECT pg_advisory_xact_lock({self._store_key})", (), idempotent=False)
            targets = self._all("SELECT target FROM refs WHERE starts_with(name, 'refs/')")
            if any(t not in keep for (t,) in targets):
                raise ConcurrentUpdate("a commit landed while gc was computing what is reachable; run gc again")
            self._exclusive = True  # held to the end of the transaction
        with self._lock:
            self._flush()
            conn = self._live()
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS memrev_keep(id bytea PRIMARY KEY) ON COMMIT DELETE ROWS")
            conn.execute("TRUNCATE memrev_keep")
            with conn.cursor().copy("COPY memrev_keep(id) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["bytea"])
                for oid in keep:
                    copy.write_row((oid,))
            gone = f"NOT EXISTS (SELECT 1 FROM memrev_keep k WHERE k.id = {table}.id)"
            if table == "commits":
                conn.execute(f"DELETE FROM changes WHERE seq IN (SELECT seq FROM commits WHERE {gone})")
            n = conn.execute(f"DELETE FROM {table} WHERE {gone}").rowcount
            conn.execute("TRUNCATE memrev_keep")
            return n

    # Keyset pages: no cursor or snapshot is held open between pages, and the
    # connection is free for other calls while the caller works on a page.

    def iter_commits(self) -> Iterator[CommitRow]:
        last = 0
        while rows := self._all("SELECT seq, id, data FROM commits WHERE seq > %s ORDER BY seq LIMIT %s", (last, _SCAN_PAGE)):
            yield from map(CommitRow._make, rows)
            last = rows[-1][0]

    def clear_indexes(self) -> None:
        self._exec("DELETE FROM changes", ())
        self._exec("DELETE FROM head", ())

    def iter_changes(self) -> Iterator[ChangeRow]:
        return iter(list(map(ChangeRow._make, self._all("SELECT path, seq, prev, prev2 FROM changes ORDER BY seq", ()))))

    def scan_changes(self) -> Iterator[ChangeRow]:
        """Every change row by (seq, path), a page at a time (fsck: never the whole index at once)."""
        rows = self._all("SELECT path, seq, prev, prev2 FROM changes ORDER BY seq, path LIMIT %s", (_SCAN_PAGE,))
        while rows:
            yield from map(ChangeRow._make, rows)
            path, seq = rows[-1][0], rows[-1][1]
            # "seq >= ": changes_by_seq finds the page's start; the row comparison orders within a commit
            rows = self._all(
                "SELECT path, seq, prev, prev2 FROM changes WHERE seq >= %s AND (seq, path) > (%s, %s)"
                " ORDER BY seq, path LIMIT %s",
                (seq, seq, path, _SCAN_PAGE),
            )

    def iter_blobs(self) -> Iterator[BlobRow]:
        """Every blob row, in pages by id (a base may come after the version built on it)."""
        last = b""
        while rows := self._all(f"SELECT {_BLOB_COLS} FROM blobs WHERE id > %s ORDER BY id LIMIT %s", (last, _SCAN_PAGE)):
            yield from (BlobRow(*r) for r in rows)
            last = rows[-1][0]

    def iter_commits_newest_first(self) -> Iterator[CommitRow]:
        rows = self._all("SELECT seq, id, data FROM commits ORDER BY seq DESC LIMIT %s", (_SCAN_PAGE,))
        while rows:
            yield from map(CommitRow._make, rows)
            rows = self._all("SELECT seq, id, data FROM commits WHERE seq < %s ORDER BY seq DESC LIMIT %s", (rows[-1][0], _SCAN_PAGE))

    def first_parent_numbers(self) -> Iterator[FirstParentNumber]:
        last = 0
        while rows := self._all("SELECT seq, parent_seq FROM commits WHERE seq > %s ORDER BY seq LIMIT 500", (last,)):
            yield from map(FirstParentNumber._make, rows)
            last = rows[-1][0]

    def relink_first_parent(self, seq: int, parent: bytes | None, parent_seq: int | None) -> None:
        self._exec("UPDATE commits SET parent = %s, parent_seq = %s WHERE seq = %s", (parent, parent_seq, seq))

    def blob_bases(self, oids: list[bytes]) -> dict[bytes, bytes | None]:
        if not oids:
            return {}
        return dict(self._all("SELECT id, base FROM blobs WHERE id = ANY(%s::bytea[])", (list(oids),)))

    def iter_blob_ids(self) -> Iterator[bytes]:
        return iter([r[0] for r in self._all("SELECT id FROM blobs")])

    def iter_trees(self) -> Iterator[tuple[bytes, bytes]]:
        last = b""
        while rows := self._all("SELECT id, data FROM trees WHERE id > %s ORDER BY id LIMIT %s", (last, _SCAN_PAGE)):
            yield from rows
            last = rows[-1][0]

    # ------------------------------------------------------------ erasure (purge)

    def restack_commit(self, oid: bytes) -> int:
        # seq is GENERATED ALWAYS AS IDENTITY: DEFAULT takes the identity's next value
        row = self._one("UPDATE commits SET seq = DEFAULT WHERE id = %s RETURNING seq", (oid,), idempotent=False)
        if row is None:
            raise KeyError(oid.hex())
        return cast(int, row[0])

    # secure_delete: the default (nothing to switch). VACUUM FULL below writes new
    # files from the live rows only and the old ones are truncated at its commit.

    def reclaim(self) -> None:
        """After a purge committed: ``VACUUM (FULL, ANALYZE)`` of every table of the store,
        then ``VACUUM FULL pg_catalog.pg_statistic``, ``pg_switch_wal()`` and ``CHECKPOINT``,
        each where the role may (superuser; or the database's owner, ``EXECUTE`` on
        ``pg_switch_wal``, ``pg_checkpoint``); else the server's next checkpoint does
        what these would have: flush, and let the old WAL go.

        ``FULL`` writes each table, with its TOAST table and indexes, to new files from
        its live rows; the old files are cut to zero bytes at its commit. ``ANALYZE``
        recomputes the column statistics from those rows: ANALYZE (autovacuum runs it)
        keeps sample values of columns (a payload under 1 kB, a path) in
        ``pg_statistic``. Its old rows may stay, as dead versions, in that catalog's file
        (page pruning usually overwrites them, nothing promises it) until it is rewritten
        too, which only a superuser or the database's owner may do; for another role that
        rewrite is skipped (logged; docs/purge.md).

        ``VACUUM FULL`` takes an ACCESS EXCLUSIVE lock per table, so it waits for every
        open transaction that read the table; other sessions' statements on the table
        queue behind it while it waits. It asks in tries of at most ``_RECLAIM_TRY``
        seconds each (readers queued behind a try get through between tries), for up to
        the session's ``lock_timeout`` in all (``reclaim_wait``), then raises
        ``TransientConflict``: the purge is committed, run it again to reclaim.
        A role that does not own the tables cannot reclaim at all (``MemrevError``).
        What recycled WAL segments, a WAL archive, replicas and backups keep is beyond it
        (docs/purge.md)."""
        with self._lock:
            if self._in_write or self._in_snapshot:
                raise MemrevError("reclaim() runs outside write() and read_snapshot() (VACUUM cannot run in a transaction)")
            deadline = time.monotonic() + self.reclaim_wait
            warnings: list[str] = []
            before = self._filenodes()
            for table in _TABLES:
                self._vacuum("(FULL, ANALYZE)", self.schema, table, deadline, warnings)
            # VACUUM FULL writes each table to a new file; one it skipped with a warning (a
            # role that does not own it) kept its file, dead rows and all.
            after = self._filenodes()
            kept = [t for t in _TABLES if after.get(f"{self.schema}.{t}") == before.get(f"{self.schema}.{t}")]
            if kept:
                said = f" ({warnings[0]})" if warnings else ""
                raise MemrevError(
                    f"this PostgreSQL role may not VACUUM {', '.join(kept)} of schema {self.schema!r}{said}: the purge"
                    " is committed, its bytes are not reclaimed; run it again as the tables' owner (or a superuser)"
                )
            self._vacuum("FULL", "pg_catalog", "pg_statistic", deadline, warnings)
            if self._filenodes().get("pg_catalog.pg_statistic") == after.get("pg_catalog.pg_statistic"):
                log.warning(
                    "purge: this PostgreSQL role may not rewrite pg_catalog.pg_statistic (superuser or the"
                    " database's owner may): old column statistics of the store's tables may keep purged values"
                    " in its file until it is (VACUUM FULL pg_catalog.pg_statistic)"
                )
            # A new WAL segment, then a checkpoint whose redo point is in it: the segments that
            # hold the purged rows (their inserts, the purge's full-page images) are no longer
            # needed for crash recovery; the server recycles them (renamed, not overwritten) or,
            # with wal_recycle=off, unlinks them, unless archiving, wal_keep_size or a
            # replication slot still holds them (docs/purge.md).
            for stmt in ("SELECT pg_switch_wal()", "CHECKPOINT"):
                try:
                    self._live().execute(stmt)
                except pg_errors.InsufficientPrivilege:
                    pass  # superuser's (or granted: pg_checkpoint, EXECUTE); the server's next checkpoint will do
                except psycopg.Error as e:
                    raise MemrevError(f"PostgreSQL: {stmt} after a purge failed: {e}".strip()) from e

    reclaim_wait = float(_SESSION["lock_timeout"].removesuffix("s"))  # seconds, in all

    def _filenodes(self) -> dict[str, int]:
        """``schema.table`` -> the number of the file it is in now: the store's tables and pg_statistic."""
        rows = self._all(
            "SELECT n.nspname || '.' || c.relname, pg_relation_filenode(c.oid) FROM pg_catalog.pg_class c"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE (n.nspname = %s AND c.relname = ANY(%s::text[]) AND c.relkind = 'r')"
            " OR c.oid = 'pg_catalog.pg_statistic'::regclass",
            (self.schema, list(_TABLES)),
        )
        return {name: node for name, node in rows}

    def _vacuum(self, options: str, schema: str, table: str, deadline: float, warnings: list[str]) -> None:
        """``VACUUM <options> schema.table`` in tries until ``deadline`` (see ``reclaim``)."""
        stmt = pg_sql.SQL("VACUUM " + options + " {}").format(pg_sql.Identifier(schema, table))
        shown = f"{schema}.{table}"

        def notice(diag: psycopg.errors.Diagnostic) -> None:
            if diag.severity_nonlocalized == "WARNING":  # "skipping ...": the role does not own it
                warnings.append(diag.message_primary or "")

        reconnected = False
        while True:
            conn = self._live()
            wait = max(0.001, min(_RECLAIM_TRY, deadline - time.monotonic()))
            conn.add_notice_handler(notice)
            try:
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(wait * 1000)}ms",))
                conn.execute(stmt)
            except pg_errors.LockNotAvailable:
                if time.monotonic() < deadline:
                    time.sleep(min(_RECLAIM_PAUSE, max(0.0, deadline - time.monotonic())))
                    continue
                raise TransientConflict(
                    f"other sessions kept {shown} in use for {self.reclaim_wait:.0f} s: the purge is committed, its"
                    " bytes are not all reclaimed yet (dead row versions are left in the table files); run it again"
                ) from None
            except (pg_errors.DiskFull, pg_errors.ReadOnlySqlTransaction) as e:
                refused = StoreFull if isinstance(e, pg_errors.DiskFull) else ReadOnlyStore
                raise refused(
                    f"PostgreSQL refused VACUUM FULL of {shown}: the purge is committed, its bytes are not all"
                    f" reclaimed ({e})".strip()
                ) from e
            except psycopg.OperationalError as e:
                if not reconnected and not self._closed and conn.closed:  # dropped: VACUUM may simply run again
                    reconnected = True
                    continue
                raise MemrevError(
                    f"PostgreSQL: VACUUM FULL of {shown} failed: the purge is committed, its bytes are not all"
                    f" reclaimed yet; run it again ({e})".strip()
                ) from e
            except psycopg.Error as e:
                raise MemrevError(
                    f"PostgreSQL refused VACUUM FULL of {shown}: the purge is committed, its bytes are not all"
                    f" reclaimed ({e})".strip()
                ) from e
            finally:
                conn.remove_notice_handler(notice)
                if not conn.closed:
                    try:
                        conn.execute("SELECT set_config('lock_timeout', %s, false)", (_SESSION["lock_timeout"],))
                    except psycopg.Error:
                        conn.close()  # a session left without its settings is not used again
            break

    def storage_files(self) -> list[str]:
        return []  # the server's files, not the client's: the raw byte scan cannot read them

    def storage_bytes(self) -> int:
        """``pg_total_relation_size`` of the store's tables (TOAST and indexes included)."""
        row = self._one(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_catalog.pg_class c"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = ANY(%s::text[]) AND c.relkind = 'r'",
            (self.schema, list(_TABLES)),
        )
        return 0 if row is None else int(row[0])

    # ------------------------------------------------------------ change notification

    def wait_for_change(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when some ref moved (``NOTIFY memrev_refs``).

        Runs on its own ``LISTEN`` connection, opened on first use, so it never
        waits behind a commit. False on timeout, on ``close()``, or when the
        server cannot be reached (after waiting out ``timeout``). True at once
        when the ``LISTEN`` was just (re)established, on first use or after
        the server dropped the connection: a ref may have moved while nobody
        listened. The caller re-reads its branch head after every return, so a
        notification lost to a failure costs at most one ``timeout``.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._listen_lock:
            if self._closed:
                return False
            try:
                if self._listener is None or self._listener.closed:
                    self._listen()
                    return True
                pg = self._listener.pgconn
                while True:
                    pg.consume_input()
                    got = False
                    while pg.notifies() is not None:
                        got = True
                    if got:
                        return True
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    waits: list[Any] = [pg.socket, self._wake_r]  # a descriptor and a socket
                    ready, _, _ = select.select(waits, [], [], remaining)
                    if self._wake_r in ready:
                        return False
            except (psycopg.Error, MemrevError, OSError):
                if self._listener is not None:
                    self._listener.close()
                    self._listener = None
            try:  # the server dropped us (restart, failover): listen again at once
                self._listen()
                return True
            except (psycopg.Error, MemrevError, OSError):
                remaining = deadline - time.monotonic()
                if remaining > 0:  # do not spin while the server is away
                    select.select([self._wake_r], [], [], remaining)
                return False

    def _listen(self) -> None:
        conn = self._connect()
        try:
            conn.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            conn.close()
            raise
        self._listener = conn
