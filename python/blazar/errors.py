"""The exception tree every Blazar module raises; it owns no behaviour beyond messages and HTTP status.

BlazarError                 base; ``str(e)`` is one teaching line (what happened and how to fix it)
├── ConfigError             config file or environment invalid
├── StoreError              the SQLite store cannot be opened or migrated
├── CatalogError            model catalog operations (import, rm, cp, unknown names)
│   └── ModelNotFound       a request or command names a model that is not in the catalog (404)
├── EngineError             engine build/registration problems
│   └── LaneError           no engine can serve the model; the message names the install command.
│       │                   Its text is the same bytes in the CLI and in API bodies.
│       └── ProfileUnfit    (fit.py) the model cannot fit this machine; names the levers (503)
├── ChildError              a spawned engine failed to start or died (502)
│   └── EngineHeldBack      (supervisor/breaker.py) its restarts are held back after repeated crashes (503)
├── PromptTooLong           (preflight.py) the prompt cannot fit the context; names the levers (400)
├── KeysError, QuotaError   (keys.py, quotas.py) 401 / 403 / 429 with retry-after
└── AllSlotsBusy            (admission.py) 503 all_slots_busy after the bounded wait

``GgufError`` (a ValueError) comes from the native parser and is converted to CatalogError at the catalog edge.
"""

from __future__ import annotations

from collections.abc import Callable


class BlazarError(Exception):
    """Base class; ``status`` is the HTTP status the gateway uses when it reaches a client."""

    status = 500
    retry_after: int | None = None
    """For a busy answer (the model's slots stayed taken): when to come back, sent as ``Retry-After``."""


class ConfigError(BlazarError):
    """The config file or environment is invalid."""

    status = 500


class StoreError(BlazarError):
    """The database cannot be opened, migrated or written."""

    status = 500


class CatalogError(BlazarError):
    """A catalog operation failed (bad name, unreadable file, duplicate)."""

    status = 400


class ModelNotFound(CatalogError):
    """The named model is not in the catalog. ``known`` are the catalog's names its message lists, so the gateway
    can say it again naming only what the caller may see (``shown_to``)."""

    status = 404

    def __init__(self, message: str, *, lead: str = "", known: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.lead = lead
        self.known = known

    def shown_to(self, visible: Callable[[str], bool]) -> str:
        """The message with only the known models ``visible`` allows."""
        if self.known is None:
            return str(self)
        return self.lead + known_models([n for n in self.known if visible(n)])


def known_models(names: list[str]) -> str:
    return f" (known models: {', '.join(names[:10])})" if names else " (no models you can use)"


class EngineError(BlazarError):
    """An engine could not be built, registered or found."""

    status = 500


class LaneError(EngineError):
    """No installed engine can serve this model; the message teaches the fix."""

    status = 503


class EngineBusy(LaneError):
    """The model's engine stayed busy too long to be restarted for this request: busy, as ``all_slots_busy`` is
    (``Retry-After``; a 529 for Anthropic clients; retried by batches)."""

    retry_after = 1


class ChildError(BlazarError):
    """An engine child failed to start, or died while serving."""

    status = 502
