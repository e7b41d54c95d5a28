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
        _match_lines(old_mid, new_mid, p, ops)
    elif new_mid:
        ops.append((_INSERT, 0, new_mid))
    if s:
        _add_copy(ops, len(old) - s, s)
    return ops


def _add_copy(ops: list, offset: int, length: int) -> None:
    """Append a copy, merged into the copy before it when the two ranges are adjacent."""
    if ops and ops[-1][0] == _COPY and ops[-1][1] + ops[-1][2] == offset:
        ops[-1] = (_COPY, ops[-1][1], ops[-1][2] + length)
    else:
        ops.append((_COPY, offset, length))


def _match_lines(old: bytes, new: bytes, base: int, ops: list) -> None:
    """Append to ``ops``: a copy of every new line that occurs in ``old``, the rest inserted.

    One dictionary pass (O(lines)) instead of a longest-common-subsequence
    search: for a delta only the size matters, not a minimal edit script.
    Written coalesced (adjacent copies of adjacent ranges merged, inserts in
    a row joined once) in the same pass: a W1 rewrite's lines mostly copy on
    from where the line before ended, and a second pass over them cost as
    much as the first.
    """
    where: dict[bytes, int] = {}
    offset = base
    for line in old.splitlines(keepends=True):
        where.setdefault(line, offset)
        offset += len(line)
    start = end = -1  # the copy being extended: old[start:end]
    pending: list[bytes] = []  # inserts waiting to be joined
    for line in new.splitlines(keepends=True):
        at = where.get(line)
        if at is None or len(line) <= 2:
            if start >= 0:
                _add_copy(ops, start, end - start)
                start = end = -1
            pending.append(line)
        elif at == end:
            end += len(line)
        else:
            if pending:
                ops.append((_INSERT, 0, b"".join(pending)))
                pending = []
            elif start >= 0:
                _add_copy(ops, start, end - start)
            start, end = at, at + len(line)
    if start >= 0:
        _add_copy(ops, start, end - start)
    if pending:
        ops.append((_INSERT, 0, b"".join(pending)))


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
