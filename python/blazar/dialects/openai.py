"""The OpenAI dialect, request side: /v1/chat/completions, /v1/completions and /v1/embeddings bodies into the
canonical request, and the OpenAI error body.

The canonical form is OpenAI's own, so parsing is validation plus a few normalisations: every documented parameter
and any extra field (llama-server reads its own extras such as ``top_k`` or ``mirostat``) passes through;
``max_completion_tokens`` becomes ``max_tokens``; ``stop`` becomes a list; the ``developer`` role becomes ``system``;
``keep_alive`` (a Blazar extension) is taken out. What the engine cannot do (``n`` > 1, ``best_of``, ``echo``)
is refused with a 400 that says so. Imports only ``canonical``; pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from blazar.dialects.canonical import (
    MAX_TOKENS,
    CanonicalRequest,
    DialectError,
    function_tools,
    is_int,
    is_number,
    json_object,
    parse_duration,
    shown,
    stop_list,
)

_NUMBER = (is_number, "a number")
_INT = (is_int, "an integer")
_BOOL: tuple[Callable[[Any], bool], str] = (lambda v: isinstance(v, bool), "a boolean")
_STR: tuple[Callable[[Any], bool], str] = (lambda v: isinstance(v, str), "a string")
_OBJECT: tuple[Callable[[Any], bool], str] = (lambda v: isinstance(v, dict), "an object")
_SCHEMA_NAME: tuple[Callable[[Any], bool], str] = (
    lambda v: isinstance(v, str) and re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", v) is not None,
    "a name of 1 to 64 letters, digits, '_' and '-'",
)

_TYPED: dict[str, tuple[Callable[[Any], bool], str]] = {
    # documented OpenAI parameters
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "presence_penalty": _NUMBER,
    "frequency_penalty": _NUMBER,
    "seed": _INT,
    "user": _STR,
    "metadata": _OBJECT,  # and OpenAI's bounds on chat (``metadata``)
    "store": _BOOL,
    "parallel_tool_calls": _BOOL,
    "logit_bias": (
        lambda v: isinstance(v, list) or (isinstance(v, dict) and all(_bias(k, b) for k, b in v.items())),
        "an object mapping token ids (as strings) to biases from -100 to 100",
    ),
    "reasoning_effort": (
        lambda v: v in ("none", "minimal", "low", "medium", "high", "xhigh"),
        '"none", "minimal", "low", "medium", "high" or "xhigh"',
    ),
    "service_tier": (
        lambda v: v in ("auto", "default", "flex", "scale", "priority"),
        '"auto", "default", "flex", "scale" or "priority"',
    ),
    "modalities": (
        lambda v: isinstance(v, list) and all(m in ("text", "audio") for m in v),
        'an array of "text" and "audio"',
    ),
    # llama-server extras
    "top_k": _INT,
    "min_p": _NUMBER,
    "typical_p": _NUMBER,
    "repeat_penalty": _NUMBER,
    "repeat_last_n": _INT,
    "mirostat": _INT,
    "mirostat_tau": _NUMBER,
    "mirostat_eta": _NUMBER,
    "n_keep": _INT,
    "n_probs": _INT,
    "min_keep": _INT,
    "dynatemp_range": _NUMBER,
    "dynatemp_exponent": _NUMBER,
    "xtc_probability": _NUMBER,
    "xtc_threshold": _NUMBER,
    "dry_multiplier": _NUMBER,
    "dry_base": _NUMBER,
    "dry_allowed_length": _INT,
    "dry_penalty_last_n": _INT,
    "ignore_eos": _BOOL,
    "cache_prompt": _BOOL,
    "grammar": _STR,
    "json_schema": _OBJECT,
    "chat_template_kwargs": _OBJECT,
    "reasoning_format": (
        lambda v: v in ("none", "auto", "deepseek", "deepseek-legacy"),
        '"none", "auto", "deepseek" or "deepseek-legacy"',
    ),
}


def metadata(value: Any) -> dict[str, str] | None:
    """OpenAI's ``metadata`` (Chat Completions and the Responses API): at most 16 string values of at most 512
    characters, keys of at most 64."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > 16:
        raise DialectError(
            400,
            "'metadata' must be an object of at most 16 keys, each a string value (keys up to 64 characters,"
            f" values up to 512), got {shown(value)}",
        )
    for k, v in value.items():
        if len(k) > 64 or not isinstance(v, str) or len(v) > 512:
            raise DialectError(
                400,
                f"'metadata.{k[:64]}' must be a string of at most 512 characters (keys up to 64 characters),"
                f" got {shown(v)}",
            )
    return value


def _bias(token: Any, bias: Any) -> bool:
    return isinstance(token, str) and token.isdigit() and is_number(bias) and -100 <= bias <= 100


_UNAPPLIED = {
    "prediction": "prediction: predicted outputs are not used to speed up the answer",
    "store": "store: Blazar keeps no completions",
    "metadata": "metadata: accepted and not used",
    "service_tier": "service_tier: a local engine has one tier",
    "web_search_options": "web_search_options: no web search runs here",
    "verbosity": "verbosity: the model's length follows the prompt and max_tokens",
}
"""OpenAI request fields llama-server does not read: accepted, and named in ``x-blazar-ignored``."""

_RANGES = {"temperature": (0, 2), "top_p": (0, 1), "presence_penalty": (-2, 2), "frequency_penalty": (-2, 2)}
"""OpenAI's bounds on its sampling parameters (it refuses values outside them)."""

_MESSAGE_STRINGS = ("name", "reasoning_content", "refusal")
_ROLES = ("system", "developer", "user", "assistant", "tool")
_USER_PARTS = ("text", "image_url", "input_audio", "input_video")
_ASSISTANT_PARTS = ("text", "refusal")

# fields the parsers consume themselves; everything else passes through in params
_CHAT_OWN = {
    "model", "messages", "stream", "stream_options", "tools", "tool_choice", "response_format", "n",
    "keep_alive", "max_tokens", "max_completion_tokens", "stop", "logprobs", "top_logprobs",
    "functions", "function_call",
}  # fmt: skip
_COMPLETION_OWN = {
    "model", "prompt", "stream", "stream_options", "n", "keep_alive", "max_tokens", "stop", "logprobs",
    "best_of", "echo", "suffix", "response_format",
}  # fmt: skip
MAX_LATE_CHUNKS = 2048
"""The most chunks one late_chunking request may have (OpenAI's bound on an embeddings request's inputs)."""

_EMBEDDING_OWN = {"model", "input", "keep_alive", "late_chunking"}


# ---------------------------------------------------------------------------------------------------------------
# Public API


def parse_chat(body: Any) -> CanonicalRequest:
    """A /v1/chat/completions body as a canonical chat request; DialectError 400 on anything malformed."""
    body = json_object(body)
    for legacy, modern in (("functions", "tools"), ("function_call", "tool_choice")):
        if body.get(legacy) is not None:
            raise DialectError(
                400,
                f"'{legacy}' is the deprecated function-calling API and is not supported; send '{modern}'",
            )
    stream = _flag(body, "stream")
    tools = function_tools(body.get("tools"))
    params = _params(body, _CHAT_OWN)
    _max_tokens(body, params, ("max_completion_tokens", "max_tokens"))
    alternatives = _logprobs_chat(body, params)
    metadata(body.get("metadata"))
    notes = [note for key, note in _UNAPPLIED.items() if body.get(key) not in (None, False)]
    if "audio" in (body.get("modalities") or ()) or body.get("audio") is not None:
        raise DialectError(
            400,
            "'modalities' asks for audio output, which local models do not make: send modalities [\"text\"]"
            " (or none), and no 'audio'",
        )
    return CanonicalRequest(
        model=_model(body),
        kind="chat",
        notes=notes,
        messages=_messages(body.get("messages")),
        stream=stream,
        params=params,
        tools=tools,
        tool_choice=_tool_choice(body.get("tool_choice"), tools),
        response_format=_response_format(body.get("response_format")),
        keep_alive=parse_duration(body.get("keep_alive")),
        include_usage=_include_usage(body, stream),
        alternatives=alternatives,
    )


def parse_completion(body: Any) -> CanonicalRequest:
    """A /v1/completions body as a canonical completion request (``suffix`` makes it fill-in-the-middle)."""
    body = json_object(body)
    prompt = body.get("prompt")
    if not _is_prompt(prompt):
        raise DialectError(
            400,
            f"'prompt' is required and must be a string, an array of strings or an array of token ids, "
            f"got {shown(prompt) if 'prompt' in body else 'nothing'}",
        )
    best_of = body.get("best_of")
    if best_of is not None and best_of != 1:
        raise DialectError(
            400,
            f"'best_of' is {shown(best_of)}, but the llama.cpp engine generates one candidate; send best_of=1",
        )
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise DialectError(400, f"'suffix' must be a string, got {shown(suffix)}")
    stream = _flag(body, "stream")
    echo = _echo(body, prompt, stream, suffix)
    params = _params(body, _COMPLETION_OWN)
    if echo and body.get("max_tokens") == 0:  # the prompt scored, nothing generated (as OpenAI took it)
        params["max_tokens"] = 0
    else:
        _max_tokens(body, params, ("max_tokens",))
    logprobs = body.get("logprobs")
    if logprobs is not None:
        if not is_int(logprobs) or logprobs < 0:
            raise DialectError(
                400,
                f"'logprobs' must be an integer from 0 (the number of top log-probabilities), got {shown(logprobs)}",
            )
        params["logprobs"] = logprobs
    return CanonicalRequest(
        model=_model(body),
        kind="completion",
        prompt=prompt,
        stream=stream,
        params=params,
        response_format=_response_format(body.get("response_format")),
        keep_alive=parse_duration(body.get("keep_alive")),
        include_usage=_include_usage(body, stream),
        suffix=suffix,
        echo_prompt=echo,
    )


def _echo(body: dict[str, Any], prompt: Any, stream: bool, suffix: str | None) -> bool:
    """Whether the completion repeats its prompt (with ``logprobs``, scored token by token), checked."""
    echo = _flag(body, "echo")
    if not echo:
        return False
    if stream:
        raise DialectError(400, "'echo' is answered whole: send stream false (or no echo)")
    if suffix is not None:
        raise DialectError(400, "'echo' and 'suffix' cannot be sent together: send one of them")
    n = body.get("n")
    if n is not None and n != 1:
        raise DialectError(400, f"'n' is {shown(n)}, but 'echo' scores one choice per prompt; send n=1")
    if isinstance(prompt, list) and (
        not prompt
        or (any(is_int(x) for x in prompt) and not all(is_int(x) for x in prompt))
        or any(x == "" or x == [] for x in prompt)
    ):
        raise DialectError(
            400,
            "with 'echo', 'prompt' must be a string, an array of token ids, or an array of non-empty strings or"
            f" arrays of token ids (each scored alone), got {shown(prompt)}",
        )
    if prompt == "":
        raise DialectError(400, "with 'echo', 'prompt' must not be empty: there is nothing to score")
    return True


def parse_embedding(body: Any) -> CanonicalRequest:
    """A /v1/embeddings body as a canonical embedding request."""
    body = json_object(body)
    inp = body.get("input")
    if not _is_prompt(inp, mixed=False) or inp == [] or inp == "":
        raise DialectError(
            400,
            "'input' is required and must be a non-empty string, an array of strings, an array of token ids or an"
            " array of arrays of token ids (one kind throughout), "
            f"got {shown(inp) if 'input' in body else 'nothing'}",
        )
    params = _params(body, _EMBEDDING_OWN)
    fmt = params.get("encoding_format")
    if fmt is not None and fmt not in ("float", "base64"):
        raise DialectError(400, f'\'encoding_format\' must be "float" or "base64", got {shown(fmt)}')
    dims = params.get("dimensions")
    if dims is not None and (not is_int(dims) or dims < 1):
        raise DialectError(400, f"'dimensions' must be a positive integer, got {shown(dims)}")
    late = _flag(body, "late_chunking")
    notes = []
    if late:
        inp = [inp] if isinstance(inp, str) else inp
        bad = next((i for i, c in enumerate(inp) if not isinstance(c, str) or not c), None)
        if bad is not None:
            raise DialectError(
                400,
                "with late_chunking, 'input' must be a string or an array of non-empty strings (the chunks of one"
                f" text, in order), got {shown(inp[bad])} at input[{bad}]",
            )
        if len(inp) > MAX_LATE_CHUNKS:
            raise DialectError(400, f"late_chunking takes at most {MAX_LATE_CHUNKS} chunks, got {len(inp)}")
        if dims is not None:
            notes.append("dimensions: late_chunking vectors have the model's own size")
    return CanonicalRequest(
        model=_model(body),
        kind="embedding",
        input=inp,
        params=params,
        keep_alive=parse_duration(body.get("keep_alive")),
        late_chunking=late,
        notes=notes,
    )


def render_error(status: int, message: str, kind: str | None = None) -> bytes:
    """``{"error": {"message", "type", "code"}}``; the type defaults to invalid_request_error for 4xx and
    blazar_error otherwise (pass ``kind="engine_error"`` for errors the engine produced)."""
    if kind is None:
        kind = "invalid_request_error" if 400 <= status < 500 else "blazar_error"
    return orjson.dumps({"error": {"message": message, "type": kind, "code": status}})


# ---------------------------------------------------------------------------------------------------------------
# Top-level fields


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        got = shown(model) if "model" in body else "nothing"
        raise DialectError(
            400, f"'model' is required and must be a non-empty string naming a model, got {got}"
        )
    return model


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise DialectError(400, f"'{key}' must be a boolean, got {shown(value)}")
    return value


def _include_usage(body: dict[str, Any], stream: bool) -> bool:
    opts = body.get("stream_options")
    if opts is None:
        return False
    if not isinstance(opts, dict):
        raise DialectError(400, f"'stream_options' must be an object, got {shown(opts)}")
    usage = opts.get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise DialectError(400, f"'stream_options.include_usage' must be a boolean, got {shown(usage)}")
    return stream and bool(usage)  # OpenAI refuses it without stream; clients of local servers send it anyway


def _params(body: dict[str, Any], own: set[str]) -> dict[str, Any]:
    """Everything not consumed by the parser, type-checked where the type is known; nulls mean 'default'."""
    n = body.get("n")
    params: dict[str, Any] = {}
    if n is not None:
        if not is_int(n) or n < 1:
            raise DialectError(400, f"'n' must be a positive integer, got {shown(n)}")
        if n > 1:
            params["n"] = n  # the engine generates the choices, one slot each (gateway.core checks the slots)
    for key, value in body.items():
        if key in own or value is None:
            continue
        check = _TYPED.get(key)
        if check is not None and not check[0](value):
            raise DialectError(400, f"'{key}' must be {check[1]}, got {shown(value)}")
        bounds = _RANGES.get(key)
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise DialectError(400, f"'{key}' must be from {bounds[0]} to {bounds[1]}, got {shown(value)}")
        params[key] = value
    if body.get("stop") is not None:
        params["stop"] = stop_list(body["stop"], "'stop'")
    return params


def _max_tokens(body: dict[str, Any], params: dict[str, Any], keys: tuple[str, ...]) -> None:
    """The first of ``keys`` present becomes params['max_tokens'] (max_completion_tokens wins over max_tokens)."""
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if not is_int(value) or value < 1:  # OpenAI refuses 0 too ("Expected a value >= 1")
            raise DialectError(
                400, f"'{key}' must be a positive integer, got {shown(value)}; omit it for no limit"
            )
        if value > MAX_TOKENS:
            raise DialectError(
                400, f"'{key}' must be at most {MAX_TOKENS}, got {shown(value)}; omit it for no limit"
            )
        params["max_tokens"] = value
        return


def _logprobs_chat(body: dict[str, Any], params: dict[str, Any]) -> bool:
    """The logprobs fields into ``params``; whether each token's alternatives are to be sent."""
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise DialectError(400, f"'logprobs' must be a boolean, got {shown(logprobs)}")
    top = body.get("top_logprobs")
    if top is not None:
        if not is_int(top) or not 0 <= top <= 20:
            raise DialectError(400, f"'top_logprobs' must be an integer from 0 to 20, got {shown(top)}")
        if not logprobs:
            raise DialectError(400, "'top_logprobs' needs 'logprobs': true")
        params["top_logprobs"] = top
    if logprobs is not None:
        params["logprobs"] = logprobs
    if logprobs and not top:
        # llama-server gives no logprobs at all at top_logprobs 0, and 20 alternatives per token without it: it is
        # asked for one, the fewest it gives with logprobs, and the translator cuts it (``alternatives``)
        params["top_logprobs"] = 1
        return False
    return True


def _is_prompt(value: Any, *, mixed: bool = True) -> bool:
    """A completion prompt or embedding input: a string or an array of strings, token ids or arrays of token ids.
    With ``mixed`` (a completion: llama.cpp reads ``[12, "text", 34]`` as one prompt of tokens and text) the kinds
    may mix; without (an embedding input, as OpenAI takes it) they may not: llama-server reads a mixed array as one
    input, and a client would get fewer vectors than it sent inputs."""
    if isinstance(value, str):
        return True
    if not isinstance(value, list):
        return False
    if mixed:
        return all(
            isinstance(x, str) or is_int(x) or (isinstance(x, list) and all(is_int(t) for t in x))
            for x in value
        )
    return (
        all(isinstance(x, str) for x in value)
        or all(is_int(x) for x in value)
        or all(isinstance(x, list) and all(is_int(t) for t in x) for x in value)
    )


def _response_format(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise DialectError(400, f"'response_format' must be an object, got {shown(value)}")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = value.get("schema")
        if schema is not None and not isinstance(schema, dict):
            raise DialectError(
                400, f"'response_format.schema' must be a JSON schema object, got {shown(schema)}"
            )
        return dict(value)
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise DialectError(
                400,
                "'response_format.json_schema' is required with type \"json_schema\" and must be an object "
                f'like {{"name": "answer", "schema": {{...}}}}, got {shown(spec)}',
            )
        schema = spec.get("schema")
        if schema is not None and not isinstance(schema, dict):
            raise DialectError(
                400, f"'response_format.json_schema.schema' must be a JSON schema object, got {shown(schema)}"
            )
        for key, check in (("name", _SCHEMA_NAME), ("strict", _BOOL)):
            if spec.get(key) is not None and not check[0](spec[key]):
                raise DialectError(
                    400, f"'response_format.json_schema.{key}' must be {check[1]}, got {shown(spec[key])}"
                )
        return {**value, "json_schema": dict(spec)}
    raise DialectError(
        400, f'\'response_format.type\' must be "text", "json_object" or "json_schema", got {shown(kind)}'
    )


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> Any:
    if value is None:
        return None
    names = [t["function"]["name"] for t in tools or []]
    if value in ("none", "auto"):
        return value
    if value == "required":
        if not names:
            raise DialectError(400, "'tool_choice' is \"required\" but no 'tools' were given")
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        fn = value.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise DialectError(400, f"'tool_choice.function.name' must name a tool, got {shown(name)}")
        if name not in names:
            offered = ", ".join(names) or "none"
            raise DialectError(
                400, f"'tool_choice' names function {name!r}, which is not in 'tools' ({offered})"
            )
        return {"type": "function", "function": {"name": name}}
    raise DialectError(
        400,
        f'\'tool_choice\' must be "none", "auto", "required" or '
        f'{{"type": "function", "function": {{"name": ...}}}}, got {shown(value)}',
    )


# ---------------------------------------------------------------------------------------------------------------
# Messages


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise DialectError(
            400,
            f"'messages' is required and must be a non-empty array of message objects, got {shown(value)}",
        )
    return [_message(m, f"messages[{i}]") for i, m in enumerate(value)]


def _message(msg: Any, at: str) -> dict[str, Any]:
    if not isinstance(msg, dict):
        raise DialectError(400, f"'{at}' must be a message object, got {shown(msg)}")
    role = msg.get("role")
    if role not in _ROLES:
        allowed = ", ".join(f'"{r}"' for r in _ROLES)
        raise DialectError(400, f"'{at}.role' must be one of {allowed}, got {shown(role)}")
    out = {k: v for k, v in msg.items() if v is not None or k == "content"}
    for key in _MESSAGE_STRINGS:  # the engine's template reads them as strings (a number is its 500)
        if out.get(key) is not None and not isinstance(out[key], str):
            raise DialectError(400, f"'{at}.{key}' must be a string, got {shown(out[key])}")
    if role == "developer":
        out["role"] = "system"
    content = msg.get("content")
    if role == "assistant":
        calls = msg.get("tool_calls")
        if calls is not None:
            out["tool_calls"] = _tool_calls(calls, f"{at}.tool_calls")
        if content is None and not calls:
            raise DialectError(400, f"'{at}' is an assistant message with neither 'content' nor 'tool_calls'")
        if content is not None:
            out["content"] = _content(content, f"{at}.content", _ASSISTANT_PARTS)
        return out
    if "content" not in msg or content is None:
        raise DialectError(400, f"'{at}.content' is required for a {role} message")
    if role == "user":
        out["content"] = _content(content, f"{at}.content", _USER_PARTS)
    else:
        out["content"] = _content(content, f"{at}.content", ("text",))
    if role == "tool":
        call_id = msg.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise DialectError(
                400,
                f"'{at}.tool_call_id' is required for a tool message and must be the id of the tool call it "
                f"answers, got {shown(call_id)}",
            )
    return out


def _content(value: Any, at: str, parts: tuple[str, ...]) -> str | list[dict[str, Any]]:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise DialectError(400, f"'{at}' must be a string or an array of content parts, got {shown(value)}")
    out: list[dict[str, Any]] = []
    for j, part in enumerate(value):
        where = f"{at}[{j}]"
        if not isinstance(part, dict):
            raise DialectError(400, f"'{where}' must be a content part object, got {shown(part)}")
        kind = part.get("type")
        if kind not in parts:
            allowed = ", ".join(f'"{p}"' for p in parts)
            raise DialectError(400, f"'{where}.type' must be one of {allowed} here, got {shown(kind)}")
        if kind == "text" and not isinstance(part.get("text"), str):
            raise DialectError(400, f"'{where}.text' must be a string, got {shown(part.get('text'))}")
        if (
            kind == "refusal"
        ):  # an earlier answer's refusal is text of that turn to the engine, which has no such part
            refusal = part.get("refusal")
            if not isinstance(refusal, str):
                raise DialectError(400, f"'{where}.refusal' must be a string, got {shown(refusal)}")
            part = {"type": "text", "text": refusal}
        if kind == "image_url":
            url = part.get("image_url")
            if isinstance(url, str):
                part = {**part, "image_url": {"url": url}}
            elif not isinstance(url, dict) or not isinstance(url.get("url"), str):
                raise DialectError(
                    400,
                    f"'{where}.image_url' must be an object with a 'url' (an http(s) URL or a data URI), "
                    f"got {shown(url)}",
                )
        out.append(part)
    return out


def _tool_calls(value: Any, at: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise DialectError(400, f"'{at}' must be an array of tool calls, got {shown(value)}")
    out = []
    for j, call in enumerate(value):
        where = f"{at}[{j}]"
        if not isinstance(call, dict):
            raise DialectError(400, f"'{where}' must be a tool call object, got {shown(call)}")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise DialectError(400, f"'{where}.id' must be a non-empty string, got {shown(call_id)}")
        kind = call.get("type", "function")
        if kind != "function":
            raise DialectError(400, f"'{where}.type' must be \"function\", got {shown(kind)}")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise DialectError(
                400, f"'{where}.function' must be an object with 'name' and 'arguments', got {shown(fn)}"
            )
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise DialectError(400, f"'{where}.function.name' must be a non-empty string, got {shown(name)}")
        args = fn.get("arguments", "{}")
        if isinstance(args, dict):
            args = orjson.dumps(args).decode()
        elif not isinstance(args, str):
            raise DialectError(
                400,
                f"'{where}.function.arguments' must be a JSON-encoded string of the arguments, got {shown(args)}",
            )
        out.append({**call, "type": "function", "function": {**fn, "name": name, "arguments": args}})
    return out
