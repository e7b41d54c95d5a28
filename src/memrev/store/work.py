"""The repository work behind ``Store``'s methods: synchronous functions of a repository and a branch.

Each is what one ``Store`` method asks of the :class:`~memrev.repo.Repository`;
``Store`` decides where it runs (``memrev.store.run``) and what the commit it
makes tells subscribers (``memrev.store.txn``). ``rev`` ``None`` is the head
of ``branch``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import errors, history
from ..core import trees
from ..core.paths import is_own, normalize, split
from ..folders.read import replace_file
from ..history import pickaxe
from ..repo import revisions
from ..repo.repository import Commit, FileChange, Repository

if TYPE_CHECKING:
    from ..history import browse  # the history pages' reader loads with a page (a CLI read pays for none)
    from ..maintenance import gc as gc_mod  # bundles and gc are imported where they run (a read pays for neither)

# ------------------------------------------------------------------ reading


def commit_for(repo: Repository, branch: str, rev: str | None) -> bytes | None:
    return repo.head(branch) if rev is None else repo.resolve(rev, branch)


def file_bytes(repo: Repository, branch: str, path: str, rev: str | None) -> bytes | None:
    entry = repo.entry_at(commit_for(repo, branch, rev), path)
    return None if entry is None else repo.content(entry.oid)


def read_versioned(repo: Repository, branch: str, path: str, rev: str | None) -> tuple[bytes | None, str | None]:
    """A file's content and its version (the commit that last changed it on the line of
    ``rev``, default the branch head), read in one snapshot; ``(None, None)`` when absent.
    At the head the version is the path's head row, what a conditional commit compares."""
    with repo.backend.read_snapshot():
        commit = commit_for(repo, branch, rev)
        entry = repo.entry_at(commit, path) if commit is not None else None
        if entry is None or commit is None:
            return None, None
        data = repo.content(entry.oid)
        row = repo.backend.head_get(branch, path) if rev is None else None
        seq = row.seq if row is not None else repo.last_change(path, commit)
        if seq is None:
            return data, commit.hex()
        return data, repo.commit_ids_at([seq])[seq].hex()


def read_many(repo: Repository, branch: str, paths: Sequence[str], rev: str | None) -> dict[str, bytes | None]:
    """Each of ``paths`` at one commit (``rev``, default the branch head), read in one snapshot:
    one hop to the worker for a folder's worth of files, not one per file."""
    with repo.backend.read_snapshot():
        commit = commit_for(repo, branch, rev)
        root = repo.root(commit)
        folders: dict[str, dict[trees.Key, trees.Entry] | None] = {}  # each folder's entries, decoded once
        out: dict[str, bytes | None] = {}
        for path in paths:
            folder, _, name = path.rpartition("/")
            if folder not in folders:
                node = trees.find_dir(repo, root, split(folder or "/")) if commit is not None else None
                folders[folder] = None if node is None else trees.dir_entries(repo, node)
            entries = folders[folder]
            entry = None if entries is None else entries.get((name, "f"))
            out[path] = None if entry is None else repo.content(entry.oid)
        return out


class Committed(NamedTuple):
    """What ``Store.commit_ops`` made: the commit's id (``None``: nothing changed) and the offset
    of each ``Append`` among its ops, in order."""

    id: str | None
    offsets: list[int]


@dataclass(frozen=True)
class TreeEntry:
    """One entry of ``Store.tree``: ``path`` (a folder's ends with ``/``), ``kind`` (``"file"`` or
    ``"dir"``) and ``size`` in bytes (a folder's: every file below it, as ``du --apparent-size``)."""

    path: str
    kind: str
    size: int


def tree(repo: Repository, branch: str, norm: str, rev: str | None, depth: int) -> list[TreeEntry] | None:
    """The entries below the folder ``norm``, ``depth`` levels deep, in pre-order (each folder
    followed by what is in it, names sorted; a name that is both a file and a folder gives two
    entries, the file first); ``None`` when there is no such folder. Costs the files below
    ``norm`` (a folder's size is theirs), not the store; memrev's own files are left out."""
    commit = commit_for(repo, branch, rev)
    root = repo.root(commit)
    node = trees.find_dir(repo, root, split(norm)) if norm != "/" else root
    if node is None or (norm == "/" and commit is None):
        return None if norm != "/" else []
    base = "" if norm == "/" else norm
    out: list[TreeEntry] = []

    def visit(node: bytes, prefix: str, level: int) -> int:
        total = 0
        entries = trees.dir_entries(repo, node)
        for name, kind in sorted(entries, key=lambda key: (key[0], key[1] == "d")):
            path = f"{prefix}/{name}"
            if is_own(path):
                continue
            entry = entries[(name, kind)]
            if kind == "f":
                total += entry.size
                if level <= depth:
                    out.append(TreeEntry(path, "file", entry.size))
                continue
            at = len(out)
            if level <= depth:
                out.append(TreeEntry(path + "/", "dir", 0))
            size = visit(entry.oid, path, level + 1)
            if level <= depth:
                out[at] = TreeEntry(path + "/", "dir", size)
            total += size
        return total

    visit(node, base, 1)
    return out


@dataclass(frozen=True)
class GrepHit:
    """One line of ``Store.grep``: the file, the line's number (from 1, lines split on LF) and its text."""

    path: str
    line: int
    text: str


class Grep(NamedTuple):
    """What ``Store.grep`` found: the hits, and whether a bound stopped it (more may match)."""

    hits: list[GrepHit]
    truncated: bool


GREP_FILES = 2_000  # files one grep reads at most
GREP_BYTES = 32 << 20  # bytes of content it reads at most
GREP_LINE = 1_000  # characters of a hit's line returned


def grep(
    repo: Repository, branch: str, norm: str, text: str, rev: str | None, ignore_case: bool, limit: int
) -> Grep | None:
    """The lines holding ``text`` in the file ``norm``, or in the files below the folder ``norm``
    (names sorted), at ``rev``; ``None`` when it is neither. Reads at most ``GREP_FILES`` files and
    ``GREP_BYTES`` bytes and returns at most ``limit`` hits (``truncated`` says a bound stopped it)."""
    commit = commit_for(repo, branch, rev)
    entry = None if norm == "/" else repo.entry_at(commit, norm)
    below = tree(repo, branch, norm, rev, 1 << 20)
    if entry is None and below is None:
        return None
    paths = ([norm] if entry is not None else []) + [e.path for e in below or () if e.kind == "file"]
    needle = text.casefold() if ignore_case else text
    hits: list[GrepHit] = []
    read = 0
    for n, path in enumerate(paths):
        if n >= GREP_FILES or read >= GREP_BYTES:
            return Grep(hits, True)
        found = repo.entry_at(commit, path)
        if found is None:
            continue
        read += found.size
        content = repo.content(found.oid).decode("utf-8")
        if needle not in (content.casefold() if ignore_case else content):
            continue
        for number, line in enumerate(content.split("\n"), 1):
            if needle in (line.casefold() if ignore_case else line):
                if len(hits) == limit:
                    return Grep(hits, True)
                hits.append(GrepHit(path, number, line[:GREP_LINE]))
    return Grep(hits, False)


def exists_at(repo: Repository, branch: str, norm: str, rev: str | None) -> bool:
    """A directory at ``norm`` (a file was looked for first)."""
    commit = commit_for(repo, branch, rev)
    if norm == "/":
        return bool(visible(norm, repo.list_at(commit, "/")))
    return repo.dir_exists_at(commit, norm)


def text_range(repo: Repository, branch: str, norm: str, start: int, end: int | None, rev: str | None) -> str:
    entry = repo.entry_at(commit_for(repo, branch, rev), norm)
    if entry is None:
        return ""
    window = byte_window(entry.size, start, end)
    return "" if window is None else repo.content_range(entry.oid, *window).decode("utf-8", errors="strict")


def byte_window(size: int, start: int, end: int | None) -> tuple[int, int] | None:
    """``[lo, hi)`` of a ``size``-byte file that ag2's ``MemoryKnowledgeStore.read_range`` returns; None: "".

    ag2 computes ``stop = min(end, size)``, returns "" when ``start >= stop``,
    then slices ``data[start:stop]``, so negative bounds count from the end
    as Python slices do.
    """
    stop = size if end is None else min(end, size)
    if start >= stop:
        return None
    lo, hi, _ = slice(start, stop).indices(size)
    return None if lo >= hi else (lo, hi)


def slice_text(data: bytes, start: int, end: int | None) -> str:
    window = byte_window(len(data), start, end)
    return "" if window is None else data[window[0] : window[1]].decode("utf-8", errors="strict")


def visible(path: str, names: list[str]) -> list[str]:
    """A listing of ``path`` without memrev's own files (``core.paths.OWN_FILES``): the
    agent's view of its memory, as ``/.memrev`` is never in it. Reading one by name still works."""
    prefix = path.rstrip("/") + "/"
    return [n for n in names if not is_own(prefix + n)]


# ------------------------------------------------------------------ history


def log(repo: Repository, branch: str, norm: str | None, limit: int | None, rev: str | None) -> list[Commit]:
    start = commit_for(repo, branch, rev)
    if start is None:
        return []
    if norm is None or norm == "/":
        return repo.log(start, limit)
    seq = repo.path_start(norm, start, branch)
    if repo.entry_at(start, norm) is None and (seq is None or repo.dir_exists_at(start, norm)):
        # A directory, present or deleted (it has no change rows of its own as a file).
        return repo.dir_log(norm, start, branch, limit)
    return repo.path_log(norm, seq, limit)


def filtered_log(
    repo: Repository, branch: str, norm: str | None, limit: int | None, rev: str | None, wanted: pickaxe.LogFilter
) -> list[Commit]:
    under = None if norm is None or norm == "/" else norm
    return pickaxe.select(repo, log(repo, branch, norm, None, rev), under, wanted, limit)


def last_change(repo: Repository, branch: str, norm: str, rev: str | None) -> tuple[str | None, str]:
    """The two revisions of ``norm``'s last change at ``rev`` (``Store.last_change``)."""
    versions = log(repo, branch, norm, 2, rev)
    if not versions:
        raise errors.RevisionNotFound(f"{norm} has no history at {rev or 'HEAD'}")
    if len(versions) == 2:
        return versions[1].id, versions[0].id
    parents = versions[0].parents
    return (parents[0] if parents else None), versions[0].id


def any_log(
    repo: Repository, branch: str, norm: str | None, limit: int | None, rev: str | None, wanted: pickaxe.LogFilter
) -> list[Commit]:
    """``log``, or ``filtered_log`` when ``wanted`` filters (``Store.log``, ``Reader.log``)."""
    return filtered_log(repo, branch, norm, limit, rev, wanted) if wanted.active else log(repo, branch, norm, limit, rev)


def log_page(
    repo: Repository, branch: str, path: str | None, limit: int, cursor: str | None, rev: str | None,
    where: Callable[[Commit], bool] | None,
) -> browse.Page:
    from ..history import browse

    keep = where
    start = commit_for(repo, branch, rev)
    norm = None if path is None or normalize(path) == "/" else normalize(path)
    first = None if start is None or norm is None else repo.path_start(norm, start, branch)
    if start is not None and norm is not None and repo.entry_at(start, norm) is None and (
        first is None or repo.dir_exists_at(start, norm)
    ):
        # a directory, present or deleted, as in ``log``: its directory key's walk
        # (or, as ``Repository.dir_log`` says when, the whole log filtered)
        if first is None and not repo.directory_keys_stale():
            norm = norm + "/"
            first = repo.path_start(norm, start, branch)
        else:
            inside = browse.under(norm)
            keep, norm = (inside if keep is None else lambda c, w=keep: inside(c) and w(c)), None
    kind = browse.WHOLE if norm is None else browse.PATH
    if cursor is not None:
        frontier = browse.decode_cursor(cursor, kind)
    elif start is None or (norm is not None and first is None):
        frontier = []  # nothing yet, or a directory that never held anything
    else:
        frontier = [start if norm is None else first]
    return browse.log_page(repo, frontier, path=norm, limit=limit, keep=keep)


def find_text(repo: Repository, branch: str, path: str, text: str, rev: str | None) -> list[browse.TextChange]:
    from ..history import browse

    norm = normalize(path)
    start = commit_for(repo, branch, rev)
    return [] if start is None else browse.find_text(repo, norm, text, repo.path_start(norm, start, branch))


def log_all(repo: Repository, limit: int | None, wanted: pickaxe.LogFilter) -> list[Commit]:
    heads = [bytes.fromhex(target) for target in history.branches(repo).values()]
    commits, _ = repo.log_page(heads, None if wanted.active else limit)
    return pickaxe.select(repo, commits, None, wanted, limit) if wanted.active else commits


def _file_start(repo: Repository, branch: str, norm: str, rev: str | None) -> bytes:
    start = commit_for(repo, branch, rev)
    if start is None or repo.entry_at(start, norm) is None:
        raise errors.RevisionNotFound(f"{norm} is not a file at {rev or 'HEAD'}")
    return start


def blame(repo: Repository, branch: str, norm: str, rev: str | None) -> list[history.BlameLine]:
    start = _file_start(repo, branch, norm, rev)
    return history.blame(repo, norm, repo.path_start(norm, start, branch))


def why(repo: Repository, branch: str, norm: str, line: int | None, rev: str | None, event_log: str) -> pickaxe.Why:
    start = _file_start(repo, branch, norm, rev)
    return pickaxe.why(repo, norm, start, branch, line, event_log=event_log)


def with_sizes(repo: Repository, commits: list[Commit], norm: str) -> list[tuple[Commit, int | None]]:
    """``history``'s pairs: each commit with the file's size there (``None``: deleted there)."""
    entries = repo.entries_at(commits, norm)
    return [(c, None if e is None else e.size) for c, e in zip(commits, entries, strict=True)]


def diff(repo: Repository, branch: str, rev_a: str | None, rev_b: str, wanted: Sequence[str] | None) -> list[FileChange]:
    a, b = None if rev_a is None else repo.resolve(rev_a, branch), repo.resolve(rev_b, branch)
    if wanted is None or len(wanted) == 1:
        return repo.diff(a, b, None if wanted is None else wanted[0])
    # Several paths: one filtered diff each (only their files are read), a path under two counted once.
    found = {c.path: c for w in wanted for c in repo.diff(a, b, w)}
    return [found[p] for p in sorted(found)]


# ------------------------------------------------------------------ commits made by history operations
# Each returns (its answer, the commit it made on the branch or None), for ``Writer.commit_by``.


def tag(repo: Repository, branch: str, name: str, rev: str) -> bytes:
    target = repo.resolve(rev, branch)
    history.create_tag(repo, name, target)
    return target


def merge(
    repo: Repository, branch: str, author: str, source: str, *, strategy: str | None,
    resolutions: dict[str, str | None], message: str | None,
) -> tuple[history.MergeResult, bytes | None]:
    result = history.merge(
        repo, branch, repo.resolve(source, branch), author=author,
        kinds=history.merge_kinds(repo, repo.head(branch)),
        strategy=strategy, resolutions=resolutions, message=message, source_name=source,
    )
    return result, (bytes.fromhex(result.commit) if result.commit else None)


def revert_touches(repo: Repository, branch: str, rev: str, changed: Callable[[bytes | None, bytes], list[str]]) -> list[str]:
    """The paths a revert of ``rev`` can change."""
    target = repo.resolve(rev, branch)
    parents = repo.commit_data(target)[1].parents
    return changed(parents[0] if parents else None, target)


def revert(repo: Repository, branch: str, author: str, rev: str) -> tuple[str | None, bytes | None]:
    new = history.revert(
        repo, branch, repo.resolve(rev, branch), author=author, kinds=history.merge_kinds(repo, repo.head(branch)),
    )
    return new, (bytes.fromhex(new) if new else None)


def restore(
    repo: Repository, branch: str, author: str, norm: str, rev: str, meta: dict[str, Any] | None
) -> tuple[str | None, bytes | None]:
    new = history.restore(repo, branch, norm, repo.resolve(rev, branch), author=author, meta=meta)
    return new, (bytes.fromhex(new) if new else None)


def import_bundle(repo: Repository, branch: str, file: str | os.PathLike[str]) -> tuple[dict[str, str], bytes | None]:
    before = repo.head(branch)
    from ..maintenance import bundles

    with bundles.open_bundle(file) as fh:
        imported = bundles.import_bundle(repo, fh)
    after = repo.head(branch)
    return imported, (after if after != before else None)


def export_bundle(
    repo: Repository, file: str | os.PathLike[str], branches: list[str] | None, progress: gc_mod.Progress | None
) -> int:
    from ..maintenance import bundles

    buf = io.BytesIO()
    # One snapshot from the refs to the last object: a branch another handle deletes
    # and collects (gc) meanwhile is exported whole, as it was when the export began.
    with repo.backend.read_snapshot():
        refs = repo.backend.list_refs(revisions.HEAD_PREFIX)
        if branches is not None:
            missing = [b for b in branches if revisions.HEAD_PREFIX + b not in refs]
            if missing:
                raise errors.RevisionNotFound(f"no branch {missing[0]!r}")
            refs = {revisions.HEAD_PREFIX + b: refs[revisions.HEAD_PREFIX + b] for b in branches}
        refs.update(repo.backend.list_refs(revisions.TAG_PREFIX))
        count = bundles.export_bundle(repo, buf, refs, progress)
    replace_file(file, buf.getvalue())  # refuses to replace a link, FIFO or device
    return count
