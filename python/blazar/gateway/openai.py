"""The OpenAI dialect's handlers: /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings.

Each parses with ``dialects.openai`` and hands the canonical request to ``core``; responses come back through
the native translator (model name as the client asked, usage-only chunk dropped unless asked for).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from blazar.dialects import openai as dialect
from blazar.gateway import core
from blazar.gateway.http import JSON_HEADERS, Request
from blazar.supervisor import Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]


async def list_models(sup: Supervisor, req: Request, proto: Any) -> Response:
    data = []
    for m in sup.catalog.list():
        created = int(time.mktime(time.strptime(m.created_at[:19], "%Y-%m-%dT%H:%M:%S")))
        data.append({"id": m.name, "object": "model", "created": created, "owned_by": "blazar"})
    return 200, JSON_HEADERS, orjson.dumps({"object": "list", "data": data})


async def chat_completions(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    return await core.serve(sup, req, proto, dialect.parse_chat(req.json()), core.OPENAI)


async def completions(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    return await core.serve(sup, req, proto, dialect.parse_completion(req.json()), core.OPENAI)


async def embeddings(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    canon = dialect.parse_embedding(req.json())
    body, _load_ns = await core.embed(sup, req, canon)
    body["model"] = canon.model
    return 200, JSON_HEADERS, orjson.dumps(body)
