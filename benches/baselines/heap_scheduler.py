"""Pure-Python admission scheduler on ``heapq``: the baseline ``benches/bench_sched.py`` measures against.

It implements the same rules as ``blazar_sched.Scheduler`` (bands by priority and class rank, the RawLong ceiling,
fair share by key credit with lift and rebase, strict EDF for explicit deadlines) with the same API, the way one
would write it in Python: tuples in ``heapq`` heaps, cancelled tickets and outdated key entries dropped lazily when
they reach a heap's top. ``tests/tenancy/test_sched.py`` also uses it as an oracle: both must admit the same tickets in the
same order. It is never imported by blazar itself.
"""

from __future__ import annotations

import heapq
import math
from itertools import count

HIGH, NORMAL, LOW = 0, 1, 2
INTERACTIVE, TOOL, RAWLONG = 0, 1, 2

_RANK = (1, 0, 2)
_TIER_S = (2.0, 2.0, 2.0, 30.0, 10.0, 30.0, 120.0, 10.0, 120.0)
_RAW_MASK = (1 << 2) | (1 << 5) | (1 << 8)
_NBANDS = 9
_LARGE_BODY = 65536
_CREDIT_RESET = 256.0
_CREDIT_SPREAD = 128.0

_NEW, _WAITING, _RUNNING, _RELEASED, _CANCELLED = range(5)


def raw_ceiling(n_slots: int) -> int:
    if n_slots < 1:
        raise ValueError(f"a model has at least one slot, got {n_slots}")
    return max(1, n_slots - (n_slots + 3) // 4)


class Ticket:
    __slots__ = (
        "band",
        "deadline",
        "key",
        "ks",
        "owner",
        "priority",
        "seq",
        "state",
        "strict",
        "waiter",
        "weight",
        "work_class",
    )

    def __init__(
        self,
        owner: HeapScheduler,
        key: str,
        weight: float,
        priority: int,
        work_class: int,
        deadline: float,
        seq: int,
        strict: bool,
    ) -> None:
        self.owner = owner
        self.key = key
        self.weight = weight
        self.priority = priority
        self.work_class = work_class
        self.deadline = deadline
        self.seq = seq
        self.strict = strict
        self.band = priority * 3 + _RANK[work_class]
        self.state = _NEW
        self.ks: _Key | None = None
        self.waiter: object = None

    @property
    def admitted(self) -> bool:
        return self.state in (_RUNNING, _RELEASED)


class _Flow:
    """One key's fair-share tickets in one band: a heap of (deadline, seq, ticket) plus its live count."""

    __slots__ = ("heap", "live")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Ticket]] = []
        self.live = 0

    def trim(self) -> None:
        heap = self.heap
        while heap and heap[0][2].state != _WAITING:
            heapq.heappop(heap)


class _Key:
    __slots__ = ("credit", "flows", "key", "waiting", "wfq_waiting")

    def __init__(self, key: str) -> None:
        self.key = key
        self.credit = 0.0
        self.waiting = 0
        self.wfq_waiting = 0
        self.flows: list[_Flow | None] = [None] * _NBANDS


_Entry = tuple[float, float, int, int, _Key]


class HeapScheduler:
    def __init__(self, slots: int) -> None:
        self._ceiling = raw_ceiling(slots)
        self._slots = slots
        self.running = 0
        self.running_raw = 0
        self.waiting = 0
        self._waiting_raw = 0
        self._seq = 0
        self._vtime = 0.0
        self._mask = 0
        self._band_n = [0] * _NBANDS
        self._keys: dict[str, _Key] = {}
        self._band_keys: list[list[_Entry]] = [[] for _ in range(_NBANDS)]
        self._band_strict: list[list[tuple[float, int, Ticket]]] = [[] for _ in range(_NBANDS)]
        self._tie = count()

    @property
    def slots(self) -> int:
        return self._slots

    @slots.setter
    def slots(self, n: int) -> None:
        self._ceiling = raw_ceiling(n)
        self._slots = n

    def credit(self, key: str) -> float:
        ks = self._keys.get(key)
        return 0.0 if ks is None else ks.credit

    def ticket(
        self,
        key: str,
        weight: float,
        priority: int,
        work_class: int,
        now: float,
        deadline_ms: float | None = None,
        body_len: int = 0,
    ) -> Ticket:
        if not (weight > 0.0 and math.isfinite(weight)):
            raise ValueError(f"a key's weight must be a positive number, got {weight!r}")
        if not 0 <= priority <= 2:
            raise ValueError(f"unknown priority class {priority}")
        if not 0 <= work_class <= 2:
            raise ValueError(f"unknown work class {work_class}")
        if body_len > _LARGE_BODY and priority < 2:
            priority += 1
        if deadline_ms is None:
            deadline = now + _TIER_S[priority * 3 + work_class]
            strict = False
        else:
            ms = float(deadline_ms)
            if not (ms > 0.0 and math.isfinite(ms)):
                raise ValueError(f"a deadline is a positive number of milliseconds, got {deadline_ms!r}")
            deadline = now + ms / 1000.0
            strict = True
        self._seq += 1
        return Ticket(self, key, weight, priority, work_class, deadline, self._seq, strict)

    def _push_entry(self, ks: _Key, b: int, flow: _Flow) -> None:
        head = flow.heap[0][2]
        heapq.heappush(self._band_keys[b], (ks.credit, head.deadline, head.seq, next(self._tie), ks))

    def enqueue(self, t: Ticket) -> None:
        if t.owner is not self:
            raise ValueError("this ticket belongs to another scheduler")
        if t.state != _NEW:
            raise ValueError("a ticket is enqueued once")
        b = t.band
        ks = self._keys.get(t.key)
        if ks is None:
            ks = self._keys[t.key] = _Key(t.key)
        t.ks = ks
        if t.strict:
            heapq.heappush(self._band_strict[b], (t.deadline, t.seq, t))
        else:
            if ks.wfq_waiting == 0 and ks.credit < self._vtime:
                ks.credit = self._vtime
            flow = ks.flows[b]
            if flow is None:
                flow = ks.flows[b] = _Flow()
            was_head = flow.heap[0][2] if flow.live else None
            heapq.heappush(flow.heap, (t.deadline, t.seq, t))
            flow.live += 1
            if was_head is None or flow.heap[0][2] is t:
                self._push_entry(ks, b, flow)
            ks.wfq_waiting += 1
        ks.waiting += 1
        t.state = _WAITING
        self.waiting += 1
        if t.work_class == RAWLONG:
            self._waiting_raw += 1
        self._band_n[b] += 1
        self._mask |= 1 << b

    def admit_ready(self) -> list[Ticket]:
        out = []
        while self.running < self._slots and self.waiting > 0:
            m = self._mask
            if self.waiting > self._waiting_raw and self.running_raw >= self._ceiling:
                m &= ~_RAW_MASK
            if not m:
                break
            out.append(self._pop_band((m & -m).bit_length() - 1))
        return out

    def _fair_pick(self, b: int) -> _Key | None:
        heap = self._band_keys[b]
        while heap:
            credit, _dl, seq, _n, ks = heap[0]
            flow = ks.flows[b]
            if credit == ks.credit and flow is not None and flow.live and flow.heap[0][1] == seq:
                return ks
            heapq.heappop(heap)
        return None

    def _pop_band(self, b: int) -> Ticket:
        strict = self._band_strict[b]
        while strict and strict[0][2].state != _WAITING:
            heapq.heappop(strict)
        ks = self._fair_pick(b)
        fair = ks.flows[b] if ks is not None else None
        if strict and (fair is None or strict[0][:2] < fair.heap[0][:2]):
            t = heapq.heappop(strict)[2]
            ks = t.ks
            assert ks is not None
        else:
            assert ks is not None and fair is not None
            self._vtime = ks.credit
            t = heapq.heappop(fair.heap)[2]
            fair.live -= 1
            if fair.live:
                fair.trim()
            else:
                fair.heap.clear()
            ks.wfq_waiting -= 1
        ks.waiting -= 1
        t.state = _RUNNING
        self.waiting -= 1
        self.running += 1
        if t.work_class == RAWLONG:
            self._waiting_raw -= 1
            self.running_raw += 1
        self._band_n[b] -= 1
        if not self._band_n[b]:
            self._mask &= ~(1 << b)
        ks.credit += 1.0 / t.weight
        if ks.credit > _CREDIT_RESET:
            self._rebase(ks)
        else:
            for i, flow in enumerate(ks.flows):
                if flow is not None and flow.live:
                    self._push_entry(ks, i, flow)
        return t

    def _rebase(self, crossed: _Key) -> None:
        lo = min([crossed.credit, *(k.credit for k in self._keys.values() if k.wfq_waiting)])
        base = max(lo, crossed.credit - _CREDIT_SPREAD)
        for ks in list(self._keys.values()):
            ks.credit = max(ks.credit - base, 0.0)
            if ks.credit == 0.0 and not ks.waiting:
                del self._keys[ks.key]
        self._vtime = max(self._vtime - base, 0.0)
        self._band_keys = [[] for _ in range(_NBANDS)]
        for ks in self._keys.values():
            for i, flow in enumerate(ks.flows):
                if flow is not None and flow.live:
                    self._push_entry(ks, i, flow)

    def release(self, t: Ticket) -> None:
        if t.owner is not self:
            raise ValueError("this ticket belongs to another scheduler")
        if t.state == _RUNNING:
            t.state = _RELEASED
            self.running -= 1
            if t.work_class == RAWLONG:
                self.running_raw -= 1
        elif t.state == _WAITING:
            self.cancel(t)

    def cancel(self, t: Ticket) -> bool:
        if t.owner is not self:
            raise ValueError("this ticket belongs to another scheduler")
        if t.state != _WAITING:
            if t.state == _NEW:
                t.state = _CANCELLED
            return False
        b = t.band
        ks = t.ks
        assert ks is not None
        t.state = _CANCELLED
        if not t.strict:
            flow = ks.flows[b]
            assert flow is not None
            flow.live -= 1
            if not flow.live:
                flow.heap.clear()
            elif flow.heap[0][2] is t:
                flow.trim()
                self._push_entry(ks, b, flow)
            ks.wfq_waiting -= 1
        ks.waiting -= 1
        self.waiting -= 1
        if t.work_class == RAWLONG:
            self._waiting_raw -= 1
        self._band_n[b] -= 1
        if not self._band_n[b]:
            self._mask &= ~(1 << b)
        return True
