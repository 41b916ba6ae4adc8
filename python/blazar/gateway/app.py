"""The RSGI application: routing and the per-request envelope around every handler.

Envelope, outermost first: trace id (``x-blazar-trace-id``) -> route lookup -> body limit (50 MiB) -> handler
-> error mapping into the caller's dialect -> access log. Handlers return ``(status, headers, body)`` or stream
through the protocol themselves and return None.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from blazar import __version__
from blazar.errors import BlazarError
from blazar.gateway import openai
from blazar.gateway.http import (
    JSON_HEADERS,
    MAX_BODY_BYTES,
    HttpError,
    Request,
    accept_trace_id,
    openai_error_body,
)
from blazar.supervisor import Supervisor

log = logging.getLogger("blazar.gateway")
access = logging.getLogger("blazar.access")

Response = tuple[int, list[tuple[str, str]], bytes]
Handler = Callable[[Supervisor, Request, Any], Awaitable[Response | None]]

_BLAZAR_KIND = {
    400: "invalid_request_error",
    404: "not_found_error",
    502: "engine_error",
    503: "blazar_error",
}


async def _healthz(sup: Supervisor, req: Request, proto: Any) -> Response:
    return 200, JSON_HEADERS, orjson.dumps({"status": "ok", "version": __version__})


async def _models(sup: Supervisor, req: Request, proto: Any) -> Response:
    return openai.list_models(sup)


ROUTES: dict[str, dict[str, Handler]] = {
    "/healthz": {"GET": _healthz},
    "/health": {"GET": _healthz},
    "/v1/models": {"GET": _models},
    "/v1/chat/completions": {"POST": openai.chat_completions},
    "/v1/completions": {"POST": openai.completions},
    "/v1/embeddings": {"POST": openai.embeddings},
}


class App:
    """Granian calls ``__rsgi_init__`` on the worker's loop, ``__rsgi__`` per request, ``__rsgi_del__`` at exit."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon(self.sup.start_background)

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        t0 = time.perf_counter()
        headers = scope.headers
        trace = accept_trace_id(headers.get("x-blazar-trace-id"))
        out_headers = [("x-blazar-trace-id", trace)]
        status = 500
        path = scope.path
        try:
            status = await self._handle(scope, proto, trace, out_headers)
        except HttpError as e:
            status = e.status
            proto.response_bytes(
                e.status,
                [*out_headers, *JSON_HEADERS, ("x-blazar-error-source", e.source)],
                openai_error_body(e.status, e.message, e.kind),
            )
        except BlazarError as e:
            status = e.status
            kind = _BLAZAR_KIND.get(e.status, "blazar_error")
            proto.response_bytes(
                e.status,
                [*out_headers, *JSON_HEADERS, ("x-blazar-error-source", "blazar")],
                openai_error_body(e.status, str(e), kind),
            )
        except Exception:
            log.exception("unhandled error on %s %s (trace %s)", scope.method, path, trace)
            status = 500
            proto.response_bytes(
                500,
                [*out_headers, *JSON_HEADERS],
                openai_error_body(
                    500, f"internal error in blazar; see the daemon log for trace {trace}", "blazar_error"
                ),
            )
        if access.isEnabledFor(logging.INFO):
            access.info(
                "%s %s %d %.1fms trace=%s",
                scope.method,
                path,
                status,
                (time.perf_counter() - t0) * 1000,
                trace,
            )

    async def _handle(self, scope: Any, proto: Any, trace: str, out_headers: list[tuple[str, str]]) -> int:
        methods = ROUTES.get(scope.path)
        if methods is None:
            raise HttpError(404, f"no route for {scope.method} {scope.path}", "not_found_error")
        handler = methods.get(scope.method)
        if handler is None:
            raise HttpError(405, f"{scope.path} accepts {', '.join(methods)}, not {scope.method}")
        body = await _read_body(scope, proto)
        req = Request(scope.method, scope.path, scope.query_string, scope.headers, body, trace, out_headers)
        result = await handler(self.sup, req, proto)
        if result is None:
            return 200
        status, headers, data = result
        proto.response_bytes(status, [*out_headers, *headers], data)
        return status


def _too_large(size: int | None) -> HttpError:
    got = f" ({size} bytes)" if size is not None else ""
    return HttpError(413, f"request body{got} exceeds the 50 MiB limit", "request_too_large")


async def _read_body(scope: Any, proto: Any) -> bytes:
    if scope.method in ("GET", "HEAD", "OPTIONS"):
        return b""
    declared = scope.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise HttpError(400, f"invalid content-length header {declared!r}") from None
        if size > MAX_BODY_BYTES:
            raise _too_large(size)
        return bytes(await proto())
    parts = []
    total = 0
    async for chunk in proto:
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise _too_large(None)
        parts.append(chunk)
    return b"".join(parts)
