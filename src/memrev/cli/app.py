"""The ``memrev`` command group: its global options (``--store``, ``--branch``,
``--no-pager``, ``--version``), opening the store, running a command's job on
it, and memrev's errors as one line on stderr and exit status 1.

Every command takes the store from ``--store``, else ``$MEMREV_STORE``, else
the current folder, and writes to click's output stream, so it is testable
with ``click.testing.CliRunner`` and no terminal. The store module (and with
it asyncio, SQLite, the history modules) is imported when a command opens one
(see ``memrev.cli``'s docstring: start time matters); a read-only command
(``read``) opens a ``memrev.store.reads.Reader`` instead, the same store
without the event loop or the async ``Store``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from ..errors import ConcurrentUpdate, MemrevError, MergeConflict, NoStore, RevisionNotFound, TransientConflict
from .render import printable

if TYPE_CHECKING:
    from ..store.reads import Reader
    from ..store.store import Store


Job = Callable[["Store"], Awaitable[Any]]
ReadJob = Callable[["Reader"], Any]
# A merge, revert or restore computed against a head that moved before it
# could commit is computed again on the new head, as often as a commit retries.
_RECOMPUTE_ATTEMPTS = 8


def open_store(location: str, **options: Any) -> Store:
    """A store handle; the store module is imported here, not at start (see ``memrev.cli``'s docstring)."""
    from ..store.store import Store

    return Store(location, **options)


def run(ctx: click.Context, job: Job, *, create: bool = False, need_branch: bool = True, author: str | None = None) -> Any:
    """:func:`run_raw`, and a merge conflict as its paths on stderr and exit 1 (``merge`` shows more itself)."""
    try:
        return run_raw(ctx, job, create=create, need_branch=need_branch, author=author)
    except MergeConflict as e:
        for c in e.conflicts:
            click.echo(f"CONFLICT ({c.kind}): {c.path}", err=True)
        raise click.ClickException(str(e)) from None


def no_store_hint(location: str) -> str:
    """Why there is no store, and what to do when the folder holds files (never adopted implicitly)."""
    try:
        holds_files = any(not name.startswith(".") for name in os.listdir(location))
    except OSError:
        holds_files = False
    if holds_files:
        return f"no memrev store at {location}; it holds files: run `memrev adopt {location}` to make them the first commit"
    return f"no memrev store at {location}"


def run_raw(
    ctx: click.Context, job: Job, *, create: bool = False, need_branch: bool = True, author: str | None = None
) -> Any:
    """Run ``job`` on a store handle; memrev's errors (and the OS's, about files
    the user named: a missing folder, an unwritable export target) become one
    line on stderr and exit 1. Anything else (a ``KeyError``, a ``TypeError``)
    is a bug in memrev and keeps its traceback.

    ``create``: only commands that bring data in (``import``, ``import-dir``)
    may create the store. ``need_branch``: ``--branch`` must name an existing
    branch, unless the store has none yet (a typo never starts a new branch).
    ``author``: who the commits this command makes are by.
    """
    import asyncio

    options: dict[str, Any] = {"branch": ctx.obj["branch"], "create": create}
    if author is not None:
        options["author"] = author

    async def main() -> Any:
        store = open_store(ctx.obj["store"], **options)
        try:
            if need_branch:
                await _check_branch(store)
            return await job(store)
        finally:
            store.close()

    with _one_line_errors(ctx):
        return asyncio.run(main())


def read(ctx: click.Context, job: ReadJob, *, need_branch: bool = True) -> Any:
    """:func:`run_raw` for a command that only reads (``log``, ``show``, ``diff``, ``history``, ``cat``, ``ls``):
    ``job`` gets a :class:`~memrev.store.reads.Reader`, the store opened exactly as
    ``run`` opens it, and runs on this thread; errors end as ``run``'s do. No event loop,
    so neither asyncio nor the ``Store`` is imported (issue 26: a read starts faster)."""
    from ..store.reads import Reader

    with _one_line_errors(ctx):
        reader = Reader(ctx.obj["store"], branch=ctx.obj["branch"])
        try:
            if need_branch and reader.head() is None:
                _refuse_missing_branch(reader.branch_name, reader.branches())
            return job(reader)
        finally:
            reader.close()


@contextlib.contextmanager
def _one_line_errors(ctx: click.Context) -> Iterator[None]:
    """memrev's errors (and the OS's) as one line on stderr and exit 1 (see :func:`run_raw`)."""
    try:
        yield
    except MergeConflict:
        raise
    except NoStore:
        raise click.ClickException(printable(no_store_hint(ctx.obj["store"]), one_line=True)) from None
    except (MemrevError, OSError) as e:
        raise click.ClickException(printable(" ".join(str(e).split("\n")), one_line=True)) from None


async def _check_branch(store: Store) -> None:
    if await store.head() is not None:
        return
    _refuse_missing_branch(store.branch_name, await store.branches())


def _refuse_missing_branch(name: str, branches: dict[str, str]) -> None:
    """The branch has no head: a store with other branches has no branch ``name`` (a typo)."""
    if branches:
        names = ", ".join(sorted(branches)[:10])
        raise RevisionNotFound(f"branch {name!r} does not exist (branches: {names})")


async def recomputing(step: Callable[[], Awaitable[Any]]) -> Any:
    """``step()`` again when the branch moved between computing and committing.

    Callers resolve revisions before the first attempt, so ``revert HEAD``
    still means the commit that was HEAD when the command started.
    """
    import asyncio

    from ..repo.retry import backoff_delay

    for attempt in range(_RECOMPUTE_ATTEMPTS):
        try:
            return await step()
        except ConcurrentUpdate as e:
            if isinstance(e, TransientConflict) or attempt == _RECOMPUTE_ATTEMPTS - 1:
                raise  # a transient conflict was retried inside the commit already
            await asyncio.sleep(backoff_delay(attempt))
    raise AssertionError("unreachable")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memrev")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"memrev {_version()}")
        ctx.exit()


@click.group(name="memrev", context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.option("--store", envvar="MEMREV_STORE", default=".", show_default=True,
              help="Store folder or URL (default: $MEMREV_STORE, else the current folder).")
@click.option("--branch", default="main", show_default=True, help="Branch that HEAD names.")
@click.option("--no-pager", is_flag=True, help="Never page long output (log, history, blame) on a terminal.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show memrev's version and exit.")
@click.pass_context
def main(ctx: click.Context, store: str, branch: str, no_pager: bool) -> None:
    """Inspect and undo the history of a memrev store.

    On a terminal, log, history and blame go through a pager ($MEMREV_PAGER,
    else $PAGER, else less -FRX), as git's do; --no-pager prints directly.

    The store is --store, else $MEMREV_STORE, else the current folder.

    Example: memrev --store ./journal-state log /memory/working.md
    """
    ctx.obj = {"store": store, "branch": branch, "no_pager": no_pager}
    if ctx.invoked_subcommand is None:  # bare ``memrev``: the help, as git prints its usage
        click.echo(ctx.get_help())
        ctx.exit(0)
