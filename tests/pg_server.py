"""A throwaway PostgreSQL server for tests (a helper and its pytest fixtures, not a test).

``PgServer`` runs ``initdb`` into a temporary folder and starts ``pg_ctl`` on
127.0.0.1 with a free port, its Unix socket in the same folder, trust
authentication and no fsync (nothing here must outlive the test run). As root
(CI, this machine) ``initdb`` and the server refuse to run, so they run as the
``postgres`` OS user that Debian's package creates (else ``nobody``), with the
folder handed over to that user; as a normal user they run as that user.

Fixtures: ``pg_server`` (one server per test session) and ``pg_url`` (a new,
empty database per test). Where the binaries or psycopg are missing the tests
that use them skip with the reason, unless ``MEMREV_REQUIRE_POSTGRES=1``, where
they fail: CI sets it so PostgreSQL tests can never silently stop running.
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

import pytest

REQUIRE = os.environ.get("MEMREV_REQUIRE_POSTGRES") == "1"
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_user() -> pwd.struct_passwd | None:
    """The account to run the server as: None for "ourselves" (not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL")


class PgServer:
    def __init__(self) -> None:
        bins = find_binaries()
        if bins is None:
            raise FileNotFoundError("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")
        self.initdb, self.pg_ctl = bins
        self.user = _server_user()
        self.dir = Path(tempfile.mkdtemp(prefix="memrev-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = 0
        self._running = False
        self._dbs = itertools.count()
        if self.user is not None:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        try:
            self._run(
                [self.initdb, "-D", str(self.data), "-U", SUPERUSER, "--auth=trust"]
                + ["-E", "UTF8", "--locale=C", "--no-sync"]
            )
            self._start()
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)

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
            opts = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir}"
                " -c fsync=off -c full_page_writes=off -c synchronous_commit=on"
                " -c max_connections=60 -c shared_buffers=32MB"
            )
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

    def stop(self) -> None:
        if self._running:
            self._running = False
            try:
                self._run([self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"], timeout=60)
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"MEMREV_REQUIRE_POSTGRES=1 but {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason} (apt-get install postgresql, and pip install 'memrev[postgres]')")


@pytest.fixture(scope="session")
def pg_server():
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed")
    if find_binaries() is None:
        _unavailable("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")
    server = PgServer()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer):
    """A fresh, empty database for one test; dropped afterwards."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture(scope="module")
def pg_module_url(pg_server: PgServer):
    """A fresh, empty database shared by the tests of one module; linguistic default collation."""
    url = pg_server.create_database("m", linguistic=True)
    yield url
    pg_server.drop_database(url)
