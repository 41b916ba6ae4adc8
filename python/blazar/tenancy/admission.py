"""Admission for asyncio: one Cython ``Scheduler`` per model, a bounded wait, and leases that free slots.

Owns: the per-model queues, waking the requests the scheduler admits, the bounded wait that ends in
``AllSlotsBusy`` (503 ``all_slots_busy`` with the seed's human wait string) once no slot of the model has freed for
``queue_wait_secs`` (a queue that moves keeps its waiters), the ``Retry-After`` it carries (estimated from how long
the model's slots are held), and two pure helpers the handlers
call before admitting: ``classify_work`` (Interactive / Tool / RawLong) and ``parse_deadline_ms``
(``x-blazar-deadline-ms``); ``parse_priority`` (``x-blazar-priority``) and the class constants are re-exported
from ``blazar_sched`` so handlers import from one place. The ordering rules themselves live in ``blazar_sched`` (see its module docstring).

Must not: do I/O, log, or read HTTP objects; everything here runs on the gateway's one event loop and touches a
request a constant number of times.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

from blazar_sched import HIGH, INTERACTIVE, LOW, NORMAL, RAWLONG, TOOL, Scheduler, Ticket, parse_priority

from blazar.errors import BlazarError

__all__ = [
    "HIGH",
    "INTERACTIVE",
    "LOW",
    "NORMAL",
    "RAWLONG",
    "TOOL",
    "Admission",
    "AllSlotsBusy",
    "InvalidDeadline",
    "QueueStats",
    "SlotLease",
    "classify_work",
    "human_wait",
    "parse_deadline_ms",
    "parse_priority",
]


class AllSlotsBusy(BlazarError):
    """Every slot of a model stayed busy for the whole bounded wait (503 ``all_slots_busy``)."""

    status = 503
    code = "all_slots_busy"

    retry_after: int
    """Seconds a client should wait before retrying (the ``Retry-After`` header): ``Admission.retry_after``
    estimates when a slot will be free for it from how long the model's slots are held."""

    def __init__(self, model: str, waited_s: float, retry_after: int = 1) -> None:
        self.model = model
        self.waited_s = waited_s
        self.retry_after = retry_after
        remote = model.removeprefix("@remote/") if model.startswith("@remote/") else None
        what = f"remote '{remote}'" if remote is not None else f"model '{model}'"
        lever = "its `parallel` under [[remotes]]" if remote is not None else "the model's `parallel` slots"
        super().__init__(
            f"all_slots_busy: every slot of {what} stayed busy for {human_wait(waited_s)}; "
            f"retry later, send x-blazar-priority: high, or raise {lever}"
        )


class InvalidDeadline(BlazarError):
    """The ``x-blazar-deadline-ms`` header is not a positive number of milliseconds (400)."""

    status = 400


def human_wait(seconds: float) -> str:
    """The seed's wait string: whole seconds as ``"30s"``, anything else in milliseconds (``"250ms"``)."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def parse_deadline_ms(header: str | None) -> float | None:
    """``x-blazar-deadline-ms``: absent is None; otherwise a positive, finite number of milliseconds."""
    if header is None:
        return None
    try:
        ms = float(header.strip())
    except ValueError:
        ms = math.nan
    if not (ms > 0.0 and math.isfinite(ms)):
        shown = header if len(header) <= 40 else header[:40] + "..."
        raise InvalidDeadline(
            f"x-blazar-deadline-ms must be a positive number of milliseconds, got {shown!r}; "
            "send e.g. 'x-blazar-deadline-ms: 1500' to be admitted ahead of queued work due later, "
            "or leave it out to use the priority's SLO"
        )
    return ms


_RAW_ROUTES = frozenset({"/api/generate"})


def classify_work(route: str, body: Mapping[str, object]) -> int:
    """Work class of a request: Ollama raw completions are RawLong, tool-bearing chat is Tool, else Interactive."""
    if body.get("raw") is True and route.rstrip("/") in _RAW_ROUTES:
        return RAWLONG
    if body.get("tools") or body.get("functions"):
        return TOOL
    return INTERACTIVE


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One model's queue at a glance."""

    slots: int
    waiting: int
    running: int
    running_raw: int


RETRY_AFTER_MAX_S = 300
"""The longest ``Retry-After`` an ``all_slots_busy`` answer gives (batches retry a busy answer up to this far)."""

SERVICE_WEIGHT = 0.2
"""How much the latest freed slot moves a model's mean hold time (an exponentially weighted mean)."""


class _Flow:
    """How a model's queue moves: when a slot last freed, and how long a request holds its slot (the mean)."""

    __slots__ = ("freed_at", "held_s")

    def __init__(self) -> None:
        self.freed_at: float | None = None
        self.held_s: float | None = None


class SlotLease:
    """A started request's slot; ``release()`` (idempotent, or leaving the ``with`` block) frees it."""

    __slots__ = ("_admission", "_flow", "_released", "_sched", "model_key", "started", "ticket", "waited_s")

    def __init__(
        self,
        admission: Admission,
        sched: Scheduler,
        ticket: Ticket,
        model_key: str,
        waited_s: float,
        started: float,
        flow: _Flow,
    ) -> None:
        self._admission = admission
        self._sched = sched
        self._flow = flow
        self._released = False
        self.ticket = ticket
        self.model_key = model_key
        self.waited_s = waited_s
        self.started = started

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Free the slot and start whoever the scheduler admits next; later calls do nothing."""
        if self._released:
            return
        self._released = True
        self._sched.release(self.ticket)
        now = self._admission._clock()
        flow = self._flow
        held = now - self.started
        flow.held_s = held if flow.held_s is None else flow.held_s + SERVICE_WEIGHT * (held - flow.held_s)
        flow.freed_at = now
        self._admission._wake(self._sched.admit_ready())

    def __enter__(self) -> SlotLease:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    async def __aenter__(self) -> SlotLease:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"SlotLease(model={self.model_key!r}, key={self.ticket.key!r}, {state})"


class Admission:
    """Per-model admission queues on one event loop; ``admit`` waits for a slot and returns its ``SlotLease``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._scheds: dict[str, Scheduler] = {}
        self._flows: dict[str, _Flow] = {}

    def scheduler(self, model_key: str, slots: int) -> Scheduler:
        """The model's scheduler, created on first use; ``slots`` (N) follows the engine's slot count (its
        parallel setting; an embedding engine's, rounded down to a power of two: ``profile.embed_slots``)."""
        sched = self._scheds.get(model_key)
        if sched is None:
            sched = self._scheds[model_key] = Scheduler(slots)
            self._flows[model_key] = _Flow()
        elif sched.slots != slots:
            sched.slots = slots
            self._wake(sched.admit_ready())
        return sched

    def waiting(self, model_key: str) -> int:
        """Requests queued for the model now (admitted ones are not counted)."""
        sched = self._scheds.get(model_key)
        return 0 if sched is None else int(sched.waiting)

    async def admit(
        self,
        model_key: str,
        slots: int,
        *,
        key: str,
        weight: float,
        priority: int,
        work_class: int,
        deadline_ms: float | None,
        body_len: int,
        max_wait_s: float,
        holds: int = 1,
        on_wait: Callable[[], None] | None = None,
    ) -> SlotLease:
        """Queue a request for ``model_key`` and wait until it may start. It takes ``holds`` of the model's
        ``slots`` (an OpenAI request for n choices takes n, at most all of them).

        The wait is bounded by the queue's movement, not by the request's own age: it raises ``AllSlotsBusy`` once
        no slot of the model has freed for ``max_wait_s`` (counted from the later of its arrival and the last
        freed slot), so a long queue that keeps moving, as at a benchmark's start, is served in turn. It re-raises
        cancellation (a client gone) after taking the request out of the queue or freeing a slot it just got.
        ``on_wait`` is called once the request has to wait (one admitted at once pays nothing for it).
        """
        sched = self.scheduler(model_key, slots)
        flow = self._flows[model_key]
        start = self._clock()
        t = sched.ticket(key, weight, priority, work_class, start, deadline_ms, body_len, holds)
        sched.enqueue(t)
        self._wake(sched.admit_ready())
        if t.admitted:
            return SlotLease(self, sched, t, model_key, 0.0, start, flow)
        if max_wait_s <= 0:
            sched.cancel(t)
            self._wake(sched.admit_ready())
            raise AllSlotsBusy(model_key, 0.0, self.retry_after(model_key, 0.0))
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        t.waiter = fut
        timer: list[asyncio.TimerHandle] = []
        timer.append(loop.call_later(max_wait_s, self._expire, sched, t, model_key, max_wait_s, start, timer))
        try:
            if on_wait is not None:
                on_wait()
            await fut
        except BaseException:
            timer[0].cancel()
            t.waiter = None
            if t.admitted:  # admitted while the cancellation was on its way: hand the slot on
                sched.release(t)
            else:
                sched.cancel(t)
            self._wake(sched.admit_ready())
            raise
        timer[0].cancel()
        t.waiter = None
        now = self._clock()
        return SlotLease(self, sched, t, model_key, now - start, now, flow)

    def _expire(
        self,
        sched: Scheduler,
        t: Ticket,
        model_key: str,
        max_wait_s: float,
        start: float,
        timer: list[asyncio.TimerHandle],
    ) -> None:
        """The waiter's bound came due: refuse it if no slot freed for ``max_wait_s``, else look again that long
        after the last freed slot."""
        fut = t.waiter
        if not isinstance(fut, asyncio.Future) or fut.done():
            return
        freed = self._flows[model_key].freed_at
        now = self._clock()
        due = max(start, freed if freed is not None else start) + max_wait_s
        if due - now > 0.001:  # the loop's timers may fire a little early
            timer[0] = asyncio.get_running_loop().call_later(
                due - now, self._expire, sched, t, model_key, max_wait_s, start, timer
            )
            return
        if not sched.cancel(t):
            return
        fut.set_exception(AllSlotsBusy(model_key, max_wait_s, self.retry_after(model_key, max_wait_s)))
        # a waiter leaving can let others start (RawLong borrows once no interactive work waits)
        self._wake(sched.admit_ready())

    def retry_after(self, model_key: str, stalled_s: float) -> int:
        """Whole seconds until a slot of ``model_key`` is likely free for a client refused now, behind the
        requests still queued: a slot frees about every ``hold / slots`` seconds, where ``hold`` is how long a
        request holds its slot (the recent mean, and at least as long as the queue has stood still,
        ``stalled_s``); at least 1, at most ``RETRY_AFTER_MAX_S``."""
        sched = self._scheds[model_key]
        flow = self._flows[model_key]
        hold = max(flow.held_s or 0.0, stalled_s)
        est = hold * (int(sched.waiting) + 1) / max(int(sched.slots), 1)
        return min(RETRY_AFTER_MAX_S, max(1, math.ceil(est)))

    def _wake(self, admitted: Iterable[Ticket]) -> None:
        for t in admitted:
            fut = t.waiter
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.set_result(None)

    def stats(self) -> dict[str, QueueStats]:
        """Every model's queue: slots, waiting, running and running RawLong."""
        return {m: QueueStats(s.slots, s.waiting, s.running, s.running_raw) for m, s in self._scheds.items()}
