"""The conformance suite's hooks and fixtures (``ConformanceBase``), and the helpers its areas share."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ...backends import open_backend as _default_open_backend
from ...backends.base import Backend

_names = itertools.count()


def make_oid(tag: str, n: int = 0) -> bytes:
    """A 20-byte id, readable in failure messages."""
    raw = f"{tag}{n}".encode()
    return (raw + b"\x00" * 20)[:20]


def fresh_branch(stem: str) -> str:
    return f"{stem}{os.getpid()}x{next(_names)}"


def in_thread(fn) -> tuple[threading.Thread, list]:
    """Start ``fn`` in a thread; the list receives its result or exception."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def joined(t: threading.Thread, out: list, what: str, timeout: float = 60.0) -> Any:
    t.join(timeout)
    assert not t.is_alive(), f"{what}: still blocked after {timeout} s"
    assert len(out) == 1, f"{what}: no result"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


class ConformanceBase:
    """The hooks and fixtures every area of the suite uses (see :mod:`memrev.testing.conformance`)."""

    # ================================================================ hooks

    def make_location(self, tmp_path: Path) -> str:
        """A location string for a new, empty store. Called once per test."""
        raise NotImplementedError(
            f"{type(self).__name__} must define make_location(tmp_path) or override the memrev_location fixture"
        )

    def drop_location(self, location: str) -> None:
        """Clean up after a test (drop a database, ...). Default: nothing."""

    def open_backend(self, location: str, *, durability: str = "normal") -> Backend:
        """Open the backend under test on ``location``."""
        return _default_open_backend(location, durability=durability)

    # ================================================================ fixtures

    @pytest.fixture
    def memrev_location(self, tmp_path: Path) -> Iterator[str]:
        location = self.make_location(tmp_path)
        yield location
        self.drop_location(location)

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def memrev_backend(self, memrev_location: str) -> Iterator[Backend]:
        backend = self.open_backend(memrev_location)
        yield backend
        backend.close()

    def _second_backend(self, location: str) -> Backend:
        return self.open_backend(location)

