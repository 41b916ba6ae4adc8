"""When the supervisor takes an engine for possibly asleep, and when a request's keep_alive keeps it awake
(``supervisor/sleep.py``; the real engine's sleep and wake-up are in tests/e2e/test_idle_sleep.py)."""

from __future__ import annotations

from pathlib import Path

from blazar.launch.spec import LaunchSpec
from blazar.paths import DataDir
from blazar.supervisor import sleep
from blazar.supervisor.child import Child


def child(sleep_secs: int, last_used: float, inflight: int = 0) -> Child:
    c = Child("m", "m", LaunchSpec(("x",), sleep_secs=sleep_secs), DataDir(Path("/nonexistent")))
    c.last_used = last_used
    c.inflight = inflight
    return c


def test_may_be_asleep_after_about_its_sleep_time_with_nothing_in_flight() -> None:
    assert not sleep.may_be_asleep(child(0, last_used=0.0), now=10_000.0)  # an engine that never sleeps
    assert not sleep.may_be_asleep(child(300, last_used=0.0), now=298.9)
    assert sleep.may_be_asleep(child(300, last_used=0.0), now=299.0)  # the margin: the clocks start apart
    assert not sleep.may_be_asleep(child(300, last_used=0.0, inflight=1), now=10_000.0)
    woken = child(300, last_used=0.0)
    woken.kept_awake = 200.0  # a wake-up or keep-awake ping restarted its idle clock
    assert not sleep.may_be_asleep(woken, now=400.0) and sleep.may_be_asleep(woken, now=499.5)


def test_only_a_requests_keep_alive_past_the_sleep_keeps_it_awake() -> None:
    c = child(300, last_used=0.0)
    assert not sleep.wants_awake(c)  # no keep_alive: the default, which sleeps
    for kept, awake in ((-1.0, True), (600.0, True), (300.0, False), (60.0, False), (0.0, False)):
        c.keep.secs = kept
        assert sleep.wants_awake(c) is awake, kept
    c.keep.secs = c.keep.base = 3600.0  # the model's own idle_timeout_secs is no request's keep_alive
    assert not sleep.wants_awake(c)
    never = child(0, last_used=0.0)
    never.keep.secs = -1.0
    assert not sleep.wants_awake(never)
