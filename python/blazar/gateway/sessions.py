"""Named session pins: ``x-blazar-session`` keeps a conversation on the same engine child and slot.

Owns the session table ((API key, name) -> model key, slot, last use), slot choice (the least-shared slot of the
model), and expiry after ``session_keep_secs`` idle (0 disables sessions). A session belongs to the key that
opened it: another key's session of the same name is a different one, and a key limited to some models lists
and closes only its own (``owner=None`` below: every session, for full-access keys and an authless gateway).
Pure bookkeeping: no I/O, no engine calls; the handler passes the slot to llama-server as ``id_slot``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class Pin:
    name: str
    owner: str
    model_key: str
    slot: int
    created: float
    last_used: float
    requests: int = 0


class Sessions:
    def __init__(self, keep_secs: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.keep_secs = keep_secs
        self._clock = clock
        self._pins: dict[tuple[str, str], Pin] = {}

    @property
    def enabled(self) -> bool:
        return self.keep_secs > 0

    def _expire(self, now: float) -> None:
        for k in [k for k, p in self._pins.items() if now - p.last_used > self.keep_secs]:
            del self._pins[k]

    def pin(self, name: str, model_key: str, slots: int, owner: str = "") -> int | None:
        """The slot for ``owner``'s session ``name`` on ``model_key``; a new session takes the least-shared slot."""
        if not self.enabled:
            return None
        now = self._clock()
        self._expire(now)
        p = self._pins.get((owner, name))
        if p is None or p.model_key != model_key or p.slot >= slots:
            used = [0] * slots
            for other in self._pins.values():
                if other.model_key == model_key and other.slot < slots:
                    used[other.slot] += 1
            slot = used.index(min(used))
            p = self._pins[owner, name] = Pin(name, owner, model_key, slot, now, now)
        p.last_used = now
        p.requests += 1
        return p.slot

    def close(self, name: str, owner: str | None = None) -> bool:
        """Close ``owner``'s session ``name`` (``None``: that name under every key). True if one was open."""
        keys = [k for k in self._pins if k[1] == name and (owner is None or k[0] == owner)]
        for k in keys:
            del self._pins[k]
        return bool(keys)

    def pinned(self, name: str, owner: str = "") -> str | None:
        """The engine key ``owner``'s session ``name`` is pinned to, if it is (a model's replicas: which
        instance holds the conversation's KV cache)."""
        if not self.enabled:
            return None
        self._expire(self._clock())
        p = self._pins.get((owner, name))
        return p.model_key if p is not None else None

    def release_model(self, model_key: str) -> None:
        """A child went away (evicted or dead): its pins mean nothing any more."""
        for k in [k for k, p in self._pins.items() if p.model_key == model_key]:
            del self._pins[k]

    def listing(self, owner: str | None = None) -> list[dict[str, object]]:
        """``owner``'s open sessions (``None``: everyone's, each with the key that opened it)."""
        now = self._clock()
        self._expire(now)
        return [
            {
                "session": p.name,
                "key": p.owner or None,
                "model": p.model_key,
                "slot": p.slot,
                "requests": p.requests,
                "idle_secs": round(now - p.last_used, 3),
                "expires_in_secs": round(self.keep_secs - (now - p.last_used), 3),
            }
            for p in self._pins.values()
            if owner is None or p.owner == owner
        ]
