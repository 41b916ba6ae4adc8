"""Blazar's admission scheduler, compiled with Cython because it orders Python objects on every admission.

So far it holds the seed's pure admission rules (priority parsing, SLO tiers, the RawLong ceiling); the queue
itself arrives with the admission work.
"""

from blazar_sched._scheduler import HIGH, LOW, NORMAL, parse_priority, raw_ceiling, slo_ms

__all__ = ["HIGH", "LOW", "NORMAL", "parse_priority", "raw_ceiling", "slo_ms"]
