"""PostgreSQL reads for fsck: one snapshot (read_snapshot) and scans in keyset pages."""

from __future__ import annotations

from memrev.backends import postgres
from memrev.backends.postgres import PostgresBackend
from memrev.maintenance.fsck import fsck
from memrev.repo.ops import Delete, Write
from memrev.repo.repository import Repository


def test_fsck_sees_one_moment_while_another_handle_commits(pg_url):
    """fsck reads the store in many statements (blobs, then change rows, commits, trees,
    refs). Another handle commits a new file between the blob scan and the rest: read at
    READ COMMITTED, fsck then met a commit whose tree names a blob it never scanned and
    reported damage that is not there. In one REPEATABLE READ snapshot it sees neither."""
    mine, other = Repository(PostgresBackend(pg_url)), Repository(PostgresBackend(pg_url))
    try:
        mine.commit("main", [Write("/a", b"a")], author="me")
        real = mine.backend.scan_changes
        landed = []

        def scan_after_a_commit_lands():
            if not landed:
                landed.append(other.commit("main", [Write("/new", b"a blob the scan did not meet")], author="other").id)
            return real()

        mine.backend.scan_changes = scan_after_a_commit_lands
        assert fsck(mine) == []
        assert landed and mine.head("main") == landed[0]  # it did land, and the handle reads again after
        del mine.backend.scan_changes
        assert fsck(mine) == []
    finally:
        mine.backend.close()
        other.backend.close()


def test_scans_page_through_every_row(pg_url, monkeypatch):
    """scan_changes and scan_head read keyset pages (here of 2 rows): every row once, in
    order, across pages that split one commit's change rows and skip tombstones."""
    monkeypatch.setattr(postgres, "_SCAN_PAGE", 2)
    repo = Repository(PostgresBackend(pg_url))
    try:
        repo.commit("main", [Write(f"/d{i}/f{j}", f"{i}{j}".encode()) for i in range(3) for j in range(3)], author="t")
        repo.commit("main", [Delete("/d1")], author="t")
        repo.commit("main", [Write("/d0/f0", b"again"), Write("/e", b"e")], author="t")
        backend = repo.backend
        reads = []
        real_all = backend._all
        monkeypatch.setattr(backend, "_all", lambda *a: reads.append(a) or real_all(*a))
        changes = list(backend.scan_changes())
        assert changes == sorted(backend.iter_changes(), key=lambda r: (r[1], r[0]))
        assert len(changes) > 15 and len(reads) >= len(changes) // 2  # page after page
        reads.clear()
        head = list(backend.scan_head("main"))
        assert [r.path for r in head] == sorted(r.path for r in backend.head_rows("main"))
        assert "/d1/f0" not in [r.path for r in head]  # a tombstone is no file
        assert len(reads) >= len(backend.head_all("main")) // 2
        assert fsck(repo) == []
    finally:
        repo.backend.close()
