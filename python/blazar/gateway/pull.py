"""Ollama's ``POST /api/pull``: a model from the Hugging Face Hub (or an alias) into the catalog.

Streams Ollama's progress objects as NDJSON (``pulling manifest``, ``pulling <digest>`` with ``total`` and
``completed``, ``verifying sha256 digest``, ``writing manifest``, ``success``); with ``"stream": false`` it
answers one final object. A bad name is an HTTP error before the stream starts; a failure after it started
is a final ``{"error": "..."}`` line. A client that goes away cancels the download (the next pull resumes it).
The work itself is ``blazar.hub.pull``; this module only speaks HTTP.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from blazar.errors import BlazarError
from blazar.gateway import proxy
from blazar.gateway.http import JSON_HEADERS, ClientGone, HttpError, Request
from blazar.hub import pull as pulling
from blazar.paths import DataDir
from blazar.supervisor import Supervisor

log = logging.getLogger("blazar.gateway")

Response = tuple[int, list[tuple[str, str]], bytes]


async def pull(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    body = req.json_object()
    model = body.get("model", body.get("name"))
    if not isinstance(model, str) or not model:  # a name with spaces is refused naming them (names.check)
        raise HttpError(400, "'model' is required and must be a non-empty string")
    req.require_full_access("pulling models")
    events = pulling.pull_events(sup.catalog, model)
    if body.get("stream", True) is False:
        try:
            async for _ in events:
                pass
        finally:
            await events.aclose()
        return 200, JSON_HEADERS, orjson.dumps({"status": "success"})
    first = await anext(events)  # a bad name raises here, as an HTTP error in Ollama's shape
    await stream_events(
        req, proto, first, events, f"pull of {model}", "the download is cancelled and resumable", sup.data
    )
    return None


async def _next(events: AsyncGenerator[pulling.Event, None]) -> pulling.Event:
    return await anext(events)


async def stream_events(
    req: Request,
    proto: Any,
    first: pulling.Event,
    events: AsyncGenerator[pulling.Event, None],
    what: str,
    on_leave: str,
    data: DataDir,
) -> None:
    """Ollama's progress stream (pull, create): ``first`` and then each of ``events`` as an NDJSON line, a failure
    as a last ``{"error": ...}`` line, worded as the app words an error body (no path inside ``data``, no model
    name hidden from the key; an unexpected failure names its trace, not its text). A client that goes away
    closes ``events`` (which stops the work); ``on_leave`` says in the log what that meant."""
    req.mark_overhead()
    transport = proto.response_stream(200, [*req.extra_headers, ("content-type", "application/x-ndjson")])
    line = orjson.dumps(first.as_ollama()) + b"\n"
    try:
        while True:
            try:
                await transport.send_bytes(line)
            except Exception as e:  # granian raises when the client has gone
                log.info("%s: the client went away (%s); %s", what, e, on_leave)
                return
            try:
                # watched while the work runs, not only when a line is sent: the last step (a quantization's
                # hash and import) happens in one ``anext``, and a client gone by then stops it too
                event = await proxy.unless_gone(_next(events), req.client, after=0.0)
            except StopAsyncIteration:
                return
            except ClientGone as e:
                log.info("%s: the client went away (%s); %s", what, e, on_leave)
                return
            except BlazarError as e:
                message = data.redact(req.scrub(e.message))
                with contextlib.suppress(Exception):
                    await transport.send_bytes(orjson.dumps({"error": message}) + b"\n")
                return
            except Exception:
                log.exception("%s failed (trace %s)", what, req.trace_id)
                message = f"internal error in blazar; see the daemon log for trace {req.trace_id}"
                with contextlib.suppress(Exception):
                    await transport.send_bytes(orjson.dumps({"error": message}) + b"\n")
                return
            line = orjson.dumps(event.as_ollama()) + b"\n"
    finally:
        # Granian ends the response when the transport is freed. A failure's traceback holds this frame (and the
        # work's future holds that exception, in a cycle only a full collection frees), so the frame must not
        # keep the transport: else the client waits forever after the error line.
        del transport
        await events.aclose()
