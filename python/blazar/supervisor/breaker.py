"""Crash circuit breakers: one per child key, so an engine that crashes on every start or request is not
restarted in a loop.

It owns the crash history and the decision to hold a restart back; ``pool`` records crashes (a start that failed,
an engine found dead) and asks before each spawn. A clean stop (eviction) forgets the history; ``reset`` (``blazar
ps --reset``, ``POST /api/breakers/reset``) clears it by hand. Pure apart from the clock: tested alone.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from blazar.errors import ChildError

log = logging.getLogger("blazar.supervisor")

CRASHES_TO_OPEN = 3
"""Crashes within ``CRASH_WINDOW_SECS`` that hold an engine's restarts back."""
CRASH_WINDOW_SECS = 120.0
HOLD_SECS = 60.0
"""How long restarts are held back once the breaker opens. After that one start is tried; a crash then opens it
again at once (the earlier crashes are still in the window)."""


class EngineHeldBack(ChildError):
    """A request for a model whose engine keeps crashing, while its restarts are held back (503, Retry-After)."""

    status = 503

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class History:
    model: str
    crashes: deque[float] = field(default_factory=deque)
    held_until: float = 0.0
    last: str = ""


@dataclass(frozen=True)
class Held:
    """A breaker that is open now: for the CLI and ``GET /api/breakers``."""

    key: str
    model: str
    crashes: int
    retry_in_secs: int
    last: str


class Breakers:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_key: dict[str, History] = {}

    def crashed(self, key: str, model: str, why: str) -> None:
        """Record an unclean end of ``key``'s engine (of ``model``): a failed start, a death the supervisor found,
        an engine wedged past its header bound."""
        now = self._clock()
        h = self._by_key.setdefault(key, History(model))
        h.crashes.append(now)
        while h.crashes and now - h.crashes[0] > CRASH_WINDOW_SECS:
            h.crashes.popleft()
        h.last = _gist(why)
        if len(h.crashes) >= CRASHES_TO_OPEN:
            if h.held_until <= now:  # it opens now (a crash while held does not say it again)
                log.warning(
                    "engine for %s crashed %d times in %.0fs: its restarts are held back for %.0fs (last: %s);"
                    " `blazar ps --reset` lifts the hold",
                    model, len(h.crashes), CRASH_WINDOW_SECS, HOLD_SECS, h.last,
                )  # fmt: skip
            h.held_until = now + HOLD_SECS

    def clean(self, key: str) -> None:
        """``key``'s engine was stopped on purpose after running: its crash history no longer says anything."""
        self._by_key.pop(key, None)

    def check(self, key: str, model: str, log_name: str) -> None:
        """Raise ``EngineHeldBack`` while ``key``'s restarts are held back."""
        h = self._by_key.get(key)
        if h is None:
            return
        left = h.held_until - self._clock()
        if left <= 0:
            return
        secs = max(1, math.ceil(left))
        raise EngineHeldBack(
            f"engine for '{model}' crashed {len(h.crashes)} times in {CRASH_WINDOW_SECS:.0f}s, so Blazar holds its"
            f" restart back for {secs}s more instead of crashing it again (last: {h.last}); fix the cause (see"
            f" {log_name}), then run `blazar ps --reset` or wait",
            secs,
        )

    def held(self) -> list[Held]:
        now = self._clock()
        return [
            Held(key, h.model, len(h.crashes), max(1, math.ceil(h.held_until - now)), h.last)
            for key, h in sorted(self._by_key.items())
            if h.held_until > now
        ]

    def reset(self, model: str | None = None) -> list[str]:
        """Forget the crash history of ``model``'s engines (every engine's when None); returns the keys that
        were held back."""
        now = self._clock()
        chosen = [k for k, h in self._by_key.items() if model is None or h.model == model]
        was_held = sorted(k for k in chosen if self._by_key[k].held_until > now)
        for k in chosen:
            del self._by_key[k]
        return was_held


GIST_MAX = 400


def _gist(why: str) -> str:
    """One line of a failure: its first line and, for one that quotes a log (a failed start), the log's last
    line, where an engine says why it exited."""
    lines = [ln.strip() for ln in why.strip().splitlines() if ln.strip()]
    if not lines:
        return "no reason given"
    gist = lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"
    return gist if len(gist) <= GIST_MAX else gist[: GIST_MAX - 3] + "..."
