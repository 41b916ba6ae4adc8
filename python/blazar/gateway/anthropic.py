"""The Anthropic dialect's handlers: /v1/messages (streaming and not) and /v1/messages/count_tokens.

Parsing is ``dialects.anthropic``; responses come from the native Anthropic translator. Token counting runs the
engine's own chat template and tokenizer (llama-server's /apply-template, then /tokenize).
"""

from __future__ import annotations

from typing import Any

import orjson

from blazar.dialects import anthropic as dialect
from blazar.dialects.canonical import render_engine
from blazar.gateway import core
from blazar.gateway.http import JSON_HEADERS, Request
from blazar.preflight import check_images_readable
from blazar.supervisor import Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]


async def messages(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    return await core.serve(sup, req, proto, dialect.parse_messages(req.json()), core.ANTHROPIC)


async def count_tokens(sup: Supervisor, req: Request, proto: Any) -> Response:
    canon = dialect.parse_count_tokens(req.json())
    core.claim(sup, req, canon)  # the key's scope covers counting too: it runs the model's engine

    async def count() -> int:
        child, _ = await core.ready_child(sup, req, canon)
        core.llama_only(child, "counting tokens", "/apply-template and /tokenize")
        check_images_readable(canon, child.spec.reads_images)  # as /v1/messages would refuse them
        _path, chat = render_engine(canon)
        template_req: dict[str, Any] = {k: chat[k] for k in ("messages", "tools", "tool_choice") if k in chat}
        prompt = await core.ask_engine(sup, req, child, "/apply-template", template_req, "prompt", str)
        body = {"content": prompt, "add_special": True}
        return len(await core.ask_engine(sup, req, child, "/tokenize", body, "tokens", list))

    # a wedged engine is stopped and the count asked once more of a fresh one, as a message would be
    return 200, JSON_HEADERS, orjson.dumps({"input_tokens": await core.once_more_if_wedged(count)})
