"""Admission on an event loop: waiting, waking, bounded waits, cancellation and leases.

No test sleeps on a timer to let things happen: tasks are driven by futures, and a test that needs another task
to reach a state yields to the loop until it has (``_until``, no timers); the only real time spent is the few
milliseconds of the bounded-wait tests, and the ordering test runs on a clock that stands still. Every test runs on
plain asyncio and on uvloop (what the gateway uses).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from blazar.errors import BlazarError
from blazar.tenancy.admission import (
    INTERACTIVE,
    RAWLONG,
    RETRY_AFTER_MAX_S,
    TOOL,
    Admission,
    AllSlotsBusy,
    InvalidDeadline,
    SlotLease,
    classify_work,
    human_wait,
    parse_deadline_ms,
)
from tests.conftest import until

HIGH, NORMAL, LOW = 0, 1, 2

Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def _run(coro: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(coro)

    return _run


async def _until(done: Callable[[], bool], what: str) -> None:
    """Yield to the loop until ``done()``: the other tasks have reached the state the test needs (no timers; a
    task that can reach it does so within a few loop turns, so 10,000 is only a bound for one that never will)."""
    for _ in range(10_000):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"the tasks never reached the state the test waits on: {what}")


def _waiting(adm: Admission, n: int, model: str = "m") -> Callable[[], bool]:
    return lambda: adm.waiting(model) == n


def _admit(
    adm: Admission,
    *,
    model: str = "m",
    slots: int = 1,
    key: str = "k",
    weight: float = 1.0,
    priority: int = NORMAL,
    work_class: int = INTERACTIVE,
    deadline_ms: float | None = None,
    body_len: int = 0,
    max_wait_s: float = 60.0,
    holds: int = 1,
) -> Coroutine[Any, Any, SlotLease]:
    return adm.admit(
        model,
        slots,
        key=key,
        weight=weight,
        priority=priority,
        work_class=work_class,
        deadline_ms=deadline_ms,
        body_len=body_len,
        max_wait_s=max_wait_s,
        holds=holds,
    )


def test_free_slot_admits_at_once(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        lease = await _admit(adm, slots=2)
        assert lease.ticket.admitted and lease.waited_s == 0.0 and not lease.released
        st = adm.stats()["m"]
        assert (st.slots, st.waiting, st.running, st.running_raw) == (2, 0, 1, 0)
        lease.release()
        assert lease.released and adm.stats()["m"].running == 0

    run(main())


def test_waiter_starts_when_a_slot_frees(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        first = await _admit(adm)
        task = asyncio.create_task(_admit(adm))
        await _until(_waiting(adm, 1), "the second request to queue")
        assert not task.done() and adm.stats()["m"].waiting == 1
        first.release()
        second = await task
        assert second.ticket.admitted and second.waited_s >= 0.0
        assert adm.stats()["m"].running == 1
        second.release()

    run(main())


def test_a_request_for_n_choices_holds_n_slots(run: Run) -> None:
    """OpenAI n=2 on a two-slot model: llama-server runs each choice in a slot, so the next request queues in
    Blazar (within its deadline and fair share) rather than inside the engine."""

    async def main() -> None:
        adm = Admission()
        two = await _admit(adm, slots=2, holds=2)
        assert adm.stats()["m"].running == 2
        task = asyncio.create_task(_admit(adm, slots=2))
        await _until(_waiting(adm, 1), "the next request to queue")
        assert not task.done() and adm.stats()["m"].waiting == 1
        two.release()
        one = await task
        assert adm.stats()["m"].running == 1
        one.release()

    run(main())


def test_admission_order_priority_class_and_deadline(run: Run) -> None:
    async def main() -> None:
        adm = Admission(clock=lambda: 1000.0)  # a still clock: the order cannot depend on the machine's speed
        holder = await _admit(adm)
        order: list[str] = []

        async def one(name: str, **kw: Any) -> None:
            async with await _admit(adm, **kw):
                order.append(name)

        specs: list[tuple[str, dict[str, Any]]] = [
            ("low", {"priority": LOW}),
            ("raw", {"work_class": RAWLONG}),
            ("chat", {"key": "other"}),
            ("tool", {"work_class": TOOL}),
            ("high", {"priority": HIGH}),
            ("big-high", {"priority": HIGH, "body_len": 70_000}),  # demoted to NORMAL
            ("tight", {"deadline_ms": 5.0}),
        ]
        tasks = []
        for i, (name, kw) in enumerate(specs, 1):
            tasks.append(asyncio.create_task(one(name, **kw)))
            await _until(_waiting(adm, i), f"{name!r} to queue")
        holder.release()
        await asyncio.gather(*tasks)
        assert order == ["high", "tool", "tight", "chat", "big-high", "raw", "low"]
        assert adm.stats()["m"].running == 0

    run(main())


def test_bounded_wait_ends_in_all_slots_busy(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        holder = await _admit(adm, model="smollm2")
        with pytest.raises(AllSlotsBusy) as info:
            await _admit(adm, model="smollm2", max_wait_s=0.02)
        err = info.value
        assert isinstance(err, BlazarError) and err.status == 503 and err.code == "all_slots_busy"
        assert str(err).startswith("all_slots_busy: every slot of model 'smollm2' stayed busy for 20ms;")
        assert adm.stats()["smollm2"].waiting == 0
        with pytest.raises(AllSlotsBusy, match="stayed busy for 0s"):
            await _admit(adm, model="smollm2", max_wait_s=0)
        holder.release()
        assert adm.stats()["smollm2"].running == 0

    run(main())


def test_a_queue_that_moves_keeps_its_waiters(run: Run) -> None:
    """The bound counts from the last freed slot, not from arrival: a waiter older than ``max_wait_s`` stays queued
    while slots keep freeing, and is refused only once none has freed for the bound. The test moves the clock
    admission reads; the loop's timers only say when to look at it."""

    async def main() -> None:
        now, looks = [0.0], [0]

        def clock() -> float:
            looks[0] += 1
            return now[0]

        adm = Admission(clock=clock)
        first = await _admit(adm, max_wait_s=0.01)
        second = asyncio.create_task(_admit(adm, max_wait_s=0.01))
        third = asyncio.create_task(_admit(adm, max_wait_s=0.01))
        await _until(_waiting(adm, 2), "two requests to queue")
        now[0] = 5.0
        first.release()  # held 5 s; the queue moved at 5.0
        held = await second
        seen = looks[0]
        await until(lambda: looks[0] >= seen + 3, "the third request's bound to come due three times")
        assert not third.done() and adm.waiting("m") == 1  # the clock stands at the freed slot: still queued
        now[0] = 5.02  # no slot has freed for longer than the bound
        with pytest.raises(AllSlotsBusy, match="stayed busy for 10ms") as info:
            await third
        assert (
            info.value.retry_after == 5
        )  # a slot is held 5 s (the one freed), one slot, nobody else waiting
        assert adm.waiting("m") == 0
        held.release()

    run(main())


def test_retry_after_is_estimated_from_how_long_slots_are_held(run: Run) -> None:
    """``Retry-After`` on all_slots_busy: a slot frees about every ``hold / slots`` seconds, so a client behind
    ``w`` waiters comes back in ``(w + 1) * hold / slots``, from the recent mean hold (never a flat 1 s)."""

    async def main() -> None:
        now = [0.0]
        adm = Admission(clock=lambda: now[0])
        a = await _admit(adm, slots=2)
        b = await _admit(adm, slots=2)
        with pytest.raises(AllSlotsBusy) as info:  # nothing freed yet: no hold to go by
            await _admit(adm, slots=2, max_wait_s=0)
        assert info.value.retry_after == 1
        now[0] = 8.0
        a.release()  # held 8 s
        c = await _admit(adm, slots=2)
        with pytest.raises(AllSlotsBusy) as info:
            await _admit(adm, slots=2, max_wait_s=0)
        assert info.value.retry_after == 4  # 8 s / 2 slots
        now[0] = 28.0
        b.release()  # held 28 s: the mean moves a fifth of the way, to 12 s
        d = await _admit(adm, slots=2)
        queued = [asyncio.create_task(_admit(adm, slots=2)) for _ in range(2)]
        await _until(_waiting(adm, 2), "two requests to queue")
        with pytest.raises(AllSlotsBusy) as info:
            await _admit(adm, slots=2, max_wait_s=0)
        assert info.value.retry_after == 18  # behind two waiters: 3 * 12 s / 2 slots
        now[0] = 10_000.0
        c.release()  # held for hours: the estimate is capped
        e = await queued[0]
        with pytest.raises(AllSlotsBusy) as info:
            await _admit(adm, slots=2, max_wait_s=0)
        assert info.value.retry_after == RETRY_AFTER_MAX_S
        d.release()
        e.release()
        (await queued[1]).release()
        assert adm.stats()["m"].running == 0

    run(main())


def test_all_slots_busy_message_uses_the_human_wait_string() -> None:
    assert str(AllSlotsBusy("m", 30.0)) == (
        "all_slots_busy: every slot of model 'm' stayed busy for 30s; "
        "retry later, send x-blazar-priority: high, or raise the model's `parallel` slots"
    )
    assert [human_wait(x) for x in (30.0, 1.0, 0.25, 1.5, 0.0, 120.0)] == [
        "30s",
        "1s",
        "250ms",
        "1500ms",
        "0s",
        "120s",
    ]


def test_cancelled_waiter_leaves_the_queue(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        holder = await _admit(adm)
        task = asyncio.create_task(_admit(adm))
        await _until(_waiting(adm, 1), "the request to queue")
        assert adm.stats()["m"].waiting == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert adm.stats()["m"].waiting == 0
        holder.release()
        assert adm.stats()["m"].running == 0

    run(main())


def test_waiter_cancelled_just_after_admission_hands_its_slot_on(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        holder = await _admit(adm)
        doomed = asyncio.create_task(_admit(adm))
        await _until(_waiting(adm, 1), "the doomed request to queue")
        nxt = asyncio.create_task(_admit(adm))
        await _until(_waiting(adm, 2), "the next request to queue")
        holder.release()  # admits `doomed` (its future resolves) ...
        doomed.cancel()  # ... but its client goes away before the task runs again
        results = await asyncio.gather(doomed, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError)
        lease = await nxt
        assert lease.ticket.admitted
        st = adm.stats()["m"]
        assert (st.running, st.waiting) == (1, 0)
        lease.release()

    run(main())


def test_release_is_idempotent_and_wakes_once(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        lease = await _admit(adm)
        waiters = [asyncio.create_task(_admit(adm)) for _ in range(2)]
        await _until(_waiting(adm, 2), "both requests to queue")
        lease.release()
        lease.release()
        with lease:
            pass
        await _until(waiters[0].done, "the woken request to start")
        assert [w.done() for w in waiters] == [True, False]
        assert adm.stats()["m"].running == 1
        (await waiters[0]).release()
        (await waiters[1]).release()
        assert adm.stats()["m"].running == 0

    run(main())


def test_lease_released_when_the_handler_raises(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        waiter: asyncio.Task[SlotLease] | None = None
        with pytest.raises(RuntimeError, match="engine went away"):
            async with await _admit(adm):
                waiter = asyncio.create_task(_admit(adm))
                await _until(_waiting(adm, 1), "the request to queue")
                raise RuntimeError("engine went away")
        assert waiter is not None
        lease = await waiter
        assert adm.stats()["m"].running == 1
        with pytest.raises(ValueError), lease:
            raise ValueError("sync handler failed")
        assert lease.released and adm.stats()["m"].running == 0

    run(main())


def test_raising_slots_admits_waiters(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        holder = await _admit(adm, slots=1)
        task = asyncio.create_task(_admit(adm, slots=1))
        await _until(_waiting(adm, 1), "the request to queue")
        assert not task.done()
        third = await _admit(adm, slots=3)  # the engine now runs 3 slots: both start
        second = await task
        assert adm.stats()["m"].running == 3
        for lease in (holder, second, third):
            lease.release()

    run(main())


def test_models_have_separate_queues(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        a = await _admit(adm, model="a")
        b = await _admit(adm, model="b")
        assert {m: s.running for m, s in adm.stats().items()} == {"a": 1, "b": 1}
        a.release()
        b.release()

    run(main())


def test_fair_share_one_to_three_through_the_loop(run: Run) -> None:
    async def main() -> None:
        adm = Admission()
        served = {"a": 0, "b": 0}
        total = 4000
        done = asyncio.Event()

        async def worker(key: str, weight: float) -> None:
            while not done.is_set():
                async with await _admit(adm, key=key, weight=weight):
                    served[key] += 1
                    if sum(served.values()) >= total:
                        done.set()
                    await asyncio.sleep(0)

        workers = [asyncio.create_task(worker(k, w)) for k, w in (("a", 1.0), ("b", 3.0)) for _ in range(6)]
        await done.wait()
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        ratio = served["b"] / served["a"]
        assert abs(ratio - 3.0) / 3.0 < 0.10, served
        st = adm.stats()["m"]
        assert (st.running, st.waiting) == (0, 0)

    run(main())


@pytest.mark.parametrize(
    ("route", "body", "expected"),
    [
        ("/v1/chat/completions", {"messages": [], "tools": [{"type": "function"}]}, TOOL),
        ("/v1/chat/completions", {"messages": [], "tools": []}, INTERACTIVE),
        ("/v1/chat/completions", {"messages": [], "functions": [{"name": "f"}]}, TOOL),
        ("/v1/messages", {"messages": [], "tools": [{"name": "f"}]}, TOOL),
        ("/api/chat", {"messages": [], "tools": [{"type": "function"}]}, TOOL),
        ("/api/generate", {"prompt": "x", "raw": True}, RAWLONG),
        ("/api/generate/", {"prompt": "x", "raw": True}, RAWLONG),
        ("/api/generate", {"prompt": "x", "raw": False}, INTERACTIVE),
        ("/api/generate", {"prompt": "x"}, INTERACTIVE),
        ("/v1/completions", {"prompt": "x", "raw": True}, INTERACTIVE),
        ("/v1/chat/completions", {"messages": []}, INTERACTIVE),
    ],
)
def test_classify_work(route: str, body: dict[str, object], expected: int) -> None:
    assert classify_work(route, body) == expected


@pytest.mark.parametrize(("header", "expected"), [(None, None), ("1500", 1500.0), (" 250.5 ", 250.5)])
def test_parse_deadline_ms(header: str | None, expected: float | None) -> None:
    assert parse_deadline_ms(header) == expected


@pytest.mark.parametrize("header", ["0", "-3", "soon", "", "nan", "inf", "1e400", "x" * 100])
def test_bad_deadline_header_is_a_400_that_teaches(header: str) -> None:
    with pytest.raises(InvalidDeadline) as info:
        parse_deadline_ms(header)
    err = info.value
    assert isinstance(err, BlazarError) and err.status == 400
    assert "x-blazar-deadline-ms must be a positive number of milliseconds" in str(err)
    assert len(str(err)) < 300
