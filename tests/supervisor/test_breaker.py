"""The crash breakers alone, on a hand-driven clock."""

from __future__ import annotations

import pytest

from blazar.supervisor.breaker import (
    CRASH_WINDOW_SECS,
    HOLD_SECS,
    Breakers,
    EngineHeldBack,
)

LOG = "logs/m--latest.log in blazar's data directory"
WHY = (
    "its start failed: engine for 'm:latest' exited with code 1 while starting; last log lines (logs/m.log):\n"
    "build: 11434 (b11434)\n\nerror: invalid argument: --no-such-flag\n"
)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def crash(b: Breakers, n: int, clock: Clock, gap: float = 1.0, key: str = "m:latest") -> None:
    for _ in range(n):
        b.crashed(key, key.partition("@")[0], WHY)
        clock.t += gap


def test_the_hold_is_logged_once_when_it_opens(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    b = Breakers(clock)
    with caplog.at_level("WARNING", logger="blazar.supervisor"):
        crash(b, 2, clock)
        assert caplog.records == []
        crash(b, 3, clock)  # opens, then two more crashes while held: said once
    [record] = caplog.records
    assert record.getMessage().startswith(
        "engine for m:latest crashed 3 times in 120s: its restarts are held"
    )
    assert "`blazar ps --reset` lifts the hold" in record.getMessage()


def test_two_crashes_hold_nothing_back_and_the_third_does() -> None:
    clock = Clock()
    b = Breakers(clock)
    crash(b, 2, clock)
    b.check("m:latest", "m:latest", LOG)
    assert b.held() == []
    crash(b, 1, clock, gap=0)
    with pytest.raises(EngineHeldBack) as e:
        b.check("m:latest", "m:latest", LOG)
    assert e.value.status == 503 and e.value.retry_after == HOLD_SECS
    assert str(e.value) == (
        "engine for 'm:latest' crashed 3 times in 120s, so Blazar holds its restart back for 60s more instead of"
        " crashing it again (last: its start failed: engine for 'm:latest' exited with code 1 while starting;"
        " last log lines (logs/m.log): error: invalid argument: --no-such-flag); fix the cause"
        f" (see {LOG}), then run `blazar ps --reset` or wait"
    )
    [held] = b.held()
    assert (held.key, held.model, held.crashes, held.retry_in_secs) == ("m:latest", "m:latest", 3, 60)
    b.check("other:latest", "other:latest", LOG)  # per key


def test_crashes_older_than_the_window_do_not_count() -> None:
    clock = Clock()
    b = Breakers(clock)
    crash(b, 2, clock, gap=CRASH_WINDOW_SECS)
    crash(b, 1, clock)
    b.check("m:latest", "m:latest", LOG)


def test_after_the_hold_one_start_is_tried_and_a_crash_holds_again_at_once() -> None:
    clock = Clock()
    b = Breakers(clock)
    crash(b, 3, clock, gap=0)
    clock.t += HOLD_SECS
    b.check("m:latest", "m:latest", LOG)  # the hold is over: one try
    crash(b, 1, clock, gap=0)
    with pytest.raises(EngineHeldBack) as e:
        b.check("m:latest", "m:latest", LOG)
    assert "crashed 4 times" in str(e.value)


def test_a_clean_stop_and_a_reset_forget_the_history() -> None:
    clock = Clock()
    b = Breakers(clock)
    crash(b, 2, clock)
    b.clean("m:latest")
    crash(b, 2, clock)
    b.check("m:latest", "m:latest", LOG)  # only two since the clean stop
    crash(b, 1, clock)
    crash(b, 3, clock, key="m:latest@embed")  # the model's embedding engine
    crash(b, 3, clock, key="n:latest")
    assert b.reset("x:latest") == []
    assert b.reset("m:latest") == ["m:latest", "m:latest@embed"]
    assert [h.key for h in b.held()] == ["n:latest"]
    crash(b, 3, clock, gap=0)
    assert b.reset() == ["m:latest", "n:latest"]
    assert b.held() == []
    b.check("m:latest", "m:latest", LOG)
