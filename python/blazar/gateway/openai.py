"""The OpenAI dialect's handlers: /v1/models, /v1/chat/completions, /v1/responses, /v1/completions, /v1/embeddings.

Each parses with ``dialects.openai`` and hands the canonical request to ``core``; responses come back through
the native translator (model name as the client asked, usage-only chunk dropped unless asked for).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import orjson

from blazar.catalog import names
from blazar.catalog.loras import LoraRow
from blazar.catalog.models import ModelRow
from blazar.dialects import openai as dialect
from blazar.dialects import responses as responses_dialect
from blazar.gateway import core, plan, remote
from blazar.gateway.http import JSON_HEADERS, HttpError, Request
from blazar.gateway.tenancy import require_visible, visible
from blazar.launch.settings import model_capabilities
from blazar.supervisor import Supervisor
from blazar.supervisor.remotes import LISTING

Response = tuple[int, list[tuple[str, str]], bytes]


MODELS_PREFIX = "/v1/models/"


def _model_object(m: ModelRow | LoraRow, capabilities: list[str]) -> dict[str, Any]:
    """OpenAI's model object, with what the model does in ``capabilities`` (as llama-server lists its model)."""
    when = datetime.fromisoformat(m.created_at)
    created = int(
        (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()
    )  # stored in UTC
    return {
        "id": m.name,
        "object": "model",
        "created": created,
        "owned_by": "blazar",
        "capabilities": capabilities,
    }


def _capabilities(sup: Supervisor, m: ModelRow | LoraRow) -> list[str]:
    """A model's, or an adapter's base model's (an adapter is served on it)."""
    base = sup.catalog.find(m.base) if isinstance(m, LoraRow) else m
    return model_capabilities(sup.cfg, base) if base is not None else ["completion"]


async def list_models(sup: Supervisor, req: Request, proto: Any) -> Response:
    rows: list[ModelRow | LoraRow] = [*sup.catalog.list(), *sup.loras.list()]
    shown = [m for m in sorted(rows, key=lambda r: r.name) if visible(req, m.name)]
    # off the loop: a model not seen since it changed has its vocabulary read (once; then kept)
    caps = await asyncio.to_thread(lambda: [_capabilities(sup, m) for m in shown])
    data = [_model_object(m, c) for m, c in zip(shown, caps, strict=True)]
    if sup.remotes.by_name and not req.headers.get(LISTING):
        data += await remote.listed(sup, req)
    return 200, JSON_HEADERS, orjson.dumps({"object": "list", "data": data})


async def retrieve_model(sup: Supervisor, req: Request, proto: Any) -> Response:
    """``GET /v1/models/{model}`` (the SDKs' ``models.retrieve``): one model object, or a 404."""
    asked = unquote(req.path[len(MODELS_PREFIX) :])
    if sup.remotes.by_name and (found := await remote.retrieve(sup, req, asked)) is not None:
        require_visible(req, asked)
        return 200, JSON_HEADERS, orjson.dumps(found)
    full = names.normalize(asked)  # an invalid name: CatalogError, a 400
    require_visible(req, full)
    m = sup.catalog.find(full) or sup.loras.find(full)
    if m is None:
        raise HttpError(
            404,
            f"the model '{full}' does not exist; GET /v1/models lists the models this server has",
            "not_found_error",
        )
    # the id that was asked, as OpenAI answers it (a client compares it with the name it configured)
    caps = await asyncio.to_thread(_capabilities, sup, m)
    return 200, JSON_HEADERS, orjson.dumps({**_model_object(m, caps), "id": asked})


async def chat_completions(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    return await core.serve(sup, req, proto, dialect.parse_chat(req.json()), plan.OPENAI)


async def responses(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    """``POST /v1/responses``: OpenAI's Responses API, stateless (``dialects.responses``), answered by the native
    Responses translator from the engine's chat completion."""
    return await core.serve(sup, req, proto, responses_dialect.parse_responses(req.json()), plan.RESPONSES)


async def responses_input_tokens(sup: Supervisor, req: Request, proto: Any) -> Response:
    """``POST /v1/responses/input_tokens`` (the SDK's ``responses.input_tokens.count``): what the request's input
    would take, counted by the model's own template and tokenizer."""
    count = await core.count_input_tokens(sup, req, responses_dialect.parse_responses(req.json()))
    return 200, JSON_HEADERS, orjson.dumps({"object": "response.input_tokens", "input_tokens": count})


async def completions(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    return await core.serve(sup, req, proto, dialect.parse_completion(req.json()), plan.OPENAI)


async def embeddings(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    canon = dialect.parse_embedding(req.json())
    body, _load_ns = await core.embed(sup, req, canon)
    body["model"] = canon.model
    return 200, JSON_HEADERS, orjson.dumps(body)
