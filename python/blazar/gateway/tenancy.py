"""The per-request tenancy gate: API keys, quotas, admission, session pins and the audit lane.

Order, as the seed gives it: auth (401) -> concurrency lease (429) -> [handler parses the model] -> scope (403)
-> rpm / tpm / daily tokens (429) -> admission (503 ``all_slots_busy`` after the bounded wait). Usage from the
native summary is charged when the response ends, and committed to ``key_usage`` before the end is recorded (the
audit line), so a daemon killed after an answer loses none of its tokens; the concurrency lease is released then
too (a client that drops a stream releases it as the stream ends). It owns no HTTP I/O.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hmac
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from blazar_sched import INTERACTIVE, RAWLONG, TOOL, parse_priority

from blazar import tasks
from blazar.config import Config
from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway.audit import AuditLog
from blazar.gateway.events import Events
from blazar.gateway.http import (
    CLIENT_CLOSED,
    HEADER_TOKEN_MAX,
    ClientWatch,
    HttpError,
    Request,
    is_header_token,
)
from blazar.gateway.metrics import METRICS_PATH, Metrics
from blazar.gateway.otlp import Exporter
from blazar.gateway.semcache import SemanticCache
from blazar.gateway.sessions import Sessions
from blazar.gateway.status import PATHS as STATUS_PATHS
from blazar.gateway.usage import UsageWriter
from blazar.launch.settings import model_settings
from blazar.paths import DataDir
from blazar.store import Store
from blazar.tenancy.admission import Admission, AllSlotsBusy, SlotLease, parse_deadline_ms
from blazar.tenancy.keys import KeyRegistry, Unauthorized, allows_model, scope_denied_message
from blazar.tenancy.quotas import Quotas

log = logging.getLogger("blazar.tenancy")

OPEN_PATHS = frozenset({"/healthz", "/health"})
FLUSH_SECS = 5.0
"""How often usage a failed write left in memory is tried again; each finished request commits its own
(``UsageWriter``)."""


def basic_as_bearer(authorization: str | None) -> str | None:
    """``Authorization: Basic`` (any user name, the key as password; or the key as user name and no password) as
    the Bearer header it stands for; any other header as it is. Only the status page's paths take Basic."""
    if not authorization or authorization[:6].lower() != "basic ":
        return authorization
    try:
        user, _, password = base64.b64decode(authorization[6:].strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    secret = password or user
    return f"Bearer {secret}" if secret else None


def visible(req: Request, model: str) -> bool:
    """Whether the caller may see ``model``: in listings (``/v1/models``, ``/api/tags``, ``/api/ps``) and in
    ``/api/show`` a scoped key sees only its own models; a full-access key, or no auth, sees all."""
    return req.key is None or allows_model(req.key, model)


def require_visible(req: Request, model: str) -> None:
    """403 in the caller's dialect when ``model`` is outside the key's scope (no quota is charged)."""
    if req.key is not None and not allows_model(req.key, model):
        raise HttpError(403, scope_denied_message(req.key, model), "permission_error")


WORK_CLASSES = {INTERACTIVE: "interactive", TOOL: "tool", RAWLONG: "rawlong"}
"""The scheduler's work classes by name (a metrics label)."""

UNLEASED_PREFIXES = ("/v1/files", "/v1/batches", "/v1/messages/batches", "/api/keys", "/api/session",
                     "/api/breakers", "/api/show", "/api/copy", "/api/push")  # fmt: skip
"""POST routes that run no model: no ``max_concurrent`` lease (nor do GET, HEAD and DELETE requests)."""


class Gate:
    def __init__(self, cfg: Config, store: Store, data: DataDir, config_path: Path) -> None:
        self.cfg = cfg
        self.config_path = config_path
        self.store = store
        self.keys = KeyRegistry(cfg)
        self.quotas = Quotas()
        self.quotas.load(store)
        self.usage = UsageWriter(self.quotas, store)
        self.admission = Admission()
        self.sessions = Sessions(cfg.session_keep_secs)
        self.audit = AuditLog(data.root / "audit") if cfg.audit else None
        self.semcache = SemanticCache(cfg) if cfg.semantic_cache else None
        self.otlp = Exporter(cfg.otlp_endpoint) if cfg.otlp_endpoint else None
        self.metrics = Metrics()
        self.events = Events()
        self._flusher: asyncio.Task[None] | None = None
        self.batches: Any = None  # the App's gateway.batch.BatchRunner, which runs batch jobs

    # -- envelope ------------------------------------------------------------------------------------------

    def authenticate(self, req: Request) -> None:
        """Resolve the caller's key (when auth is active) and, for a request that may run a model, take its
        concurrency lease (``max_concurrent``): reading listings, files, batches or sessions takes none, so a key
        whose requests fill its limit can still watch them."""
        if not self.keys.auth_active or req.path in OPEN_PATHS:
            return
        h = req.headers
        if req.path == METRICS_PATH and self.cfg.metrics_token:
            sent = h.get("authorization") or ""
            if sent.startswith("Bearer ") and hmac.compare_digest(
                sent[7:].encode(), self.cfg.metrics_token.encode()
            ):
                req.scraper = True  # the scraper's token: /metrics and nothing else, no key
                return
        authorization = h.get("authorization")
        page = req.path in STATUS_PATHS
        if page:  # a browser sends the key the status page asked for as HTTP Basic's password
            authorization = basic_as_bearer(authorization)
        ctx = self.keys.authenticate(authorization, h.get("x-api-key"))
        if ctx is None:
            refused = Unauthorized()
            if page:  # the browser asks for the key
                refused.headers = (("www-authenticate", 'Basic realm="Blazar", charset="UTF-8"'),)
            raise refused
        req.key = ctx
        if req.method == "POST" and not req.path.startswith(UNLEASED_PREFIXES):
            req.quota_lease = self.quotas.acquire(ctx)

    def finish(self, req: Request, status: int) -> None:
        """The response is over (drained or dropped): free the lease, charge usage, write the audit line."""
        self.metrics.observe(req, status, time.perf_counter())
        if req.model:
            self.events.request(req, status)
        if req.quota_lease is not None:
            req.quota_lease.release()
            req.quota_lease = None
        usage = req.summary.get("usage") if req.summary else None
        if usage is None and req.dispatched and (status == CLIENT_CLOSED or 200 <= status < 300):
            usage = cut_off_usage(req)  # cut off: the client left, or the engine died inside the stream
        charged = False
        if req.key is not None and (isinstance(usage, dict) or req.reserved):
            got = usage if isinstance(usage, dict) else {}
            prompt, completion = got.get("prompt_tokens", 0), got.get("completion_tokens", 0)
            self.quotas.record_usage(req.key, prompt, completion, req.reserved)
            req.reserved, charged = 0, True
        if self.otlp is not None:
            self.otlp.record(req, status)
        record = (
            None if self.audit is None else functools.partial(self.audit.emit, self._audit_line(req, status))
        )
        if charged:  # the end is recorded once its tokens are on disk: a kill -9 then loses none of them
            self.usage.commit(record)
        elif record is not None:
            record()

    @staticmethod
    def _audit_line(req: Request, status: int) -> dict[str, object]:
        return {
            "ts": datetime.now(UTC).isoformat(),
            "trace": req.trace_id,
            "key": req.key.name if req.key else None,
            "method": req.method,
            "path": req.path,
            "model": req.model,
            "status": status,
            "ms": round((time.perf_counter() - req.t0) * 1000, 3),
            "priority": req.headers.get("x-blazar-priority") or "normal",
            "queue_depth": req.queue_depth,
            "ttft_ms": _ms(req.first_token_ms()),
            "tpot_ms": _ms(req.token_gap_ms()),
        }

    # -- handler side --------------------------------------------------------------------------------------

    def check_model(
        self, req: Request, model: str, canon: CanonicalRequest | None = None, slot_ctx: int | None = None
    ) -> None:
        """Scope, rpm, tpm and daily tokens for the model this request names; what ``canon`` may charge
        (``quota_reservation``, within ``slot_ctx``: the context one request of the model may use, from its
        placement; by default the config's) is held against tpm and daily_tokens until it finishes."""
        req.model = model
        check_session_header(req.headers.get("x-blazar-session"))  # before a queue or an engine start
        key = req.key
        if key is not None:
            counted = key.limits.tpm or key.limits.daily_tokens  # a key without them holds nothing
            reserve = (
                quota_reservation(req, canon, self._slot_context(model, canon, slot_ctx))
                if canon and counted
                else 0
            )
            req.reserved += self.quotas.check(key, model, reserve)

    def _slot_context(self, model: str, canon: CanonicalRequest, slot_ctx: int | None) -> int:
        """Ollama's ``num_ctx`` when the request asks for one, else ``slot_ctx``, else ``slot_context``."""
        if canon.options_ctx:
            return canon.options_ctx
        return slot_context(self.cfg, model) if slot_ctx is None else slot_ctx

    async def admit(self, req: Request, model_key: str, slots: int, canon: CanonicalRequest) -> SlotLease:
        h = req.headers
        work = TOOL if canon.has_tools() else RAWLONG if canon.raw else INTERACTIVE
        sched = self.admission.scheduler(model_key, slots)
        req.queue_depth = sched.waiting
        t0 = time.perf_counter()
        watching: list[ClientWatch] = []
        work_class = WORK_CLASSES[work]
        queued = False

        def on_wait() -> (
            None
        ):  # only a request that has to queue watches its client: one that leaves is never run
            nonlocal queued
            queued = True
            self.metrics.queued(model_key, work_class, 1)
            task = asyncio.current_task()  # the request's own: admit runs in it
            if req.client is not None and task is not None:
                watching.append(ClientWatch(req.client, task))

        try:
            lease = await self.admission.admit(
                model_key,
                slots,
                key=req.key.name if req.key else "",
                weight=req.key.weight if req.key else 1.0,
                priority=parse_priority(h.get("x-blazar-priority")),
                work_class=work,
                deadline_ms=parse_deadline_ms(h.get("x-blazar-deadline-ms")),
                body_len=len(req.body),
                max_wait_s=float(self.cfg.queue_wait_secs),
                holds=canon.choices(),
                on_wait=on_wait,
            )
        except AllSlotsBusy:
            self.metrics.refused_busy(model_key)
            raise
        except asyncio.CancelledError:
            gone = ClientWatch.gone(watching, "while it waited for a slot; it was never run")
            if gone is None:
                raise
            raise gone from None
        finally:
            for watch in watching:
                watch.close()
            if queued:
                self.metrics.queued(model_key, work_class, -1)
        waited = time.perf_counter() - t0
        req.engine_s += waited  # queueing is waiting for engine capacity, not overhead
        self.metrics.admitted(model_key, work_class, waited)
        return lease

    def sessions_seen_by(self, req: Request) -> str | None:
        """Whose sessions ``req`` may list and close: a key limited to some models, its own (sessions are opened
        under the key's name); a full-access key, or anyone on an authless gateway, everyone's (``None``)."""
        return req.key.name if req.key is not None and not req.key.full_access else None

    def session_slot(self, req: Request, model_key: str, slots: int) -> int | None:
        name = req.headers.get("x-blazar-session")
        check_session_header(name)
        owner = req.key.name if req.key is not None else ""
        return self.sessions.pin(name, model_key, slots, owner) if name else None

    def session_engine(self, req: Request) -> str | None:
        """The engine key ``req``'s ``x-blazar-session`` is pinned to, if any."""
        name = req.headers.get("x-blazar-session")
        return self.sessions.pinned(name, req.key.name if req.key is not None else "") if name else None

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        self.events.start(asyncio.get_running_loop())
        if self.audit is not None:
            self.audit.start()
        if self.otlp is not None:
            self.otlp.start()
        self.usage.start()
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while True:  # usage a failed write left in memory is tried again without waiting for a request
            await asyncio.sleep(FLUSH_SECS)
            self.usage.commit()

    async def close(self) -> None:
        if self.batches is not None:
            await self.batches.close()
        await tasks.stop(self._flusher)
        self._flusher = None
        await self.usage.close()
        if self.audit is not None:
            await self.audit.close()
        if self.otlp is not None:
            await self.otlp.close()


RESERVE_BYTES_PER_TOKEN = 4
"""A request's prompt is reserved against its key's tpm and daily_tokens at this many body bytes per token: about
what English text averages, more than the JSON around it costs."""


def check_session_header(name: str | None) -> None:
    if name is not None and not is_header_token(name):
        raise HttpError(
            400,
            f"x-blazar-session must be 1-{HEADER_TOKEN_MAX} printable ASCII characters without spaces"
            f" (got {len(name)} characters)",
        )


def quota_reservation(req: Request, canon: CanonicalRequest, slot_ctx: int) -> int:
    """What a request may charge its key: its body at ``RESERVE_BYTES_PER_TOKEN``, plus for each choice its
    max_tokens, or without one what its slot's context (``slot_ctx``) leaves after the prompt, which an answer
    with no bound may fill (held until it finishes, when what it used is charged instead). Embeddings, audio and
    loads generate nothing."""
    prompt = len(req.body) // RESERVE_BYTES_PER_TOKEN
    if canon.kind not in ("chat", "completion") or canon.load_only:
        return prompt
    max_tokens = canon.params.get("max_tokens")
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
        out = max_tokens
    else:
        out = max(slot_ctx - prompt, 0)
    return prompt + out * canon.choices()


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def slot_context(cfg: Config, model: str) -> int:
    """The context one request of ``model`` may use, as configured (``launch.settings.model_settings``): the engine's may
    be smaller once fitted to memory, never larger."""
    return model_settings(cfg, model).ctx_per_slot


def cut_off_usage(req: Request) -> dict[str, int]:
    """What an answer cut off before the engine's usage report (the client left, the engine died) is charged:
    the prompt the engine read, estimated as a reservation estimates it, and a token for each chunk that carried
    output. Without it a client could read any amount and hang up before the report, charged nothing."""
    seen = req.summary.get("token_chunks") if req.summary else None
    return {
        "prompt_tokens": len(req.body) // RESERVE_BYTES_PER_TOKEN,
        "completion_tokens": seen if isinstance(seen, int) else 0,
    }


def each_task_charged(summary: dict[str, Any], n: int) -> dict[str, Any]:
    """A whole llama-server body with several choices (``n`` per prompt, one prompt or many) reports one task's
    usage, though the engine ran a task for each choice (a stream reports every task's, and the translator adds
    them up). Each task is charged as much as the reported one: its completion tokens for every choice, its
    prompt tokens for every prompt. The client's body keeps the engine's figures."""
    usage, k = summary.get("usage"), summary.get("choices")
    if not isinstance(usage, dict) or summary.get("usage_reports") != 1 or not isinstance(k, int) or k <= 1:
        return summary
    prompts = max(k // max(n, 1), 1)
    charged = {
        "prompt_tokens": int(usage.get("prompt_tokens") or 0) * prompts,
        "completion_tokens": int(usage.get("completion_tokens") or 0) * k,
    }
    return {**summary, "usage": charged}
