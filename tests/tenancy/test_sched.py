"""The Cython scheduler module builds, imports and applies the seed's admission rules.

Every test drives the scheduler with made-up ``now`` values; nothing sleeps or reads a clock. The pure-Python
baseline in ``benches/baselines`` serves as an oracle: both must admit the same tickets in the same order.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import blazar_sched as s
import pytest
from blazar_sched import INTERACTIVE, RAWLONG, TOOL, Scheduler, Ticket
from hypothesis import given, settings
from hypothesis import strategies as st


def _load_baseline() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benches" / "baselines" / "heap_scheduler.py"
    spec = importlib.util.spec_from_file_location("heap_scheduler_oracle", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


baseline = _load_baseline()


def test_priority_parsing() -> None:
    assert s.parse_priority("HIGH") == s.HIGH
    assert s.parse_priority(" low ") == s.LOW
    assert s.parse_priority("urgent") == s.NORMAL
    assert s.parse_priority(None) == s.NORMAL


def test_slo_tiers() -> None:
    assert [s.slo_ms(p) for p in (s.HIGH, s.NORMAL, s.LOW)] == [2000, 30000, 120000]
    with pytest.raises(ValueError):
        s.slo_ms(9)


@pytest.mark.parametrize(("n", "cap"), [(1, 1), (2, 1), (3, 2), (4, 3), (8, 6), (16, 12)])
def test_raw_ceiling(n: int, cap: int) -> None:
    assert s.raw_ceiling(n) == cap


def test_compiled() -> None:
    assert s.raw_ceiling.__module__ == "blazar_sched._scheduler"
    assert s.__file__ is not None
    import blazar_sched._scheduler as mod

    assert mod.__file__ is not None and mod.__file__.endswith(".so")


# ---- helpers ----


def _busy(sched: Scheduler, now: float = 0.0) -> list[Ticket]:
    """Fill every slot with normal interactive work so later tickets queue."""
    held = []
    for _ in range(sched.slots):
        t = sched.ticket("filler", 1.0, s.NORMAL, INTERACTIVE, now)
        sched.enqueue(t)
        held += sched.admit_ready()
    assert sched.running == sched.slots
    return held


def _drain_one_by_one(sched: Scheduler, first: Ticket) -> list[Ticket]:
    """Release ``first``, then each admitted ticket in turn; the order tickets were admitted."""
    order: list[Ticket] = []
    current = first
    while True:
        sched.release(current)
        got = sched.admit_ready()
        if not got:
            return order
        assert len(got) == 1
        order += got
        current = got[0]


def _enq(sched: Scheduler, key: str, priority: int, work_class: int, now: float, **kw: float | int) -> Ticket:
    t = sched.ticket(key, 1.0, priority, work_class, now, **kw)  # type: ignore[arg-type]
    sched.enqueue(t)
    return t


# ---- tickets ----


def test_ticket_fields_and_slo_deadlines() -> None:
    sched = Scheduler(1)
    t = sched.ticket("k", 2.0, s.HIGH, INTERACTIVE, 100.0)
    assert (t.key, t.weight, t.priority, t.work_class, t.strict) == ("k", 2.0, s.HIGH, INTERACTIVE, False)
    assert t.deadline == pytest.approx(102.0)
    assert not t.admitted and not t.waiting
    assert sched.ticket("k", 1.0, s.NORMAL, INTERACTIVE, 100.0).deadline == pytest.approx(130.0)
    assert sched.ticket("k", 1.0, s.LOW, RAWLONG, 100.0).deadline == pytest.approx(220.0)
    # Tool work is tightened to a 10 s SLO, never loosened
    assert sched.ticket("k", 1.0, s.NORMAL, TOOL, 100.0).deadline == pytest.approx(110.0)
    assert sched.ticket("k", 1.0, s.LOW, TOOL, 100.0).deadline == pytest.approx(110.0)
    assert sched.ticket("k", 1.0, s.HIGH, TOOL, 100.0).deadline == pytest.approx(102.0)
    # an explicit deadline is strict EDF: now + ms
    e = sched.ticket("k", 1.0, s.LOW, INTERACTIVE, 100.0, deadline_ms=250)
    assert e.strict and e.deadline == pytest.approx(100.25)
    seqs = [sched.ticket("k", 1.0, s.NORMAL, INTERACTIVE, 0.0).seq for _ in range(3)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


@pytest.mark.parametrize(
    ("priority", "body_len", "expected"),
    [
        (s.HIGH, 65536, s.HIGH),
        (s.HIGH, 65537, s.NORMAL),
        (s.NORMAL, 1 << 20, s.LOW),
        (s.LOW, 1 << 20, s.LOW),
    ],
)
def test_large_body_demotes_one_class(priority: int, body_len: int, expected: int) -> None:
    sched = Scheduler(1)
    t = sched.ticket("k", 1.0, priority, INTERACTIVE, 0.0, body_len=body_len)
    assert t.priority == expected
    assert t.deadline == pytest.approx(s.slo_ms(expected) / 1000)


def test_demoted_request_admits_behind_its_former_class() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    big = sched.ticket("k", 1.0, s.HIGH, INTERACTIVE, 1.0, body_len=100_000)
    sched.enqueue(big)
    small = _enq(sched, "k", s.NORMAL, INTERACTIVE, 2.0)
    high = _enq(sched, "k", s.HIGH, INTERACTIVE, 3.0)
    # the demoted HIGH request now sits in NORMAL, EDF-ordered with the other normal one
    assert _drain_one_by_one(sched, first) == [high, big, small]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("k", 0.0, s.NORMAL, INTERACTIVE, 0.0), "weight"),
        (("k", float("inf"), s.NORMAL, INTERACTIVE, 0.0), "weight"),
        (("k", 1.0, 3, INTERACTIVE, 0.0), "priority"),
        (("k", 1.0, s.NORMAL, 7, 0.0), "work class"),
        (("k", 1.0, s.NORMAL, INTERACTIVE, 0.0, 0.0), "deadline"),
        (("k", 1.0, s.NORMAL, INTERACTIVE, 0.0, -5.0), "deadline"),
        (("k", 1.0, s.NORMAL, INTERACTIVE, 0.0, float("nan")), "deadline"),
    ],
)
def test_bad_ticket_arguments(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scheduler(1).ticket(*args)  # type: ignore[arg-type]


def test_tickets_come_only_from_a_scheduler() -> None:
    with pytest.raises(TypeError):
        Ticket()
    a, b = Scheduler(1), Scheduler(1)
    t = a.ticket("k", 1.0, s.NORMAL, INTERACTIVE, 0.0)
    for op in (b.enqueue, b.release, b.cancel):
        with pytest.raises(ValueError, match="another scheduler"):
            op(t)
    a.enqueue(t)
    with pytest.raises(ValueError, match="once"):
        a.enqueue(t)


def test_slots_setting() -> None:
    sched = Scheduler(1)
    with pytest.raises(ValueError):
        Scheduler(0)
    ts = [_enq(sched, "k", s.NORMAL, INTERACTIVE, 0.0) for _ in range(4)]
    assert sched.admit_ready() == ts[:1]
    sched.slots = 3
    assert sched.slots == 3
    assert sched.admit_ready() == ts[1:3]
    sched.slots = 1  # lowering N lets running work finish; nothing new starts until below N
    sched.release(ts[0])
    assert sched.admit_ready() == []
    sched.release(ts[1])
    sched.release(ts[2])
    assert sched.admit_ready() == ts[3:]
    with pytest.raises(ValueError):
        sched.slots = 0


# ---- order ----


def test_order_by_priority_then_class_rank() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    low_i = _enq(sched, "k", s.LOW, INTERACTIVE, 1.0)
    norm_raw = _enq(sched, "k", s.NORMAL, RAWLONG, 2.0)
    norm_i = _enq(sched, "k", s.NORMAL, INTERACTIVE, 3.0)
    norm_tool = _enq(sched, "k", s.NORMAL, TOOL, 4.0)
    high_raw = _enq(sched, "k", s.HIGH, RAWLONG, 5.0)
    high_i = _enq(sched, "k", s.HIGH, INTERACTIVE, 6.0)
    assert sched.waiting == 6
    assert _drain_one_by_one(sched, first) == [high_i, high_raw, norm_tool, norm_i, norm_raw, low_i]
    assert sched.waiting == 0 and sched.running == 0


def test_same_band_is_first_come_first_served() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    ts = [_enq(sched, "k", s.NORMAL, INTERACTIVE, float(i)) for i in range(5)]
    assert _drain_one_by_one(sched, first) == ts


def test_tight_deadline_overtakes_queued_ones() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    queued = [_enq(sched, f"k{i % 3}", s.NORMAL, INTERACTIVE, float(i)) for i in range(6)]
    tight = _enq(sched, "k0", s.NORMAL, INTERACTIVE, 10.0, deadline_ms=500)
    order = _drain_one_by_one(sched, first)
    assert order[0] is tight
    assert sorted(order[1:], key=lambda t: t.seq) == queued


def test_tight_deadline_overtakes_a_key_with_less_credit() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    # key "busy" has been served a lot; "fresh" would win fair share, but the tight deadline goes first
    for i in range(20):
        t = _enq(sched, "busy", s.NORMAL, INTERACTIVE, float(i))
        sched.release(first)
        (first,) = sched.admit_ready()
        assert first is t
    assert sched.credit("busy") > sched.credit("fresh")
    fresh = _enq(sched, "fresh", s.NORMAL, INTERACTIVE, 30.0)
    tight = _enq(sched, "busy", s.NORMAL, INTERACTIVE, 31.0, deadline_ms=200)
    assert _drain_one_by_one(sched, first) == [tight, fresh]


def test_loose_explicit_deadline_waits_its_turn() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    queued = _enq(sched, "k", s.NORMAL, INTERACTIVE, 0.0)  # SLO deadline 30.0
    loose = _enq(sched, "k", s.NORMAL, INTERACTIVE, 1.0, deadline_ms=60_000)  # 61.0
    tighter = _enq(sched, "k", s.NORMAL, INTERACTIVE, 2.0, deadline_ms=20_000)  # 22.0
    assert _drain_one_by_one(sched, first) == [tighter, queued, loose]


def test_explicit_deadline_stays_within_its_priority() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    low_tight = _enq(sched, "k", s.LOW, INTERACTIVE, 0.0, deadline_ms=1)
    high = _enq(sched, "k", s.HIGH, INTERACTIVE, 1.0)
    tool = _enq(sched, "k", s.LOW, TOOL, 2.0)
    assert _drain_one_by_one(sched, first) == [high, tool, low_tight]


# ---- RawLong ceiling ----


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_rawlong_borrows_every_slot_when_nothing_else_waits(n: int) -> None:
    sched = Scheduler(n)
    raws = [_enq(sched, "k", s.NORMAL, RAWLONG, 0.0) for _ in range(2 * n)]
    assert sched.admit_ready() == raws[:n]
    assert sched.running_raw == n
    sched.release(raws[0])
    assert sched.admit_ready() == [raws[n]]
    assert sched.running_raw == n


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_rawlong_capped_while_interactive_waits(n: int) -> None:
    ceiling = s.raw_ceiling(n)
    sched = Scheduler(n)
    # RawLong at HIGH ranks ahead of LOW interactive, so only the ceiling keeps slots for interactive work
    for _ in range(8 * n):
        _enq(sched, "raw", s.HIGH, RAWLONG, 0.0)
    running = sched.admit_ready()
    assert len(running) == n and sched.running_raw == n  # borrowed: nothing else waited
    inter = [_enq(sched, "chat", s.LOW, INTERACTIVE, 1.0) for _ in range(2 * n)]
    assert sched.admit_ready() == []  # no free slot; nothing is preempted
    admitted_inter: list[Ticket] = []
    for step in range(3 * n):
        victim = running.pop(0)
        sched.release(victim)
        got = sched.admit_ready()
        assert len(got) == 1
        running += got
        if got[0].work_class == RAWLONG:
            # a RawLong ticket starts only under the ceiling while interactive work waits
            assert sched.running_raw <= ceiling
        else:
            admitted_inter += got
        if any(t.waiting for t in inter):
            assert sched.running_raw <= max(ceiling, n - step - 1)
    # steady state reached: RawLong holds exactly its ceiling, interactive the rest (for N > 1)
    if any(t.waiting for t in inter):
        assert sched.running_raw == ceiling
    assert admitted_inter == inter[: len(admitted_inter)]
    if n > 1:
        assert admitted_inter
    # once interactive work stops waiting, RawLong borrows the freed slots again
    for t in inter:
        sched.cancel(t)
    for t in list(running):
        if t.work_class == INTERACTIVE:
            sched.release(t)
            running.remove(t)
    running += sched.admit_ready()
    assert sched.running_raw == n == sched.running
    assert all(t.work_class == RAWLONG for t in running)


def test_same_priority_interactive_always_before_rawlong() -> None:
    sched = Scheduler(4)
    raws = [_enq(sched, "raw", s.NORMAL, RAWLONG, 0.0) for _ in range(8)]
    running = sched.admit_ready()
    chat = _enq(sched, "chat", s.NORMAL, INTERACTIVE, 1.0)
    sched.release(running[0])
    assert sched.admit_ready() == [chat]
    assert raws[4].waiting


# ---- fair share ----


class _Saturator:
    """Keys that keep ``backlog`` tickets waiting on a saturated scheduler; each admission is replaced at once."""

    def __init__(self, sched: Scheduler, weights: dict[str, float], backlog: int = 8) -> None:
        self.sched = sched
        self.weights = weights
        self.now = 0.0
        for key, w in weights.items():
            for _ in range(backlog):
                sched.enqueue(sched.ticket(key, w, s.NORMAL, INTERACTIVE, self.now))
        self.running: list[Ticket] = sched.admit_ready()

    def run(self, admissions: int) -> dict[str, int]:
        sched = self.sched
        served = dict.fromkeys(self.weights, 0)
        total = 0
        while total < admissions:
            sched.release(self.running.pop(0))
            self.now += 0.01
            got = sched.admit_ready()
            for t in got:
                served[t.key] += 1
                sched.enqueue(sched.ticket(t.key, self.weights[t.key], s.NORMAL, INTERACTIVE, self.now))
                assert sched.credit(t.key) <= 257.0
            self.running += got
            total += len(got)
        return served


def test_wfq_weights_one_and_three_share_one_slot_1_to_3() -> None:
    served = _Saturator(Scheduler(1), {"a": 1.0, "b": 3.0}).run(4000)
    assert sum(served.values()) == 4000
    ratio = served["b"] / served["a"]
    assert abs(ratio - 3.0) / 3.0 < 0.10, served


def test_wfq_holds_in_every_window_across_credit_resets() -> None:
    # at weight 1 the credit passes 256 every ~256 admissions of that key: fairness must survive each rebase
    sched = Scheduler(2)
    weights = {"a": 1.0, "b": 3.0, "c": 0.5}
    load = _Saturator(sched, weights)
    load.run(900)
    for _ in range(6):
        window = load.run(900)
        share = {k: window[k] / sum(window.values()) for k in weights}
        assert abs(share["b"] / share["a"] - 3.0) < 0.3, window
        assert abs(share["a"] / share["c"] - 2.0) < 0.2, window
    assert all(sched.credit(k) <= 257.0 for k in weights)


def test_credit_reset_keeps_credits_bounded_and_prunes_idle_keys() -> None:
    sched = Scheduler(1)
    for i in range(50):
        _enq(sched, f"idle{i}", s.NORMAL, INTERACTIVE, 0.0)
    for t in sched.admit_ready():
        sched.release(t)
    while sched.waiting:
        for t in sched.admit_ready():
            sched.release(t)
    # a starved LOW ticket keeps its key's credit low; the busy key must still be rebased, not grow unbounded
    load = _Saturator(sched, {"busy": 1.0}, backlog=2)
    starved = _enq(sched, "starved", s.LOW, INTERACTIVE, 0.0)
    busy = load.run(2000)
    assert busy["busy"] == 2000
    assert 0.0 <= sched.credit("busy") <= 257.0
    assert starved.waiting
    # the idle keys were served once each and then forgotten at a rebase
    assert sched.credit("idle3") == 0.0


def test_returning_key_gets_no_burst_for_its_idle_time() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    current = first
    for i in range(100):
        _enq(sched, "steady", s.NORMAL, INTERACTIVE, float(i))
        sched.release(current)
        (current,) = sched.admit_ready()
    for i in range(10):
        _enq(sched, "steady", s.NORMAL, INTERACTIVE, 200.0 + i)
        _enq(sched, "back", s.NORMAL, INTERACTIVE, 200.0 + i)
    order = [t.key for t in _drain_one_by_one(sched, current)]
    # equal weights alternate instead of "back" taking the next hundred admissions
    assert order[:6].count("back") <= 4
    assert order[:10].count("steady") >= 4


def test_weight_is_per_ticket_and_charges_one_over_weight() -> None:
    sched = Scheduler(1)
    t = sched.ticket("k", 4.0, s.NORMAL, INTERACTIVE, 0.0)
    sched.enqueue(t)
    sched.admit_ready()
    assert sched.credit("k") == pytest.approx(0.25)
    assert sched.credit("unknown") == 0.0


# ---- cancel and release ----


def test_cancel_a_waiter() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    a = _enq(sched, "k", s.NORMAL, INTERACTIVE, 1.0)
    b = _enq(sched, "k", s.NORMAL, INTERACTIVE, 2.0)
    c = _enq(sched, "k", s.NORMAL, INTERACTIVE, 3.0, deadline_ms=100)
    d = _enq(sched, "j", s.NORMAL, INTERACTIVE, 4.0)
    assert sched.waiting == 4
    assert sched.cancel(a) is True  # the head of its key's queue
    assert sched.cancel(c) is True  # a strict one
    assert sched.cancel(a) is False
    assert not a.waiting and not a.admitted
    assert sched.waiting == 2
    assert _drain_one_by_one(sched, first) == [b, d]
    assert sched.cancel(b) is False  # admitted tickets are released, not cancelled
    assert sched.running == 0


def test_cancel_before_enqueue_and_release_of_a_waiter() -> None:
    sched = Scheduler(1)
    (first,) = _busy(sched)
    never = sched.ticket("k", 1.0, s.NORMAL, INTERACTIVE, 0.0)
    assert sched.cancel(never) is False
    with pytest.raises(ValueError):
        sched.enqueue(never)
    w = _enq(sched, "k", s.NORMAL, INTERACTIVE, 0.0)
    sched.release(w)  # releasing a ticket that never started takes it out of the queue
    assert not w.waiting and sched.waiting == 0
    sched.release(first)
    assert sched.admit_ready() == []


def test_release_is_idempotent() -> None:
    sched = Scheduler(2)
    a = _enq(sched, "k", s.NORMAL, RAWLONG, 0.0)
    b = _enq(sched, "k", s.NORMAL, INTERACTIVE, 0.0)
    assert sched.admit_ready() == [b, a]
    assert (sched.running, sched.running_raw) == (2, 1)
    for _ in range(3):
        sched.release(a)
    assert (sched.running, sched.running_raw) == (1, 0)
    assert a.admitted
    sched.release(b)
    sched.release(b)
    assert sched.running == 0


# ---- tickets that hold several slots (OpenAI n > 1) ----


def test_a_ticket_for_n_slots_waits_for_n_free_and_nothing_passes_it() -> None:
    sched = Scheduler(3)
    first = _enq(sched, "k", s.NORMAL, INTERACTIVE, 0.0)
    two = _enq(sched, "k", s.NORMAL, INTERACTIVE, 1.0, slots=2)
    assert sched.admit_ready() == [first, two] and sched.running == 3
    assert (first.slots, two.slots) == (1, 2)
    three = _enq(sched, "k", s.NORMAL, INTERACTIVE, 2.0, slots=3)
    one = _enq(sched, "k", s.NORMAL, INTERACTIVE, 3.0)
    sched.release(
        first
    )  # one slot free: the 3-slot ticket is next and does not fit; the 1-slot one waits too
    assert sched.admit_ready() == [] and sched.running == 2
    sched.release(two)  # its two slots come back
    assert sched.admit_ready() == [three] and sched.running == 3
    sched.release(three)
    assert sched.admit_ready() == [one] and sched.running == 1


def test_more_slots_than_the_model_has_takes_all_of_them() -> None:
    sched = Scheduler(2)
    big = _enq(sched, "k", s.NORMAL, RAWLONG, 0.0, slots=5)
    after = _enq(sched, "k", s.NORMAL, INTERACTIVE, 1.0)
    assert sched.admit_ready() == [after]  # interactive ranks first: it takes one slot
    assert sched.admit_ready() == []  # the 5-slot RawLong ticket needs both
    sched.release(after)
    assert sched.admit_ready() == [big] and (sched.running, sched.running_raw) == (2, 2)
    sched.release(big)
    sched.release(big)  # idempotent: frees what it held, once
    assert (sched.running, sched.running_raw) == (0, 0)
    with pytest.raises(ValueError, match="at least one slot"):
        sched.ticket("k", 1.0, s.NORMAL, INTERACTIVE, 0.0, slots=0)


# ---- oracle: the pure-Python baseline admits the same tickets in the same order ----


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_matches_the_pure_python_baseline(seed: int) -> None:
    rng = random.Random(seed)
    slots = rng.randint(1, 6)
    fast, ref = Scheduler(slots), baseline.HeapScheduler(slots)
    keys = [f"k{i}" for i in range(rng.randint(1, 5))]
    weights = {k: rng.choice([0.25, 0.5, 1.0, 2.0, 3.0]) for k in keys}
    pairs: list[tuple[Ticket, object]] = []
    now = 0.0
    for _ in range(600):
        now += rng.random()
        op = rng.random()
        if op < 0.45:
            k = rng.choice(keys)
            args = (k, weights[k], rng.randint(0, 2), rng.randint(0, 2), now)
            dl = rng.choice([None, None, None, rng.uniform(1.0, 40_000.0)])
            body = rng.choice([0, 0, 70_000])
            pair = (fast.ticket(*args, dl, body), ref.ticket(*args, dl, body))
            fast.enqueue(pair[0])
            ref.enqueue(pair[1])
            pairs.append(pair)
        elif op < 0.75:
            live = [p for p in pairs if p[0].admitted]
            if live:
                x, y = rng.choice(live)
                fast.release(x)
                ref.release(y)
        elif op < 0.85:
            live = [p for p in pairs if p[0].waiting]
            if live:
                x, y = rng.choice(live)
                assert fast.cancel(x) == ref.cancel(y)
        elif op < 0.87:
            fast.slots = ref.slots = rng.randint(1, 6)
        assert [t.seq for t in fast.admit_ready()] == [t.seq for t in ref.admit_ready()]
        assert (fast.waiting, fast.running, fast.running_raw) == (ref.waiting, ref.running, ref.running_raw)
        assert [fast.credit(k) for k in keys] == [ref.credit(k) for k in keys]
        pairs = [p for p in pairs if p[0].waiting or p[0].admitted]
