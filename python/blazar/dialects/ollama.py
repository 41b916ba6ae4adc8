"""The Ollama dialect, request side: /api/chat, /api/generate, /api/embed and the legacy /api/embeddings bodies
into the canonical request, and the Ollama error body.

Ollama semantics kept here: ``stream`` defaults to true; ``keep_alive`` is seconds or a Go duration, 0 unloads and a
negative value keeps the model loaded; ``options`` are mapped to llama-server's sampling names (``num_predict`` ->
``max_tokens``, negative = unlimited), ``num_ctx`` becomes ``options_ctx`` (the supervisor restarts the engine with that context per slot) and load-time options become notes;
``format`` ("json" or a JSON schema) becomes a response_format; images (base64) become image_url data-URI parts;
tool-call arguments arrive as objects and leave as JSON strings. A request with no prompt, messages or input only
loads (or unloads) the model: ``load_only``. Imports only ``canonical``; pure.
"""

from __future__ import annotations

from typing import Any

import orjson

from blazar.dialects.canonical import (
    MAX_TOKENS,
    CanonicalRequest,
    DialectError,
    arguments_json,
    function_tools,
    image_data_uri,
    is_number,
    json_object,
    parse_duration,
    shown,
    stop_list,
)

_ROLES = ("system", "user", "assistant", "tool")

# option -> (expected type, llama-server parameter)
_SAMPLING: dict[str, tuple[str, str]] = {
    "num_keep": ("int", "n_keep"),
    "seed": ("int", "seed"),
    "top_k": ("int", "top_k"),
    "top_p": ("float", "top_p"),
    "min_p": ("float", "min_p"),
    "typical_p": ("float", "typical_p"),
    "repeat_last_n": ("int", "repeat_last_n"),
    "temperature": ("float", "temperature"),
    "repeat_penalty": ("float", "repeat_penalty"),
    "presence_penalty": ("float", "presence_penalty"),
    "frequency_penalty": ("float", "frequency_penalty"),
    "mirostat": ("int", "mirostat"),
    "mirostat_tau": ("float", "mirostat_tau"),
    "mirostat_eta": ("float", "mirostat_eta"),
}
# options that size or place the model: set when the engine starts, never per request
_LOAD_TIME = {
    "num_batch": "int", "num_gpu": "int", "main_gpu": "int", "num_thread": "int", "draft_num_predict": "int",
    "use_mmap": "bool", "use_mlock": "bool", "numa": "bool", "low_vram": "bool", "f16_kv": "bool",
    "vocab_only": "bool", "logits_all": "bool", "num_gqa": "int", "rope_frequency_base": "float",
    "rope_frequency_scale": "float",
}  # fmt: skip
# options llama.cpp no longer has
_RETIRED = {"tfs_z": "float", "penalize_newline": "bool"}

_CHAT_KEYS = {
    "model", "messages", "stream", "format", "keep_alive", "tools", "options", "think", "truncate", "shift",
    "logprobs", "top_logprobs",
}  # fmt: skip
_GENERATE_KEYS = {
    "model", "prompt", "suffix", "system", "template", "context", "stream", "raw", "format", "keep_alive",
    "images", "options", "think", "truncate", "shift", "logprobs", "top_logprobs",
}  # fmt: skip
_EMBED_KEYS = {"model", "input", "truncate", "options", "keep_alive", "dimensions"}
_EMBEDDINGS_KEYS = {"model", "prompt", "options", "keep_alive"}


# ---------------------------------------------------------------------------------------------------------------
# Public API


def parse_chat(body: Any) -> CanonicalRequest:
    """An /api/chat body as a canonical chat request; empty ``messages`` only loads the model."""
    body = json_object(body)
    req = CanonicalRequest(model=_model(body), kind="chat")
    req.messages = _messages(body.get("messages"))
    req.load_only = not req.messages
    _common(body, req, _CHAT_KEYS)
    req.tools = function_tools(body.get("tools"))
    return req


def parse_generate(body: Any) -> CanonicalRequest:
    """An /api/generate body: a chat of one user message (after ``system``) unless ``raw`` is true or a ``suffix``
    is given, which make it a completion with the prompt verbatim. An empty prompt only loads the model."""
    body = json_object(body)
    model = _model(body)
    prompt = _str_field(body, "prompt")
    system = _str_field(body, "system")
    suffix = _str_field(body, "suffix")
    raw = body.get("raw")
    if raw is not None and not isinstance(raw, bool):
        raise DialectError(400, f"raw must be a boolean, got {shown(raw)}")
    images = _images(body.get("images"), "images")
    req = CanonicalRequest(model=model, kind="chat", raw=bool(raw))
    if raw or suffix:
        if images:
            raise DialectError(
                400,
                "images cannot be sent with raw: true or a suffix, because the model's template places them; "
                "send the request without raw (and without suffix)",
            )
        req.kind = "completion"
        req.prompt = prompt
        req.suffix = suffix or None
        if system:
            req.notes.append("system is ignored with raw: true or a suffix: no template is applied")
    else:
        if system:
            req.messages.append({"role": "system", "content": system})
        if prompt or images:
            req.messages.append({"role": "user", "content": _with_images(prompt, images)})
    req.load_only = not prompt and not images and not suffix
    if body.get("template"):
        _str_field(body, "template")
        req.notes.append("template is ignored: the engine applies the model's own chat template")
    if body.get("context") is not None:
        ctx = body["context"]
        if not isinstance(ctx, list):
            raise DialectError(400, f"context must be an array of token ids, got {shown(ctx)}")
        req.notes.append(
            "context is ignored: Blazar keeps no token context between requests; "
            "send the conversation as /api/chat messages"
        )
    _common(body, req, _GENERATE_KEYS)
    return req


def parse_embed(body: Any) -> CanonicalRequest:
    """An /api/embed body (``input`` a string or an array of strings); no input only loads the model."""
    body = json_object(body)
    req = CanonicalRequest(model=_model(body), kind="embedding")
    inp = body.get("input")
    if isinstance(inp, list):
        if not all(isinstance(s, str) for s in inp):
            raise DialectError(400, "input must be a string or an array of strings (one embedding each)")
        texts: list[Any] = list(inp)
    elif isinstance(inp, str):
        texts = [inp] if inp else []
    elif inp is None:
        texts = []
    else:
        raise DialectError(400, f"input must be a string or an array of strings, got {shown(inp)}")
    req.input = texts
    req.load_only = not texts
    truncate = body.get("truncate")
    if truncate is not None and not isinstance(truncate, bool):
        raise DialectError(400, f"truncate must be a boolean, got {shown(truncate)}")
    req.truncate = truncate is not False  # Ollama's default: true
    dims = body.get("dimensions")
    if dims is not None:
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
            raise DialectError(400, f"dimensions must be a positive integer, got {shown(dims)}")
        req.params["dimensions"] = dims
    _embedding_common(body, req, _EMBED_KEYS)
    return req


def parse_embeddings_legacy(body: Any) -> CanonicalRequest:
    """A legacy /api/embeddings body (``prompt``, one string); an empty prompt only loads the model. Its vector is
    the model's own, not normalised, as Ollama's legacy endpoint answers (``/api/embed`` normalises)."""
    body = json_object(body)
    req = CanonicalRequest(model=_model(body), kind="embedding", raw_vectors=True)
    prompt = _str_field(body, "prompt")
    req.input = prompt
    req.load_only = not prompt
    _embedding_common(body, req, _EMBEDDINGS_KEYS)
    return req


def preset_request(options: Any, messages: Any) -> CanonicalRequest:
    """A model preset's ``parameters`` and ``messages`` (Ollama's create fields), checked as a chat request's
    ``options`` and ``messages`` are: a chat request holding them (``notes`` name the options it ignores)."""
    req = CanonicalRequest(model="", kind="chat")
    req.messages = _messages(messages)
    _options(options, req, embedding=False)
    return req


def is_request_option(key: str) -> bool:
    """Whether option ``key`` applies per request (a sampling option, ``num_ctx``, ``num_predict``, ``stop``)."""
    return key in _SAMPLING or key in ("num_ctx", "num_predict", "stop")


def option_type(key: str) -> str | None:
    """The JSON type ("int", "float", "bool", "string") of Ollama option ``key``; None for no such option."""
    if key in _SAMPLING:
        return _SAMPLING[key][0]
    if key in ("num_ctx", "num_predict"):
        return "int"
    if key == "stop":
        return "string"
    return _LOAD_TIME.get(key) or _RETIRED.get(key)


def render_error(status: int, message: str) -> bytes:
    """Ollama's error body, ``{"error": "..."}``; the status travels on the response line."""
    del status
    return orjson.dumps({"error": message})


# ---------------------------------------------------------------------------------------------------------------
# Shared top-level fields


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        got = shown(model) if "model" in body else "nothing"
        raise DialectError(400, f"model is required and must be a non-empty string, got {got}")
    return model


def _str_field(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DialectError(400, f"{key} must be a string, got {shown(value)}")
    return value


def _common(body: dict[str, Any], req: CanonicalRequest, known: set[str]) -> None:
    """stream (default true), keep_alive, format, options, think, logprobs and the ignored fields."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise DialectError(400, f"stream must be a boolean, got {shown(stream)}")
    req.stream = stream is not False
    req.include_usage = req.stream
    req.keep_alive = parse_duration(body.get("keep_alive"))
    req.response_format = _format(body.get("format"))
    _options(body.get("options"), req, embedding=False)
    _think(body.get("think"), req)
    _logprobs(body, req)
    for key in ("truncate", "shift"):
        value = body.get(key)
        if value is not None:
            if not isinstance(value, bool):
                raise DialectError(400, f"{key} must be a boolean, got {shown(value)}")
            req.notes.append(f"{key} is not applied: the engine refuses a prompt longer than its context")
    _unknown(body, req, known)


def _embedding_common(body: dict[str, Any], req: CanonicalRequest, known: set[str]) -> None:
    req.keep_alive = parse_duration(body.get("keep_alive"))
    _options(body.get("options"), req, embedding=True)
    _unknown(body, req, known)


def _unknown(body: dict[str, Any], req: CanonicalRequest, known: set[str]) -> None:
    for key in body:
        if key not in known:
            req.notes.append(f"{key} is not an Ollama request field here and is ignored")


def _format(value: Any) -> dict[str, Any] | None:
    if value is None or value == "":
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": value}}
    raise DialectError(400, f'invalid format: expected "json" or a JSON schema object, got {shown(value)}')


def _think(value: Any, req: CanonicalRequest) -> None:
    if value is None:
        return
    if isinstance(value, bool):
        req.params["chat_template_kwargs"] = {"enable_thinking": value}
        if not value:
            req.params["reasoning_effort"] = "none"
        return
    if value in ("low", "medium", "high", "max"):
        req.params["reasoning_effort"] = value
        return
    raise DialectError(
        400, f'think must be true, false, "low", "medium", "high" or "max", got {shown(value)}'
    )


def _logprobs(body: dict[str, Any], req: CanonicalRequest) -> None:
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise DialectError(400, f"logprobs must be a boolean, got {shown(logprobs)}")
    top = body.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20):
        raise DialectError(400, f"top_logprobs must be an integer from 0 to 20, got {shown(top)}")
    if not logprobs:
        return
    # llama-server gives no logprobs at top_logprobs 0 and 20 alternatives by default: 1 is the fewest, and the
    # translator cuts it when the client asked for none (Ollama then sends no top_logprobs)
    req.alternatives = bool(top)
    if req.kind == "completion":
        req.params["logprobs"] = max(top or 0, 1)
    else:
        req.params["logprobs"] = True
        req.params["top_logprobs"] = max(top or 0, 1)


# ---------------------------------------------------------------------------------------------------------------
# options


def _options(value: Any, req: CanonicalRequest, *, embedding: bool) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise DialectError(400, f"options must be an object, got {shown(value)}")
    for key, v in value.items():
        if v is None:
            continue
        if key == "num_ctx":
            req.options_ctx = _token_count(key, v)
        elif key == "num_predict":
            n = _token_count(key, v)
            if embedding:
                req.notes.append("option num_predict does not apply to embeddings and is ignored")
            else:  # -1 = unlimited, -2 = fill the context: the engine's own default (null), over a preset's
                req.params["max_tokens"] = n if n >= 0 else None
        elif key == "stop":
            stops = stop_list(v, 'option "stop"')
            if embedding:
                req.notes.append("option stop does not apply to embeddings and is ignored")
            else:
                req.params["stop"] = stops
        elif key in _SAMPLING:
            kind, target = _SAMPLING[key]
            typed = _typed(key, v, kind)
            if kind == "int" and not -(2**63) <= typed < 2**63:  # what the engine's JSON can carry
                raise DialectError(400, f'option "{key}" must be an integer within 64 bits, got {shown(v)}')
            _in_range(key, typed, v)
            if embedding:
                req.notes.append(f"option {key} does not apply to embeddings and is ignored")
            else:
                req.params[target] = typed
        elif key in _LOAD_TIME:
            _typed(key, v, _LOAD_TIME[key])
            req.notes.append(f"option {key} is set when the engine starts and is ignored per request")
        elif key in _RETIRED:
            _typed(key, v, _RETIRED[key])
            req.notes.append(f"option {key} is no longer supported by llama.cpp and is ignored")
        else:
            req.notes.append(f"option {key} is not a known option and is ignored")


WHOLE_CONTEXT = -1
"""``repeat_last_n`` -1: Ollama's "the whole context", which llama-server does not take; ``core`` sends the
engine's context per slot."""


def _in_range(key: str, typed: Any, value: Any) -> None:
    """The values llama-server refuses for every request, refused here, where the option is named (a model's
    preset must never hold one)."""
    if key == "repeat_penalty" and not typed > 0:
        raise DialectError(
            400, f'option "repeat_penalty" must be greater than 0 (1 is no penalty), got {shown(value)}'
        )
    if key == "repeat_last_n" and typed < WHOLE_CONTEXT:
        raise DialectError(
            400, f'option "repeat_last_n" must be -1 (the whole context), 0 (off) or more, got {shown(value)}'
        )
    if key == "num_keep" and typed < -1:
        raise DialectError(
            400, f'option "num_keep" must be -1 (the whole prompt), 0 or more, got {shown(value)}'
        )


def _token_count(key: str, value: Any) -> int:
    n: int = _typed(key, value, "int")
    if n > MAX_TOKENS:
        raise DialectError(400, f'option "{key}" must be at most {MAX_TOKENS}, got {shown(value)}')
    return n


def _typed(key: str, value: Any, kind: str) -> Any:
    """Ollama's option typing: integers accept any JSON number (truncated), floats any number."""
    if kind == "int" and is_number(value):
        return int(value)
    if kind == "float" and is_number(value):
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    what = {"int": "an integer", "float": "a number", "bool": "a boolean"}[kind]
    raise DialectError(400, f'option "{key}" must be {what}, got {shown(value)}')


# ---------------------------------------------------------------------------------------------------------------
# Messages


def _images(value: Any, at: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DialectError(400, f"{at} must be an array of base64-encoded images, got {shown(value)}")
    return [image_data_uri(img, f"{at}[{i}]") for i, img in enumerate(value)]


def _with_images(text: str, images: list[str]) -> str | list[dict[str, Any]]:
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}} for url in images]
    if text:
        parts.append({"type": "text", "text": text})
    return parts


def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DialectError(400, f"messages must be an array of message objects, got {shown(value)}")
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (tool call id, function name) not yet answered by a tool message
    for i, msg in enumerate(value):
        at = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise DialectError(400, f"{at} must be a message object, got {shown(msg)}")
        role = msg.get("role")
        role = role.lower() if isinstance(role, str) else role
        if role not in _ROLES:
            raise DialectError(
                400, f"{at}.role must be one of system, user, assistant or tool, got {shown(msg.get('role'))}"
            )
        content = msg.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise DialectError(400, f"{at}.content must be a string, got {shown(content)}")
        images = _images(msg.get("images"), f"{at}.images")
        m: dict[str, Any] = {"role": role, "content": _with_images(content, images)}
        thinking = msg.get("thinking")
        if thinking:
            if not isinstance(thinking, str):
                raise DialectError(400, f"{at}.thinking must be a string, got {shown(thinking)}")
            if role == "assistant":
                m["reasoning_content"] = thinking
        if role == "assistant" and msg.get("tool_calls") is not None:
            m["tool_calls"] = calls = _tool_calls(msg["tool_calls"], f"{at}.tool_calls", i)
            pending = [(c["id"], c["function"]["name"]) for c in calls]
        if role == "tool":
            _tool_reply(msg, m, at, pending)
        out.append(m)
    return out


def _tool_calls(value: Any, at: str, index: int) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise DialectError(400, f"{at} must be an array of tool calls, got {shown(value)}")
    calls = []
    for j, call in enumerate(value):
        where = f"{at}[{j}]"
        if not isinstance(call, dict):
            raise DialectError(400, f"{where} must be an object, got {shown(call)}")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise DialectError(
                400,
                f"{where}.function is required and must be an object with name and arguments, got {shown(fn)}",
            )
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise DialectError(400, f"{where}.function.name must be a non-empty string, got {shown(name)}")
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise DialectError(400, f"{where}.id must be a string, got {shown(call_id)}")
        calls.append(
            {
                "id": call_id or f"call_{index}_{j}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": arguments_json(fn.get("arguments"), f"{where}.function.arguments"),
                },
            }
        )
    return calls


def _tool_reply(msg: dict[str, Any], m: dict[str, Any], at: str, pending: list[tuple[str, str]]) -> None:
    """A tool message: keep its name and link it to the call it answers (by id, else by name, else in order)."""
    name = msg.get("tool_name")
    if name is not None and not isinstance(name, str):
        raise DialectError(400, f"{at}.tool_name must be a string, got {shown(name)}")
    call_id = msg.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise DialectError(400, f"{at}.tool_call_id must be a string, got {shown(call_id)}")
    match = next((p for p in pending if p[0] == call_id), None) if call_id else None
    if match is None and name:
        match = next((p for p in pending if p[1] == name), None)
    if match is None and not call_id and not name and pending:
        match = pending[0]
    if match is not None:
        pending.remove(match)
        call_id, name = call_id or match[0], name or match[1]
    if call_id:
        m["tool_call_id"] = call_id
    if name:
        m["name"] = name
