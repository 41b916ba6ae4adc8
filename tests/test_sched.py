"""The Cython scheduler module builds, imports and applies the seed's admission rules."""

from __future__ import annotations

import blazar_sched as s
import pytest


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
