"""The Anthropic dialect's handlers: /v1/messages (streaming and not) and /v1/messages/count_tokens.

Parsing is ``dialects.anthropic``; responses come from the native Anthropic translator. Token counting runs the
engine's own chat template and tokenizer (llama-server's /apply-template, then /tokenize).
"""

from __future__ import annotations

from typing import Any

import orjson

from blazar.dialects import anthropic as dialect
from blazar.gateway import core, plan
from blazar.gateway.http import JSON_HEADERS, Request
from blazar.supervisor import Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]


async def messages(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    return await core.serve(sup, req, proto, dialect.parse_messages(req.json()), plan.ANTHROPIC)


async def count_tokens(sup: Supervisor, req: Request, proto: Any) -> Response:
    count = await core.count_input_tokens(sup, req, dialect.parse_count_tokens(req.json()))
    return 200, JSON_HEADERS, orjson.dumps({"input_tokens": count})
