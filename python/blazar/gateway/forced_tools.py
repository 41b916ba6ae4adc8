"""Forced tool calls on any model: when a client forces a tool and the engine's chat template cannot emit tool
calls, the generation is constrained with a JSON schema built from the tools and the result is returned as a
well-formed tool call in the caller's dialect, streamed or not.

It owns the engine-capability probe (llama-server's ``/props`` ``chat_template_caps`` and template: tool calls and
thinking, cached per child), how each dialect forces a call, the constrained engine request, and for a whole
answer the synthetic OpenAI completion that the native translators then render. A streamed answer is the
constrained generation relayed as it comes, its JSON turned into tool-call deltas natively
(``StreamTranslator``'s ``forced_call``).
"""

from __future__ import annotations

import os
import re
import time
import weakref
from typing import Any

import orjson

from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import proxy
from blazar.gateway.http import HttpError
from blazar.supervisor import Child, Supervisor


async def template_emits_tool_calls(sup: Supervisor, child: Child) -> bool:
    """Whether the child's chat template can produce tool calls. Other engines (sglang, mlx-lm, mistral.rs) take
    ``tool_choice`` themselves and are trusted to."""
    return (await _template_caps(sup, child))[0]


async def template_thinks(sup: Supervisor, child: Child) -> bool:
    """Whether the child's chat template has a thinking (reasoning) section to turn on or off: it mentions
    thinking, or llama-server says it takes a reasoning effort. Other engines are trusted to."""
    return (await _template_caps(sup, child))[1]


_TEMPLATES: weakref.WeakKeyDictionary[Child, tuple[bool, bool]] = weakref.WeakKeyDictionary()
"""(tool calls, thinking) per running child, as its ``/props`` said; a restarted engine is a new child."""


async def _template_caps(sup: Supervisor, child: Child) -> tuple[bool, bool]:
    """(tool calls, thinking) of the child's chat template, from llama-server's ``/props``, asked once per child."""
    if not child.spec.can.template_props:
        return True, True
    known = _TEMPLATES.get(child)
    if known is None:
        known = _TEMPLATES[child] = await _read_props(sup, child)
    return known


async def _read_props(sup: Supervisor, child: Child) -> tuple[bool, bool]:
    """What llama-server's ``/props`` says of the child's chat template: (tool calls, thinking)."""
    with sup.lease(child):  # in flight: a concurrent num_ctx restart waits for it instead of stopping it
        _s, data, _c = await proxy.get_whole(sup, child, "/props")
    props = orjson.loads(data)
    caps = props.get("chat_template_caps") or {}
    template = props.get("chat_template")
    thinks = bool(caps.get("supports_reasoning_effort")) or (
        isinstance(template, str) and "think" in template.lower()
    )
    return bool(caps.get("supports_tool_calls")), thinks


def asks_to_think(canon: CanonicalRequest) -> bool:
    """Whether the request turns thinking on (Ollama's think, a reasoning effort other than none)."""
    kwargs = canon.params.get("chat_template_kwargs")
    effort = canon.params.get("reasoning_effort")
    return (isinstance(kwargs, dict) and kwargs.get("enable_thinking") is True) or effort in (
        "low",
        "medium",
        "high",
        "xhigh",
        "max",
    )


_THINK_FIELD = {"openai": "reasoning_effort", "anthropic": "thinking", "responses": "reasoning"}


def think_field(translator: str, canon: CanonicalRequest) -> str:
    """The request field that turned thinking on, in the caller's dialect (Ollama's is ``think``); an OpenAI
    request may have sent llama-server's own ``chat_template_kwargs`` instead of ``reasoning_effort``."""
    if translator == "openai" and canon.params.get("reasoning_effort") is None:
        return "chat_template_kwargs.enable_thinking"
    return _THINK_FIELD.get(translator, "think")


_FORCE_A_CALL = {
    "openai": "send tool_choice required, or name a tool, to have Blazar force a call; send tool_choice none to"
    " leave them unused",
    "responses": 'send tool_choice "required", or {"type": "function", "name": ...}, to have Blazar force a call;'
    ' send tool_choice "none" to leave them unused',
    "anthropic": 'send tool_choice {"type": "any"}, or {"type": "tool", "name": ...}, to have Blazar force a call;'
    ' send {"type": "none"} to leave them unused',
    "ollama_chat": "send the request without tools (the OpenAI endpoint, /v1/chat/completions, can force a call"
    " with tool_choice required)",
}


def no_tools_here(model: str, translator: str) -> str:
    """The 400 for tools a model may call (``auto``) whose chat template cannot show them: Ollama's words first,
    which its clients match, then the fix in the caller's dialect. Neither serving them unseen (the bare engine's
    way: the model never calls one) nor a prompt Blazar renders (SmolLM2 then called a tool for 4 of 5 questions
    needing none, and pydantic-ai's agent looped to its request limit on 9 of 10) serves an agent, so it is told."""
    fix = _FORCE_A_CALL.get(translator, _FORCE_A_CALL["openai"])
    return (
        f"{model} does not support tools: its chat template cannot show them (llama-server's /props); give it one"
        f' that can with chat_template_file under [models."{model}"] in config.toml, or {fix}'
    )


def constrained_body(body: dict[str, Any], schema: dict[str, Any], *, stream: bool = False) -> dict[str, Any]:
    """The engine request without tools, its output constrained to ``{"name", "arguments"}`` of a forced tool;
    streamed (with the usage report the plan asks for) or whole."""
    drop = ("tools", "tool_choice", "response_format") + (() if stream else ("stream_options",))
    out = {k: v for k, v in body.items() if k not in drop}
    out["stream"] = stream
    out["response_format"] = {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}
    return out


def synthetic_completion(engine_body: bytes) -> dict[str, Any]:
    """The engine's constrained JSON answer turned into an OpenAI chat.completion carrying one tool call."""
    try:
        data = orjson.loads(engine_body)
        if isinstance(data, dict) and data.get("error") is not None:
            raise proxy.engine_error(502, engine_body)
        choice = data["choices"][0]
        content = choice["message"]["content"]
        if choice.get("finish_reason") == "length":
            # Cut off by max_tokens before the call was complete: say so as the APIs do, with the partial text.
            return _truncated(data, content)
        call = orjson.loads(content)
        name, arguments = call["name"], call["arguments"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise HttpError(
            502, "the engine's constrained tool-call output was not the JSON it was asked for", "engine_error"
        ) from None
    call_message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{os.urandom(12).hex()}",
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
            }
        ],
    }
    return _completion(data, call_message, "tool_calls")


_PARTIAL_CALL = re.compile(
    r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*(.*)', re.DOTALL
)


def _truncated(data: dict[str, Any], content: str) -> dict[str, Any]:
    """A call cut off by max_tokens, as the APIs give one: the tool call as far as it got (its name, once that was
    complete, and the arguments' JSON text so far), finish_reason "length"; never the ``{"name", "arguments"}``
    wrapper Blazar asked the engine for."""
    found = _PARTIAL_CALL.match(content)
    if found is None:  # not even the name yet
        return _completion(data, {"role": "assistant", "content": ""}, "length")
    call = {
        "id": f"call_{os.urandom(12).hex()}",
        "type": "function",
        "function": {"name": orjson.loads(found.group(1)), "arguments": found.group(2).rstrip()},
    }
    return _completion(data, {"role": "assistant", "content": None, "tool_calls": [call]}, "length")


def _completion(data: dict[str, Any], message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    """An OpenAI chat.completion with one choice, keeping the engine answer's id, model and usage."""
    return {
        "id": data.get("id") or f"chatcmpl-{os.urandom(8).hex()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": data.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": data.get("usage") or {},
    }
