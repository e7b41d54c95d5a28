"""Per-path and per-folder history: the commits that changed one path or anything
under one folder, walked along the change index's links (``prev``, and
``prev2`` for the merged line), never by reading the whole log."""

from __future__ import annotations

import heapq

from .. import errors
from ..core.objects import commit_id
from ..core.paths import is_directory_key, is_under
from .model import Commit
from .reading import Reading

__all__ = ["DIRECTORY_KEYS", "PathLog"]

# The stale-index marker (backends' migration 2) of the change index's directory keys.
DIRECTORY_KEYS = "directory-keys"


class PathLog(Reading):
    """``path_log``, ``path_versions``, ``dir_log`` and where a path's walk starts."""

    def path_log(self, path: str, start_seq: int | None, limit: int | None = None) -> list[Commit]:
        """Commits that changed ``path``, following the per-path index only."""
        if start_seq is not None and limit is None:
            return self._whole_path_log(path, start_seq)
        return self.commits_at(self.path_versions(path, start_seq, limit))

    def _whole_path_log(self, path: str, start_seq: int) -> list[Commit]:
        """Every commit that changed ``path`` reachable from change ``start_seq``, newest first.

        One statement however long the history: the path's change rows newest
        first, each with its commit's record and the other files that commit
        changed. Links point to older changes, so one pass over the rows as they
        come finds the reachable ones, and a commit not built yet is built from
        its row there: the rows are never all held at once and nothing but the
        ``Commit`` is kept per commit (a first ``log`` of a 5,000-version file
        spent most of its time on the garbage collections its allocations set
        off). Each record is checked against its hash once and kept undecoded
        in its ``Commit`` until a field is read. Once a path's log was built,
        its commits are kept: a log of it again reads the rows without records
        and files, takes the commits from the cache and reads the few missing
        (newer ones, or evicted) by number.

        One function on purpose: it is the hot loop of every first ``log(path)``,
        and splitting the pass over the rows into calls costs a call per row.
        """
        records = self._logged.get(path) is None
        infos = self._infos
        file = not is_directory_key(path)
        wanted = {start_seq}  # the changes reachable from the start among those not passed yet
        out: list[Commit | None] = []
        built: list[Commit] = []
        built_ids: list[bytes] = []  # apart, not as pairs: a tuple per commit is one more object to collect
        missing: list[int] = []  # commits to read by number (rows read without records) ...
        missing_at: list[int] = []  # ... and their places in ``out``
        files: list[str] | None = None  # the files of the commit just built, while more rows may add to them
        last = None
        rows = self.backend.path_log_rows(path, start_seq, records=records)
        try:
            for seq, prev, prev2, oid, data, other in rows:
                if seq == last:  # another file the commit just read changed
                    if files is not None and other is not None:
                        files.append(other)
                    continue
                last, files = seq, None
                if seq not in wanted:
                    continue
                wanted.discard(seq)
                if prev is not None:
                    wanted.add(prev)
                if prev2 is not None:
                    wanted.add(prev2)
                if oid is None:
                    raise errors.IntegrityError(f"change index names missing commit #{seq}")
                info = infos.get(oid)
                if info is None:
                    if data is None:
                        missing.append(seq)
                        missing_at.append(len(out))
                        out.append(None)
                        continue
                    if commit_id(data) != oid:
                        raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
                    if other is None:
                        changed: str | list[str] = path if file else []
                    elif file:
                        changed = files = [path, other]
                    else:
                        changed = files = [other]
                    info = Commit.from_record(oid, seq, data, changed)
                    built.append(info)
                    built_ids.append(oid)
                out.append(info)
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        if wanted:  # a link to a change row that is not there, or to a newer one: the general walk
            return self._linked_path_log(path, start_seq)
        for oid, info in zip(built_ids, built, strict=True):
            infos.put(oid, info)
        if missing:
            found = self._build_at(missing)
            for at, seq in zip(missing_at, missing, strict=True):
                out[at] = found[seq]
        self._logged.put(path, True)
        return out  # type: ignore[return-value]  # every None was filled

    def _linked_path_log(self, path: str, start_seq: int) -> list[Commit]:
        """``_whole_path_log`` for a change index whose links do not all lead to older
        change rows of the path (damage, or an index that names a commit it lacks a row
        for): the links followed whatever they point to, as the per-link walk does."""
        rows = self.backend.change_commits(path, start_seq)
        links = {seq: (prev, prev2) for seq, prev, prev2, _, _ in rows}
        seqs = _reachable(links, start_seq)
        ids = {seq: oid for seq, _, _, oid, _ in rows}
        strays = [seq for seq in seqs if seq not in ids]  # a link to a change row that is not there
        ids.update({seq: oid for seq, oid, _ in self.backend.commits_at(strays)})
        out: list[Commit | None] = []
        missing: list[int] = []
        for seq in seqs:
            oid = ids.get(seq)
            if oid is None:
                raise errors.IntegrityError(f"change index names missing commit #{seq}")
            info = self._infos.get(oid)
            out.append(info)
            if info is None:
                missing.append(seq)
        if missing:
            found = self._build_at(missing)
            out = [found[seq] if info is None else info for seq, info in zip(seqs, out, strict=True)]
        return out  # type: ignore[return-value]  # every None was filled

    def _build_at(self, seqs: list[int]) -> dict[int, Commit]:
        """The commits numbered ``seqs`` built from their records and change keys, read
        by number (each record checked against its hash) and kept."""
        records = {seq: (oid, data) for seq, oid, data in self.backend.commits_at(seqs)}
        paths = self.backend.paths_at(seqs)
        found: dict[int, Commit] = {}
        for seq in seqs:
            if seq not in records:
                raise errors.IntegrityError(f"change index names missing commit #{seq}")
            oid, data = records[seq]
            if commit_id(data) != oid:
                raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
            info = found[seq] = Commit.from_record(oid, seq, data, paths.get(seq, ()))
            self._infos.put(oid, info)
        return found

    def path_log_page(self, path: str, frontier: list[int], limit: int) -> tuple[list[Commit], list[int]]:
        """Commits that changed ``path`` from the per-path walk's ``frontier``, and where to continue."""
        seqs, rest = self._path_walk(path, frontier, limit)
        return self.commits_at(seqs), rest

    def path_versions(self, path: str, start_seq: int | None, limit: int | None = None) -> list[int]:
        """Commit numbers that changed ``path``, newest first, along both parents of merges."""
        if start_seq is None:
            return []
        if limit is None:
            return self._whole_path_walk(path, start_seq)
        return self._path_walk(path, [start_seq], limit)[0]

    def _whole_path_walk(self, path: str, start_seq: int) -> list[int]:
        """Every change reachable from ``start_seq`` by the path's links: the rows read in
        one range read, the links followed here (a recursive query is slower)."""
        links = {seq: (prev, prev2) for seq, prev, prev2 in self.backend.change_rows(path, start_seq)}
        return _reachable(links, start_seq)

    def dir_log(self, folder: str, start: bytes, branch: str, limit: int | None = None) -> list[Commit]:
        """Commits that changed something under directory ``folder``, newest first.

        Walks the directory key's links (docs/design.md, "Directory keys"), so
        it reads the commits it returns, not the store. Until reindex has
        given older commits their directory keys, and for a path that was
        also a file once, every commit is read and filtered instead.
        """
        key = folder.rstrip("/") + "/"
        if self.directory_keys_stale() or self.path_start(folder, start, branch) is not None:
            return [c for c in self.log(start) if any(is_under(p, folder) for p in c.paths)][:limit]
        return self.path_log(key, self.path_start(key, start, branch), limit)

    def directory_keys_stale(self) -> bool:
        """Older commits lack directory keys (a store from before them, not reindexed yet).
        Once they are filled they stay so; until then another process may fill them."""
        if not self._folders_fresh:
            self._folders_fresh = DIRECTORY_KEYS not in self.backend.stale_indexes()
        return not self._folders_fresh

    def _path_walk(self, path: str, frontier: list[int], limit: int) -> tuple[list[int], list[int]]:
        # As in log_page: links point to older commits, so the heap resumes the walk exactly.
        out: list[int] = []
        heap = [-seq for seq in frontier]
        heapq.heapify(heap)
        seen: set[int] = set()
        while heap and len(out) < limit:
            seq = -heapq.heappop(heap)
            if seq in seen:
                continue
            seen.add(seq)
            out.append(seq)
            links = self.backend.change_prev(path, seq)
            for nxt in links or ():
                if nxt is not None and nxt not in seen:
                    heapq.heappush(heap, -nxt)
        return out, sorted({-s for s in heap} - seen, reverse=True)

    def path_start(self, path: str, commit: bytes, branch: str) -> int | None:
        """Where the per-path walk starts: the last change to ``path`` in ``commit``'s history.

        The head index answers only for the head it was read with: the head check and
        the row are read in one snapshot, else a commit another process makes between
        them gives ``commit`` the row of a newer one."""
        with self.backend.read_snapshot():
            row = self.backend.head_get(branch, path) if commit == self.head(branch) else None
        return row.seq if row is not None else self.last_change(path, commit)


def _reachable(links: dict[int, tuple[int | None, int | None]], start: int) -> list[int]:
    """The changes reachable from change ``start`` by a path's ``(prev, prev2)`` links, newest first."""
    if start not in links:
        return []
    todo, seen = [start], {start}
    while todo:
        for nxt in links.get(todo.pop(), ()):
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return sorted(seen, reverse=True)
