"""Group commit: the commits waiting for one handle's worker thread share one transaction.

A commit that goes to the worker thread (``durability="full"``: an fsync per
transaction; PostgreSQL: round trips and a synchronous commit on the server)
spends most of its time on what every transaction pays once. When several
tasks commit through one handle at the same time, their commits queue here;
the worker takes every commit waiting and hands them to
``Repository.commit_group``: one transaction, one fsync, and still one commit
(id, parent, compare-and-swap) per caller, each failing on its own. A caller
is answered only after the transaction holding its commit is committed, so an
acknowledged commit is as durable as it would have been alone.

The queue is filled on the event loop and drained by the worker thread while
it holds the handle lock; its own lock only guards the deque.
"""

from __future__ import annotations

import collections
import threading

from .repository import CommitRequest, CommitResult, Repository

MAX_GROUP = 64  # commits per transaction: bounds how long one transaction holds the lock


class Pending:
    """One caller's commit in the queue; ``outcome`` is set by the worker that committed it."""

    __slots__ = ("dropped", "outcome", "request", "taken")

    def __init__(self, request: CommitRequest) -> None:
        self.request = request
        self.taken = False  # a worker took it into a transaction: it will be committed or fail
        self.dropped = False  # its caller was cancelled before that: it is never committed
        self.outcome: CommitResult | BaseException | None = None


class CommitQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: collections.deque[Pending] = collections.deque()

    def add(self, request: CommitRequest) -> Pending:
        """Queue a commit (on the loop, before its worker job is submitted)."""
        pending = Pending(request)
        with self._lock:
            self._waiting.append(pending)
        return pending

    def drop(self, pending: Pending) -> bool:
        """Take back a commit whose caller was cancelled; ``False`` if a worker already took it."""
        with self._lock:
            if pending.taken:
                return False
            pending.dropped = True
            self._waiting.remove(pending)
            return True

    def run(self, repo: Repository, pending: Pending) -> CommitResult | None:
        """In the worker, with the handle lock held: commit what waits (up to ``pending``) and
        answer for ``pending`` (``None`` if it was dropped)."""
        while not (pending.taken or pending.dropped):
            self._commit(repo, self._take())
        if pending.dropped:
            return None
        if isinstance(pending.outcome, BaseException):
            raise pending.outcome
        return pending.outcome

    def _take(self) -> list[Pending]:
        with self._lock:
            group = [self._waiting.popleft() for _ in range(min(MAX_GROUP, len(self._waiting)))]
            for p in group:
                p.taken = True
        return group

    @staticmethod
    def _commit(repo: Repository, group: list[Pending]) -> None:
        try:
            outcomes: list[CommitResult | BaseException] = list(repo.commit_group([p.request for p in group]))
        except BaseException as e:  # noqa: BLE001 - the transaction failed: nothing of the group was committed; each caller gets it
            outcomes = [e] * len(group)
        for p, outcome in zip(group, outcomes, strict=True):
            p.outcome = outcome
