"""Helper functions the test modules share (fixtures are in ``conftest.py``).

``from helpers import snapshot, spawn`` works from any test module: pytest
puts ``tests/`` on ``sys.path`` (rootdir conftest, no ``__init__.py``).
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import types
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hypothesis import strategies as st

import memrev
from memrev import VersionedStore

# The memrev under test (the worktree's src/ when PYTHONPATH names it), for child processes.
SRC = str(Path(memrev.__file__).resolve().parents[1])


async def snapshot(store: Any, rev: str | None = None) -> dict[str, str]:
    """Every file of the tree (path -> content) at ``rev`` (default: the handle's head)."""
    out: dict[str, str] = {}

    async def walk(folder: str) -> None:
        for name in await store.list(folder, rev=rev):
            path = folder.rstrip("/") + "/" + name.rstrip("/")
            if name.endswith("/"):
                await walk(path)
            else:
                text = await store.read(path, rev=rev)
                assert text is not None, f"{path} is listed but reads as missing"
                out[path] = text

    await walk("/")
    return out


async def head(store: VersionedStore) -> str:
    return await store.resolve("HEAD")


async def ids(store: VersionedStore, path: str | None = None, rev: str | None = None) -> list[str]:
    """The commit ids of ``store.log(path, rev=rev)``, newest first."""
    return [c.id for c in await store.log(path, rev=rev)]


def step_lists(paths: list[str], words: list[str], *, max_lines: int) -> st.SearchStrategy:
    """Lists of up to 8 steps for ``apply_steps``: whole-file writes of up to ``max_lines``
    lines of ``words``, one-line appends, deletes of a file or of the folder ``/d``."""
    line = st.sampled_from(words).map(lambda w: w + "\n")
    text = st.lists(line, max_size=max_lines).map("".join)
    step = st.one_of(
        st.tuples(st.just("write"), st.sampled_from(paths), text),
        st.tuples(st.just("append"), st.sampled_from(paths), line),
        st.tuples(st.just("delete"), st.sampled_from([*paths, "/d"])),
    )
    return st.lists(step, max_size=8)


async def apply_steps(store: VersionedStore, steps) -> None:
    """Run generated ``("write", path, text)`` / ``("append", path, text)`` / ``("delete", path)`` steps."""
    for name, path, *rest in steps:
        if name == "write":
            await store.write(path, rest[0])
        elif name == "append":
            await store.append(path, rest[0])
        else:
            await store.delete(path)


class FreshStore:
    """``async with FreshStore(**kw) as store``: a new store in a new temporary folder.

    For hypothesis examples, where pytest's ``tmp_path`` (one per test, not per
    example) would carry one example's store into the next. ``.tmp`` is the folder.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    async def __aenter__(self) -> VersionedStore:
        self.tmp = tempfile.TemporaryDirectory(prefix="memrev-test-")
        self.store = VersionedStore(os.path.join(self.tmp.name, "store"), **self.kwargs)
        return self.store

    async def __aexit__(self, *exc: Any) -> None:
        self.store.close()
        self.tmp.cleanup()


def own_copy(test: Any) -> Any:
    """An inherited test (of the conformance suite) as a function of its own, for one class to
    mark: ``pytest.mark.slow(test)`` itself would mark the test on every backend's class."""
    copy = types.FunctionType(test.__code__, test.__globals__, test.__name__, test.__defaults__, test.__closure__)
    copy.__dict__.update(test.__dict__)
    copy.__qualname__ = test.__qualname__
    return copy


def spawn(script: str, *args: str, stdin: bool = False) -> subprocess.Popen:
    """Run ``script`` (dedented) in a new Python process on the memrev under test; pipes for its output."""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


_SYNC = b"S\x00\x00\x00\x04"  # the protocol's Sync message: the end of a pipeline


class RoundTripRelay:
    """A loopback TCP relay to a PostgreSQL server (connect to ``url``).

    It counts, per client connection, how many times the server answered after the
    client last spoke: the round trips (``trips``, by client port). Once ``armed``, it
    passes the client's next pipeline (up to its Sync, or a message holding ``COMMIT``)
    on to the server and then drops that connection instead of passing the answer back
    (and disarms): armed before a commit of one round trip, the server has the whole
    commit (a pipeline's implicit transaction commits at its Sync), the client never
    hears how it ended.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._target = (parts.hostname, parts.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        user = f"{parts.username}@" if parts.username else ""
        self.url = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self._listener.getsockname()[1]}"))
        self.trips: dict[int, int] = {}  # client port -> round trips
        self.armed = False
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, (_, port) = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            thread = threading.Thread(target=self._pump, args=(client, server, port), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _pump(self, client: socket.socket, server: socket.socket, port: int) -> None:
        client_spoke = dropping = False
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [])
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        server.sendall(data)  # the rest of a pipeline too (its Sync may come later)
                        client_spoke = True
                        with self._lock:
                            if self.armed and (b"COMMIT" in data or _SYNC in data):
                                self.armed, dropping = False, True
                    elif dropping:
                        return  # the server committed and answered; the answer never reaches the client
                    else:
                        # Counted before it is passed on: once the client has the answer it may
                        # read the count, which must include this round trip already.
                        if client_spoke:  # the answer to what the client sent since the last one
                            with self._lock:
                                self.trips[port] = self.trips.get(port, 0) + 1
                            client_spoke = False
                        client.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
