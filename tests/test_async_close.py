"""Closing a handle while its worker thread still has work whose caller was cancelled.

The work then fails with StoreClosed in the worker; before the fix its future was
left with an exception nobody retrieved, which the event loop reported (and
anyio's test runner raised) — seen as a flaky failure of test_worktree.py."""

from __future__ import annotations

import asyncio
import gc

import pytest

from memrev import VersionedStore

pytestmark = pytest.mark.anyio


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_close_after_a_cancelled_caller_leaves_nothing_unretrieved(tmp_path):
    reported: list[dict] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        store = VersionedStore(tmp_path)
        await store.write("/a.md", "a\n")
        store._lock.acquire()  # the worker's job will wait for the handle lock
        caller = asyncio.ensure_future(store.log())
        await asyncio.sleep(0.05)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        store.close()  # lock busy: the backend is closed by the worker, after the job
        store._lock.release()
        await asyncio.sleep(0.2)  # the job runs, finds the handle closed, fails
        gc.collect()  # an unretrieved future exception is reported when the future is collected
        await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(previous)
    assert reported == []
