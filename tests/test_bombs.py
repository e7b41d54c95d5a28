"""Bombs (issue 8 item 6, item 17): small inputs that claim huge outputs are refused
by the sizes objects declare and the documented limits, before anything is
expanded; a bundle file is read a little at a time, and a file that is not a
bundle (``/dev/zero``) is a one-line error.

Memory is checked by counting (tracemalloc's peak of Python allocations), never by time.
"""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from pathlib import Path

import pytest
import zstandard
from click.testing import CliRunner

import memrev
from memrev import VersionedStore
from memrev.backends.base import BlobRow
from memrev.cli import main as cli_main
from memrev.core import delta
from memrev.core.objects import ID_BYTES, MAX_BLOB_SIZE, blob_id, put_varint
from memrev.errors import IntegrityError
from memrev.maintenance import bundles as bundles_mod
from test_bundles_gc import BUNDLE_MAGIC, _refused
from test_untrusted_bundles import Forge, leaf

pytestmark = pytest.mark.anyio

GIB = 1 << 30
DESIGN_MD = Path(__file__).resolve().parents[1] / "docs" / "design.md"


def doubling_chain(levels: int) -> tuple[Forge, bytes]:
    """A 2-byte blob and ``levels`` deltas, each copying its base twice: ~1.5 KB for 40 levels."""
    f = Forge()
    oid, size = f.full(b"ab"), 2
    for _ in range(levels):
        oid = f.delta(oid, [(0, 0, size), (0, 0, size)], size * 2)
        size *= 2
    return f, f.commit(f.tree(leaf(("bomb", "f", oid, size))))


async def test_doubling_delta_bundle_is_refused_without_expanding(tmp_path):
    forge, tip = doubling_chain(40)
    data = forge.bundle(tip)
    assert len(data) < 4096
    tracemalloc.start()
    try:
        message = await _refused(tmp_path, data, "doubling")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "limit" in message
    assert peak < 64 << 20


async def test_doubling_deltas_within_depth_in_a_store_are_refused_by_declared_size(tmp_path):
    """Written straight into a store (30 levels: depth allowed, 2 GiB declared): reading refuses."""
    forge, tip = doubling_chain(30)
    store = VersionedStore(tmp_path / "s")
    try:
        forge.write_into(store, tip)
        tracemalloc.start()
        try:
            with pytest.raises(memrev.IntegrityError, match="over the limit"):
                await store.read("/bomb")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20
        assert any("over" in p for p in await store.fsck())
    finally:
        store.close()


def zero_blob_bundle(size: int) -> bytes:
    """A sealed bundle holding one full blob of ``size`` zero bytes, built in constant memory."""
    oid_hash = hashlib.blake2b(b"blob F\0", digest_size=ID_BYTES)
    chunk = bytes(1 << 20)
    for _ in range(size // len(chunk)):
        oid_hash.update(chunk)
    oid = oid_hash.digest()
    head = bytearray(b'{"refs":{}}\n')
    head += b"B"
    for field in (oid, b"F", b""):
        put_varint(head, len(field))
        head += field
    put_varint(head, size)
    body_hash = hashlib.blake2b(b"bundle\0", digest_size=ID_BYTES)
    body_hash.update(bytes(head))
    out = io.BytesIO()
    z = zstandard.ZstdCompressor().compressobj()
    out.write(z.compress(bytes(head)))
    for _ in range(size // len(chunk)):
        out.write(z.compress(chunk))
        body_hash.update(chunk)
    end = bytearray(b"E")
    put_varint(end, ID_BYTES)
    end += body_hash.digest()
    out.write(z.compress(bytes(end)))
    out.write(z.flush())
    return BUNDLE_MAGIC + out.getvalue()


@pytest.mark.slow
async def test_zstd_bomb_bundle_is_refused_before_decompressing(tmp_path):
    data = zero_blob_bundle(GIB)
    assert len(data) < 64 << 10  # a 1 GiB record in under 64 KB
    tracemalloc.start()
    try:
        message = await _refused(tmp_path, data, "zstd-bomb")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "limit" in message
    assert peak < 128 << 20


async def test_the_decompressed_total_of_a_bundle_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(bundles_mod, "MAX_BUNDLE_RAW", 4 << 20)
    message = await _refused(tmp_path, zero_blob_bundle(8 << 20), "raw-cap")
    assert "expands to more than" in message


async def test_a_stored_payload_frame_declaring_more_than_its_row_is_refused(tmp_path):
    """A damaged row whose zstd frame says 1 GiB for a 5-byte blob: no decompression happens."""
    frame = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(frame, size=GIB, closefd=False) as w:
        chunk = bytes(1 << 20)
        for _ in range(GIB // len(chunk)):
            w.write(chunk)
    store = VersionedStore(tmp_path / "s")
    try:
        await store.write("/a.md", "hello")
        oid = bytes.fromhex((await store.log())[0].id)  # noqa: F841 - the commit exists
        repo = store._live()
        entry = repo.entry_at(repo.head("main"), "/a.md")
        with repo.backend.write():
            repo.backend._exec("UPDATE blobs SET data=? WHERE id=?", (b"z" + frame.getvalue(), entry.oid))
        repo.forget()
        tracemalloc.start()
        try:
            with pytest.raises(memrev.IntegrityError, match="impossible size"):
                await store.read("/a.md")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20
    finally:
        store.close()


async def test_bad_delta_opcodes_and_truncated_varints_are_errors_of_memrev(tmp_path):
    for payload in (b"\x09", b"\x00\xff", b"\x01\x85"):
        forge = Forge()
        base = forge.full(b"base")
        oid = blob_id("D", payload, base)
        forge.raw_blob(oid, b"D", base, payload)
        tip = forge.commit(forge.tree(leaf(("a", "f", oid, 1))))
        await _refused(tmp_path, forge.bundle(tip), f"opcode-{payload.hex()}")
    with pytest.raises(ValueError):
        delta.apply(b"base", b"\x00\xff", 4)


async def test_writes_over_the_blob_limit_are_refused(tmp_path, monkeypatch):
    """The limit holds for content made here too, so every store exports a bundle that imports."""
    import memrev.repo.blobs as blobs_mod

    monkeypatch.setattr(blobs_mod, "MAX_BLOB_SIZE", 1000)
    store = VersionedStore(tmp_path / "s")
    try:
        with pytest.raises(memrev.InvalidContent, match="of 1001 bytes is over the limit of 1000 bytes per file"):
            await store.write("/big.md", "x" * 1001)
        await store.write("/log.md", "x" * 600)
        with pytest.raises(memrev.InvalidContent, match="of 1001 bytes is over the limit of 1000 bytes per file"):
            await store.append("/log.md", "y" * 401)
        assert await store.read("/log.md") == "x" * 600
    finally:
        store.close()
    # the limit patched above is the one docs/design.md documents
    assert f"| `MAX_BLOB_SIZE` (a file's content) | {MAX_BLOB_SIZE >> 20} MiB |" in DESIGN_MD.read_text()


@pytest.mark.parametrize("source", ["/dev/zero", "dir", "fifo"])
def test_import_of_something_that_is_not_a_regular_file_is_one_line(tmp_path, source):
    import os

    if source == "dir":
        source = str(tmp_path)
    elif source == "fifo":
        source = str(tmp_path / "fifo")
        os.mkfifo(source)
    result = CliRunner().invoke(cli_main, ["--store", str(tmp_path / "s"), "import", source])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "not a regular file" in lines[0], result.output
    assert "Traceback" not in result.output


def test_import_of_a_file_over_the_size_limit_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(bundles_mod, "MAX_BUNDLE_BYTES", 100)
    big = tmp_path / "big.memrev"
    big.write_bytes(BUNDLE_MAGIC + bytes(200))
    result = CliRunner().invoke(cli_main, ["--store", str(tmp_path / "s"), "import", str(big)])
    assert result.exit_code == 1
    assert "larger than 100 bytes" in result.output


async def test_blob_row_helper_is_the_backend_row(tmp_path):
    """The rows ``Forge`` writes into a store (the damage above) are the backend's own rows: stored and read back unchanged."""
    forge, tip = doubling_chain(2)
    store = VersionedStore(tmp_path / "s")
    try:
        forge.write_into(store, tip)
        backend = store._live().backend
        rows = [backend.get_blob(row.id) for row in forge.blob_rows]
        assert rows == forge.blob_rows and all(type(row) is BlobRow for row in rows)
    finally:
        store.close()


@pytest.mark.parametrize("column", ["lineage", "base"])
async def test_an_append_piece_with_a_missing_run_or_base_is_an_integrity_error(tmp_path, column):
    """A damaged append row (NULL run or base): every read is an IntegrityError naming the blob, never a TypeError."""
    store = VersionedStore(tmp_path / "s")
    try:
        await store.write("/log.md", "one\n")
        for i in range(3):
            await store.append("/log.md", f"line {i}\n")
        repo = store._live()
        entry = repo.entry_at(repo.head("main"), "/log.md")
        with repo.backend.write():
            repo.backend._exec(f"UPDATE blobs SET {column}=NULL WHERE kind='A'", ())
        store.close()
        store = VersionedStore(tmp_path / "s")  # nothing cached
        with pytest.raises(IntegrityError):
            await store.read("/log.md")
        store.close()
        store = VersionedStore(tmp_path / "s")
        with pytest.raises(IntegrityError):
            await store.read_range("/log.md", 0, 3)
        assert entry.oid  # the damaged file was an append run
        problems = await store.fsck()
        assert problems and len(problems) == len(set(problems)), problems  # each named once
    finally:
        store.close()
