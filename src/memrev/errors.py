"""One hierarchy for every error memrev raises on purpose.

Each error also derives from the builtin a caller would naturally catch
(``InvalidPath`` is a ``ValueError``, ``RevisionNotFound`` a ``KeyError``), so
code written against ag2's stores keeps working.
"""

from __future__ import annotations


class MemrevError(Exception):
    """Base class of every memrev error."""


class InvalidPath(MemrevError, ValueError):
    """A path with NUL or control characters, a ``..`` segment, over ``MAX_PATH_BYTES``, or of
    the wrong type; likewise a branch or tag name, memory name or session id memrev does not
    take (docs/api.md, "Limits on names and metadata"). Nothing was written."""


class InvalidMergeKind(MemrevError, ValueError):
    """A merge-kind declaration with an unknown kind or a malformed path pattern,
    or a declarations file (``/.memrev-merge-kinds.json``) that is not a valid table."""


class InvalidContent(MemrevError, TypeError):
    """Content of the wrong type (not ``str``), or text that cannot be stored."""


class RevisionNotFound(MemrevError, KeyError):
    """A revision (id, prefix, branch, tag, ``REV~n``) that names no commit."""

    def __str__(self) -> str:  # KeyError quotes its argument; say it plainly
        return str(self.args[0]) if self.args else "revision not found"


class AmbiguousRevision(RevisionNotFound):
    """An id prefix that matches more than one commit."""


class IntegrityError(MemrevError):
    """Stored data does not match its hash, or a reference points nowhere."""


class NotAMemrevStore(MemrevError):
    """The location holds a file that is not a memrev store."""


class NoStore(NotAMemrevStore):
    """Nothing is stored at the location yet, and the caller asked not to create a store
    (``create=False``: every read command of the CLI)."""


class ReadOnlyStore(MemrevError, PermissionError):
    """The store was opened for reading only (a read-only mount, no write permission);
    a mutation was attempted. Nothing was written."""


class StoreFull(MemrevError, OSError):
    """The disk (or the database's size limit) is full. Nothing of the refused call was
    written; everything acknowledged before stays."""


class NotARegularFile(MemrevError, OSError):
    """A file outside the store that memrev would read or replace (an export target,
    an imported bundle) is a symbolic link, FIFO, device node or folder. Nothing was done."""


class FolderTooLarge(MemrevError):
    """A folder to adopt holds more files or bytes than adoption reads (``memrev.folders.adopt`` limits). Nothing was written."""


class SchemaTooNew(MemrevError):
    """The store was written by a newer memrev whose schema this one cannot read."""


class StoreClosed(MemrevError, RuntimeError):
    """The store handle was closed."""


class ReadOnlyRevision(MemrevError, PermissionError):
    """A mutation was attempted on a view of a past revision."""


class ConcurrentUpdate(MemrevError):
    """The branch moved under a commit that required it not to (``expect_head``),
    or kept moving for longer than the retry budget. Nothing was written."""


class TransientConflict(ConcurrentUpdate):
    """The database refused a transaction for now (deadlock, lock timeout,
    serialization failure). Nothing was written; ``Repository.commit`` retries it.
    Raised by a purge after its rewrite committed, it says the freed bytes could not
    all be reclaimed yet (readers kept the WAL or a table busy): running the same
    purge again rewrites nothing and reclaims them."""


class WriteConflict(ConcurrentUpdate):
    """A conditional ``write``/``append``/``delete`` (``expected=``) found the path at another
    version than the one expected: someone else changed it since it was read. Nothing was
    written (in a transaction: nothing of the transaction). ``path``; ``expected`` and
    ``actual`` are commit ids, or ``"absent"``. Read it again (``read_versioned``), redo the
    change on what is there, and write with the new version."""

    def __init__(self, message: str, path: str = "", expected: str = "", actual: str = "") -> None:
        super().__init__(message)
        self.path, self.expected, self.actual = path, expected, actual


class HeadMoved(TransientConflict):
    """A commit computed on the branch head a backend saw last (``guess_ref``) found
    the branch moved when it was sent. Nothing was written; ``Repository.commit``
    computes it again at once on the locked, current head."""


class MergeConflict(MemrevError):
    """A merge or revert that cannot be completed without a decision. Nothing was written.

    ``conflicts`` lists each path with its kind (``content``, ``modify/delete``,
    ``add/add``, ``binary``) and, for text, the file with conflict markers.
    """

    def __init__(self, message: str, conflicts: list) -> None:
        super().__init__(message)
        self.conflicts = conflicts


class InvalidBundle(IntegrityError):
    """An export bundle that is truncated, tampered with, or not a memrev bundle. Nothing was imported."""


class PurgedContent(MemrevError):
    """A bundle would bring back commits a purge rewrote or removed (``import_bundle`` of a
    bundle exported before the purge). ``commits`` names them (their old ids). Nothing was
    imported: export again after the purge, or purge the store the bundle goes to."""

    def __init__(self, message: str, commits: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.commits = commits


class InvalidPattern(MemrevError, ValueError):
    """A search pattern that cannot be used: an invalid regular expression, an empty text."""


class InvalidCursor(MemrevError, ValueError):
    """A log page cursor that this query did not hand out (malformed, or for another path)."""


class InvalidArgument(MemrevError, ValueError):
    """An option outside what it can mean (e.g. ``gc(keep_seconds=nan)``). Nothing was done."""


class UnknownBackend(MemrevError, ValueError):
    """A location ``SCHEME://...`` whose scheme no backend is registered for
    (``memrev.backends.register``). Nothing was created."""


class UnsafeWorkTree(MemrevError, OSError):
    """memrev's own folder in a working tree (``.memrev`` or ``.memrev/tmp``) is a symbolic
    link, not a directory, or owned by another user. memrev opened nothing through it."""


class BranchInUse(MemrevError):
    """A branch cannot be deleted while something follows it: the handle asking is on it,
    or the folder's working tree follows it (as git refuses to delete a checked-out branch).
    Nothing was changed."""


class WorkTreeDiverged(MemrevError):
    """Turning a folder's working tree on: files changed on disk since memrev last wrote the
    folder while the branch changed them too, and the two sides do not merge by the paths'
    declared kinds. ``paths`` names them. Nothing was committed and no file was touched:
    make each file the version to keep (or move it aside), then open again."""

    def __init__(self, message: str, paths: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.paths = paths


class UnstorableFileInTheWay(MemrevError, OSError):
    """A write, append, delete, restore or revert would replace or remove a file in the working-tree
    folder that memrev could not store (binary, a symbolic link, over the size limit): its
    bytes are in no commit, so memrev refuses instead of destroying them. ``paths`` names
    them; nothing was committed. Move or delete the file (or make it text) and try again."""

    def __init__(self, message: str, paths: list[str] | None = None) -> None:
        super().__init__(message)
        self.paths = list(paths or [])

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PathNotFound(MemrevError, LookupError):
    """A file command (``memrev.frameworks.memory_files``: the MCP tools, Claude's memory tool)
    named a path that does not exist, or is not what the command needs (a folder where a
    file is edited). Nothing was written."""


class PathExists(MemrevError, FileExistsError):
    """A file command would create or rename onto a path that exists. Nothing was written."""


class EditRefused(MemrevError, ValueError):
    """A file command's edit cannot be made as asked: ``old_str`` not found or found more
    than once, an insert line out of range, a folder renamed into itself. Nothing was written."""
