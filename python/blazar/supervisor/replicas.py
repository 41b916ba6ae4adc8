"""Replicas: which of a model's engine instances (``replicas = N``: ``name``, ``name#1``, ...) a request runs on.

It owns the count of requests given to each instance (from the choice until the request ends) and the choice:
a session's pinned instance; else the least loaded started instance with a free slot; else the next instance
not started yet (so another engine starts only when every slot of the running ones is taken); else the least
loaded. Admission already bounds a model's requests at its slots times its replicas. Pure bookkeeping: starting
an instance is ``Supervisor.ensure_ready``'s, stopping an idle one the idle reaper's, like any engine.
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from contextlib import contextmanager

from blazar.paths import instance_key, replica_of


class Instances:
    """``take``: an instance for one request, counted until it ends."""

    def __init__(self) -> None:
        self.load: dict[str, int] = {}
        """Requests given to each instance key and not yet ended."""

    def choose(
        self, key: str, slots: int, replicas: int, started: Container[str], pinned: str | None = None
    ) -> int:
        """The instance (0 to ``replicas - 1``) of the model whose engine key is ``key`` for the next request;
        ``started``: the instance keys with an engine (ready or starting); ``pinned``: the instance key a session
        is pinned to."""
        if pinned is not None:
            base, n = replica_of(pinned)
            if base == key and n < replicas:
                return n
        keys = [instance_key(key, i) for i in range(replicas)]
        loads = [self.load.get(k, 0) for k in keys]
        running = [i for i, k in enumerate(keys) if k in started or loads[i] > 0]
        free = [i for i in running if loads[i] < slots]
        if free:
            return min(free, key=lambda i: (loads[i], i))
        idle = [i for i in range(replicas) if i not in running]
        if idle:
            return idle[0]
        return min(range(replicas), key=lambda i: (loads[i], i))

    @contextmanager
    def take(
        self, key: str, slots: int, replicas: int, started: Container[str], pinned: str | None = None
    ) -> Iterator[int]:
        """``choose``, with the instance's count raised until the block ends."""
        n = self.choose(key, slots, replicas, started, pinned)
        k = instance_key(key, n)
        self.load[k] = self.load.get(k, 0) + 1
        try:
            yield n
        finally:
            left = self.load[k] - 1
            if left:
                self.load[k] = left
            else:
                del self.load[k]
