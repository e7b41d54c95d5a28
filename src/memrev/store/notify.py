"""Change notification of a store handle: ``on_change``, polling, and delivery to subscribers.

A commit made through this process is claimed at once for every handle on
the same branch that has subscribers (:meth:`Notifier.announce`); commits
made by other processes are found by polling the branch head
(:meth:`Notifier.poll`). Each handle delivers its batches of changed paths
in order, in its own task with a clean context, so a subscriber never sees
the writer's transaction and a failing subscriber never undoes or blocks a
commit.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable

from ..core import trees
from ..core.paths import is_under, normalize
from ..repo import revisions
from ..repo.repository import Repository
from .run import DELIVERING, Runner, create_task_in_fresh_context

log = logging.getLogger("memrev")

ChangeCallback = Callable[[str], Awaitable[None]]

# Handles on the same store in this process, so a commit through one reaches
# the others' subscribers at once instead of at their next poll.
_SIBLINGS: dict[str, weakref.WeakSet[Notifier]] = {}


class Subscription:
    """What ``on_change`` returns: ``await sub.close()`` stops the callback."""

    def __init__(self, notifier: Notifier, prefix: str, callback: ChangeCallback) -> None:
        self._notifier, self.prefix, self.callback = notifier, prefix, callback

    async def close(self) -> None:
        self._notifier.unsubscribe(self)


class Batch:
    """Changes claimed for delivery: the paths between commits ``base`` and ``upto``, then ``paths``."""

    def __init__(self, base: bytes | None, upto: bytes | None, paths: list[str]) -> None:
        self.base, self.upto, self.paths = base, upto, paths
        self.delivered = asyncio.get_running_loop().create_future()


def changed_paths(repo: Repository, a: bytes | None, b: bytes | None) -> builtins.list[str]:
    """The paths whose content differs between commits ``a`` and ``b``."""
    return [p for p, _, _ in trees.diff(repo, repo.root(a), repo.root(b))]


def changed_since(repo: Repository, branch: str, seen: bytes | None, upto: bytes | None) -> builtins.list[str]:
    """``changed_paths`` from the commit a handle's subscribers last heard of. When a purge
    rewrote that commit (it is gone), from the commit it became, plus the files the purge
    changed at the branch's tip (its record says which; all files when it could not list
    them): a subscriber hears that a purged or redacted file changed."""
    if seen is not None:
        repo.fresh()
        if repo.backend.get_commit(seen) is None:
            known = repo.purge_map()
            hit = known.follow(seen.hex())
            if hit is not None:
                now = None if hit.new is None else bytes.fromhex(hit.new)
                extra = known.changed_on(revisions.branch_ref(branch), seen.hex())
                if extra is None:
                    extra = {p for p, _ in trees.walk(repo, repo.root(upto))}
                return sorted(set(changed_paths(repo, now, upto)) | extra)
    return changed_paths(repo, seen, upto)


async def deliver(batches: builtins.list[Batch]) -> None:
    """Wait until subscribers have heard of ``batches`` (as ag2's stores do), unless called from a subscriber.

    A subscriber that writes runs inside the delivery task, which is busy
    with it: waiting there would wait for itself.
    """
    if batches and not DELIVERING.get():
        await asyncio.shield(asyncio.gather(*(b.delivered for b in batches)))


class Notifier:
    """The subscribers of one handle, what it has claimed for delivery, its poller and its deliverer.

    ``key`` names the store and branch: handles with the same key are siblings.
    """

    def __init__(self, runner: Runner, branch: str, key: str, poll_interval: float) -> None:
        self._runner = runner
        self._branch = branch
        self._poll_interval = poll_interval
        self._key = key
        self.subs: list[Subscription] = []
        self._seen: bytes | None = None  # changes up to this commit are claimed for delivery
        self._seen_seq = 0  # its commit number (topological: a descendant has a larger one)
        self._batches: collections.deque[Batch] = collections.deque()
        self._deliverer: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        _SIBLINGS.setdefault(key, weakref.WeakSet()).add(self)

    def close(self) -> None:
        """Stop polling and delivering (the handle is closed)."""
        for task in (self._poller, self._deliverer):
            if task is not None:
                task.cancel()
        self._poller = self._deliverer = None
        self.subs.clear()
        self._batches.clear()
        # A process that opens stores in many places (a test run, a server) kept an
        # empty set per place it ever opened.
        siblings = _SIBLINGS.get(self._key)
        if siblings is not None:
            siblings.discard(self)
            if not siblings:
                del _SIBLINGS[self._key]

    async def subscribe(self, path: str, callback: ChangeCallback) -> Subscription:
        self._runner.live()
        if not self.subs and self._poller is None:
            self._seen, self._seen_seq = await self._runner.read(self.head_and_seq)
        sub = Subscription(self, normalize(path), callback)
        self.subs.append(sub)
        if self._poller is None:
            # A clean context: the poller must never see the subscriber's
            # transaction (or anything else task-local of whoever subscribed).
            self._poller = create_task_in_fresh_context(self.poll(), "memrev-poll")
        return sub

    def head_and_seq(self) -> tuple[bytes | None, int]:
        repo = self._runner.repo
        head = repo.head(self._branch)
        return head, (0 if head is None else repo.commit_data(head)[0])

    def unsubscribe(self, sub: Subscription) -> None:
        with contextlib.suppress(ValueError):
            self.subs.remove(sub)
        if not self.subs and self._poller is not None:
            self._poller.cancel()
            self._poller = None

    def announce(self, parent: bytes | None, new: bytes, seq: int, paths: builtins.list[str]) -> builtins.list[Batch]:
        """A commit made through this process: claim it for every handle on this branch that has subscribers."""
        out = []
        for sibling in list(_SIBLINGS.get(self._key, ())):
            if sibling.subs and not sibling._runner.closed:
                batch = sibling.claim(parent, new, seq, paths)
                if batch is not None:
                    out.append(batch)
        return out

    def announce_paths(self, paths: builtins.list[str]) -> builtins.list[Batch]:
        """Paths to report without a commit (an unchanged write): to this handle's subscribers."""
        if not self.subs:
            return []
        return [self._enqueue(Batch(self._seen, self._seen, paths))]

    def claim(self, parent: bytes | None, new: bytes, seq: int, paths: builtins.list[str]) -> Batch | None:
        """Advance what this handle has delivered to ``new``, before anything is delivered.

        Runs on the loop without awaiting, so a commit is claimed exactly once
        however the poller and the writers interleave. A commit at or below the
        claimed one was covered already (a later commit or a poll reached past
        it). If others committed between the claimed commit and ``parent``,
        their paths are part of this batch.
        """
        if seq <= self._seen_seq:
            return None
        base = self._seen
        self._seen, self._seen_seq = new, seq
        return self._enqueue(Batch(base, parent, paths))

    def _enqueue(self, batch: Batch) -> Batch:
        self._batches.append(batch)
        loop = asyncio.get_running_loop()
        task = self._deliverer
        if task is None or task.done() or task.get_loop() is not loop:
            # Delivery does not depend on the writer's task surviving: it has
            # its own task (clean context), one per handle, so it is serialised.
            self._deliverer = create_task_in_fresh_context(self._deliver_batches(), "memrev-deliver")
        return batch

    async def _deliver_batches(self) -> None:
        while self._batches and not self._runner.closed:
            batch = self._batches.popleft()
            try:
                missed: list[str] = []
                if batch.base != batch.upto:
                    missed = await self._runner.run(
                        functools.partial(changed_since, self._runner.repo, self._branch, batch.base, batch.upto)
                    )
                await self._dispatch(missed + batch.paths)
            except Exception:
                log.exception("memrev: could not deliver changes of branch %s to subscribers", self._branch)
            finally:
                if not batch.delivered.done():
                    batch.delivered.set_result(None)
        for batch in self._batches if self._runner.closed else ():
            if not batch.delivered.done():
                batch.delivered.set_result(None)

    async def _dispatch(self, paths: builtins.list[str]) -> None:
        for path in paths:
            for sub in list(self.subs):
                if is_under(path, sub.prefix):
                    try:
                        await sub.callback(path)
                    except Exception:  # a subscriber's failure must not undo or block a commit
                        log.exception("memrev: on_change subscriber %r failed on %s", sub.callback, path)

    async def poll(self) -> None:
        """Find commits made by other processes: one ref read per interval, a tree diff on change."""
        runner = self._runner
        backend = runner.repo.backend
        while not runner.closed:
            if not backend.notifies:  # nothing wakes us: one read of the branch head per interval
                await asyncio.sleep(self._poll_interval)
            else:
                # Not the handle's worker: this blocks for a whole interval.
                await asyncio.to_thread(backend.wait_for_change, self._poll_interval)
            if runner.closed:
                return
            try:
                head, seq = await runner.read(self.head_and_seq)
            except Exception:  # the database is away for a moment: look again next time
                log.warning("memrev: polling branch %s failed; trying again", self._branch, exc_info=True)
                await asyncio.sleep(self._poll_interval)
                continue
            if not runner.closed and seq > self._seen_seq:
                base = self._seen
                self._seen, self._seen_seq = head, seq
                self._enqueue(Batch(base, head, []))
