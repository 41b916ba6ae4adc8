# cython: language_level=3
"""Admission rules from the seed: priority classes, their SLO tiers, and the RawLong slot ceiling."""

HIGH = 0
NORMAL = 1
LOW = 2

cdef dict _SLO_MS = {HIGH: 2000, NORMAL: 30000, LOW: 120000}


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
