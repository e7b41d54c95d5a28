"""Binary deltas between two versions of a file: copy ranges of the base, insert new bytes.

Agents rewrite files whole (``WorkingMemoryAggregate`` rewrites
``/memory/working.md``, ``EventLogWriter`` the whole log) but change little,
so a version is stored as the operations that turn its predecessor into it.
The common prefix and suffix are found with C-speed slice compares; only the
middle is matched line by line, so the cost follows the size of the change.
"""

from __future__ import annotations

from .objects import get_varint, put_varint

_COPY, _INSERT = 0, 1


def common_prefix(a: bytes, b: bytes) -> int:
    lo, hi = 0, min(len(a), len(b))
    ma, mb = memoryview(a), memoryview(b)
    if ma[:hi] == mb[:hi]:
        return hi
    while lo < hi:  # invariant: a[:lo] == b[:lo], a[:hi+1] != b[:hi+1] somewhere
        mid = (lo + hi + 1) // 2
        if ma[lo:mid] == mb[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common suffix, at most ``limit``."""
    lo, hi = 0, limit
    la, lb = len(a), len(b)
    ma, mb = memoryview(a), memoryview(b)
    if ma[la - hi :] == mb[lb - hi :]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ma[la - mid : la - lo] == mb[lb - mid : lb - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def compute(old: bytes, new: bytes) -> list[tuple[int, int, bytes]]:
    """Operations ``(COPY, offset, length)`` / ``(INSERT, 0, data)`` turning ``old`` into ``new``."""
    p = common_prefix(old, new)
    s = common_suffix(old, new, min(len(old), len(new)) - p)
    ops: list[tuple[int, int, bytes]] = []
    if p:
        ops.append((_COPY, 0, p))  # type: ignore[arg-type]
    old_mid, new_mid = old[p : len(old) - s], new[p : len(new) - s]
    if old_mid and new_mid:
        ops.extend(_match_lines(old_mid, new_mid, p))
    elif new_mid:
        ops.append((_INSERT, 0, new_mid))
    if s:
        ops.append((_COPY, len(old) - s, s))  # type: ignore[arg-type]
    return _coalesce(ops)


def _match_lines(old: bytes, new: bytes, base: int) -> list[tuple[int, int, bytes]]:
    """Copy every new line that occurs in ``old``; insert the rest.

    One dictionary pass (O(lines)) instead of a longest-common-subsequence
    search: for a delta only the size matters, not a minimal edit script.
    """
    where: dict[bytes, int] = {}
    offset = base
    for line in old.splitlines(keepends=True):
        where.setdefault(line, offset)
        offset += len(line)
    ops: list[tuple[int, int, bytes]] = []
    for line in new.splitlines(keepends=True):
        at = where.get(line)
        if at is not None and len(line) > 2:
            ops.append((_COPY, at, len(line)))  # type: ignore[arg-type]
        else:
            ops.append((_INSERT, 0, line))
    return ops


def _coalesce(ops: list) -> list:
    """Merge adjacent copies of adjacent ranges and adjacent inserts (linear: inserts are joined once)."""
    out: list = []
    pending: list[bytes] = []  # inserts waiting to be joined
    for op in ops:
        if op[0] == _INSERT:
            pending.append(op[2])
            continue
        if pending:
            out.append((_INSERT, 0, b"".join(pending)))
            pending = []
        if out and out[-1][0] == _COPY and out[-1][1] + out[-1][2] == op[1]:
            out[-1] = (_COPY, out[-1][1], out[-1][2] + op[2])
        else:
            out.append(op)
    if pending:
        out.append((_INSERT, 0, b"".join(pending)))
    return out


def encode(ops: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray()
    for kind, offset, arg in ops:
        if kind == _COPY:
            out.append(_COPY)
            put_varint(out, offset)
            put_varint(out, arg)  # type: ignore[arg-type]
        else:
            out.append(_INSERT)
            put_varint(out, len(arg))
            out += arg
    return bytes(out)


def apply(base: bytes, encoded: bytes, size: int) -> bytes:
    """Rebuild a version of ``size`` bytes (the size its blob declares).

    One pass reads and checks every operation (as ``output_size`` does) and
    collects views of the base and of the delta; the size is checked before
    anything is joined, so a hostile delta (copies of copies doubling at every
    level) fails with ``ValueError`` instead of allocating what it claims.
    Reading an old version applies up to 32 of these, so the one-byte varints
    (most offsets and lengths of a small file) are read inline.
    """
    parts: list[memoryview] = []
    mv, mb = memoryview(encoded), memoryview(base)
    pos, n, total, base_size = 0, len(encoded), 0, len(base)
    try:
        while pos < n:
            kind = encoded[pos]
            pos += 1
            if kind == _COPY:
                offset = encoded[pos]
                if offset < 0x80:
                    pos += 1
                else:
                    offset, pos = get_varint(mv, pos)
                length = encoded[pos]
                if length < 0x80:
                    pos += 1
                else:
                    length, pos = get_varint(mv, pos)
                if offset + length > base_size:
                    raise ValueError("delta copies past the end of its base")
                parts.append(mb[offset : offset + length])
            elif kind == _INSERT:
                length = encoded[pos]
                if length < 0x80:
                    pos += 1
                else:
                    length, pos = get_varint(mv, pos)
                if pos + length > n:
                    raise ValueError("delta insert runs past its end")
                parts.append(mv[pos : pos + length])
                pos += length
            else:
                raise ValueError("corrupt delta: unknown operation")
            total += length
    except IndexError:
        raise ValueError("truncated or oversized varint") from None
    if total != size:
        raise ValueError("delta does not produce the size its blob declares")
    return b"".join(parts)


def output_size(encoded: bytes, base_size: int) -> int:
    """The size ``apply`` would produce, checking every operation against the base
    and the delta's own length; without applying. Malformed deltas raise ``ValueError``."""
    mv = memoryview(encoded)
    pos, n, total = 0, len(encoded), 0
    while pos < n:
        kind = encoded[pos]
        if kind == _COPY:
            offset, pos = get_varint(mv, pos + 1)
            length, pos = get_varint(mv, pos)
            if offset + length > base_size:
                raise ValueError("delta copies past the end of its base")
            total += length
        elif kind == _INSERT:
            length, pos = get_varint(mv, pos + 1)
            if pos + length > n:
                raise ValueError("delta insert runs past its end")
            total += length
            pos += length
        else:
            raise ValueError("corrupt delta: unknown operation")
    return total
