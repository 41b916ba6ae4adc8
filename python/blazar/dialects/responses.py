"""OpenAI's Responses API (``POST /v1/responses``), request side: a Responses body into the canonical chat request,
and the request's members that every response object repeats (``CanonicalRequest.echo``).

Stateless, as Ollama's and LM Studio's Responses endpoints are: ``input`` carries the whole conversation (a string,
or message, ``function_call`` and ``function_call_output`` items), and what would need a stored response
(``previous_response_id``, ``conversation``, ``background``) is refused with a 400 that says so. The body becomes a
Chat Completions body that ``openai.parse_chat`` checks as it checks any chat request, so sampling, tool schemas
and structured outputs follow one set of rules; the checks here are of the Responses shapes themselves, and their
errors name the Responses fields. Part of the OpenAI spoke: imports ``openai`` and ``canonical`` only; pure.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from blazar.dialects import openai
from blazar.dialects.canonical import MAX_TOKENS, CanonicalRequest, DialectError, is_int, json_object, shown

_STATEFUL = {
    "previous_response_id": "Blazar keeps no responses: send the whole conversation in 'input'",
    "conversation": "Blazar keeps no conversations: send the whole conversation in 'input'",
    "prompt": "Blazar has no stored prompt templates: send the prompt in 'input' and 'instructions'",
}
_IGNORED = {
    "reasoning": "reasoning: a local model reasons as its chat template does; its reasoning comes back as a"
    " reasoning item",
    "include": "include: only the output items themselves are returned",
    "top_logprobs": "top_logprobs: log-probabilities are not returned by /v1/responses",
    "max_tool_calls": "max_tool_calls: the model's calls are returned to the client, which runs them",
    "truncation": "truncation: an input longer than the model's context is refused, not truncated",
}
# consumed here; every other member goes to the chat body as is (llama-server's own extras such as top_k)
_OWN = {
    "model", "input", "instructions", "stream", "max_output_tokens", "tools", "tool_choice", "text", "store",
    "metadata", "background", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
    "service_tier", "stream_options", *_STATEFUL, *_IGNORED,
}  # fmt: skip
_CHAT_ONLY = ("messages", "max_tokens", "max_completion_tokens", "response_format", "n", "stop")
_ROLES = ("user", "system", "developer", "assistant")


def parse_responses(body: Any) -> CanonicalRequest:
    """A /v1/responses body as a canonical chat request whose ``echo`` holds what its response objects repeat;
    DialectError 400 on anything malformed or stateful."""
    body = json_object(body)
    for name, why in _STATEFUL.items():
        if body.get(name) is not None:
            raise DialectError(400, f"'{name}' is not supported: {why}")
    if body.get("background") is True:
        raise DialectError(400, "'background' is not supported: a response is answered on its own request")
    for name in _CHAT_ONLY:
        if name in body:
            raise DialectError(400, _chat_field(name))
    chat: dict[str, Any] = {k: v for k, v in body.items() if k not in _OWN}
    chat["model"] = body.get("model")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise DialectError(400, f"'instructions' must be a string, got {shown(instructions)}")
    messages = [{"role": "system", "content": instructions}] if instructions else []
    origins = Origins(["instructions"] if instructions else [])
    messages += _input(body.get("input"), "input" in body, origins)
    chat["messages"] = messages
    if "stream" in body:
        chat["stream"] = body["stream"]
    limit = body.get("max_output_tokens")
    if limit is not None:
        if not is_int(limit) or not 1 <= limit <= MAX_TOKENS:
            raise DialectError(
                400,
                f"'max_output_tokens' must be an integer from 1 to {MAX_TOKENS}, got {shown(limit)}; omit it for"
                " no limit",
            )
        chat["max_tokens"] = limit
    tools = _tools(body.get("tools"))
    if tools is not None:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = _format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    metadata = openai.metadata(body.get("metadata"))
    _check_types(body)
    try:
        canon = openai.parse_chat(chat)
    except (
        DialectError
    ) as e:  # its checks name the Chat Completions body built here: say the Responses fields
        raise DialectError(e.status, origins.responses_words(e.message)) from None
    canon.include_usage = canon.stream  # a response object always carries its usage
    canon.notes += [note for name, note in _IGNORED.items() if body.get(name) is not None]
    if body.get("store") is True:
        canon.notes.append("store: Blazar keeps no responses; each request carries its whole conversation")
    canon.echo = _echo(body, instructions, metadata)
    return canon


class Origins:
    """Where each message of the Chat Completions body came from (``instructions``, ``input[3]``), and each
    assistant tool call (the ``function_call`` item), so its checks' messages can name the Responses fields."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = messages
        self.calls: dict[tuple[int, int], str] = {}

    def responses_words(self, message: str) -> str:
        def call(m: re.Match[str]) -> str:
            origin = self.calls.get((int(m[1]), int(m[2])), f"input (message {m[1]}, call {m[2]})")
            return origin + (
                ".call_id" if m[3] == ".id" else "." + m[3].removeprefix(".function.") if m[3] else ""
            )

        def origin(m: re.Match[str]) -> str:
            i = int(m[1])
            return self.messages[i] if i < len(self.messages) else f"input (message {i})"

        text = _MESSAGE.sub(origin, _CALL.sub(call, message))
        for chat, responses in _CHAT_WORDS:
            text = text.replace(chat, responses)
        return text


_CALL = re.compile(r"messages\[(\d+)\]\.tool_calls\[(\d+)\](\.id|\.function\.\w+)?")
_MESSAGE = re.compile(r"messages\[(\d+)\]")
_CHAT_WORDS = (
    ("response_format.json_schema.", "text.format."),
    ("response_format", "text.format"),
    (".function.", "."),  # tools[i].function.name -> tools[i].name
    ('{"type": "function", "function": {"name": ...}}', '{"type": "function", "name": ...}'),
    # content part types, as the chat parts made of them are named
    (
        'one of "text", "image_url", "input_audio", "input_video" here',
        'one of "input_text", "input_image" here',
    ),
    ('one of "text", "refusal" here', 'one of "output_text", "refusal" here'),
    ('one of "text" here', 'one of "input_text" here'),
    ('got string "image_url"', 'got string "input_image"'),
    ('got string "text"', 'got string "input_text"'),
    ("'max_completion_tokens'", "'max_output_tokens'"),
    ("'max_tokens'", "'max_output_tokens'"),
)


_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "user": (str, "a string"),
    "safety_identifier": (str, "a string"),
    "prompt_cache_key": (str, "a string"),
    "service_tier": (str, "a string"),
    "store": (bool, "a boolean"),
    "background": (bool, "a boolean"),
    "parallel_tool_calls": (bool, "a boolean"),
    "reasoning": (dict, "an object"),
    "include": (list, "an array of strings"),
    "stream_options": (dict, "an object"),
    "text": (dict, "an object"),
}


def _check_types(body: dict[str, Any]) -> None:
    """The Responses members this module takes or repeats, type-checked (what is repeated must be valid)."""
    for name, (kind, what) in _TYPES.items():
        value = body.get(name)
        if value is not None and not isinstance(value, kind):
            raise DialectError(400, f"'{name}' must be {what}, got {shown(value)}")
    truncation = body.get("truncation")
    if truncation is not None and truncation not in ("auto", "disabled"):
        raise DialectError(400, f'\'truncation\' must be "auto" or "disabled", got {shown(truncation)}')
    verbosity = (body.get("text") or {}).get("verbosity")
    if verbosity is not None and verbosity not in ("low", "medium", "high"):
        raise DialectError(
            400, f'\'text.verbosity\' must be "low", "medium" or "high", got {shown(verbosity)}'
        )


def _chat_field(name: str) -> str:
    fixes = {
        "messages": "send the conversation as 'input' (and a system prompt as 'instructions')",
        "max_tokens": "send 'max_output_tokens'",
        "max_completion_tokens": "send 'max_output_tokens'",
        "response_format": "send text.format",
        "n": "the Responses API makes one answer per request",
        "stop": "the Responses API has no stop sequences; use /v1/chat/completions for them",
    }
    return f"'{name}' is a Chat Completions field, not a Responses API one: {fixes[name]}"


def _echo(body: dict[str, Any], instructions: str | None, metadata: dict[str, Any] | None) -> str:
    """The members every response object repeats, as JSON object members without braces."""
    echo = {
        "instructions": instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": metadata or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "previous_response_id": None,
        "store": False,
        "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "truncation": "disabled",
        "user": body.get("user"),
    }
    return orjson.dumps(echo)[1:-1].decode()


# ---------------------------------------------------------------------------------------------------------------
# input


def _input(value: Any, given: bool, origins: Origins) -> list[dict[str, Any]]:
    if isinstance(value, str):
        if not value:
            raise DialectError(400, "'input' must not be empty")
        origins.messages.append("input")
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        got = shown(value) if given else "nothing"
        raise DialectError(
            400,
            "'input' is required: a string, or a non-empty array of message, function_call and"
            f" function_call_output items, got {got}",
        )
    messages: list[dict[str, Any]] = []
    first = len(origins.messages)  # the messages before the input's (instructions)
    calls: dict[str, str] = {}  # call_id -> the function_call item still waiting for its output
    for i, item in enumerate(value):
        at = f"input[{i}]"
        if not isinstance(item, dict):
            raise DialectError(400, f"{at} must be an object (an input item), got {shown(item)}")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(item, at))
            origins.messages.append(at)
        elif kind == "function_call":
            if _function_call(item, at, messages):
                origins.messages.append(at)
            last = messages[-1]
            origins.calls[(first + len(messages) - 1, len(last["tool_calls"]) - 1)] = at
            if item["call_id"] in calls:
                raise DialectError(
                    400, f"{at}.call_id {shown(item['call_id'])} is the call_id of {calls[item['call_id']]}"
                )
            calls[item["call_id"]] = at
        elif kind == "function_call_output":
            output = _function_output(item, at)
            if calls.pop(output["tool_call_id"], None) is None:
                raise DialectError(
                    400,
                    f"{at} is the output of call_id {shown(output['tool_call_id'])}, but no function_call item before"
                    " it has that call_id (or its output came already)",
                )
            messages.append(output)
            origins.messages.append(at)
        elif kind == "reasoning":
            continue  # an earlier turn's reasoning: the chat template leaves it out of the prompt too
        elif kind == "item_reference":
            raise DialectError(400, f"{at} is an item_reference: Blazar keeps no items; send the item itself")
        else:
            raise DialectError(
                400,
                f"{at} has type {shown(kind)}; Blazar takes message, function_call and function_call_output"
                " items (and reasoning items, which it leaves out)",
            )
    if not messages:
        raise DialectError(400, "'input' holds no message: add at least one")
    if calls:
        waiting = next(iter(calls.values()))
        raise DialectError(
            400,
            f"{waiting} is a function_call with no function_call_output after it: run the function and send its"
            " output (type function_call_output, the same call_id) after the call",
        )
    return messages


def _message(item: dict[str, Any], at: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise DialectError(400, f"{at}.role must be one of {', '.join(_ROLES)}, got {shown(role)}")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise DialectError(
            400, f"{at}.content must be a string or an array of content parts, got {shown(content)}"
        )
    return {"role": role, "content": [_part(p, f"{at}.content[{j}]") for j, p in enumerate(content)]}


def _part(part: Any, at: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise DialectError(400, f"{at} must be an object (a content part), got {shown(part)}")
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise DialectError(400, f"{at}.text must be a string, got {shown(text)}")
        return {"type": "text", "text": text}
    if kind == "refusal":
        refusal = part.get("refusal")
        if not isinstance(refusal, str):
            raise DialectError(400, f"{at}.refusal must be a string, got {shown(refusal)}")
        return {"type": "refusal", "refusal": refusal}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            why = (
                "a file_id names a stored file, and Blazar keeps none"
                if part.get("file_id")
                else "it is missing"
            )
            raise DialectError(400, f"{at}.image_url must be the image's URL or data: URL ({why})")
        return {"type": "image_url", "image_url": {"url": url}}
    raise DialectError(
        400,
        f"{at} has type {shown(kind)}; Blazar takes input_text, output_text, refusal and input_image parts",
    )


def _function_call(item: dict[str, Any], at: str, messages: list[dict[str, Any]]) -> bool:
    """Adds the call to the assistant turn it belongs to; whether that made a new message."""
    for name in ("call_id", "name", "arguments"):
        value = item.get(name)
        if not isinstance(value, str) or (name != "arguments" and not value):
            raise DialectError(400, f"{at}.{name} must be a non-empty string, got {shown(value)}")
    call = {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": item["arguments"]},
    }
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)  # one assistant turn: its text, then its calls
        return False
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    return True


def _function_output(item: dict[str, Any], at: str) -> dict[str, Any]:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise DialectError(400, f"{at}.call_id must be the call's id, got {shown(call_id)}")
    output = item.get("output")
    if isinstance(output, list):
        parts = [_part(p, f"{at}.output[{j}]") for j, p in enumerate(output)]
        if any(p["type"] != "text" for p in parts):
            raise DialectError(400, f"{at}.output may hold text parts only")
        output = "".join(p["text"] for p in parts)
    if not isinstance(output, str):
        raise DialectError(
            400, f"{at}.output must be a string or an array of input_text parts, got {shown(output)}"
        )
    return {"role": "tool", "tool_call_id": call_id, "content": output}


# ---------------------------------------------------------------------------------------------------------------
# tools and text.format


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise DialectError(400, f"'tools' must be an array of function tools, got {shown(value)}")
    tools = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise DialectError(
                400,
                f"tools[{i}] is {shown(kind) if kind else shown(tool)}: Blazar serves function tools (type"
                " 'function'); built-in tools such as web_search run on OpenAI's servers",
            )
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        tools.append({"type": "function", "function": fn})
    return tools


def _tool_choice(value: Any) -> Any:
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    raise DialectError(
        400,
        '\'tool_choice\' must be "auto", "none", "required" or {"type": "function", "name": ...},'
        f" got {shown(value)}",
    )


def _format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise DialectError(400, f"'text' must be an object, got {shown(text)}")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise DialectError(400, f"'text.format' must be an object, got {shown(fmt)}")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        name = fmt.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise DialectError(
                400,
                f"'text.format.name' must name the format: 1-64 letters, digits, '_' or '-', got {shown(name)}",
            )
        if not isinstance(fmt.get("schema"), dict):
            raise DialectError(
                400, f"'text.format.schema' must be a JSON schema object, got {shown(fmt.get('schema'))}"
            )
        if "strict" in fmt and not isinstance(fmt["strict"], bool | None):
            raise DialectError(400, f"'text.format.strict' must be a boolean, got {shown(fmt['strict'])}")
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise DialectError(
        400, f'\'text.format.type\' must be "text", "json_object" or "json_schema", got {shown(kind)}'
    )
