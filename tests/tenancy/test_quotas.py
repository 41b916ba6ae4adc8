"""Tests for blazar.tenancy.quotas with a fake clock: leases, every limit in the seed's order, retry-after values, and
usage that survives closing and reopening a real SQLite file.

They never sleep: time moves only when a test advances the ``FakeClock``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import apsw
import pytest

from blazar.config import KeyLimits
from blazar.errors import BlazarError, StoreError
from blazar.store import Store
from blazar.tenancy.keys import KeyCtx
from blazar.tenancy.quotas import (
    DayUsage,
    QuotaError,
    QuotaLease,
    Quotas,
    UsageBook,
    seconds_until_utc_midnight,
    utc_day,
)

NOON = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC).timestamp()


class FakeClock:
    def __init__(self, epoch: float = NOON) -> None:
        self.mono = 1000.0
        self.epoch = epoch

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.epoch

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.epoch += seconds


def key(name: str = "team", models: tuple[str, ...] = (), **limits: int) -> KeyCtx:
    return KeyCtx(name=name, weight=1.0, models=frozenset(models), limits=KeyLimits(**limits))


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture()
def quotas(clock: FakeClock) -> Quotas:
    return Quotas(clock=clock)


def refusal(call: object, *args: object) -> QuotaError:
    assert callable(call)
    with pytest.raises(QuotaError) as info:
        call(*args)
    return info.value


# --- max_concurrent and leases -------------------------------------------------------------------------------


def test_max_concurrent(quotas: Quotas) -> None:
    ctx = key(max_concurrent=2)
    first, second = quotas.acquire(ctx), quotas.acquire(ctx)
    assert quotas.in_flight("team") == 2
    err = refusal(quotas.acquire, ctx)
    assert (err.status, err.limit, err.key_name, err.retry_after) == (429, "max_concurrent", "team", 1)
    assert str(err) == (
        "key 'team' already has 2 requests in flight, its max_concurrent limit; retry when one finishes, "
        "or raise max_concurrent for this key in config.toml"
    )
    assert isinstance(err, BlazarError)
    first.release()
    third = quotas.acquire(ctx)
    assert quotas.in_flight("team") == 2
    second.release()
    third.release()
    assert quotas.in_flight("team") == 0


def test_a_lease_is_released_exactly_once(quotas: Quotas) -> None:
    ctx = key(max_concurrent=1)
    lease = quotas.acquire(ctx)
    other = quotas.acquire(key("other"))
    assert not lease.released
    assert repr(lease) == "QuotaLease('team', held)"
    assert lease.release() is True
    assert lease.release() is False
    assert lease.release() is False
    assert lease.released and repr(lease) == "QuotaLease('team', released)"
    assert quotas.in_flight("team") == 0  # never negative
    assert quotas.in_flight("other") == 1
    again = quotas.acquire(ctx)
    lease.release()  # a stale lease must not free the new holder's slot
    assert quotas.in_flight("team") == 1
    refusal(quotas.acquire, ctx)
    again.release()
    other.release()


def test_a_lease_released_from_many_threads_frees_one_slot(quotas: Quotas) -> None:
    ctx = key(max_concurrent=3)
    held = [quotas.acquire(ctx) for _ in range(3)]
    results: list[bool] = []
    lock = threading.Lock()

    def release() -> None:
        outcome = held[0].release()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=release) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert quotas.in_flight("team") == 2


def test_a_lease_as_a_context_manager(quotas: Quotas) -> None:
    with quotas.acquire(key(max_concurrent=1)) as lease:
        assert isinstance(lease, QuotaLease)
        assert quotas.in_flight("team") == 1
    assert lease.released and quotas.in_flight("team") == 0


def test_unlimited_concurrency_still_counts(quotas: Quotas) -> None:
    leases = [quotas.acquire(key()) for _ in range(50)]
    assert quotas.in_flight("team") == 50
    for lease in leases:
        lease.release()
    assert quotas.in_flight("team") == 0


# --- scope ---------------------------------------------------------------------------------------------------


def test_scope(quotas: Quotas) -> None:
    ctx = key(models=("smollm2:latest",))
    quotas.check(ctx, "smollm2")
    quotas.check(ctx, None)  # routes without a model (listings) skip the scope check
    err = refusal(quotas.check, ctx, "qwen:7b")
    assert (err.status, err.limit, err.retry_after) == (403, "scope", None)
    assert str(err).startswith("key 'team' may not use model 'qwen:7b'; it is limited to smollm2:latest.")


def test_admit_releases_the_lease_when_a_check_refuses(quotas: Quotas) -> None:
    ctx = key(models=("smollm2:latest",), max_concurrent=1)
    refusal(quotas.admit, ctx, "other")
    assert quotas.in_flight("team") == 0
    lease = quotas.admit(ctx, "smollm2")
    assert quotas.in_flight("team") == 1
    err = refusal(quotas.admit, ctx, "smollm2")
    assert err.limit == "max_concurrent"
    lease.release()


# --- rpm -----------------------------------------------------------------------------------------------------


def test_rpm_is_a_sliding_window(quotas: Quotas, clock: FakeClock) -> None:
    ctx = key(rpm=3)
    quotas.check(ctx, None)
    clock.advance(10)
    quotas.check(ctx, None)
    clock.advance(10)
    quotas.check(ctx, None)
    err = refusal(quotas.check, ctx, None)
    assert (err.status, err.limit, err.retry_after) == (429, "rpm", 40)
    assert str(err) == (
        "key 'team' reached its rpm limit of 3 requests per minute; retry in 40 s, or raise rpm for this key "
        "in config.toml"
    )
    clock.advance(39.5)
    assert refusal(quotas.check, ctx, None).retry_after == 1
    clock.advance(0.5)  # the first request is now 60 s old
    quotas.check(ctx, None)
    assert refusal(quotas.check, ctx, None).retry_after == 10


def test_refused_requests_do_not_count(quotas: Quotas, clock: FakeClock) -> None:
    ctx = key(rpm=1)
    quotas.check(ctx, None)
    for _ in range(5):
        refusal(quotas.check, ctx, None)
    clock.advance(60)
    quotas.check(ctx, None)
    assert quotas.usage.get("team", utc_day(clock.time())).requests == 2


def test_keys_are_limited_separately(quotas: Quotas) -> None:
    quotas.check(key("a", rpm=1), None)
    quotas.check(key("b", rpm=1), None)
    refusal(quotas.check, key("a", rpm=1), None)


# --- tpm -----------------------------------------------------------------------------------------------------


def test_tpm_counts_prompt_and_completion_in_a_sliding_window(quotas: Quotas, clock: FakeClock) -> None:
    ctx = key(tpm=1000)
    quotas.check(ctx, None)
    quotas.record_usage(ctx, 300, 200)
    clock.advance(20)
    quotas.check(ctx, None)
    quotas.record_usage("team", 250, 250)  # by name works too
    err = refusal(quotas.check, ctx, None)
    assert (err.status, err.limit, err.retry_after) == (429, "tpm", 40)
    assert str(err) == (
        "key 'team' used 1000 tokens in the last minute, its tpm limit is 1000; retry in 40 s, "
        "or raise tpm for this key in config.toml"
    )
    clock.advance(40)  # the first 500 tokens leave the window
    quotas.check(ctx, None)


def test_requests_in_flight_hold_what_they_may_use(quotas: Quotas) -> None:
    """Concurrent requests cannot overshoot tpm or daily_tokens by more than one request's worth: each holds its
    estimate until it finishes, when what it used is charged instead."""
    ctx = key(tpm=50)
    held = [quotas.check(ctx, None, reserve=30), quotas.check(ctx, None, reserve=30)]
    assert held == [30, 30]
    err = refusal(lambda: quotas.check(ctx, None, reserve=30))
    assert (err.limit, err.retry_after) == ("tpm", 1)
    assert str(err).startswith(
        "key 'team' used 0 tokens in the last minute and its requests in flight may use 60 more, its tpm limit is 50"
    )
    quotas.record_usage(ctx, 10, 5, reserved=30)
    quotas.record_usage(ctx, 10, 5, reserved=30)
    assert quotas.check(ctx, None, reserve=30) == 30  # 30 used, nothing held
    daily = key("daily", daily_tokens=40)
    quotas.check(daily, None, reserve=25)
    quotas.check(daily, None, reserve=25)
    err = refusal(lambda: quotas.check(daily, None, reserve=25))
    assert (err.limit, err.retry_after) == ("daily_tokens", 1)
    assert quotas.check(key(), None, reserve=99) == 0  # no token limits: nothing held


def test_tpm_waits_for_enough_tokens_to_expire(quotas: Quotas, clock: FakeClock) -> None:
    ctx = key(tpm=100)
    quotas.record_usage(ctx, 10, 0)
    clock.advance(5)
    quotas.record_usage(ctx, 200, 0)
    clock.advance(5)
    # Usage is 210; dropping the first 10 leaves 200 >= 100, so it takes the second charge to expire.
    assert refusal(quotas.check, ctx, None).retry_after == 55


def test_negative_token_counts_are_ignored(quotas: Quotas, clock: FakeClock) -> None:
    quotas.record_usage("team", -5, -7)
    assert quotas.usage.get("team", utc_day(clock.time())) == DayUsage(0, 0, 0)


# --- daily_tokens --------------------------------------------------------------------------------------------


def test_daily_tokens_reset_at_utc_midnight(clock: FakeClock) -> None:
    clock.epoch = datetime(2026, 11, 29, 23, 0, 0, tzinfo=UTC).timestamp()
    quotas = Quotas(clock=clock)
    ctx = key(daily_tokens=1000)
    quotas.check(ctx, None)
    quotas.record_usage(ctx, 600, 400)
    clock.advance(120)  # well past the tpm window; only the day limit applies
    err = refusal(quotas.check, ctx, None)
    assert (err.status, err.limit, err.retry_after) == (429, "daily_tokens", 3600 - 120)
    assert str(err) == (
        "key 'team' used 1000 tokens today, its daily_tokens limit is 1000; it resets at 00:00 UTC "
        "(in 3480 s), or raise daily_tokens for this key in config.toml"
    )
    clock.advance(3480)
    assert utc_day(clock.time()) == "2026-11-30"
    quotas.check(ctx, None)
    assert quotas.usage.get("team", "2026-11-29") == DayUsage(1, 600, 400)
    assert quotas.usage.get("team", "2026-11-30") == DayUsage(1, 0, 0)


def test_time_helpers() -> None:
    assert utc_day(NOON) == "2026-11-29"
    assert seconds_until_utc_midnight(NOON) == 12 * 3600
    assert seconds_until_utc_midnight(NOON + 12 * 3600 - 0.25) == 1


# --- order ---------------------------------------------------------------------------------------------------


def test_checks_run_in_the_seed_order(quotas: Quotas, clock: FakeClock) -> None:
    ctx = key(models=("m:latest",), rpm=1, tpm=10, daily_tokens=10, max_concurrent=1)
    lease = quotas.admit(ctx, "m")
    quotas.record_usage(ctx, 50, 50)
    # Everything is now exhausted; each refusal names the first rule in the seed's order.
    assert refusal(quotas.admit, ctx, "other").limit == "max_concurrent"
    lease.release()
    assert refusal(quotas.admit, ctx, "other").limit == "scope"
    assert refusal(quotas.admit, ctx, "m").limit == "rpm"
    clock.advance(60.5)  # the rpm and tpm windows are empty again; the day's tokens remain
    assert (
        refusal(quotas.check, key(models=("m:latest",), tpm=10, daily_tokens=10), "m").limit == "daily_tokens"
    )
    fresh = Quotas(clock=clock)
    fresh.record_usage(ctx, 50, 50)
    assert refusal(fresh.check, key(tpm=10, daily_tokens=10), None).limit == "tpm"
    assert quotas.in_flight("team") == 0


def test_zero_means_unlimited(quotas: Quotas) -> None:
    ctx = key()
    for _ in range(500):
        quotas.check(ctx, "anything")
        quotas.record_usage(ctx, 10_000, 10_000)


# --- usage in the store --------------------------------------------------------------------------------------


def rows(store: Store) -> list[tuple[object, ...]]:
    return [
        tuple(r)
        for r in store.conn.execute(
            "SELECT key_name, day, requests, prompt_tokens, completion_tokens FROM key_usage ORDER BY key_name, day"
        )
    ]


def test_usage_survives_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    db = tmp_path / "data" / "blazar.db"
    ctx = key(daily_tokens=1000)
    with Store.open(db) as store:
        quotas = Quotas(clock=clock)
        assert quotas.load(store) == 0
        quotas.check(ctx, None)
        quotas.record_usage(ctx, 400, 300)
        quotas.check(key("other"), None)
        assert quotas.flush(store) == 2
        assert quotas.flush(store) == 0  # nothing changed since
        quotas.record_usage(ctx, 100, 0)
        assert quotas.flush(store) == 1
        assert rows(store) == [("other", "2026-11-29", 1, 0, 0), ("team", "2026-11-29", 1, 500, 300)]

    with Store.open(db) as store:
        restarted = Quotas(clock=clock)
        assert restarted.load(store) == 2
        assert restarted.usage.get("team", "2026-11-29") == DayUsage(1, 500, 300)
        restarted.check(ctx, None)  # 800 of 1000 used
        restarted.record_usage(ctx, 150, 50)
        err = refusal(restarted.check, ctx, None)
        assert err.limit == "daily_tokens"
        assert restarted.flush(store) == 1
        # Absolute whole-day values, not increments: one row per key and day.
        assert rows(store) == [("other", "2026-11-29", 1, 0, 0), ("team", "2026-11-29", 2, 650, 350)]


def test_yesterday_is_not_loaded(tmp_path: Path, clock: FakeClock) -> None:
    with Store.open(tmp_path / "blazar.db") as store:
        quotas = Quotas(clock=clock)
        quotas.record_usage("team", 10, 10)
        quotas.flush(store)
        clock.advance(86400)
        fresh = Quotas(clock=clock)
        assert fresh.load(store) == 0
        assert fresh.usage.get("team", utc_day(clock.time())) == DayUsage()


def test_one_transaction_per_flush(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store.open(tmp_path / "blazar.db") as store:
        quotas = Quotas(clock=clock)
        for n in range(25):
            quotas.record_usage(f"k{n}", n, n)
        opened: list[int] = []
        real = Store.transaction

        @contextmanager
        def counting(self: Store) -> Iterator[apsw.Connection]:
            opened.append(1)
            with real(self) as conn:
                yield conn

        monkeypatch.setattr(Store, "transaction", counting)
        assert quotas.flush(store) == 25
        assert opened == [1]
        assert len(rows(store)) == 25


def test_a_failed_flush_keeps_the_rows_dirty(tmp_path: Path, clock: FakeClock) -> None:
    store = Store.open(tmp_path / "blazar.db")
    quotas = Quotas(clock=clock)
    quotas.record_usage("team", 5, 5)
    store.close()
    with pytest.raises(StoreError):
        quotas.flush(store)
    assert quotas.usage.dirty == 1
    with Store.open(tmp_path / "blazar.db") as reopened:
        assert quotas.flush(reopened) == 1
        assert quotas.usage.dirty == 0
        assert rows(reopened) == [("team", "2026-11-29", 0, 5, 5)]


def test_flush_drops_clean_rows_of_past_days(tmp_path: Path, clock: FakeClock) -> None:
    with Store.open(tmp_path / "blazar.db") as store:
        quotas = Quotas(clock=clock)
        quotas.record_usage("team", 1, 1)
        clock.advance(86400)
        quotas.record_usage("team", 2, 2)
        assert quotas.flush(store) == 2
        assert quotas.usage.get("team", "2026-11-29") == DayUsage()  # gone from memory
        assert quotas.usage.get("team", "2026-11-30") == DayUsage(0, 2, 2)
        assert len(rows(store)) == 2


def test_load_keeps_the_larger_counter(tmp_path: Path) -> None:
    with Store.open(tmp_path / "blazar.db") as store:
        book = UsageBook()
        book.add("a", "2026-11-29", requests=3, prompt_tokens=30, completion_tokens=3)
        book.flush(store)
        again = UsageBook()
        again.add("a", "2026-11-29", requests=5)
        assert again.load(store, "2026-11-29") == 1
        assert again.load(store, "2026-11-29") == 1  # idempotent
        assert again.get("a", "2026-11-29") == DayUsage(5, 30, 3)
        assert again.tokens("a", "2026-11-29") == 33


def test_quota_messages_never_hold_a_secret(quotas: Quotas) -> None:
    # KeyCtx carries no secret at all; messages name the key and the limit only.
    assert not any("secret" in f for f in KeyCtx.__dataclass_fields__)


def test_utc_day_matches_the_calendar_across_midnights() -> None:
    from datetime import UTC, datetime

    from blazar.tenancy.quotas import utc_day

    for epoch in (
        0.0,
        86_399.999,
        86_400.0,
        1_764_460_799.5,
        1_764_460_800.0,
        -1.0,
        4_102_444_800.0,
        86_399.0,
    ):
        assert utc_day(epoch) == datetime.fromtimestamp(epoch, UTC).date().isoformat(), epoch
