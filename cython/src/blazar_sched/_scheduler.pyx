# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: auto_pickle=False, autotestdict=False
"""Admission rules and the per-model admission scheduler (the seed's ``queue.rs``).

Owns: priority classes and their SLO tiers, work classes and their rank, the RawLong slot ceiling, and
``Scheduler``, which decides which waiting request of one model may start when a slot is free. It is synchronous
and knows no event loop, clock, socket or log: callers pass ``now`` in monotonic seconds and act on the tickets
it hands back (``blazar.tenancy.admission`` wraps it for asyncio).

Order of admission, for one model with N slots. A ticket takes ``slots`` of them (an OpenAI request for n
choices: llama-server runs each in a slot of its own), at most N; the next ticket in order waits until that many
are free, and nothing behind it passes it.

1. Band: (priority, class rank). HIGH before NORMAL before LOW; within a priority Tool before Interactive before
   RawLong. The first non-empty band goes first.
2. RawLong ceiling: while any non-RawLong ticket waits, RawLong tickets start only while fewer than
   ``raw_ceiling(N) = max(1, N - ceil(N/4))`` RawLong tickets run; with nothing else waiting RawLong borrows every
   slot.
3. Within a band, fair share across keys (WFQ): every key has a credit; serving one of its tickets adds
   ``1/weight``. The key with the lowest credit goes next, ties by the deadline of its next ticket, then arrival (seq). A key
   that comes back from idle is lifted to the credit of the last key served by fair share, so idling banks no
   burst. When a credit passes 256 every credit is rebased: the smallest active credit is subtracted (keeping
   each active key's lead or debt) and nobody is kept more than 128 behind the key that crossed, so the numbers
   stay bounded.
4. Strict EDF: a ticket with an explicit deadline (``x-blazar-deadline-ms``) is not queued behind its key's
   fair share; it starts ahead of the band's fair-share pick whenever its deadline is earlier (ties by seq). Its
   service is still charged to its key's credit. So a key that sends tight deadlines gets ahead of fair share
   within its band only, and never past a fair-share pick that is due sooner. Tickets without an explicit deadline
   carry their SLO tier as deadline (HIGH 2 s, NORMAL 30 s, LOW 120 s; Tool at most 10 s).

Data structures: per band an indexed heap of keys (a key's flow in that band) by (credit, head deadline, head
seq), per flow an indexed heap of its tickets by (deadline, seq), and per band an indexed heap of strict-deadline
tickets. Enqueue, admit and cancel are O(log n); nothing scans the queue (a rebase walks the keys, at most once
per 128 credits of the key that crossed).
"""

cimport cython
from cpython.list cimport PyList_SetItem
from cpython.ref cimport Py_INCREF
from libc.math cimport isfinite

HIGH = 0
NORMAL = 1
LOW = 2

INTERACTIVE = 0
TOOL = 1
RAWLONG = 2

cdef dict _SLO_MS = {HIGH: 2000, NORMAL: 30000, LOW: 120000}

cdef enum:
    _RAW = 2  # RAWLONG, as a C constant for the hot paths
    _NBANDS = 9
    # bands b = priority * 3 + class rank; class rank 2 (RawLong) sits on bits 2, 5 and 8
    _RAW_MASK = (1 << 2) | (1 << 5) | (1 << 8)
    _LARGE_BODY = 65536

cdef enum _State:
    _NEW = 0
    _WAITING = 1
    _RUNNING = 2
    _RELEASED = 3
    _CANCELLED = 4

cdef double _CREDIT_RESET = 256.0
cdef double _CREDIT_SPREAD = 128.0
# class rank indexed by work class: INTERACTIVE -> 1, TOOL -> 0, RAWLONG -> 2
cdef int[3] _RANK = [1, 0, 2]
# SLO tier in seconds indexed by priority * 3 + work class; Tool is tightened to at most 10 s
cdef double[9] _TIER_S = [2.0, 2.0, 2.0, 30.0, 10.0, 30.0, 120.0, 10.0, 120.0]


cpdef int parse_priority(object header):
    """``x-blazar-priority``: case-insensitive 'high' / 'low', anything else (or absent) is normal."""
    if header is None:
        return NORMAL
    value = str(header).strip().lower()
    if value == "high":
        return HIGH
    if value == "low":
        return LOW
    return NORMAL


cpdef int slo_ms(int priority):
    """The SLO tier of a priority class in milliseconds: HIGH 2 s, NORMAL 30 s, LOW 120 s."""
    try:
        return _SLO_MS[priority]
    except KeyError:
        raise ValueError(f"unknown priority class {priority}") from None


cpdef int raw_ceiling(int n_slots):
    """RawLong work's slot cap while interactive work waits: max(1, N - ceil(N/4))."""
    if n_slots < 1:
        raise ValueError(f"a model has at least one slot, got {n_slots}")
    return max(1, n_slots - (n_slots + 3) // 4)


@cython.final
@cython.freelist(256)
cdef class Ticket:
    """One request's place in a model's queue; made by ``Scheduler.ticket``, read-only from Python."""

    cdef readonly str key
    cdef readonly double weight
    cdef readonly int priority
    cdef readonly int work_class
    cdef readonly double deadline
    cdef readonly long long seq
    cdef readonly bint strict
    cdef readonly int slots          # slots it asks for; ``held`` is what it got (at most the model's N)
    cdef int held
    cdef public object waiter
    cdef int state
    cdef int band
    cdef Py_ssize_t pos
    cdef Scheduler owner
    cdef _Key ks
    cdef _Flow flow

    def __init__(self):
        raise TypeError("tickets are made by Scheduler.ticket()")

    @property
    def admitted(self):
        """True once the scheduler let this ticket start (and still after it is released)."""
        return self.state == _RUNNING or self.state == _RELEASED

    @property
    def waiting(self):
        """True while the ticket is enqueued and neither admitted nor cancelled."""
        return self.state == _WAITING

    def __repr__(self):
        states = ("new", "waiting", "running", "released", "cancelled")
        return (
            f"Ticket(key={self.key!r}, priority={self.priority}, work_class={self.work_class}, "
            f"deadline={self.deadline:.3f}, seq={self.seq}, strict={self.strict}, state={states[self.state]})"
        )


@cython.final
cdef class _Key:
    """Fair-share state of one key within one scheduler."""

    cdef str key
    cdef double credit
    cdef Py_ssize_t waiting      # every waiting ticket of the key, strict ones included
    cdef Py_ssize_t wfq_waiting  # waiting tickets that take part in fair share
    cdef unsigned int active     # bit b set while the key's flow in band b is in that band's heap
    cdef list flows              # per band: a _Flow or None


# Heaps keep their own size ``n`` over a list that only grows (and shrinks when mostly empty), so a queue that
# goes 0 -> 1 -> 0 all day does not reallocate; slots past ``n`` hold None.

cdef class _Heap:
    """An indexed binary min-heap: its items (all Tickets or all _Flows) each know their index ``pos``."""

    cdef list a
    cdef Py_ssize_t n


@cython.final
cdef class _Flow(_Heap):
    """A key's fair-share tickets in one band, a heap by (deadline, seq)."""

    cdef _Key ks
    cdef Py_ssize_t pos          # index in the band's flow heap, -1 when absent


cdef _Heap _heap():
    cdef _Heap h = _Heap.__new__(_Heap)
    h.a = []
    h.n = 0
    return h


cdef inline void _set(list a, Py_ssize_t i, object x) noexcept:  # i is in range: it cannot fail
    """``a[i] = x`` for an ``i`` in range: one call, where the limited API's ``a[i] = x`` boxes ``i`` and goes
    through ``PyObject_SetItem``. ``PyList_SetItem`` steals the reference it is given, hence the incref."""
    Py_INCREF(x)
    PyList_SetItem(a, i, x)


cdef inline void _store(list a, Py_ssize_t n, object x):
    if n < len(a):
        _set(a, n, x)
    else:
        a.append(x)


cdef inline void _trim(list a, Py_ssize_t n):
    cdef Py_ssize_t cap = len(a)
    if cap > 64 and n < (cap >> 2):
        del a[n * 2:]


# ---- one heap implementation for both kinds of item ----
#
# The sift, push and remove routines below are written once over the fused type ``_Item``; Cython emits one
# specialisation per item type, resolved at compile time, so neither heap pays for the sharing. Two orders:
#   Ticket  (deadline, seq): a flow's tickets, and each band's strict-deadline (EDF) tickets;
#   _Flow   (key credit, then its head ticket's (deadline, seq)): each band's fair-share flows.

ctypedef fused _Item:
    Ticket
    _Flow


cdef inline bint _t_before(Ticket a, Ticket b) noexcept:
    return a.deadline < b.deadline or (a.deadline == b.deadline and a.seq < b.seq)


cdef inline bint _before(_Item x, _Item y) noexcept:
    if _Item is Ticket:
        return _t_before(x, y)
    else:
        if x.ks.credit != y.ks.credit:
            return x.ks.credit < y.ks.credit
        return _t_before(<Ticket>x.a[0], <Ticket>y.a[0])


cdef void _up(_Heap h, _Item x):
    """Move ``x`` (at ``x.pos``) towards the root past every parent it sorts before."""
    cdef list a = h.a
    cdef Py_ssize_t i = x.pos
    cdef Py_ssize_t parent
    cdef _Item p
    while i > 0:
        parent = (i - 1) >> 1
        p = <_Item>a[parent]
        if not _before(x, p):
            break
        _set(a, i, p)
        p.pos = i
        i = parent
    _set(a, i, x)
    x.pos = i


cdef void _down(_Heap h, _Item x):
    """Move ``x`` (at ``x.pos``) towards the leaves past every smaller child that sorts before it."""
    cdef list a = h.a
    cdef Py_ssize_t n = h.n
    cdef Py_ssize_t i = x.pos
    cdef Py_ssize_t child
    cdef _Item c
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _before(<_Item>a[child + 1], <_Item>a[child]):
            child += 1
        c = <_Item>a[child]
        if not _before(c, x):
            break
        _set(a, i, c)
        c.pos = i
        i = child
    _set(a, i, x)
    x.pos = i


cdef void _push(_Heap h, _Item x):
    _store(h.a, h.n, x)
    x.pos = h.n
    h.n += 1
    _up(h, x)


cdef void _remove(_Heap h, _Item x):
    cdef Py_ssize_t i = x.pos
    cdef list a = h.a
    cdef _Item last
    h.n -= 1
    last = <_Item>a[h.n]
    _set(a, h.n, None)
    x.pos = -1
    if last is not x:
        _set(a, i, last)
        last.pos = i
        _down(h, last)
        _up(h, last)
    _trim(a, h.n)


@cython.final
cdef class Scheduler:
    """One model's admission queue over its N parallel slots; see the module docstring for the order."""

    cdef int _slots
    cdef int _ceiling
    cdef Py_ssize_t _running
    cdef Py_ssize_t _running_raw
    cdef Py_ssize_t _waiting
    cdef Py_ssize_t _waiting_raw
    cdef long long _seq
    cdef double _vtime
    cdef unsigned int _mask          # bit b set while band b has a waiting ticket
    cdef Py_ssize_t _band_n[_NBANDS]
    cdef dict _keys                  # key -> _Key
    cdef list _band_keys             # per band: a _Heap of _Flows
    cdef list _band_strict           # per band: a _Heap of strict-deadline Tickets

    def __init__(self, int slots):
        self._set_slots(slots)
        self._keys = {}
        self._band_keys = [_heap() for _ in range(_NBANDS)]
        self._band_strict = [_heap() for _ in range(_NBANDS)]
        for b in range(_NBANDS):
            self._band_n[b] = 0

    cdef void _set_slots(self, int n) except *:
        self._ceiling = raw_ceiling(n)
        self._slots = n

    @property
    def slots(self):
        """N, the engine's parallel slot count; settable (running work above a lowered N finishes normally)."""
        return self._slots

    @slots.setter
    def slots(self, int n):
        self._set_slots(n)

    @property
    def waiting(self):
        return self._waiting

    @property
    def running(self):
        return self._running

    @property
    def running_raw(self):
        return self._running_raw

    def credit(self, str key):
        """The fair-share credit of ``key`` (0.0 for a key the scheduler does not track)."""
        cdef _Key ks = self._keys.get(key)
        return 0.0 if ks is None else ks.credit

    cpdef Ticket ticket(
        self,
        str key,
        double weight,
        int priority,
        int work_class,
        double now,
        object deadline_ms=None,
        Py_ssize_t body_len=0,
        int slots=1,
    ):
        """A new ticket: priority demoted one class for bodies over 64 KiB; deadline explicit (strict) or SLO;
        ``slots`` parallel slots to hold while it runs (more than the model has means all of them)."""
        cdef double ms
        cdef Ticket t
        if not (weight > 0.0 and isfinite(weight)):
            raise ValueError(f"a key's weight must be a positive number, got {weight!r}")
        if priority < 0 or priority > 2:
            raise ValueError(f"unknown priority class {priority}")
        if work_class < 0 or work_class > 2:
            raise ValueError(f"unknown work class {work_class}")
        if slots < 1:
            raise ValueError(f"a request holds at least one slot, got {slots}")
        if body_len > _LARGE_BODY and priority < 2:
            priority += 1
        t = Ticket.__new__(Ticket)
        t.key = key
        t.weight = weight
        t.priority = priority
        t.work_class = work_class
        t.slots = slots
        t.held = 0
        if deadline_ms is None:
            t.deadline = now + _TIER_S[priority * 3 + work_class]
            t.strict = False
        else:
            ms = deadline_ms
            if not (ms > 0.0 and isfinite(ms)):
                raise ValueError(f"a deadline is a positive number of milliseconds, got {deadline_ms!r}")
            t.deadline = now + ms / 1000.0
            t.strict = True
        self._seq += 1
        t.seq = self._seq
        t.band = priority * 3 + _RANK[work_class]
        t.state = _NEW
        t.pos = -1
        t.owner = self
        return t

    cpdef void enqueue(self, Ticket t) except *:
        """Put a new ticket in the queue; call ``admit_ready`` afterwards."""
        cdef _Key ks
        cdef _Flow f
        cdef int b = t.band
        if t.owner is not self:
            raise ValueError("this ticket belongs to another scheduler")
        if t.state != _NEW:
            raise ValueError("a ticket is enqueued once")
        ks = <_Key>self._keys.get(t.key)
        if ks is None:
            ks = _Key.__new__(_Key)
            ks.key = t.key
            ks.flows = [None] * _NBANDS
            self._keys[t.key] = ks
        t.ks = ks
        if t.strict:
            _push(<_Heap>self._band_strict[b], t)
        else:
            if ks.wfq_waiting == 0 and ks.credit < self._vtime:
                ks.credit = self._vtime
            f = <_Flow>ks.flows[b]
            if f is None:
                f = _Flow.__new__(_Flow)
                f.ks = ks
                f.a = []
                f.n = 0
                f.pos = -1
                ks.flows[b] = f
            t.flow = f
            _push(f, t)
            if f.pos < 0:
                _push(<_Heap>self._band_keys[b], f)
                ks.active |= 1u << b
            elif t.pos == 0:
                _up(<_Heap>self._band_keys[b], f)
            ks.wfq_waiting += 1
        ks.waiting += 1
        t.state = _WAITING
        self._waiting += 1
        if t.work_class == _RAW:
            self._waiting_raw += 1
        self._band_n[b] += 1
        self._mask |= 1u << b

    cpdef list admit_ready(self):
        """Admit, in order, every waiting ticket that may start now; each is marked admitted and counted running."""
        cdef list out = []
        cdef unsigned int m
        cdef int b, need
        cdef Ticket t
        while self._running < self._slots and self._waiting > 0:
            m = self._mask
            if self._waiting > self._waiting_raw and self._running_raw >= self._ceiling:
                m &= ~(<unsigned int>_RAW_MASK)
            if m == 0:
                break
            b = 0
            while not (m & (1u << b)):
                b += 1
            t = self._head(b)
            need = t.slots if t.slots < self._slots else self._slots
            if self._running + need > self._slots:
                break  # it waits for enough free slots, and nothing passes it
            self._pop(b, t, need)
            out.append(t)
        return out

    cdef Ticket _head(self, int b):
        """The ticket band ``b`` would admit next: its earliest strict deadline, or its fair-share pick."""
        cdef _Heap strict = <_Heap>self._band_strict[b]
        cdef _Heap keys = <_Heap>self._band_keys[b]
        cdef Ticket s = None
        cdef Ticket t = None
        if strict.n > 0:
            s = <Ticket>strict.a[0]
        if keys.n > 0:
            t = <Ticket>(<_Flow>keys.a[0]).a[0]
        if s is not None and (t is None or _t_before(s, t)):
            return s
        return t

    cdef void _pop(self, int b, Ticket t, int need) except *:
        """Admit ``t``, the head of band ``b``, holding ``need`` slots."""
        cdef _Heap keys = <_Heap>self._band_keys[b]
        cdef _Flow f
        cdef _Key ks = t.ks
        cdef unsigned int act
        cdef int i
        if t.strict:
            _remove(<_Heap>self._band_strict[b], t)
        else:
            f = t.flow
            self._vtime = ks.credit
            _remove(f, t)
            t.flow = None
            if f.n == 0:
                _remove(keys, f)
                ks.active &= ~(1u << b)
            else:
                _down(keys, f)
            ks.wfq_waiting -= 1
        ks.waiting -= 1
        t.state = _RUNNING
        t.held = need
        self._waiting -= 1
        self._running += need
        if t.work_class == _RAW:
            self._waiting_raw -= 1
            self._running_raw += need
        self._band_n[b] -= 1
        if self._band_n[b] == 0:
            self._mask &= ~(1u << b)
        # charge the key; its flows in other bands move back in their heaps
        ks.credit += 1.0 / t.weight
        act = ks.active
        i = 0
        while act:
            if act & 1u:
                f = <_Flow>ks.flows[i]
                _down(<_Heap>self._band_keys[i], f)
            act >>= 1
            i += 1
        if ks.credit > _CREDIT_RESET:
            self._rebase(ks)

    cdef void _rebase(self, _Key crossed) except *:
        cdef double lo = crossed.credit
        cdef double base, c
        cdef _Heap h
        cdef Py_ssize_t i
        cdef _Key ks
        cdef int b
        for b in range(_NBANDS):
            h = <_Heap>self._band_keys[b]
            if h.n > 0 and (<_Flow>h.a[0]).ks.credit < lo:
                lo = (<_Flow>h.a[0]).ks.credit
        base = crossed.credit - _CREDIT_SPREAD
        if lo > base:
            base = lo
        stale = []
        for ks in self._keys.values():
            c = ks.credit - base
            ks.credit = c if c > 0.0 else 0.0
            if ks.credit == 0.0 and ks.waiting == 0:
                stale.append(ks.key)
        for k in stale:
            del self._keys[k]
        c = self._vtime - base
        self._vtime = c if c > 0.0 else 0.0
        # keys clamped to zero may have changed places: rebuild every band's key heap
        for b in range(_NBANDS):
            h = <_Heap>self._band_keys[b]
            i = h.n // 2 - 1
            while i >= 0:
                _down(h, <_Flow>h.a[i])
                i -= 1

    cpdef void release(self, Ticket t) except *:
        """Free the ticket's slot; idempotent. A ticket still waiting is cancelled instead."""
        if t.owner is not self:
            raise ValueError("this ticket belongs to another scheduler")
        if t.state == _RUNNING:
            t.state = _RELEASED
            self._running -= t.held
            if t.work_class == _RAW:
                self._running_raw -= t.held
        elif t.state == _WAITING:
            self.cancel(t)

    cpdef bint cancel(self, Ticket t) except -1:
        """Take a waiting ticket out of the queue (timeout, client gone); True if it was waiting."""
        cdef _Key ks
        cdef _Flow f
        cdef _Heap keys
        cdef bint head
        cdef int b = t.band
        if t.owner is not self:
            raise ValueError("this ticket belongs to another scheduler")
        if t.state != _WAITING:
            if t.state == _NEW:
                t.state = _CANCELLED
            return False
        ks = t.ks
        if t.strict:
            _remove(<_Heap>self._band_strict[b], t)
        else:
            f = t.flow
            head = t.pos == 0
            _remove(f, t)
            t.flow = None
            keys = <_Heap>self._band_keys[b]
            if f.n == 0:
                _remove(keys, f)
                ks.active &= ~(1u << b)
            elif head:
                _down(keys, f)
            ks.wfq_waiting -= 1
        ks.waiting -= 1
        t.state = _CANCELLED
        self._waiting -= 1
        if t.work_class == _RAW:
            self._waiting_raw -= 1
        self._band_n[b] -= 1
        if self._band_n[b] == 0:
            self._mask &= ~(1u << b)
        return True
