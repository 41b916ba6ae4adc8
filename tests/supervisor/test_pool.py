"""Eviction is a pure function over the children; tested alone."""

from __future__ import annotations

from pathlib import Path

from blazar.paths import DataDir
from blazar.profile import LaunchSpec
from blazar.supervisor import Child, State
from blazar.supervisor.pool import idle_victims


def child(key: str, last_used: float, inflight: int = 0, keep_alive: float | None = None) -> Child:
    c = Child(key, key, LaunchSpec(("x",)), DataDir(Path("/nonexistent")))
    c.state = State.READY
    c.last_used = last_used
    c.inflight = inflight
    c.keep_alive = keep_alive
    return c


def test_idle_victims() -> None:
    kids = [
        child("old", 0),
        child("fresh", 95),
        child("busy", 0, inflight=1),
        child("forever", 0, keep_alive=-1),
        child("short", 98, keep_alive=1),
    ]
    assert [c.key for c in idle_victims(kids, now=100, default_timeout=30)] == ["old", "short"]


def test_zero_timeout_never_evicts() -> None:
    assert idle_victims([child("a", 0)], now=1e9, default_timeout=0) == []


def test_only_ready_children() -> None:
    c = child("a", 0)
    c.state = State.STARTING
    assert idle_victims([c], now=100, default_timeout=1) == []
