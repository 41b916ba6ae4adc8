"""How long an idle engine stays loaded: its keep-alive, one object per engine with the one copy of its rules.

The supervisor gives each child a ``KeepAlive`` at spawn (``KeepAlive.default_for``: a whisper engine's
``whisper_idle_secs``, a model's own ``idle_timeout_secs``, else the daemon's ``idle_timeout_secs``). A request's
Ollama ``keep_alive`` changes it only through ``ask`` (the gateway's exchange, as the request starts: the latest by
arrival wins, as in Ollama). The idle loop (``pool.idle_victims``) and ``/api/ps`` read ``limit``; the idle sleep's
keep-awake pings read ``asked``; the exchange's ``after`` reads ``unload_when_idle`` (a keep_alive 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from blazar.config import Config


@dataclass(slots=True)
class KeepAlive:
    base: float | None = None
    """The model's own idle limit in seconds (None: the daemon's ``idle_timeout_secs``; < 0: forever)."""
    secs: float | None = None
    """The limit in force: the latest request's keep_alive, else ``base``."""
    unload_when_idle: bool = False
    """A keep_alive 0 came (maybe while requests ran): unload the engine when its last request ends."""
    since: float = 0.0
    """Arrival (``perf_counter``) of the request whose keep_alive applies."""

    @classmethod
    def default_for(cls, cfg: Config, model: str, transcribes: bool) -> KeepAlive:
        """``model``'s engine's keep-alive before any request asks: a whisper engine's ``whisper_idle_secs`` (0:
        kept until the daemon stops), the model's own ``idle_timeout_secs`` (0: never evicted, as the top-level
        key's 0 is), else None (the daemon's ``idle_timeout_secs``)."""
        keep: float | None = None
        if transcribes:
            keep = float(cfg.whisper_idle_secs) if cfg.whisper_idle_secs else -1.0
        own = cfg.model_override(model).idle_timeout_secs
        if own is not None:
            keep = float(own) if own else -1.0
        return cls(base=keep, secs=keep)

    def ask(self, asked: float | None, arrival: float) -> None:
        """A request that arrived at ``arrival`` asks for ``asked`` seconds: one that waited (for its engine to
        start or wake, for a slot) never undoes what a later one asked. 0 unloads once the requests in flight
        have finished; a value sets the idle limit (negative: forever); None puts back ``base``."""
        if arrival < self.since:
            return
        self.since = arrival
        if asked == 0:
            self.unload_when_idle = True
            return
        self.unload_when_idle = False
        self.secs = self.base if asked is None else asked

    def limit(self, default: float) -> float | None:
        """The idle seconds after which the engine is stopped, ``default`` being the daemon's
        ``idle_timeout_secs``; None: never (a negative keep-alive, or that default 0 with nothing else asked)."""
        limit = default if self.secs is None else self.secs
        if limit < 0 or (limit == 0 and self.secs is None):
            return None
        return limit

    def asked(self) -> float | None:
        """The keep-alive a request set, when it is not the model's own default (else None)."""
        return None if self.secs is None or self.secs == self.base else self.secs
