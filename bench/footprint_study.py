"""Where W1's bytes go, and what each candidate storage layout would leave (issue 14, footprint).

A study, not a benchmark: it builds W1 (1,000 versions of a 2 KB file, the same data as
``bench/child.py``'s W1) in a memrev SQLite store, runs gc, then rebuilds the SAME objects
into scratch SQLite databases laid out the candidate ways and prints each one's size, per
table (``dbstat``). Nothing here is memrev's format; it measures designs before one is built.
See docs/footprint.md for the results and the conclusions drawn from them.

    PYTHONPATH=src python bench/footprint_study.py [workdir] [--postgres]
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memrev.blobs import Packer

import data  # bench/data.py: W1's versions (after the path insert above)
from memrev import VersionedStore

PATH = "/memory/working.md"
SMALL_TABLES = """
CREATE TABLE refs(name TEXT PRIMARY KEY, target BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE head(branch TEXT NOT NULL, path TEXT NOT NULL, blob BLOB, size INTEGER NOT NULL,
                  seq INTEGER NOT NULL, PRIMARY KEY(branch, path)) WITHOUT ROWID;
"""


async def build_w1(folder: Path) -> None:
    store = VersionedStore(str(folder))
    for version in data.working_md_versions(1000):
        await store.write(PATH, version)
    await store.gc(keep_seconds=0)
    store.close()


async def old_version_reads(folder: Path) -> tuple[float, float]:
    """Today's cost of reading a revision 500 back: median of 101 warm reads, and median over
    100 distinct revisions around it in a freshly opened store (seconds)."""
    store = VersionedStore(str(folder))
    ids = [c.id for c in await store.log(PATH)]
    await store.read(PATH, rev=ids[500])
    warm = []
    for _ in range(101):
        t = time.perf_counter()
        await store.read(PATH, rev=ids[500])
        warm.append(time.perf_counter() - t)
    store.close()
    store = VersionedStore(str(folder))
    distinct = []
    for rev in ids[450:550]:
        t = time.perf_counter()
        await store.read(PATH, rev=rev)
        distinct.append(time.perf_counter() - t)
    store.close()
    return statistics.median(warm), statistics.median(distinct)


async def postgres_footprint() -> None:
    """W1 on a throwaway PostgreSQL server: pg_total_relation_size per table, before and after gc."""
    import psycopg

    from memrev.testing.pgserver import PgServer

    server = PgServer()
    try:
        url = server.create_database("footprint")
        store = VersionedStore(url)
        for version in data.working_md_versions(1000):
            await store.write(PATH, version)

        def sizes() -> str:
            with psycopg.connect(url, autocommit=True) as c:
                rows = c.execute(
                    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'"
                    " AND n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 2 DESC"
                ).fetchall()
            return f"{sum(r[1] for r in rows):,} bytes ({', '.join(f'{n} {b // 1024}K' for n, b in rows)})"

        print(f"PostgreSQL, W1 alone: {sizes()}")
        await store.gc(keep_seconds=0)
        print(f"PostgreSQL, W1 + gc:  {sizes()}")
        store.close()
    finally:
        server.stop()


def db_size(path: Path) -> tuple[int, dict[str, int]]:
    """Bytes of the database file and bytes per table/index (dbstat)."""
    with sqlite3.connect(path) as c:
        pages = c.execute("PRAGMA page_count").fetchone()[0] * c.execute("PRAGMA page_size").fetchone()[0]
        per = dict(c.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
    return pages, per


def show(label: str, size: tuple[int, dict[str, int]], extra: int = 0) -> None:
    total, per = size
    parts = ", ".join(f"{k} {v // 1024}K" for k, v in sorted(per.items(), key=lambda x: -x[1]) if v > 4096)
    print(f"{label:<44} {(total + extra) / 1000:7.1f} KB   ({parts})")


class Source:
    """The objects of a W1 store, raw (blob payloads unpacked)."""

    def __init__(self, db: Path) -> None:
        self.c = sqlite3.connect(db)
        packer = Packer()
        self.blob_rows = [r[:-1] + (packer.unpack(r[-1]),) for r in self.c.execute("SELECT * FROM blobs ORDER BY rowid")]
        self.trees = self.c.execute("SELECT id, data FROM trees").fetchall()
        self.commits = self.c.execute("SELECT seq, id, parent, data FROM commits ORDER BY seq").fetchall()
        self.changes = self.c.execute("SELECT * FROM changes").fetchall()
        self.stored = {
            t: self.c.execute(f"SELECT SUM(LENGTH(data)) FROM {t}").fetchone()[0] for t in ("blobs", "trees", "commits")
        }

    def copy_small(self, d: sqlite3.Connection) -> None:
        d.executescript(SMALL_TABLES)
        for table in ("refs", "head"):
            rows = self.c.execute(f"SELECT * FROM {table}").fetchall()
            d.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(rows[0]))})", rows)


def trained(items: list[bytes], dict_size: int) -> tuple[zstandard.ZstdCompressor, int]:
    """A dictionary trained on the first quarter of the rows (what an early gc would have seen)."""
    d = zstandard.train_dictionary(dict_size, items[: len(items) // 4])
    cz = zstandard.ZstdCompressor(level=19, dict_data=d, write_dict_id=False, write_checksum=False)
    return cz, len(d.as_bytes())


def dict_payload_bytes(items: list[bytes], dict_size: int) -> int:
    """Stored bytes with a per-table dictionary: magicless frame (-4) + 2-byte prefix (kind, dict id)."""
    cz, dict_bytes = trained(items, dict_size)
    return sum(min(len(x), len(cz.compress(x)) - 4) + 2 for x in items) + dict_bytes


def dictionaries(src: Source) -> None:
    print("\nPer-object zstd dictionaries (payload bytes only, dictionary included):")
    tables = {
        "blobs": [r[-1] for r in src.blob_rows],
        "commits": [r[3] for r in src.commits],
        "trees": [r[1] for r in src.trees],
    }
    for name, items in tables.items():
        got = {n: dict_payload_bytes(items, n) for n in (2048, 4096, 8192)}
        best = min(got.values())
        print(f"  {name:<8} stored today {src.stored[name]:7,} -> {best:7,} ({best / src.stored[name]:.0%})  by dict size {got}")


def layout_dicts(src: Source, path: Path) -> tuple[int, dict[str, int]]:
    """Today's tables, blob payloads and commits compressed with a dictionary each."""
    d = sqlite3.connect(path)
    d.executescript("""
        CREATE TABLE blobs(rowid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, kind TEXT NOT NULL, base BLOB,
            lineage BLOB, start INTEGER NOT NULL, size INTEGER NOT NULL, depth INTEGER NOT NULL, data BLOB NOT NULL);
        CREATE UNIQUE INDEX blobs_lineage ON blobs(lineage, start) WHERE lineage IS NOT NULL;
        CREATE TABLE trees(id BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE commits(seq INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, parent BLOB, data BLOB NOT NULL);
        CREATE TABLE changes(path TEXT NOT NULL, seq INTEGER NOT NULL, prev INTEGER, prev2 INTEGER,
            PRIMARY KEY(path, seq)) WITHOUT ROWID;
        CREATE INDEX changes_by_seq ON changes(seq);
    """)
    bz, bdict = trained([r[-1] for r in src.blob_rows], 8192)
    cz, cdict = trained([r[3] for r in src.commits], 2048)
    d.executemany("INSERT INTO blobs VALUES (?,?,?,?,?,?,?,?,?)", [r[:-1] + (b"d" + bz.compress(r[-1]),) for r in src.blob_rows])
    d.executemany("INSERT INTO trees VALUES (?,?)", src.trees)
    d.executemany("INSERT INTO commits VALUES (?,?,?,?)", [r[:3] + (b"d" + cz.compress(r[3]),) for r in src.commits])
    d.executemany("INSERT INTO changes VALUES (?,?,?,?)", src.changes)
    src.copy_small(d)
    d.commit()
    d.execute("VACUUM")
    d.close()
    total, per = db_size(path)
    return total + bdict + cdict, per


def layout_packs(src: Source, path: Path, pack_bytes: int) -> tuple[int, dict[str, int], float]:
    """Git-style: objects of one kind concatenated and zstd-compressed together in packs of
    ~``pack_bytes``; a sorted index of (8-byte id prefix, pack, offset, length) in chunks of 256
    entries; commits by seq with an 8-byte id prefix; changes keyed by an integer path id.
    Returns sizes and the median time to read one object out of a pack not yet decompressed."""
    d = sqlite3.connect(path)
    d.executescript("""
        CREATE TABLE packs(id INTEGER PRIMARY KEY, data BLOB NOT NULL);
        CREATE TABLE idx(first INTEGER PRIMARY KEY, data BLOB NOT NULL);
        CREATE TABLE commits(seq INTEGER PRIMARY KEY, k INTEGER NOT NULL);
        CREATE TABLE paths(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE);
        CREATE TABLE changes(path INTEGER NOT NULL, seq INTEGER NOT NULL, prev INTEGER, prev2 INTEGER,
            PRIMARY KEY(path, seq)) WITHOUT ROWID;
    """)

    def key(oid: bytes) -> int:
        return int.from_bytes(oid[:8], "big", signed=True)

    objects = [(r[1], r[-1]) for r in src.blob_rows] + src.trees + [(r[1], r[3]) for r in src.commits]
    cz = zstandard.ZstdCompressor(level=19)
    entries, pieces, pack, at = [], [], 0, 0
    for oid, raw in objects:
        entries.append((key(oid), pack, at, len(raw)))
        pieces.append(raw)
        at += len(raw)
        if at >= pack_bytes or oid == objects[-1][0]:
            d.execute("INSERT INTO packs VALUES (?,?)", (pack, cz.compress(b"".join(pieces))))
            pack, at, pieces = pack + 1, 0, []
    entries.sort()
    for i in range(0, len(entries), 256):
        chunk = entries[i : i + 256]
        d.execute("INSERT INTO idx VALUES (?,?)", (chunk[0][0], b"".join(struct.pack(">qHIH", *e) for e in chunk)))
    d.executemany("INSERT INTO commits VALUES (?,?)", [(r[0], key(r[1])) for r in src.commits])
    path_ids: dict[str, int] = {}
    for p, seq, prev, prev2 in src.changes:
        d.execute("INSERT INTO changes VALUES (?,?,?,?)", (path_ids.setdefault(p, len(path_ids) + 1), seq, prev, prev2))
    d.executemany("INSERT INTO paths VALUES (?,?)", [(v, p) for p, v in path_ids.items()])
    src.copy_small(d)
    d.commit()
    d.execute("VACUUM")
    dz, times = zstandard.ZstdDecompressor(), []
    for _k, pk, off, ln in entries[::40]:
        t = time.perf_counter()
        blob = d.execute("SELECT data FROM packs WHERE id=?", (pk,)).fetchone()[0]
        dz.decompress(blob)[off : off + ln]
        times.append(time.perf_counter() - t)
    d.close()
    return (*db_size(path), statistics.median(times))


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--postgres"]
    work = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="footprint-"))
    shutil.rmtree(work, ignore_errors=True)  # a fresh folder: VACUUM INTO refuses an existing file
    work.mkdir(parents=True)
    asyncio.run(build_w1(work / "w1"))
    db = work / "w1" / "memrev.db"
    src = Source(db)
    print(f"W1 (1,000 versions of {PATH}) + gc, SQLite; payload bytes stored today: {src.stored}")
    show("memrev today", db_size(db))
    warm, distinct = asyncio.run(old_version_reads(work / "w1"))
    print(f"{'':<44} read 500 back: {warm * 1e3:.3f} ms warm, {distinct * 1e3:.3f} ms distinct revisions (medians)")
    shutil.copy(db, work / "copy.db")
    vacuumed = work / "vacuum.db"
    with sqlite3.connect(work / "copy.db") as c:
        c.execute(f"VACUUM INTO '{vacuumed}'")
    show("today + VACUUM", db_size(vacuumed))
    show("today's tables + zstd dictionaries", layout_dicts(src, work / "dicts.db"))
    for pack_bytes in (65536, 262144):
        total, per, read_s = layout_packs(src, work / f"packs{pack_bytes}.db", pack_bytes)
        show(f"packs of {pack_bytes // 1024} KB + short keys", (total, per))
        print(f"{'':<44} one object out of a cold pack: {read_s * 1e3:.3f} ms (median)")
    dictionaries(src)
    for f in ("copy.db", "vacuum.db", "dicts.db", "packs65536.db", "packs262144.db"):
        os.remove(work / f)
    if "--postgres" in sys.argv:
        asyncio.run(postgres_footprint())


if __name__ == "__main__":
    main()
