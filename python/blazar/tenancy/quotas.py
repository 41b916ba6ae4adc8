"""Per-key quotas: concurrency leases, scope, requests and tokens per minute, tokens per UTC day, and usage.

It owns the seed's order of checks (``max_concurrent`` at auth, then scope, ``rpm``, ``tpm``,
``daily_tokens``), the ``QuotaLease`` that holds a concurrency slot until released exactly once, the sliding 60 s
windows, and ``UsageBook``: whole-day usage per key kept in memory and written to ``key_usage`` as absolute
values, one transaction per flush. It must not authenticate (``keys.py``), speak HTTP, sleep, or read the
clock except through the injected ``Clock``. Messages name the key and the limit, never a secret.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Protocol

import apsw

from blazar.config.model import KeyLimits
from blazar.errors import BlazarError, StoreError
from blazar.store import Store, utc_now_iso
from blazar.tenancy.keys import KeyCtx, allows_model, scope_denied_message

__all__ = [
    "SYSTEM_CLOCK",
    "WINDOW_SECS",
    "Clock",
    "DayUsage",
    "QuotaError",
    "QuotaLease",
    "Quotas",
    "SystemClock",
    "UsageBook",
    "seconds_until_utc_midnight",
    "utc_day",
]

WINDOW_SECS = 60.0
"""The sliding window of ``rpm`` and ``tpm``."""


class QuotaError(BlazarError):
    """A request refused by a key's limits: 429 for ``max_concurrent``/``rpm``/``tpm``/``daily_tokens``, 403 for
    scope. ``retry_after`` is whole seconds where waiting helps (``None`` for scope); ``limit`` names the rule."""

    status = 429

    def __init__(
        self, message: str, *, limit: str, key_name: str, status: int = 429, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.limit = limit
        self.key_name = key_name
        self.retry_after = retry_after


# ---------------------------------------------------------------------------------------------------------
# Time


class Clock(Protocol):
    """Where quotas read time: ``monotonic()`` for the windows, ``time()`` (epoch seconds) for the UTC day."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


SYSTEM_CLOCK: Clock = SystemClock()


_DAY_SECS = 86_400
_last_day: tuple[int, str] = (-(2**62), "")


def utc_day(epoch: float) -> str:
    """``YYYY-MM-DD`` of ``epoch`` in UTC: the ``day`` column of ``key_usage``. POSIX time has no leap seconds,
    so the day number is ``epoch // 86400``; the string is built once per day, not per request."""
    global _last_day
    day = int(epoch // _DAY_SECS)
    cached = _last_day
    if cached[0] == day:
        return cached[1]
    text = datetime.fromtimestamp(day * _DAY_SECS, UTC).date().isoformat()
    _last_day = (day, text)
    return text


def seconds_until_utc_midnight(epoch: float) -> int:
    """Whole seconds (at least 1) until the next UTC day starts."""
    now = datetime.fromtimestamp(epoch, UTC)
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
    return max(1, math.ceil((midnight - now).total_seconds()))


# ---------------------------------------------------------------------------------------------------------
# Usage per key and UTC day


@dataclass(frozen=True, slots=True)
class DayUsage:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class _Row:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    version: int = 0  # bumped on every change
    flushed: int = 0  # the version last written


_UPSERT = (
    "INSERT INTO key_usage (key_name, day, requests, prompt_tokens, completion_tokens, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (key_name, day) DO UPDATE SET requests = excluded.requests, "
    "prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens, "
    "updated_at = excluded.updated_at"
)


class UsageBook:
    """Whole-day usage per (key, UTC day) in memory; ``flush`` writes the changed rows as absolute values in one
    transaction, ``load`` restores a day at startup so usage survives restarts. Thread-safe."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], _Row] = {}
        self._lock = threading.Lock()

    def add(
        self,
        key_name: str,
        day: str,
        *,
        requests: int = 0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
    ) -> None:
        with self._lock:
            row = self._rows.get((key_name, day))
            if row is None:
                row = self._rows[(key_name, day)] = _Row()
            row.requests += requests
            row.prompt_tokens += prompt_tokens
            row.completion_tokens += completion_tokens
            row.version += 1

    def get(self, key_name: str, day: str) -> DayUsage:
        row = self._rows.get((key_name, day))
        if row is None:
            return DayUsage()
        return DayUsage(row.requests, row.prompt_tokens, row.completion_tokens)

    def tokens(self, key_name: str, day: str) -> int:
        row = self._rows.get((key_name, day))
        return 0 if row is None else row.prompt_tokens + row.completion_tokens

    @property
    def dirty(self) -> int:
        """How many rows have changes not yet flushed."""
        with self._lock:
            return sum(1 for r in self._rows.values() if r.version != r.flushed)

    def flush(self, store: Store, *, keep_day: str | None = None) -> int:
        """Write every changed row in one transaction; returns how many. On failure nothing is marked clean.

        With ``keep_day``, clean rows of other days are then dropped from memory (they live in the store).
        """
        with self._lock:
            batch = [
                (key, day, row.requests, row.prompt_tokens, row.completion_tokens, row.version)
                for (key, day), row in self._rows.items()
                if row.version != row.flushed
            ]
        if batch:
            now = utc_now_iso()
            try:
                with store.transaction() as conn:
                    conn.executemany(_UPSERT, [(*values[:5], now) for values in batch])
            except apsw.Error as exc:
                raise StoreError(f"cannot write key usage to database {store.path}: {exc}") from None
        with self._lock:
            for key, day, *_counts, version in batch:
                row = self._rows.get((key, day))
                if row is not None:
                    row.flushed = max(row.flushed, version)
            if keep_day is not None:
                for k in [k for k, r in self._rows.items() if k[1] != keep_day and r.version == r.flushed]:
                    del self._rows[k]
        return len(batch)

    def load(self, store: Store, day: str) -> int:
        """Restore ``day``'s rows from the store (call once at startup, before admitting requests); returns
        how many. A row already in memory keeps the larger of each counter."""
        try:
            rows = store.conn.execute(
                "SELECT key_name, requests, prompt_tokens, completion_tokens FROM key_usage WHERE day = ?",
                (day,),
            ).fetchall()
        except apsw.Error as exc:
            raise StoreError(f"cannot read key usage from database {store.path}: {exc}") from None
        with self._lock:
            for name, *counts in rows:
                requests, prompt, completion = (int(c) if isinstance(c, int) else 0 for c in counts)
                row = self._rows.get((str(name), day))
                if row is None:
                    self._rows[(str(name), day)] = _Row(requests, prompt, completion)
                    continue
                row.requests = max(row.requests, requests)
                row.prompt_tokens = max(row.prompt_tokens, prompt)
                row.completion_tokens = max(row.completion_tokens, completion)
        return len(rows)


# ---------------------------------------------------------------------------------------------------------
# Leases and the checks


class QuotaLease:
    """One in-flight request's concurrency slot. ``release()`` frees it the first time and is a no-op after,
    so the body-drained path and the client-dropped path may both call it."""

    __slots__ = ("_release", "_released", "key_name")

    def __init__(self, key_name: str, release: Callable[[QuotaLease], bool]) -> None:
        self.key_name = key_name
        self._release = release
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> bool:
        """Free the slot; ``True`` the first time, ``False`` on every later call."""
        return self._release(self)

    def __enter__(self) -> QuotaLease:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"QuotaLease({self.key_name!r}, {'released' if self._released else 'held'})"


@dataclass(slots=True)
class _KeyState:
    in_flight: int = 0
    requests: deque[float] = field(default_factory=deque)  # admission times inside the rpm window
    tokens: deque[tuple[float, int]] = field(default_factory=deque)  # (time, tokens) inside the tpm window
    window_tokens: int = 0
    reserved: int = 0  # what the requests in flight may still charge (``check``'s ``reserve``)


class Quotas:
    """Enforces each key's limits. The gateway calls ``acquire`` at auth (``max_concurrent``), ``check`` once the
    model is known (scope, ``rpm``, ``tpm``, ``daily_tokens``) or ``admit`` for both, and ``record_usage``
    when a response's token counts are known. Thread-safe."""

    def __init__(self, usage: UsageBook | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.usage = UsageBook() if usage is None else usage
        self._clock = clock
        self._keys: dict[str, _KeyState] = {}
        self._lock = threading.Lock()

    def _state(self, name: str) -> _KeyState:
        state = self._keys.get(name)
        if state is None:
            state = self._keys[name] = _KeyState()
        return state

    def today(self) -> str:
        return utc_day(self._clock.time())

    # -- max_concurrent -----------------------------------------------------------------------------------

    def acquire(self, ctx: KeyCtx) -> QuotaLease:
        """Take a concurrency slot for ``ctx``; 429 ``QuotaError`` when ``max_concurrent`` are in flight."""
        limit = ctx.limits.max_concurrent
        with self._lock:
            state = self._state(ctx.name)
            if limit and state.in_flight >= limit:
                raise QuotaError(
                    f"key '{ctx.name}' already has {state.in_flight} requests in flight, its max_concurrent "
                    "limit; retry when one finishes, or raise max_concurrent for this key in config.toml",
                    limit="max_concurrent",
                    key_name=ctx.name,
                    retry_after=1,
                )
            state.in_flight += 1
        return QuotaLease(ctx.name, self._release)

    def _release(self, lease: QuotaLease) -> bool:
        with self._lock:
            if lease._released:
                return False
            lease._released = True
            self._state(lease.key_name).in_flight -= 1
            return True

    def in_flight(self, key_name: str) -> int:
        state = self._keys.get(key_name)
        return 0 if state is None else state.in_flight

    # -- scope, rpm, tpm, daily_tokens ------------------------------------------------------------------

    def check(self, ctx: KeyCtx, model: str | None, reserve: int = 0) -> int:
        """Scope (when ``model`` is given), then ``rpm``, ``tpm``, ``daily_tokens``; raises ``QuotaError`` for the
        first that refuses. An admitted request counts toward ``rpm`` and the day's ``requests``, and reserves
        ``reserve`` tokens (what it may charge: its prompt and max_tokens, estimated) until ``record_usage``
        charges what it used: ``tpm`` and ``daily_tokens`` count the reservations of the requests in flight, so
        concurrent requests cannot overshoot a limit by more than one request's worth. Returns what it reserved
        (0 for a key without those limits), for ``record_usage``."""
        if model is not None and not allows_model(ctx, model):
            raise QuotaError(scope_denied_message(ctx, model), limit="scope", key_name=ctx.name, status=403)
        limits = ctx.limits
        now = self._clock.monotonic()
        epoch = self._clock.time()
        day = utc_day(epoch)
        cutoff = now - WINDOW_SECS
        with self._lock:
            state = self._state(ctx.name)
            requests = state.requests
            while requests and requests[0] <= cutoff:
                requests.popleft()
            if limits.rpm and len(requests) >= limits.rpm:
                wait = _ceil_secs(requests[0] + WINDOW_SECS - now)
                raise QuotaError(
                    f"key '{ctx.name}' reached its rpm limit of {limits.rpm} requests per minute; retry in "
                    f"{wait} s, or raise rpm for this key in config.toml",
                    limit="rpm",
                    key_name=ctx.name,
                    retry_after=wait,
                )
            self._expire_tokens(state, cutoff)
            if limits.tpm and state.window_tokens + state.reserved >= limits.tpm:
                wait = self._tpm_wait(state, limits.tpm, now) if state.window_tokens >= limits.tpm else 1
                raise QuotaError(
                    f"key '{ctx.name}' used {state.window_tokens} tokens in the last minute{_held(state.reserved)}, its tpm limit"
                    f" is {limits.tpm}; retry in {wait} s, or raise tpm for this key in config.toml",
                    limit="tpm",
                    key_name=ctx.name,
                    retry_after=wait,
                )
            used = self.usage.tokens(ctx.name, day)
            if limits.daily_tokens and used + state.reserved >= limits.daily_tokens:
                spent = used >= limits.daily_tokens  # else the requests in flight may spend the rest
                wait = seconds_until_utc_midnight(epoch) if spent else 1
                when = f"it resets at 00:00 UTC (in {wait} s)" if spent else f"retry in {wait} s"
                raise QuotaError(
                    f"key '{ctx.name}' used {used} tokens today{'' if spent else _held(state.reserved)}, its"
                    f" daily_tokens limit is {limits.daily_tokens}; {when}, or raise daily_tokens for this key in"
                    " config.toml",
                    limit="daily_tokens",
                    key_name=ctx.name,
                    retry_after=wait,
                )
            if limits.rpm:
                requests.append(now)
            held_now = max(0, reserve) if limits.tpm or limits.daily_tokens else 0
            state.reserved += held_now
            self.usage.add(ctx.name, day, requests=1)
        return held_now

    def remaining(self, key_name: str, limits: KeyLimits) -> tuple[int | None, int | None]:
        """What ``key_name`` may still use: tokens today (UTC; None without ``daily_tokens``) and requests in the
        rolling minute (None without ``rpm``), the reservations of its requests in flight counted as used."""
        now = self._clock.monotonic()
        day = utc_day(self._clock.time())
        with self._lock:
            state = self._state(key_name)
            held = state.reserved
            recent = sum(1 for t in state.requests if t > now - WINDOW_SECS)
        tokens = (
            max(limits.daily_tokens - self.usage.tokens(key_name, day) - held, 0)
            if limits.daily_tokens
            else None
        )
        return tokens, (max(limits.rpm - recent, 0) if limits.rpm else None)

    def used_today(self, key_name: str) -> int:
        """Tokens ``key_name`` has used today (UTC), as charged so far."""
        return self.usage.tokens(key_name, utc_day(self._clock.time()))

    def admit(self, ctx: KeyCtx, model: str | None) -> QuotaLease:
        """``acquire`` then ``check``; the lease is released again if a check refuses."""
        lease = self.acquire(ctx)
        try:
            self.check(ctx, model)
        except BaseException:
            lease.release()
            raise
        return lease

    @staticmethod
    def _expire_tokens(state: _KeyState, cutoff: float) -> None:
        tokens = state.tokens
        while tokens and tokens[0][0] <= cutoff:
            state.window_tokens -= tokens.popleft()[1]

    @staticmethod
    def _tpm_wait(state: _KeyState, tpm: int, now: float) -> int:
        """Seconds until enough charged tokens leave the window for usage to drop below ``tpm``."""
        remaining = state.window_tokens
        for at, count in state.tokens:
            remaining -= count
            if remaining < tpm:
                return _ceil_secs(at + WINDOW_SECS - now)
        return 1  # unreachable: the window empties eventually

    # -- usage ----------------------------------------------------------------------------------------------

    def record_usage(
        self, key: KeyCtx | str, prompt_tokens: int, completion_tokens: int, reserved: int = 0
    ) -> None:
        """Charge a finished response's tokens to ``tpm`` and today's ``daily_tokens`` (negative counts are 0),
        and free the ``reserved`` tokens its ``check`` held."""
        name = key.name if isinstance(key, KeyCtx) else key
        prompt = max(0, int(prompt_tokens))
        completion = max(0, int(completion_tokens))
        total = prompt + completion
        now = self._clock.monotonic()
        day = utc_day(self._clock.time())
        with self._lock:
            state = self._state(name)
            state.reserved = max(0, state.reserved - max(0, reserved))
            self._expire_tokens(state, now - WINDOW_SECS)
            if total:
                state.tokens.append((now, total))
                state.window_tokens += total
            self.usage.add(name, day, prompt_tokens=prompt, completion_tokens=completion)

    def flush(self, store: Store) -> int:
        """Write changed usage rows in one transaction (see ``UsageBook.flush``); keeps only today in memory."""
        return self.usage.flush(store, keep_day=self.today())

    def load(self, store: Store) -> int:
        """Restore today's usage from the store at startup."""
        return self.usage.load(store, self.today())


def _held(reserved: int) -> str:
    return f" and its requests in flight may use {reserved} more" if reserved else ""


def _ceil_secs(seconds: float) -> int:
    return max(1, math.ceil(seconds))
