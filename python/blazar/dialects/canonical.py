"""The canonical request every client dialect parses into, and the engine request rendered from it.

Hub and spoke: ``openai.py``, ``ollama.py`` and ``anthropic.py`` each turn one client wire format into a
``CanonicalRequest``; ``render_engine`` turns that into the path and JSON body that llama-server's OpenAI-compatible
API takes. The canonical form *is* the OpenAI chat shape (messages, function tools, ``response_format``) with
sampling parameters under llama-server's names, so the OpenAI spoke is nearly identity and the engine side is a
small rendering step.

This module also holds the few helpers every spoke needs (JSON type descriptions for teaching errors, Go-style
durations, image data URIs, function-tool validation), so that no dialect imports another.

Pure: no I/O, no logging, no asyncio, httpx or server imports. Parsers never mutate the caller's body.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from blazar.dialects.schema_subset import contradiction
from blazar.errors import BlazarError

Kind = Literal["chat", "completion", "embedding", "audio"]

ENGINE_CHAT = "/v1/chat/completions"
ENGINE_COMPLETION = "/v1/completions"
ENGINE_EMBEDDING = "/v1/embeddings"
ENGINE_INFILL = "/infill"
"""llama-server's native fill-in-the-middle endpoint: the only engine route that takes a ``suffix``. It speaks
llama.cpp's native completion format (``content``/``stop`` chunks), not the OpenAI one."""


class DialectError(BlazarError):
    """A client request the gateway refuses; the handler renders it in the caller's dialect, with that dialect's
    own error type for the status.

    ``message`` teaches: it names the field, what was given and what is allowed.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def error_type(self) -> str | None:
        return None


@dataclass(slots=True)
class CanonicalRequest:
    """One client request, dialect-free.

    messages       OpenAI chat message objects: ``role`` (system/user/assistant/tool), ``content`` (a string or a
                   list of ``text`` / ``image_url`` parts), assistant ``tool_calls`` with JSON-string ``arguments``,
                   tool ``tool_call_id`` (and ``name`` where known), assistant ``reasoning_content``.
    prompt         completion kind: the prompt, verbatim.
    input          embedding kind: a string or a list.
    params         sampling and extras under llama-server's OpenAI-compatible names (max_tokens, temperature,
                   top_p, top_k, min_p, repeat_penalty, presence_penalty, frequency_penalty, seed, stop as a list,
                   logprobs, top_logprobs, ...). ``logprobs`` is a boolean for chat and an integer for completions,
                   as in the OpenAI endpoint of that kind.
    tools          OpenAI function tools, each with a ``parameters`` object.
    keep_alive     seconds; None = the daemon's default; 0 = unload after this request; < 0 = keep forever.
    include_usage  the client wants usage in its stream (OpenAI ``stream_options``; always true for the dialects
                   whose streams carry usage by design, Anthropic and Ollama).
    raw            Ollama ``raw: true`` generate: no template (admitted as RawLong work).
    suffix         fill-in-the-middle: text after the insertion point (renders to ``ENGINE_INFILL``).
    options_ctx    Ollama ``options.num_ctx``: the per-slot context the supervisor (re)starts the engine with.
    truncate       Ollama ``/api/embed``: cut each input to what the engine embeds in one batch (its default).
    late_chunking  embedding kind, ``input`` a list of non-empty strings: the chunks of one text, embedded together
                   and pooled per chunk (``gateway.late_chunking``).
    raw_vectors    embedding kind: the vectors as the model pools them, not L2-normalised (Ollama's legacy
                   ``/api/embeddings``; llama-server's ``embd_normalize: -1``).
    echo           Responses API: the request members every response object repeats, JSON object members without
                   braces (``dialects.responses``; the native translator writes them).
    echo_prompt    completion kind: OpenAI's ``echo``, the prompt repeated before the answer and, with ``logprobs``,
                   each of its tokens scored (``gateway.prompt_logprobs``).
    alternatives   False: logprobs asked for with top_logprobs 0 (llama-server is asked for one alternative, the
                   fewest it gives with logprobs, and the translator cuts it).
    notes          fields accepted but ignored, one teaching sentence each.
    load_only      Ollama: no prompt, messages or input; the request only loads (or with keep_alive 0 unloads) the
                   model and is never sent to the engine.
    """

    model: str
    kind: Kind
    messages: list[dict[str, Any]] = field(default_factory=list)
    prompt: str | list[Any] | None = None
    input: str | list[Any] | None = None
    stream: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    keep_alive: float | None = None
    include_usage: bool = False
    raw: bool = False
    suffix: str | None = None
    options_ctx: int | None = None
    truncate: bool = False
    late_chunking: bool = False
    raw_vectors: bool = False
    echo: str | None = None
    echo_prompt: bool = False
    alternatives: bool = True
    notes: list[str] = field(default_factory=list)
    load_only: bool = False

    def has_images(self) -> bool:
        """Whether any message carries an image part (vision traffic)."""
        for m in self.messages:
            content = m.get("content")
            if isinstance(content, list) and any(
                isinstance(p, dict) and p.get("type") == "image_url" for p in content
            ):
                return True
        return False

    def prefill(self) -> str | None:
        """The text of the assistant message a conversation ends with (an Anthropic prefill, Ollama's continued
        message), which the answer continues; None when it ends otherwise. Text parts are joined with a blank
        line, as llama-server puts them into the prompt."""
        if self.kind != "chat" or not self.messages:
            return None
        last = self.messages[-1]
        if last.get("role") != "assistant" or last.get("tool_calls"):
            return None
        content = last.get("content")
        if isinstance(content, list):
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            if not texts or not all(isinstance(t, str) for t in texts):
                return None
            content = "\n\n".join(texts)  # type: ignore[arg-type]
        return content if isinstance(content, str) and content else None

    def choices(self) -> int:
        """How many choices the client asked for (OpenAI ``n``; llama-server runs each in a slot of its own)."""
        return int(self.params.get("n", 1))

    def has_tools(self) -> bool:
        """Whether the request offers tools (tool-bearing chat is admitted as Tool work)."""
        return bool(self.tools) and self.tool_choice != "none"


# ---------------------------------------------------------------------------------------------------------------
# Rendering the engine request


def render_engine(req: CanonicalRequest) -> tuple[str, dict[str, Any]]:
    """The llama-server path and JSON body for ``req``.

    Chat goes to ``/v1/chat/completions``, completions to ``/v1/completions`` (or ``/infill`` when a suffix is
    given), embeddings to ``/v1/embeddings``. A streaming request always asks for usage
    (``stream_options.include_usage``): the gateway needs it whether or not the client does. A tool_choice naming
    one function becomes ``"required"`` over that function alone, which llama-server understands (it reads only the
    string forms). ``req`` is not modified.
    """
    if req.kind == "embedding":
        body: dict[str, Any] = {"model": req.model, **req.params, "input": req.input}
        return ENGINE_EMBEDDING, body
    check_schemas(req)
    if req.kind == "completion" and req.suffix is not None:
        return ENGINE_INFILL, _render_infill(req)
    body = {"model": req.model, **req.params, "stream": req.stream}
    if req.stream:
        body["stream_options"] = {"include_usage": True}
    if req.kind == "completion":
        body["prompt"] = req.prompt
        if req.response_format is not None:
            # /v1/completions does not read response_format everywhere; llama-server's own json_schema does.
            body["json_schema"] = schema_of(req.response_format)
        return ENGINE_COMPLETION, body
    body["messages"] = req.messages
    tools, choice = req.tools, req.tool_choice
    if tools and isinstance(choice, dict):
        name = choice.get("function", {}).get("name")
        tools = [t for t in tools if t["function"]["name"] == name] or tools
        choice = "required"
    if tools:
        body["tools"] = tools
    if choice is not None:
        body["tool_choice"] = choice
    if req.response_format is not None:
        body["response_format"] = req.response_format
    return ENGINE_CHAT, body


def check_schemas(req: CanonicalRequest) -> None:
    """Refuse (400) a request whose JSON schema (its response format, llama-server's ``json_schema``, a tool's
    parameters) has bounds no value can meet: llama.cpp builds a grammar for one without end, taking more memory
    each second until the machine has none."""
    schemas: list[tuple[str, Any]] = [("json_schema", req.params.get("json_schema"))]
    if req.response_format is not None:
        schemas.append(("response_format", schema_of(req.response_format)))
    for i, tool in enumerate(req.tools or []):
        schemas.append((f"tools[{i}].function.parameters", tool["function"].get("parameters")))
    for where, schema in schemas:
        found = contradiction(schema) if isinstance(schema, dict) else None
        if found is not None:
            raise DialectError(400, f"the JSON schema in {where} cannot be met: {found}; no value has both")


def _render_infill(req: CanonicalRequest) -> dict[str, Any]:
    params = dict(req.params)
    if "max_tokens" in params:
        params["n_predict"] = params.pop("max_tokens")
    if "logprobs" in params:
        params["n_probs"] = params.pop("logprobs")
    body: dict[str, Any] = {
        "model": req.model,
        **params,
        "input_prefix": req.prompt if isinstance(req.prompt, str) else "",
        "input_suffix": req.suffix,
        "prompt": "",
        "stream": False,  # asked whole, streamed or not: the gateway shapes the answer once (gateway.ollama)
    }
    if req.response_format is not None:
        body["json_schema"] = schema_of(req.response_format)
    return body


def forced_tool_schema(req: CanonicalRequest) -> dict[str, Any] | None:
    """When the client forces a tool call (tool_choice "required" or one named function), the JSON schema of a
    call to one of the forced tools: ``{"name": <that tool>, "arguments": <its parameters>}``; None otherwise.

    For engines whose chat template cannot emit tool calls: constrain the output with this schema (as a
    ``json_schema`` response_format, without tools) and turn the JSON into a tool call on the way back.
    """
    tools = _forced_tools(req)
    if not tools:
        return None
    defs: dict[str, Any] = {}
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t["function"]["name"]},
                "arguments": _hoist_defs(
                    t["function"].get("parameters") or {"type": "object"}, f"t{i}_", defs
                ),
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for i, t in enumerate(tools)
    ]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {**schema, "$defs": defs} if defs else schema


def forced_tool_names(req: CanonicalRequest) -> list[str]:
    """The tools a forced call may name (``forced_tool_schema``'s), in order; none when no call is forced."""
    return [t["function"]["name"] for t in _forced_tools(req)]


def _forced_tools(req: CanonicalRequest) -> list[dict[str, Any]]:
    choice = req.tool_choice
    if not req.tools or not (choice == "required" or isinstance(choice, dict)):
        return []
    if isinstance(choice, dict):
        name = choice.get("function", {}).get("name")
        return [t for t in req.tools if t["function"]["name"] == name] or req.tools
    return req.tools


_DEF_REFS = ("#/$defs/", "#/definitions/")


def _hoist_defs(params: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameters nested in the call schema, with their ``$defs`` / ``definitions`` moved into ``defs``
    (the call schema's root, where a ``$ref`` is resolved from) under ``prefix`` (tools may name theirs alike),
    and every ``$ref`` to them, or to the parameters' own root ("#"), pointed there."""
    root = prefix + "root"
    to_root = False

    def moved(node: Any) -> Any:
        nonlocal to_root
        if isinstance(node, list):
            return [moved(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: moved(v) for k, v in node.items() if k not in ("$defs", "definitions")}
        ref = node.get("$ref")
        if ref == "#":
            out["$ref"], to_root = "#/$defs/" + root, True
        elif isinstance(ref, str):
            for start in _DEF_REFS:
                if ref.startswith(start):
                    out["$ref"] = "#/$defs/" + prefix + ref[len(start) :]
        return out

    own = params.get("$defs", {}), params.get("definitions", {})
    for table in own:
        for name, schema in table.items() if isinstance(table, dict) else ():
            defs[prefix + name] = moved(schema)
    body: dict[str, Any] = moved(params)
    if to_root:
        defs[root] = body
    return body


def schema_of(response_format: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema a response_format constrains to (any JSON object when it names none)."""
    if response_format.get("type") == "json_schema":
        schema = response_format.get("json_schema", {}).get("schema")
    else:
        schema = response_format.get("schema")
    return schema if isinstance(schema, dict) and schema else {"type": "object"}


# ---------------------------------------------------------------------------------------------------------------
# Durations (Ollama keep_alive, also accepted from the other dialects)

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_COMPONENT = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)")


def parse_duration(value: Any, name: str = "keep_alive") -> float | None:
    """Seconds from a keep_alive value: None -> None (the default); a number is seconds; a string is a Go
    duration ("5m", "1h30m", "300ms", "-1h") or a bare number of seconds ("300", "-1"). 0 means unload after this
    request and any negative value means keep forever (returned as given). Anything else is a DialectError 400.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise DialectError(400, _duration_help(name, value))
    if isinstance(value, int | float):
        return _finite(float(value), name, value)
    if not isinstance(value, str):
        raise DialectError(400, _duration_help(name, value))
    text = value.strip()
    if _NUMBER.fullmatch(text):
        return _finite(float(text), name, value)
    sign = 1.0
    if text and text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    total, pos = 0.0, 0
    while pos < len(text):
        m = _COMPONENT.match(text, pos)
        if m is None:
            raise DialectError(400, _duration_help(name, value))
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise DialectError(400, _duration_help(name, value))
    return _finite(sign * total, name, value)


def _finite(seconds: float, name: str, value: Any) -> float:
    """A string of 400 digits is a float overflow (inf), which no clock can add; refuse it like any bad value."""
    if not math.isfinite(seconds):
        raise DialectError(400, _duration_help(name, value))
    return seconds


def _duration_help(name: str, value: Any) -> str:
    return (
        f"{name} must be a number of seconds or a duration string, got {shown(value)}; "
        'send e.g. 300, "5m", "1h30m", "300ms", 0 (unload after this request) or -1 (keep loaded)'
    )


# ---------------------------------------------------------------------------------------------------------------
# Helpers shared by the spokes


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def shown(value: Any) -> str:
    """A short description of what the client sent, for error messages: 'string "hot"', 'array', 'null'."""
    kind = json_type(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{kind} {'true' if value else 'false'}"
    if isinstance(value, int | float):  # an integer past 64 bits, inf and nan as Python writes them
        text = (
            orjson.dumps(value).decode() if -(2**63) <= value < 2**64 and math.isfinite(value) else str(value)
        )
        return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"
    if isinstance(value, str):
        text = orjson.dumps(value[:40]).decode()
        return f'{kind} {text[:-1]}..."' if len(value) > 40 else f"{kind} {text}"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    return "an object" if kind == "object" else kind


MAX_TOKENS = 2**31 - 1
"""The largest token count (max_tokens, num_predict, num_ctx) a request may name: llama.cpp reads them as 32-bit
ints, so a larger one wraps (2**31 came back refused as -2147483648, 2**63-1 silently meant no limit)."""


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_MAGIC = (
    ("iVBORw0KGgo", "image/png"),
    ("/9j/", "image/jpeg"),
    ("R0lGOD", "image/gif"),
    ("UklGR", "image/webp"),
    ("Qk", "image/bmp"),
)


def image_data_uri(data: Any, where: str, media_type: str | None = None) -> str:
    """A data URI for a base64 image (kept as is when it already is a data URI); DialectError 400 when not base64.

    The media type is the one given, else sniffed from the image's first bytes (PNG, JPEG, GIF, WebP, BMP); the
    engine decodes the bytes whatever the label says.
    """
    if not isinstance(data, str) or not data:
        raise DialectError(400, f"{where} must be a base64-encoded image string, got {shown(data)}")
    if data.startswith("data:"):
        return data
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise DialectError(
            400, f"{where} is not valid base64: send the image file's bytes base64-encoded, without a prefix"
        ) from None
    media = media_type or next((m for prefix, m in _MAGIC if data.startswith(prefix)), "image/png")
    return f"data:{media};base64,{data}"


def stop_list(value: Any, where: str) -> list[str]:
    """A stop value (one string or an array of strings) as a list. Empty strings are dropped: clients send ""
    to mean no stop, and llama.cpp would end every answer before its first character on one."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s for s in value if s]
    raise DialectError(400, f"{where} must be a string or an array of strings, got {shown(value)}")


def function_tools(value: Any, where: str = "tools") -> list[dict[str, Any]] | None:
    """Validate OpenAI-shaped function tools (OpenAI and Ollama share the shape) into canonical copies.

    Each becomes ``{"type": "function", "function": {"name", "description"?, "parameters", "strict"?}}``; a missing
    ``parameters`` becomes the empty object schema, because llama-server's template step requires one.
    """
    if value is None:
        return None
    if not isinstance(value, list):
        raise DialectError(400, f"'{where}' must be an array of function tools, got {shown(value)}")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(tool, dict):
            raise DialectError(400, f"'{at}' must be an object, got {shown(tool)}")
        kind = tool.get("type", "function")
        if kind != "function":
            raise DialectError(
                400,
                f'\'{at}.type\' is {shown(kind)}; only function tools are supported: send "type": "function"',
            )
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise DialectError(400, f"'{at}.function' is required and must be an object, got {shown(fn)}")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise DialectError(
                400, f"'{at}.function.name' is required and must be a non-empty string, got {shown(name)}"
            )
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise DialectError(400, f"'{at}.function.description' must be a string, got {shown(desc)}")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        elif not isinstance(params, dict):
            raise DialectError(
                400, f"'{at}.function.parameters' must be a JSON schema object, got {shown(params)}"
            )
        canon: dict[str, Any] = {"name": name}
        if desc is not None:
            canon["description"] = desc
        canon["parameters"] = params
        if "strict" in fn and fn["strict"] is not None:
            if not isinstance(fn["strict"], bool):
                raise DialectError(
                    400, f"'{at}.function.strict' must be a boolean, got {shown(fn['strict'])}"
                )
            canon["strict"] = fn["strict"]
        out.append({"type": "function", "function": canon})
    return out


def arguments_json(value: Any, where: str) -> str:
    """Tool-call arguments as the JSON string OpenAI messages carry: an object is serialised, a string must be
    JSON text of an object already."""
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    if value is None:
        return "{}"
    if isinstance(value, str):
        if not value.strip():
            return "{}"
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return value
    raise DialectError(400, f"'{where}' must be a JSON object of argument values, got {shown(value)}")


MAX_JSON_DEPTH = 254
"""The deepest JSON Blazar passes on: orjson writes no more levels (it reads up to 1,024)."""


def too_deep(value: Any) -> bool:
    """Whether ``value`` nests deeper than ``MAX_JSON_DEPTH`` (orjson cannot write it again)."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return True
    return False


def json_object(body: Any) -> dict[str, Any]:
    """The request body as a JSON object, or the teaching 400 every dialect gives."""
    if not isinstance(body, dict):
        raise DialectError(400, f"the request body must be a JSON object, got {shown(body)}")
    return body
