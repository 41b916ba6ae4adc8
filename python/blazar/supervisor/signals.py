"""What supervision tells a request about its engine: stopped before it answered, or wedged and stopped.

Both mean nothing reached the client, so the request may run once more on the fresh engine the supervisor starts
(``gateway.core.once_more_if_wedged``); a second one is the client's answer (``again``). ``Child.stopped_for``
holds why an engine was stopped, ``WEDGED`` and ``STALLED`` among the reasons.
"""

from __future__ import annotations

from blazar.errors import BlazarError

WEDGED = "no response headers within child_header_timeout_secs"
"""``Child.stopped_for`` of an engine stopped as wedged."""

STALLED = "nothing sent mid-stream within child_header_timeout_secs"
"""``Child.stopped_for`` of an engine stopped because a stream it was sending went quiet for that long and it no
longer answered its health check."""


class RetriedInVain(BlazarError):
    """A request's one retry met the same fault as its first try: the client's 503 or 504."""

    kind = "engine_error"

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class EngineStopped(BlazarError):
    """The engine was stopped on purpose (a keep_alive 0 unload, an idle eviction, a restart for more context)
    after this request was given it and before it answered. Nothing reached the client, so the request runs once
    more on the engine the supervisor starts for it (a removed model is a 404 then)."""

    status = 503
    kind = "engine_error"

    def __init__(self, model: str, reason: str) -> None:
        self.what = f"engine for '{model}' was stopped before it answered ({reason})"
        super().__init__(self.what)

    def again(self) -> RetriedInVain:
        """The 503 for a request whose retry found its engine stopped too."""
        return RetriedInVain(503, f"{self.what}, and again when the request was retried once")


class EngineWedged(BlazarError):
    """The engine sent no response headers within ``child_header_timeout_secs``; it has been stopped. Nothing
    reached the client yet, so the request is retried once on a fresh engine; a second wedge is a 504."""

    status = 504
    kind = "engine_error"

    def __init__(self, model: str, secs: int) -> None:
        self.what = (
            f"engine for '{model}' sent no response headers within {secs}s (child_header_timeout_secs)"
        )
        super().__init__(f"{self.what}; it was stopped and the next request restarts it")

    def again(self) -> RetriedInVain:
        """The 504 for a request whose retry on a fresh engine wedged too."""
        return RetriedInVain(
            504,
            f"{self.what}, and again when the request was retried once on a restarted engine; both were stopped"
            " and the next request starts it again",
        )
