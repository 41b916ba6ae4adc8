"""The exception tree every Blazar module raises; it owns no behaviour beyond messages and how they reach a client.

Every error a client can be answered with is a ``BlazarError``: its ``status``, ``kind`` (the OpenAI-style type;
None: the one its status implies), ``source`` and headers are all the gateway's envelope reads (``app``), in one
place. ``tests/test_errors.py`` checks that every subclass in the package is drawn here.

BlazarError                 base; ``str(e)`` is one teaching line (what happened and how to fix it)
├── HttpError               (gateway/http.py) an answer the gateway gives as it is: status, type, source, headers
├── EngineStopped           (supervisor/signals.py) its engine was stopped before it answered: retried once (503)
├── EngineWedged            (supervisor/signals.py) no response headers in time, engine stopped: retried (504)
├── RetriedInVain           (supervisor/signals.py) the one retry met the same fault: the client's 503 / 504
├── DialectError            (dialects/canonical.py) a request its dialect's parser refuses (4xx, the dialect's type)
├── ConfigError             config file or environment invalid
├── ConfigWriteError        (config/write.py) config.toml could not be changed
│   └── ConfigReadOnly      its owner made it read-only (409)
├── StoreError              the SQLite store cannot be opened or migrated
├── CatalogError            model catalog operations (import, rm, cp, unknown names)
│   └── ModelNotFound       a request or command names a model that is not in the catalog (404)
├── EngineError             engine build/registration problems
│   ├── GateFailed          (engines/gate.py) a new engine failed its install gate
│   ├── RateLimited         (engines/releases.py) the Releases API refused for now
│   ├── Unreachable         (engines/download.py) a release or package file could not be fetched
│   ├── Unverifiable        (engines/installer.py) a release without a digest to check it by
│   ├── WorkerError         (supervisor/worker.py) `blazar worker` cannot start, or cannot be stopped
│   └── LaneError           no engine can serve the model; the message names the install command.
│       │                   Its text is the same bytes in the CLI and in API bodies.
│       ├── EngineBusy      the engine stayed busy too long to restart for this request (503, Retry-After)
│       ├── ProfileUnfit    (fit.py) the model cannot fit this machine; names the levers (503)
│       ├── WorkerUnreachable (launch/workers.py) a model's RPC worker is busy or speaks another protocol (503)
│       │   └── WorkerDown  nothing listens at its address; names `blazar worker` (503)
│       └── UnservedArchitecture (engines/lanes.py) no installed lane serves the model's architecture
├── ChildError              a spawned engine failed to start or died (502)
│   └── EngineHeldBack      (supervisor/breaker.py) its restarts are held back after repeated crashes (503)
├── AdapterChanged          (supervisor/adapters.py) a LoRA adapter's file changed under a running engine
├── PromptTooLong           (preflight.py) the prompt cannot fit the context; names the levers (400)
├── ImagesUnreadable        (preflight.py) image parts for an engine without a vision projector (400)
├── KeysError               (keys.py) 401 / 403 for API keys
│   └── KeyConflict, KeyForbidden, Unauthorized, UnknownKey
├── QuotaError              (quotas.py) 429 with retry-after
├── AllSlotsBusy            (admission.py) 503 all_slots_busy after the bounded wait
├── InvalidDeadline         (admission.py) an x-blazar-deadline that is no time (400)
├── HubError                (hub.py) the Hugging Face Hub refused or failed
│   └── HubCancelled        the pull was cancelled
├── PullError               (pull.py) a model reference that cannot be pulled
├── QuantizeError           (quantize.py) a quantization that cannot run
│   └── QuantizeFailed      llama-quantize failed
├── BatchError              (batches.py) a batch file or job refused
├── StarterError            (starter.py) the starter model could not be fetched
├── DaemonError             (cli/client.py) the CLI could not talk to the daemon
├── BackgroundError         (cli/background.py) the daemon `blazar run` starts did not come up
├── LogError                (cli/log.py) the daemon log cannot be read, or a filter is not one
└── NotProvisioned          (cli/provision.py) a part is missing and the user did not agree to install it

``GgufError`` (a ValueError) comes from the native parser and is converted to CatalogError at the catalog edge.
"""

from __future__ import annotations

from collections.abc import Callable

KIND_BY_STATUS = {
    400: "invalid_request_error",
    403: "permission_error",  # a key's scope
    404: "not_found_error",
    429: "rate_limit_error",  # a key's quotas (rpm, tpm, daily_tokens, max_concurrent)
    502: "engine_error",
    503: "blazar_error",
}
"""The OpenAI-style error type of a ``BlazarError`` that names none."""


class BlazarError(Exception):
    """Base class; ``status`` is the HTTP status the gateway uses when it reaches a client."""

    status = 500
    kind: str | None = None
    """The OpenAI-style error type; None: ``KIND_BY_STATUS``'s for the status (``error_type``)."""
    source = "blazar"
    """Who made the error: ``blazar``, or ``engine`` for an engine's own passed on (``x-blazar-error-source``)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Headers the answer carries (an engine's ``Retry-After``, ...)."""
    retry_after: int | None = None
    """For a busy answer (the model's slots stayed taken): when to come back, sent as ``Retry-After``."""

    @property
    def message(self) -> str:
        return str(self)

    @property
    def error_type(self) -> str | None:
        """The type the answer names (None: the dialect's own for the status)."""
        return self.kind or KIND_BY_STATUS.get(self.status, "blazar_error")

    def response_headers(self) -> list[tuple[str, str]]:
        """``headers``, and ``Retry-After`` for a busy answer."""
        out = list(self.headers)
        if self.retry_after:
            out.append(("retry-after", str(self.retry_after)))
        return out


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
