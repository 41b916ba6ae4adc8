"""Blazar's admission scheduler, compiled with Cython because it orders Python objects on every admission.

It holds the seed's admission rules (priority parsing, SLO tiers, work classes, the RawLong ceiling) and
``Scheduler``, one model's queue: priority and class bands, strict EDF deadlines, fair share across keys.
``blazar.tenancy.admission`` wraps it for asyncio; this package never touches an event loop, a clock or I/O.
"""

from blazar_sched._scheduler import (
    HIGH,
    INTERACTIVE,
    LOW,
    NORMAL,
    RAWLONG,
    TOOL,
    Scheduler,
    Ticket,
    parse_priority,
    raw_ceiling,
    slo_ms,
)

__all__ = [
    "HIGH",
    "INTERACTIVE",
    "LOW",
    "NORMAL",
    "RAWLONG",
    "TOOL",
    "Scheduler",
    "Ticket",
    "parse_priority",
    "raw_ceiling",
    "slo_ms",
]
