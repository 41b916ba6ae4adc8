"""OTLP export (opt-in: ``otlp_endpoint``): one span per request, POSTed in batches every ``EXPORT_SECS`` to an
OpenTelemetry collector's OTLP/HTTP JSON traces endpoint (such as ``http://collector:4318/v1/traces``).

Owns the bounded span buffer (``BUFFER_MAX``; when it is full the oldest spans go, counted), the export task and
the span's shape. A span carries the request's method, route, status, trace id (``x-blazar-trace-id``; the OTLP
trace id is derived from it), model, key name (never a secret), the time spent queued and in the engine, and the
tokens the answer used. A collector that is down or slow never slows a request: its failures are logged at most
once a minute and the batch is dropped. What is buffered at shutdown is sent once more.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections import deque
from typing import TYPE_CHECKING

import aiohttp
import orjson

from blazar import __version__, tasks

if TYPE_CHECKING:
    from blazar.gateway.http import Request

log = logging.getLogger("blazar.otlp")

EXPORT_SECS = 10.0
BUFFER_MAX = 4096
POST_TIMEOUT_SECS = 5.0
_QUIET_SECS = 60.0


def _attr(key: str, value: object) -> dict[str, object]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": str(value)}}


class Exporter:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.spans: deque[dict[str, object]] = deque(maxlen=BUFFER_MAX)
        self.dropped = 0
        self._task: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._said_at = -_QUIET_SECS

    def record(self, req: Request, status: int) -> None:
        """One finished request as a span (constant work; the export is the task's)."""
        end_ns = time.time_ns()
        elapsed_ns = int((time.perf_counter() - req.t0) * 1e9)
        attrs = [
            _attr("http.request.method", req.method),
            _attr("url.path", req.path),
            _attr("http.response.status_code", status),
            _attr("blazar.trace_id", req.trace_id),
            _attr("blazar.overhead_ms", round(req.overhead_ms(), 3)),
            _attr("blazar.queue_depth", req.queue_depth),
        ]
        if req.model is not None:
            attrs.append(_attr("gen_ai.request.model", req.model))
        if req.key is not None:
            attrs.append(_attr("blazar.key", req.key.name))
        usage = req.summary.get("usage") if req.summary else None
        if isinstance(usage, dict):
            attrs.append(_attr("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens", 0))))
            attrs.append(_attr("gen_ai.usage.output_tokens", int(usage.get("completion_tokens", 0))))
        ttft, tpot = req.first_token_ms(), req.token_gap_ms()
        if ttft is not None:
            attrs.append(_attr("blazar.ttft_ms", round(ttft, 3)))
        if tpot is not None:
            attrs.append(_attr("blazar.tpot_ms", round(tpot, 3)))
        if len(self.spans) == self.spans.maxlen:
            self.dropped += 1
        self.spans.append(
            {
                "traceId": hashlib.sha256(req.trace_id.encode()).hexdigest()[:32],
                "spanId": os.urandom(8).hex(),
                "name": f"{req.method} {req.path}",
                "kind": 2,  # SERVER
                "startTimeUnixNano": str(end_ns - elapsed_ns),
                "endTimeUnixNano": str(end_ns),
                "attributes": attrs,
                "status": {"code": 2 if status >= 500 else 0},
            }
        )

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(EXPORT_SECS)
            await self.flush()

    def _body(self, spans: list[dict[str, object]]) -> bytes:
        resource = {"attributes": [_attr("service.name", "blazar"), _attr("service.version", __version__)]}
        scope = {"scope": {"name": "blazar.gateway", "version": __version__}, "spans": spans}
        return orjson.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]})

    async def flush(self) -> None:
        """POST what is buffered, in one batch; a failure drops the batch (counted, logged once a minute)."""
        if not self.spans:
            return
        spans = list(self.spans)
        self.spans.clear()
        if self._http is None:
            self._http = aiohttp.ClientSession()
        try:
            async with self._http.post(
                self.endpoint,
                data=self._body(spans),
                headers={"content-type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_SECS),
            ) as r:
                if r.status >= 300:
                    raise aiohttp.ClientError(f"the collector answered HTTP {r.status}")
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            self.dropped += len(spans)
            now = time.monotonic()
            if now - self._said_at >= _QUIET_SECS:
                self._said_at = now
                why = str(e) or type(e).__name__
                log.warning(
                    "otlp: sending %d span(s) to %s failed (%s); dropped (%d in all)",
                    len(spans),
                    self.endpoint,
                    why,
                    self.dropped,
                )

    async def close(self) -> None:
        await tasks.stop(self._task)
        self._task = None
        await self.flush()
        if self._http is not None:
            await self._http.close()
            self._http = None
