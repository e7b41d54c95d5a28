"""A throwaway PostgreSQL server on loopback, for tests and benchmarks.

``PgServer`` runs ``initdb`` into a temporary folder and starts ``pg_ctl`` on
127.0.0.1 with a free port, its Unix socket in the same folder, trust
authentication. As root (CI) ``initdb`` and the server refuse to run, so they
run as the ``postgres`` OS user that Debian's package creates (else
``nobody``), with the folder handed over to that user.

memrev's own test fixtures (``memrev.testing.fixtures``) start it with
``durable=False`` (no fsync: nothing must outlive the run); the benchmark
with ``durable=True`` (``fsync``, ``full_page_writes`` and
``synchronous_commit`` on, as a real deployment). A third-party backend
author can use it the same way to run ``memrev.testing.conformance`` against
PostgreSQL. Needs the server binaries (Debian: ``apt-get install
postgresql``) and psycopg 3 (``pip install 'memrev[postgres]'``).
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

SUPERUSER = "memrev"


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
    """Why a server cannot be started here, or ``None``."""
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
    """The account to run the server as: ``None`` for "ourselves" (not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL")


class PgServer:
    """One running server; ``stop()`` (also at interpreter exit) removes everything."""

    def __init__(self, *, durable: bool = False, parent_dir: str | None = None, prefix: str = "memrev-pg-") -> None:
        bins = find_binaries()
        if bins is None:
            raise FileNotFoundError("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")
        self.initdb, self.pg_ctl = bins
        self.user = _server_user()
        self.dir = Path(tempfile.mkdtemp(prefix=prefix, dir=parent_dir))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = 0
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "fsync": "on" if durable else "off",
            "full_page_writes": "on" if durable else "off",
            "synchronous_commit": "on",
            "max_connections": "60",
        }
        self._running = False
        self._dbs = itertools.count()
        if self.user is not None:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        atexit.register(self.stop)
        try:
            self._run(
                [self.initdb, "-D", str(self.data), "-U", SUPERUSER, "--auth=trust"]
                + ["-E", "UTF8", "--locale=C", "--no-sync"]  # the empty cluster need not survive a crash
            )
            self._start()
        except BaseException:
            self.stop()
            raise

    def _run(self, cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        kw: dict[str, Any] = {}
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
            opts = f"-p {self.port} -k {self.dir} " + " ".join(f"-c {k}={v}" for k, v in self.settings.items())
            try:
                self._run([self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "start"])
                self._running = True
                return
            except RuntimeError as e:
                last = e
        raise last  # type: ignore[misc]

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, prefix: str = "t", *, linguistic: bool = False) -> str:
        """A new, empty database; its URL.

        ``linguistic``: default collation ICU ``en-US`` (where the server has
        ICU), under which "a-" sorts after "a/" and case hardly counts, so
        range scans that forgot ``COLLATE "C"`` give wrong answers.
        """
        import psycopg

        name = f"{prefix}{os.getpid()}_{next(self._dbs)}"
        create = f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8'
        with psycopg.connect(self.url(), autocommit=True) as conn:
            try:
                if not linguistic:
                    raise psycopg.Error
                conn.execute(create + " LOCALE_PROVIDER icu ICU_LOCALE 'en-US'")
            except psycopg.Error:
                conn.execute(create)
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def describe(self) -> dict:
        """Server version and the settings that matter for measurements, as the server reports them."""
        import psycopg

        def show(conn: Any, setting: str) -> str:
            row = conn.execute(f"SHOW {setting}").fetchone()
            assert row is not None, setting  # SHOW always answers one row
            return row[0]

        with psycopg.connect(self.url(), autocommit=True) as conn:
            out = {"version": show(conn, "server_version")}
            for k in ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method",
                      "shared_buffers", "listen_addresses", "max_connections"):  # fmt: skip
                out[k] = show(conn, k)
        return out

    def stop(self) -> None:
        if self._running:
            self._running = False
            for mode in ("fast", "immediate"):
                try:
                    self._run([self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop"], timeout=60)
                    break
                except Exception:  # noqa: BLE001 - best effort at exit
                    continue
        shutil.rmtree(self.dir, ignore_errors=True)
