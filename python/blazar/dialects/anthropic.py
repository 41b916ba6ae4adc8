"""The Anthropic dialect, request side: /v1/messages and /v1/messages/count_tokens bodies into the canonical
request, and the Anthropic error body.

Mapping: ``system`` (a string or text blocks) becomes the first system message; content blocks become OpenAI
messages: text and images (base64 -> data URI, url -> URL) as content parts, assistant ``tool_use`` as
``tool_calls`` with JSON-string arguments, user ``tool_result`` as ``tool`` messages placed before the rest of that
turn, ``thinking`` as ``reasoning_content``. Consecutive turns of one role are combined into one, as the Messages API
does. Tools with ``input_schema`` become function tools; ``tool_choice`` auto/any/tool/none becomes
"auto"/"required"/a named function/"none"; ``stop_sequences`` becomes ``stop``, with llama-server's ``verbose``
and ``response_fields`` so that the response says which stop sequence matched. ``max_tokens`` is required.
Error messages follow the API's ``field.path: problem`` form. Imports only ``canonical``; pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from blazar.dialects.canonical import (
    MAX_TOKENS,
    CanonicalRequest,
    DialectError,
    image_data_uri,
    is_int,
    is_number,
    json_object,
    parse_duration,
    shown,
)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",  # not in Anthropic's list: a busy 503 goes out as 529 (gateway.app.wire_status)
    504: "timeout_error",
    529: "overloaded_error",
}

_IGNORED = ("service_tier", "container", "mcp_servers", "context_management", "inference_geo", "betas")
_SHARED_KEYS = {
    "model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "output_format",
    "keep_alive", *_IGNORED,
}  # fmt: skip
_MESSAGES_KEYS = _SHARED_KEYS | {
    "max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata",
}  # fmt: skip
_USER_BLOCKS = ("text", "image", "document", "tool_result")
_ASSISTANT_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")


# ---------------------------------------------------------------------------------------------------------------
# Public API


def parse_messages(body: Any) -> CanonicalRequest:
    """A /v1/messages body as a canonical chat request; DialectError 400 (Anthropic wording) when malformed."""
    body = json_object(body)
    if body.get("max_tokens") is None:
        raise DialectError(400, "max_tokens: Field required")
    max_tokens = body["max_tokens"]
    if not is_int(max_tokens) or max_tokens < 1:
        raise DialectError(
            400, f"max_tokens: Input should be an integer greater than or equal to 1, got {shown(max_tokens)}"
        )
    if max_tokens > MAX_TOKENS:
        raise DialectError(
            400, f"max_tokens: Input should be less than or equal to {MAX_TOKENS}, got {shown(max_tokens)}"
        )
    req = _parse(body, _MESSAGES_KEYS)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise DialectError(400, f"stream: Input should be a valid boolean, got {shown(stream)}")
    req.stream = bool(stream)
    req.include_usage = req.stream
    req.params["max_tokens"] = max_tokens
    for key, ok, what, low, high in (
        ("temperature", is_number, "a valid number", 0, 1),
        ("top_p", is_number, "a valid number", 0, 1),
        ("top_k", is_int, "a valid integer", 0, None),
    ):
        value = body.get(key)
        if value is None:
            continue
        if not ok(value):
            raise DialectError(400, f"{key}: Input should be {what}, got {shown(value)}")
        if value < low or (high is not None and value > high):  # the API's own ranges
            bound = f"between {low} and {high}" if high is not None else f"greater than or equal to {low}"
            raise DialectError(400, f"{key}: Input should be {bound}, got {shown(value)}")
        req.params[key] = value
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise DialectError(400, f"stop_sequences: Input should be a list of strings, got {shown(stops)}")
        stops = [
            s for s in stops if s
        ]  # an empty one would end every answer at once: dropped, as stop_list does
        if stops:
            req.params["stop"] = list(stops)
            # llama-server's OpenAI output only says finish_reason "stop"; `verbose` adds a `__verbose` object to
            # the final result, trimmed by `response_fields` to {"stop_type": "word", "stopping_word": ...}, which
            # the native translator turns into stop_reason "stop_sequence" and never passes to a client.
            req.params["verbose"] = True
            req.params["response_fields"] = ["stop_type", "stopping_word"]
    metadata = body.get("metadata")
    if metadata is not None:
        _metadata(metadata)
        req.notes.append("metadata is accepted and not used")
    return req


def parse_count_tokens(body: Any) -> CanonicalRequest:
    """A /v1/messages/count_tokens body (the Messages shape without max_tokens) as a canonical chat request."""
    body = json_object(body)
    return _parse(body, _SHARED_KEYS)


def render_error(status: int, message: str, request_id: str | None = None) -> bytes:
    """``{"type": "error", "error": {"type", "message"}}`` with the API's error type for the status (other 4xx are
    invalid_request_error, other 5xx api_error), plus ``request_id`` when one is given."""
    kind = _ERROR_TYPES.get(status) or ("invalid_request_error" if 400 <= status < 500 else "api_error")
    out: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    if request_id is not None:
        out["request_id"] = request_id
    return orjson.dumps(out)


# ---------------------------------------------------------------------------------------------------------------
# The shared request shape


@dataclass(slots=True)
class _State:
    notes: list[str] = field(default_factory=list)
    tool_names: dict[str, str] = field(default_factory=dict)
    cache_control: bool = False
    system: list[str] = field(default_factory=list)
    """Text of ``system`` messages inside ``messages`` (Claude Code sends them), added to the system prompt."""


def _parse(body: dict[str, Any], known: set[str]) -> CanonicalRequest:
    model = body.get("model")
    if model is None:
        raise DialectError(400, "model: Field required")
    if not isinstance(model, str) or not model:
        raise DialectError(400, f"model: Input should be a non-empty string, got {shown(model)}")
    if body.get("messages") is None:
        raise DialectError(400, "messages: Field required")
    state = _State()
    turns = _messages(body["messages"], state)
    messages = _system(body.get("system"), state) + turns
    tools = _tools(body.get("tools"), state)
    req = CanonicalRequest(model=model, kind="chat", messages=messages, tools=tools, notes=state.notes)
    req.tool_choice = _tool_choice(body.get("tool_choice"), tools, req.params)
    _thinking(body.get("thinking"), req)
    req.response_format = _output_format(body)
    req.keep_alive = parse_duration(body.get("keep_alive"))
    for key in body:
        if key in _IGNORED:
            _check_ignored(key, body[key])
            state.notes.append(f"{key} is accepted and not used by a local engine")
        elif key not in known:
            state.notes.append(f"{key} is not a Messages API field Blazar knows and is ignored")
    if state.cache_control:
        state.notes.append("cache_control is ignored: the engine reuses its prompt cache by itself")
    return req


def _system_texts(value: Any, at: str, state: _State) -> list[str]:
    """A system prompt's texts: a string, or a list of text blocks."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise DialectError(
            400, f"{at}: Input should be a string or a list of text blocks, got {shown(value)}"
        )
    texts = []
    for i, block in enumerate(value):
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            raise DialectError(400, f'{at}.{i}: Input should be a text block {{"type": "text", "text": ...}}')
        state.cache_control |= "cache_control" in block
        texts.append(block["text"])
    return texts


def _system(value: Any, state: _State) -> list[dict[str, Any]]:
    texts = _system_texts(value, "system", state) if value is not None else []
    text = "\n".join(t for t in (*texts, *state.system) if t)
    return [{"role": "system", "content": text}] if text else []


_SERVICE_TIERS = ("auto", "standard_only")


def _check_ignored(key: str, value: Any) -> None:
    """An accepted-and-unused field still has the API's type, as a client written against the API sends it."""
    if key == "service_tier" and value is not None and value not in _SERVICE_TIERS:
        raise DialectError(
            400, f"service_tier: Input should be 'auto' or 'standard_only', got {shown(value)}"
        )


def _metadata(value: Any) -> None:
    if not isinstance(value, dict):
        raise DialectError(400, f"metadata: Input should be an object, got {shown(value)}")
    for key, item in value.items():
        if key != "user_id":
            raise DialectError(400, f"metadata.{key}: Extra inputs are not permitted (only user_id is)")
        if item is not None and not isinstance(item, str):
            raise DialectError(400, f"metadata.user_id: Input should be a valid string, got {shown(item)}")


_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")


def _tools(value: Any, state: _State) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise DialectError(400, f"tools: Input should be a list of tools, got {shown(value)}")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise DialectError(400, f"tools.{i}: Input should be an object, got {shown(tool)}")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise DialectError(
                400,
                f"tools.{i}.type: {shown(kind)} is an Anthropic-hosted tool that a local engine cannot run; "
                "declare it as a custom tool with a name, description and input_schema",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise DialectError(400, f"tools.{i}.name: Field required (a non-empty string), got {shown(name)}")
        if not _TOOL_NAME.fullmatch(name):
            raise DialectError(
                400,
                f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$', got {shown(name)}",
            )
        if name in seen:
            raise DialectError(400, f"tools: Tool names must be unique; '{name}' is given twice")
        seen.add(name)
        schema = tool.get("input_schema")
        if schema is None:
            raise DialectError(400, f"tools.{i}.input_schema: Field required")
        if not isinstance(schema, dict):
            raise DialectError(
                400, f"tools.{i}.input_schema: Input should be a JSON schema object, got {shown(schema)}"
            )
        desc = tool.get("description")
        if desc is not None and not isinstance(desc, str):
            raise DialectError(400, f"tools.{i}.description: Input should be a string, got {shown(desc)}")
        state.cache_control |= "cache_control" in tool
        fn: dict[str, Any] = {"name": name}
        if desc:
            fn["description"] = desc
        fn["parameters"] = schema
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None, params: dict[str, Any]) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise DialectError(400, f"tool_choice: Input should be an object with a type, got {shown(value)}")
    kind = value.get("type")
    names = [t["function"]["name"] for t in tools or []]
    parallel = value.get("disable_parallel_tool_use")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise DialectError(
                400,
                f"tool_choice.disable_parallel_tool_use: Input should be a valid boolean, got {shown(parallel)}",
            )
        params["parallel_tool_calls"] = not parallel
    if kind == "auto":
        return "auto"
    if kind == "none":
        return "none"
    if kind == "any":
        if not names:
            raise DialectError(400, 'tool_choice: {"type": "any"} needs at least one tool in tools')
        return "required"
    if kind == "tool":
        name = value.get("name")
        if not isinstance(name, str) or not name:
            raise DialectError(400, 'tool_choice.name: Field required when type is "tool"')
        if name not in names:
            raise DialectError(
                400,
                f"tool_choice.name: {name!r} is not one of the tools given ({', '.join(names) or 'none'})",
            )
        return {"type": "function", "function": {"name": name}}
    raise DialectError(
        400, f"tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none', got {shown(kind)}"
    )


def _thinking(value: Any, req: CanonicalRequest) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise DialectError(
            400,
            f"thinking: Input should be an object with a 'type' ('enabled', 'disabled' or 'adaptive'), got {shown(value)}",
        )
    kind = value.get("type")
    if kind == "enabled":
        req.params["chat_template_kwargs"] = {"enable_thinking": True}
        budget = value.get("budget_tokens")
        if budget is not None and not is_int(budget):
            raise DialectError(
                400, f"thinking.budget_tokens: Input should be a valid integer, got {shown(budget)}"
            )
        if budget is not None:
            req.notes.append("thinking.budget_tokens is not applied: the engine thinks within max_tokens")
    elif kind == "disabled":
        req.params["chat_template_kwargs"] = {"enable_thinking": False}
        req.params["reasoning_effort"] = "none"
    elif kind != "adaptive":
        raise DialectError(
            400, f"thinking.type: Input should be 'enabled', 'disabled' or 'adaptive', got {shown(kind)}"
        )


def _output_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """Structured outputs: output_config.format (or the older output_format) as a json_schema response_format."""
    config = body.get("output_config")
    spec, where = body.get("output_format"), "output_format"
    if isinstance(config, dict) and config.get("format") is not None:
        spec, where = config["format"], "output_config.format"
    elif config is not None and not isinstance(config, dict):
        raise DialectError(400, f"output_config: Input should be an object, got {shown(config)}")
    if spec is None:
        return None
    if (
        not isinstance(spec, dict)
        or spec.get("type") != "json_schema"
        or not isinstance(spec.get("schema"), dict)
    ):
        raise DialectError(
            400, f'{where}: Input should be {{"type": "json_schema", "schema": {{...}}}}, got {shown(spec)}'
        )
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": spec["schema"]}}


# ---------------------------------------------------------------------------------------------------------------
# Messages


def _messages(value: Any, state: _State) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise DialectError(400, f"messages: Input should be a list of messages, got {shown(value)}")
    if not value:
        raise DialectError(400, "messages: at least one message is required")
    turns: list[tuple[str, list[tuple[Any, str]]]] = []
    for i, msg in enumerate(value):
        if not isinstance(msg, dict):
            raise DialectError(400, f"messages.{i}: Input should be an object, got {shown(msg)}")
        role = msg.get("role")
        # Anthropic's API refuses a system message; Claude Code sends one: its text joins the system prompt
        if role == "system":
            if msg.get("content") is None:
                raise DialectError(400, f"messages.{i}.content: Field required")
            state.system.extend(_system_texts(msg["content"], f"messages.{i}.content", state))
            continue
        if role not in ("user", "assistant"):
            raise DialectError(
                400, f"messages.{i}.role: Input should be 'user' or 'assistant', got {shown(role)}"
            )
        content = msg.get("content")
        if content is None:
            raise DialectError(400, f"messages.{i}.content: Field required")
        if isinstance(content, str):
            blocks = [({"type": "text", "text": content}, f"messages.{i}.content")]
        elif isinstance(content, list):
            blocks = [(b, f"messages.{i}.content.{j}") for j, b in enumerate(content)]
        else:
            raise DialectError(
                400,
                f"messages.{i}.content: Input should be a string or a list of content blocks, got {shown(content)}",
            )
        if (content == "" or content == []) and not (role == "assistant" and i == len(value) - 1):
            raise DialectError(
                400,
                f"messages.{i}: all messages must have non-empty content except for the optional final assistant"
                " message",
            )
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)  # consecutive turns of one role are one turn
        else:
            turns.append((role, blocks))
    if not turns:
        raise DialectError(400, "messages: at least one user or assistant message is required")
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        out.extend(_assistant(blocks, state) if role == "assistant" else _user(blocks, state))
    return out


def _block(block: Any, at: str, allowed: tuple[str, ...], state: _State) -> str:
    if not isinstance(block, dict):
        raise DialectError(400, f"{at}: Input should be a content block object, got {shown(block)}")
    kind = block.get("type")
    if kind not in allowed:
        raise DialectError(
            400,
            f"{at}.type: Input should be one of {', '.join(repr(a) for a in allowed)} here, got {shown(kind)}",
        )
    state.cache_control |= "cache_control" in block
    return str(kind)


def _text(block: dict[str, Any], at: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise DialectError(400, f"{at}.text: Input should be a valid string, got {shown(text)}")
    return text


def _assistant(blocks: list[tuple[Any, str]], state: _State) -> list[dict[str, Any]]:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for block, at in blocks:
        kind = _block(block, at, _ASSISTANT_BLOCKS, state)
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "thinking":
            value = block.get("thinking")
            if not isinstance(value, str):
                raise DialectError(400, f"{at}.thinking: Input should be a valid string, got {shown(value)}")
            thinking.append(value)
        elif kind == "redacted_thinking":
            state.notes.append(
                "redacted_thinking blocks are dropped: only the API that wrote them can read them"
            )
        else:
            calls.append(_tool_use(block, at, state))
    msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    if thinking:
        msg["reasoning_content"] = "\n".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return [msg]


def _tool_use(block: dict[str, Any], at: str, state: _State) -> dict[str, Any]:
    call_id, name, args = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not call_id:
        raise DialectError(400, f"{at}.id: Field required (the tool_use id), got {shown(call_id)}")
    if not isinstance(name, str) or not name:
        raise DialectError(400, f"{at}.name: Field required (the tool's name), got {shown(name)}")
    if not isinstance(args, dict):
        raise DialectError(400, f"{at}.input: Input should be an object of arguments, got {shown(args)}")
    state.tool_names[call_id] = name
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(args).decode()},
    }


def _user(blocks: list[tuple[Any, str]], state: _State) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block, at in blocks:
        kind = _block(block, at, _USER_BLOCKS, state)
        if kind == "tool_result":
            results.append(_tool_result(block, at, state))
        else:
            parts.extend(_part(block, kind, at, state))
    out = results
    if parts or not results:
        out.append({"role": "user", "content": _flatten(parts)})
    return out


def _part(block: dict[str, Any], kind: str, at: str, state: _State) -> list[dict[str, Any]]:
    if kind == "text":
        return [{"type": "text", "text": _text(block, at)}]
    if kind == "image":
        return [_image(block, at)]
    # document: plain-text sources become text; PDFs need a document reader the engine does not have
    source = block.get("source")
    unused = [key for key in ("title", "context", "citations") if block.get(key) is not None]
    if unused:
        state.notes.append(f"document {', '.join(unused)} not shown to the model: only its text is")
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        return [{"type": "text", "text": source["data"]}]
    if isinstance(source, dict) and source.get("type") == "content":
        content = source.get("content")
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise DialectError(
                400,
                f"{at}.source.content: Input should be a string or a list of blocks, got {shown(content)}",
            )
        out: list[dict[str, Any]] = []
        for k, inner in enumerate(content):
            where = f"{at}.source.content.{k}"
            if _block(inner, where, ("text", "image"), state) == "text":
                out.append({"type": "text", "text": _text(inner, where)})
            else:
                out.append(_image(inner, where))
        return out
    raise DialectError(
        400,
        f"{at}.source: only plain-text documents can be read by a local engine; "
        "extract the document's text and send it as a text block",
    )


def _image(block: dict[str, Any], at: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": _image_url(block.get("source"), f"{at}.source")}}


def _image_url(source: Any, at: str) -> str:
    if not isinstance(source, dict):
        raise DialectError(400, f"{at}: Field required (an image source object)")
    kind = source.get("type")
    if kind == "base64":
        media = source.get("media_type")
        if not isinstance(media, str) or not media.startswith("image/"):
            raise DialectError(
                400,
                f"{at}.media_type: Input should be an image media type like 'image/png', got {shown(media)}",
            )
        return image_data_uri(source.get("data"), f"{at}.data", media)
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str) or not url:
            raise DialectError(400, f"{at}.url: Field required (the image's URL), got {shown(url)}")
        return url
    if kind == "file":
        raise DialectError(
            400, f"{at}: file sources need the Files API, which Blazar does not serve; send base64 data"
        )
    raise DialectError(400, f"{at}.type: Input should be 'base64' or 'url', got {shown(kind)}")


def _tool_result(block: dict[str, Any], at: str, state: _State) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise DialectError(
            400, f"{at}.tool_use_id: Field required (the id of the tool_use it answers), got {shown(call_id)}"
        )
    content = block.get("content")
    parts: list[dict[str, Any]] = []
    if isinstance(content, str):
        parts.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for k, inner in enumerate(content):
            where = f"{at}.content.{k}"
            kind = _block(inner, where, ("text", "image", "document"), state)
            parts.extend(_part(inner, kind, where, state))
    elif content is not None:
        raise DialectError(
            400,
            f"{at}.content: Input should be a string or a list of text and image blocks, got {shown(content)}",
        )
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise DialectError(400, f"{at}.is_error: Input should be a valid boolean, got {shown(is_error)}")
    if is_error:
        parts.insert(0, {"type": "text", "text": "Error:"})
        note = "tool_result is_error is passed to the model as an 'Error:' line before the result"
        if note not in state.notes:
            state.notes.append(note)
    msg: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": _flatten(parts)}
    name = state.tool_names.get(call_id)
    if name is not None:
        msg["name"] = name
    return msg


def _flatten(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text-only content as one string (blocks joined by newlines); with images, the parts list."""
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts
