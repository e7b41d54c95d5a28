"""Adversarial review of the SQLite-side speed work of issue 14 (R1).

Each test pins a defect found in review: it failed before its fix.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

import memrev.repo.model
from memrev import VersionedStore
from memrev.core.objects import CommitData
from memrev.repo.cache import LRU
from memrev.repo.repository import Commit, Repository
from test_bundles_gc import _refused
from test_untrusted_bundles import Forge, leaf

pytestmark = pytest.mark.anyio

PATH = "/memory/notes.md"


async def _store_with_versions(folder, n: int) -> VersionedStore:
    store = VersionedStore(folder)
    for i in range(n):
        await store.write(PATH, f"version {i}\n")
    return store


async def test_a_lazy_commit_read_by_two_threads_at_once_gives_both_its_paths(tmp_path, monkeypatch):
    """Two threads reading one cached ``Commit`` (the log cache shares them between
    callers): the second starts decoding, the first finishes (and drops the change
    keys it decoded from) before the second reads them. The second thread used to
    get ``TypeError: 'NoneType' object is not iterable`` instead of the paths.

    The interleaving is made exact, not left to the scheduler: the first decode
    pauses inside the record's decoding while another thread reads the commit."""
    store = await _store_with_versions(tmp_path / "s", 2)
    try:
        repo = Repository(store._repo.backend)
        log = repo.path_log(PATH, repo.path_start(PATH, repo.head("main"), "main"))
        commit = log[0]
        assert commit.stored_record() is not None  # lazily decoded: the case under test
        inner = memrev.repo.model.commit_fields
        other: dict[str, object] = {}
        calls = 0

        def decode_while_another_thread_reads(record):
            nonlocal calls
            calls += 1
            if calls == 1:  # the outer read: let another thread read the commit in full now

                def read() -> None:
                    try:
                        other["paths"] = commit.paths
                    except Exception as e:  # noqa: BLE001 - what the other thread saw is the finding
                        other["error"] = e

                t = threading.Thread(target=read)
                t.start()
                t.join()
            return inner(record)

        monkeypatch.setattr(memrev.repo.model, "commit_fields", decode_while_another_thread_reads)
        assert commit.paths == (PATH,)
        assert other == {"paths": (PATH,)}
    finally:
        store.close()


async def test_a_commit_is_still_a_dataclass_to_callers(tmp_path):
    """``Commit`` was a frozen dataclass before issue 14 made it decode lazily: code
    that used ``dataclasses.asdict``/``replace``/``fields`` or a positional ``match``
    on it broke (``TypeError: asdict() should be called on dataclass instances``)."""
    store = await _store_with_versions(tmp_path / "s", 2)
    try:
        repo = Repository(store._repo.backend)
        lazy = repo.path_log(PATH, repo.path_start(PATH, repo.head("main"), "main"))[0]
        eager = Repository(store._repo.backend).commit_info(bytes.fromhex(lazy.id))
        for c in (lazy, eager):
            assert dataclasses.is_dataclass(c)
            assert [f.name for f in dataclasses.fields(c)] == list(Commit._NAMES)
            as_dict = dataclasses.asdict(c)
            assert as_dict == {n: getattr(c, n) for n in Commit._NAMES}
            edited = dataclasses.replace(c, message="edited")
            assert edited.message == "edited" and edited.paths == c.paths and edited != c
            match c:
                case Commit(commit_id, parents):
                    assert (commit_id, parents) == (c.id, c.parents)
                case _:
                    pytest.fail("a positional pattern no longer matches a Commit")
    finally:
        store.close()


async def test_a_log_longer_than_the_commit_cache_holds_every_commit(tmp_path):
    """``commit_infos`` built the missing commits into its cache (50,000 entries), then
    read the whole answer back from the cache: a log of more commits than it holds
    (``log()`` of a 100,000-commit store) came back with ``None`` for the commits
    evicted meanwhile. The bound is made small here, as gc's tests shrink ``BATCH``."""
    store = await _store_with_versions(tmp_path / "s", 6)
    try:
        repo = Repository(store._repo.backend)
        repo._infos = LRU(3)
        head = repo.head("main")
        log = repo.log(head)
        assert len(log) == 6 and all(isinstance(c, Commit) for c in log)
        assert [c.id for c in log] == [c.id for c in Repository(store._repo.backend).log(head)]
        seqs = repo.path_versions(PATH, repo.path_start(PATH, head, "main"), 6)
        assert [c.id for c in repo.commits_at(seqs)] == [c.id for c in log]
    finally:
        store.close()


async def test_a_bundle_commit_whose_time_no_date_can_hold_is_refused(tmp_path):
    """An untrusted bundle's commit with a time past year 9999 (a valid, canonical
    record) was imported; every ``log`` showing it then failed with a bare
    ``ValueError: year ... is out of range``, and fsck called the store sound."""
    forge = Forge()
    blob = forge.full(b"x")
    root = forge.tree(leaf(("a", "f", blob, 1)))
    tip = forge.commit(root, data=CommitData(root, (), 2**62, "a", "m").encode())
    message = await _refused(tmp_path, forge.bundle(tip), "far-future")
    assert "time" in message, message
