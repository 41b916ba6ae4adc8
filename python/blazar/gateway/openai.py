"""The OpenAI dialect's handlers: /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings.

Each handler validates the request (teaching 400s), asks the supervisor for a ready child and dispatches through
``proxy``. Request-side translation to the engine is nearly identity for this dialect.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from blazar.gateway import proxy
from blazar.gateway.http import JSON_HEADERS, HttpError, Request, check_type, require_str
from blazar.supervisor import Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]


def list_models(sup: Supervisor) -> Response:
    data = []
    for m in sup.catalog.list():
        created = int(time.mktime(time.strptime(m.created_at[:19], "%Y-%m-%dT%H:%M:%S")))
        data.append({"id": m.name, "object": "model", "created": created, "owned_by": "blazar"})
    return 200, JSON_HEADERS, orjson.dumps({"object": "list", "data": data})


def _validate_chat(body: dict[str, Any]) -> None:
    require_str(body, "model")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise HttpError(400, "'messages' is required and must be a non-empty array of message objects")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise HttpError(400, f"'messages[{i}]' must be an object with a string 'role'")
    _validate_common(body)


def _validate_common(body: dict[str, Any]) -> None:
    check_type(body, "stream", (bool,), "a boolean")
    check_type(body, "max_tokens", (int,), "an integer")
    check_type(body, "max_completion_tokens", (int,), "an integer")
    check_type(body, "temperature", (int, float), "a number")
    check_type(body, "top_p", (int, float), "a number")
    check_type(body, "seed", (int,), "an integer")
    check_type(body, "stop", (str, list), "a string or an array of strings")
    check_type(body, "stream_options", (dict,), "an object")
    n = body.get("n")
    if n is not None and n != 1:
        raise HttpError(400, "'n' greater than 1 is not supported by the llama-cpp engine; send n=1")


async def _dispatch(
    sup: Supervisor, req: Request, body: dict[str, Any], path: str, proto: Any
) -> Response | None:
    child = await sup.ensure_ready(body["model"])
    if not body.get("stream"):
        status, data, ctype = await proxy.forward_whole(sup, child, path, req.body)
        return status, [("content-type", ctype)], data
    opts = body.get("stream_options") or {}
    keep_usage = bool(opts.get("include_usage"))
    if not keep_usage:
        body["stream_options"] = {**opts, "include_usage": True}
    await proxy.forward_stream(
        sup, child, path, orjson.dumps(body), proto, req.extra_headers, keep_usage=keep_usage
    )
    return None


async def chat_completions(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    body = req.json_object()
    _validate_chat(body)
    return await _dispatch(sup, req, body, "/v1/chat/completions", proto)


async def completions(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    body = req.json_object()
    require_str(body, "model")
    prompt = body.get("prompt")
    if not isinstance(prompt, str | list):
        raise HttpError(400, "'prompt' is required and must be a string or an array")
    _validate_common(body)
    return await _dispatch(sup, req, body, "/v1/completions", proto)


async def embeddings(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    body = req.json_object()
    model = require_str(body, "model")
    inp = body.get("input")
    if not isinstance(inp, str | list) or (isinstance(inp, list) and not inp):
        raise HttpError(400, "'input' is required and must be a string or a non-empty array")
    child = await sup.ensure_ready(model, embeddings=True)
    status, data, ctype = await proxy.forward_whole(sup, child, "/v1/embeddings", req.body)
    return status, [("content-type", ctype)], data
