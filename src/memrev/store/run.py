"""Where a store handle's repository work runs: the event loop or the handle's worker thread.

Decided in one place, :meth:`Runner.run`: work that cannot wait (a read of a
local SQLite file, a commit that got the write lock without waiting) runs on
the event loop, because a hop to a thread costs more than it does; anything
that can wait (a lock held by another process, the network, retry backoff,
whole-store work) runs in the handle's worker thread, so the agent's event
loop keeps running. See docs/design.md, "Async".

Also here: what ``close()`` returns (:data:`CLOSED`), and the event-loop
helpers the rest of the store uses (a task in a fresh context, a worker job's
end handed back to the loop). How a handle is opened is ``memrev.store.opening``
(no asyncio there: the CLI's reads open a store the same way without it).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import threading
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from .. import errors
from ..repo.repository import Repository

log = logging.getLogger("memrev")
_T = TypeVar("_T")


class _Closable(Protocol):
    def close(self) -> Any: ...


_H = TypeVar("_H", bound=_Closable)
FULL_ID = re.compile(r"^[0-9a-fA-F]{40}$")
# True in the tasks that deliver changes to subscribers (and in tasks they
# spawn): a write made by a subscriber does not wait for its own delivery,
# which is queued behind the callback making it.
DELIVERING: contextvars.ContextVar[bool] = contextvars.ContextVar("memrev_delivering", default=False)


class Closed:
    """What ``close()`` returns: nothing to use, but awaitable.

    ``Store.close()`` is synchronous (the AG2 side calls it that way),
    while AutoGen's ``Memory.close()`` is awaited. Returning this object lets
    ``store.close()`` and ``await store.close()`` both work, without the
    "coroutine was never awaited" warning a coroutine would give.
    """

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]

    def __repr__(self) -> str:
        return "<memrev: closed>"


CLOSED = Closed()


def current_task() -> asyncio.Task | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop: no task, so no transaction
        return None


def fresh_context() -> contextvars.Context:
    """A context holding nothing of the caller's (transactions, provenance), marked as delivery."""
    ctx = contextvars.Context()
    ctx.run(DELIVERING.set, True)
    return ctx


def create_task_in_fresh_context(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """A task that runs in :func:`fresh_context`. Created from inside that context (the task
    copies the current one), because ``create_task(context=...)`` is Python 3.11+ and memrev
    supports 3.10."""
    return fresh_context().run(asyncio.get_running_loop().create_task, coro, name=name)


def orphaned(outcome: asyncio.Future) -> None:
    """The end of worker work whose caller was cancelled: its failure is logged, not left unretrieved."""
    if outcome.cancelled():
        return
    e = outcome.exception()
    if e is not None and not isinstance(e, errors.StoreClosed):
        log.warning("memrev: work whose caller was cancelled failed: %r", e)


def call_soon(loop: asyncio.AbstractEventLoop, on_done: Callable[[Any], None], job: Future) -> None:
    """Hand a finished worker job's result to ``on_done`` on the loop (from the worker thread)."""
    if job.cancelled() or job.exception() is not None:
        return
    try:
        loop.call_soon_threadsafe(on_done, job.result())
    except RuntimeError:  # the loop is closed: nobody is left to tell
        log.warning("memrev: a commit finished after its event loop closed; subscribers were not told")


class Runner:
    """A handle's repository, its lock and its worker thread: where each piece of work runs.

    The repository's caches and its one database connection are shared by
    the event loop (inline work) and the worker thread, so both take
    ``lock``. ``name`` is the handle's class name, for ``StoreClosed``.
    """

    def __init__(self, repo: Repository, lock: threading.Lock, name: str) -> None:
        self.repo = repo
        self.lock = lock
        self.local = repo.backend.local is True
        self.closed = False
        self._name = name
        self._worker: ThreadPoolExecutor | None = None

    def live(self) -> Repository:
        if self.closed:
            raise errors.StoreClosed(f"this {self._name} is closed")
        return self.repo

    async def run(
        self,
        work: Callable[[], _T],
        *,
        inline: Callable[[], _T] | None = None,
        on_done: Callable[[_T], None] | None = None,
        before_submit: Callable[[], None] | None = None,
        drop: Callable[[], bool] | None = None,
    ) -> _T:
        """Run repository work: on the event loop if it cannot wait, else in this handle's worker thread.

        The one place that decides (docs/design.md, "Async").
        ``inline`` is a variant that cannot wait; it runs on the loop when the
        backend is local and the handle lock is free at this instant. If it
        finds it would wait after all (``TransientConflict``: another process
        holds the write lock), ``work`` runs in the worker thread instead.
        A cancelled caller does not stop work that has started: the worker
        finishes (a commit is whole or rolled back), ``on_done`` still runs on
        the loop, and the lock is released. Work not yet started is dropped
        (``drop``, for work queued in a group commit: it says whether it
        could still take the work back; a worker may have started it as part
        of another caller's job). ``before_submit`` runs on the loop just
        before the work goes to the worker (a commit joins the group queue
        there, so the queue holds it before its job can run).
        """
        self.live()
        if inline is not None and self.local and self.lock.acquire(blocking=False):
            try:
                result = inline()
            except errors.TransientConflict:
                pass
            else:
                if on_done is not None:
                    on_done(result)
                return result
            finally:
                self.lock.release()
        loop = asyncio.get_running_loop()
        if before_submit is not None:
            before_submit()
        job = self.executor().submit(self.locked, work)
        if on_done is not None:
            job.add_done_callback(lambda f: call_soon(loop, on_done, f))
        outcome = asyncio.wrap_future(job, loop=loop)
        try:
            return await asyncio.shield(outcome)
        except asyncio.CancelledError:
            if drop is None or drop():
                job.cancel()  # only succeeds if the work has not started
            outcome.add_done_callback(orphaned)  # nobody awaits it now: never an unretrieved exception
            raise

    def locked(self, work: Callable[[], _T]) -> _T:
        with self.lock:
            self.live()
            return work()

    def executor(self) -> ThreadPoolExecutor:
        # One thread per handle, created on first use: work of one handle
        # runs in order and never occupies a thread waiting for its lock.
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memrev")
        return self._worker

    async def read(self, work: Callable[[], _T], rev: str | None = None) -> _T:
        """A bounded read: inline-able at the head or at a full commit id, else (``HEAD~n``, names) threaded."""
        cheap = rev is None or (len(rev) == 40 and FULL_ID.match(rev) is not None)
        return await self.run(work, inline=work if cheap else None)

    async def open_off_loop(self, open_handle: Callable[[], _H]) -> _H:
        """``open_handle()`` in the worker thread, not on the loop (opening a backend may connect
        over the network); a handle whose caller was cancelled meanwhile is closed when it lands."""
        opened: list[_H] = []
        gave_up = False

        def landed(handle: _H) -> None:
            opened.append(handle)
            if gave_up:
                handle.close()

        try:
            return await self.run(open_handle, on_done=landed)
        except asyncio.CancelledError:
            gave_up = True
            for handle in opened:
                handle.close()
            raise

    def shut(self, close_backend: Callable[[], None]) -> None:
        """The end of the handle: ``close_backend`` now if the lock is free, else after the work running.

        Work already running in the worker thread finishes first; the
        connection is closed after it, never under it.
        """
        if self.lock.acquire(blocking=False):
            try:
                close_backend()
            finally:
                self.lock.release()
        else:
            self.executor().submit(self._close_when_free, close_backend)
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)

    def _close_when_free(self, close_backend: Callable[[], None]) -> None:
        with self.lock:
            close_backend()
