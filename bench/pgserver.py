"""A throwaway PostgreSQL server for the benchmark (one per ``bench/run.py`` run).

Same approach as tests/pg_server.py (not imported from there): ``initdb`` into
a temporary folder, ``pg_ctl start`` on 127.0.0.1 with a free port, its Unix
socket in the same folder, trust authentication. As root, ``initdb`` and the
server refuse to run, so they run as the ``postgres`` OS user (else
``nobody``) with the folder handed over to that user.

Unlike the tests' server this one is durable as configured by default:
``fsync=on``, ``full_page_writes=on``, ``synchronous_commit=on`` (memrev sets
``synchronous_commit=on`` on its sessions too). Clients reach it over local
TCP (127.0.0.1), as a client on another host would (minus the network).
Only ``initdb`` uses ``--no-sync`` (the empty cluster need not survive a crash).
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "memrev"

SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "on",
    "full_page_writes": "on",
    "synchronous_commit": "on",
    "max_connections": "60",
}


def find_binaries() -> tuple[str, str] | None:
    """``(initdb, pg_ctl)`` from PATH, else the newest /usr/lib/postgresql/<ver>/bin."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return initdb, pg_ctl
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]), reverse=True):
        i, p = os.path.join(bindir, "initdb"), os.path.join(bindir, "pg_ctl")
        if os.access(i, os.X_OK) and os.access(p, os.X_OK):
            return i, p
    return None


def unavailable_reason() -> str | None:
    """Why memrev-pg cannot be benchmarked here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg (3) is not installed"
    if find_binaries() is None:
        return "initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL")


def db_name_for(tag: str) -> str:
    """A database name derived from a workdir name (deterministic: W1 and history share it)."""
    return "b_" + re.sub(r"[^a-z0-9_]", "_", tag.lower())[:55]


class PgServer:
    def __init__(self, parent_dir: str | None = None) -> None:
        bins = find_binaries()
        if bins is None:
            raise FileNotFoundError("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")
        self.initdb, self.pg_ctl = bins
        self.user = _server_user()
        self.dir = Path(tempfile.mkdtemp(prefix="memrev-bench-pg-", dir=parent_dir))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = 0
        self._running = False
        if self.user is not None:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        atexit.register(self.stop)
        try:
            self._run(
                [self.initdb, "-D", str(self.data), "-U", SUPERUSER, "--auth=trust"]
                + ["-E", "UTF8", "--locale=C", "--no-sync"]
            )
            self._start()
        except BaseException:
            self.stop()
            raise

    def _run(self, cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        kw = {}
        if self.user is not None:
            kw = dict(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        env = {**os.environ, "LC_ALL": "C"}
        proc = subprocess.run(cmd, cwd=self.dir, capture_output=True, text=True, timeout=timeout, env=env, **kw)
        if proc.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}{log}")
        return proc

    def _start(self) -> None:
        last: Exception | None = None
        for _ in range(3):  # the free port may be taken between the probe and the bind
            self.port = _free_port()
            opts = f"-p {self.port} -k {self.dir} " + " ".join(f"-c {k}={v}" for k, v in SERVER_SETTINGS.items())
            try:
                self._run([self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "start"])
                self._running = True
                return
            except RuntimeError as e:
                last = e
        raise last  # type: ignore[misc]

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def describe(self) -> dict:
        """Server version and the settings that matter for the numbers, as the server reports them."""
        import psycopg

        out = {}
        with psycopg.connect(self.url(), autocommit=True) as conn:
            out["version"] = conn.execute("SHOW server_version").fetchone()[0]
            for k in ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method",
                      "shared_buffers", "listen_addresses", "max_connections"):
                out[k] = conn.execute(f"SHOW {k}").fetchone()[0]
        return out

    def stop(self) -> None:
        if self._running:
            self._running = False
            try:
                self._run([self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"], timeout=60)
            except Exception:  # noqa: BLE001 - best effort at exit
                try:
                    self._run([self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"], timeout=60)
                except Exception:  # noqa: BLE001
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)


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
