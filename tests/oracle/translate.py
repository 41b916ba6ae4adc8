"""Reference response translation (see ``native/src/translate``): engine OpenAI-dialect SSE
streams and whole bodies to OpenAI, Ollama and Anthropic client bytes, plus the summary.

Same API as ``blazar._native.StreamTranslator`` / ``translate_whole``; with the same ``start_ns``
and ``now_ns`` arguments the output bytes and summaries are identical, which is what the parity
tests check. Slow on purpose only in the sense of being plain Python: it is also the baseline of
``benches/bench_native.py``.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .frames import MAX_FRAME, FrameError, SseParser

PING_AFTER_NS = 10_000_000_000
DIALECTS = ("openai", "ollama_chat", "ollama_generate", "anthropic")
_MINIFY = re.compile(r'("(?:[^"\\]|\\.)*")|[ \t\n\r]+', re.S)
_ANTHROPIC_ERRORS = {
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "rate_limit_error",
    "overloaded_error",
}


def js(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def minify_object(text: str) -> str:
    """Compact JSON object text; ValueError when ``text`` is not one JSON object."""
    if not text.strip(" \t\n\r"):
        return "{}"
    if not isinstance(json.loads(text), dict):
        raise ValueError("not a JSON object")
    return _MINIFY.sub(lambda m: m.group(1) or "", text.strip(" \t\n\r"))


def rfc3339(ns: int) -> str:
    secs, frac = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(secs, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return '"' + text + 'Z"'


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


@dataclass
class ToolCall:
    index: int
    id: str | None = None
    name: str = ""
    arguments: str = ""

    def arguments_object(self) -> str:
        try:
            return minify_object(self.arguments)
        except ValueError:
            return "{}"


@dataclass
class ToolMerger:
    calls: list[ToolCall] = field(default_factory=list)
    complete: int = 0
    current: int | None = None

    def merge(self, frag: dict[str, Any], default_index: int | None, errors: list[str]) -> int:
        index = frag.get("index")
        if index is None:
            index = default_index
        if index is None:
            index = self.calls[self.current].index if self.current is not None else 0
            errors.append(f"tool call fragment without an index; merged into call {index}")
        slot = next((s for s, c in enumerate(self.calls) if c.index == index), None)
        if slot is None:
            self.calls.append(ToolCall(index))
            slot = len(self.calls) - 1
        elif self.current != slot:
            errors.append(
                f"tool call {index} received a fragment after another call had started; "
                "streamed clients may have seen it incomplete"
            )
        if self.current != slot:
            self.complete = max(self.complete, slot)
            self.current = slot
        call = self.calls[slot]
        call_id = frag.get("id")
        if call_id is not None:
            if call.id is None:
                call.id = call_id
            elif call.id != call_id:
                errors.append(
                    f"tool call {index} has conflicting ids '{call.id}' and '{call_id}'; kept the first"
                )
        kind = frag.get("type")
        if kind is not None and kind != "function":
            errors.append(f"tool call {index} has type '{kind}', expected 'function'")
        function = frag.get("function")
        if function is not None:
            name = function.get("name")
            if name is not None and call.name != name:
                call.name += name
            arguments = function.get("arguments")
            if arguments is not None:
                call.arguments += arguments
        return slot

    def complete_all(self) -> None:
        self.complete = len(self.calls)
        self.current = None

    def validate(self, errors: list[str]) -> None:
        for call in self.calls:
            if not call.name:
                errors.append(f"tool call {call.index} has no function name")
            try:
                minify_object(call.arguments)
            except ValueError as err:
                errors.append(f"tool call {call.index} arguments are not a JSON object: {err}")


def _first_message(chunk: dict[str, Any]) -> dict[str, Any] | None:
    for choice in chunk.get("choices") or []:
        if choice.get("index", 0) == 0:
            delta = choice.get("delta")
            return delta if delta is not None else choice.get("message")
    return None


def _stats(gaps: list[int]) -> dict[str, float | int] | None:
    if not gaps:
        return None
    ordered = sorted(gaps)
    n = len(ordered)

    def rank(p: int) -> float:
        return ordered[max(-(-p * n // 100), 1) - 1] / 1e6

    return {
        "count": n,
        "mean": sum(ordered) / n / 1e6,
        "p50": rank(50),
        "p90": rank(90),
        "p99": rank(99),
        "max": ordered[-1] / 1e6,
    }


class Collector:
    def __init__(self, start_ns: int, n: int = 1) -> None:
        self.text = ""
        self.reasoning = ""
        self.tools = ToolMerger()
        self.finish_reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage_sum: tuple[int, int] | None = None
        self.usage_reports = 0
        self.per_prompt = max(n, 1)
        self.choices = 0
        self.chunks = 0
        self.token_chunks = 0
        self.errors: list[str] = []
        self.engine_error: str | None = None
        self.start_ns = start_ns
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.gaps: list[int] = []
        self._other_choices = False

    def absorb(self, chunk: dict[str, Any], now: int) -> list[int]:
        slots: list[int] = []
        self.chunks += 1
        usage = chunk.get("usage")
        if usage is not None:
            p, c = self.usage_sum or (0, 0)
            self.usage_sum = (p + usage.get("prompt_tokens", 0), c + usage.get("completion_tokens", 0))
            self.usage_reports += 1
        tokens = False
        for choice in chunk.get("choices") or []:
            self.choices = max(self.choices, choice.get("index", 0) + 1)
            if choice.get("index", 0) != 0:
                if not self._other_choices:
                    self._other_choices = True
                    self.errors.append("only choice 0 is translated; other choices were ignored")
                continue
            for key, whole in (("delta", False), ("message", True)):
                message = choice.get(key)
                if message is None:
                    continue
                if message.get("reasoning_content"):
                    self.reasoning += message["reasoning_content"]
                    tokens = True
                if message.get("content"):
                    self.text += message["content"]
                    tokens = True
                for position, frag in enumerate(message.get("tool_calls") or []):
                    slots.append(self.tools.merge(frag, position if whole else None, self.errors))
                    tokens = True
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
                self.tools.complete_all()
            word = choice.get("stop_reason", choice.get("stopping_word"))
            if isinstance(word, str):
                self.stop_sequence = word
        verbose = chunk.get("__verbose")
        if isinstance(verbose, dict) and verbose.get("stop_type") == "word":
            word = verbose.get("stopping_word")
            if isinstance(word, str):
                self.stop_sequence = word
        if tokens:
            self.token_chunks += 1
            if self.last_token_ns is None:
                self.first_token_ns = now
            else:
                self.gaps.append(max(now - self.last_token_ns, 0))
            self.last_token_ns = now
        return slots

    @property
    def usage(self) -> tuple[int, int] | None:
        """Every report added up, each prompt's tokens once for its ``n`` choices."""
        if self.usage_sum is None:
            return None
        per_prompt = self.per_prompt if self.usage_reports >= self.per_prompt else 1
        return self.usage_sum[0] // per_prompt, self.usage_sum[1]

    def prompt_tokens(self, hint: int) -> int:
        return hint if self.usage is None else self.usage[0]

    def completion_tokens(self) -> int:
        return self.token_chunks if self.usage is None else self.usage[1]

    def summary(self) -> dict[str, object]:
        return {
            "text": self.text,
            "reasoning": self.reasoning,
            "tool_calls": [
                {
                    "index": c.index,
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tools.calls
            ],
            "finish_reason": self.finish_reason,
            "stop_sequence": self.stop_sequence,
            "usage": None
            if self.usage is None
            else {"prompt_tokens": self.usage[0], "completion_tokens": self.usage[1]},
            "ttft_ms": None
            if self.first_token_ns is None
            else max(self.first_token_ns - self.start_ns, 0) / 1e6,
            "tpot_ms": _stats(self.gaps),
            "chunks": self.chunks,
            "errors": list(self.errors),
            "engine_error": self.engine_error,
            "choices": self.choices,
            "usage_reports": self.usage_reports,
            "token_chunks": self.token_chunks,
        }


@dataclass
class EngineError:
    message: str
    kind: str = "server_error"
    code: str = "null"

    @classmethod
    def parse(cls, raw: str) -> EngineError:
        """Reads ``{"error": {...}}``, ``{"message", "type", "code"}`` or any other text; a
        field of the wrong type makes the whole text the message, as the native reader does."""
        body_raw = raw
        try:
            outer = json.loads(raw)
        except ValueError:
            outer = None
        if isinstance(outer, dict) and "error" in outer:
            span = _value_span(raw, "error")
            assert span is not None
            body_raw = raw[span[0] : span[1]]
        try:
            body = json.loads(body_raw)
        except ValueError:
            return cls(body_raw)
        if isinstance(body, dict):
            message, kind = body.get("message"), body.get("type")
            if not (message is None or isinstance(message, str)) or not (
                kind is None or isinstance(kind, str)
            ):
                return cls(body_raw)
            code_span = _value_span(body_raw, "code")
            code = "null" if code_span is None else body_raw[code_span[0] : code_span[1]]
            return cls(
                body_raw if message is None else message,
                "server_error" if kind is None else kind,
                code,
            )
        if isinstance(body, str):
            return cls(body)
        return cls(body_raw)


# ---- dialect writers ------------------------------------------------------------------------


def openai_error_object(err: EngineError) -> str:
    return f'{{"error":{{"message":{js(err.message)},"type":{js(err.kind)},"code":{err.code}}}}}'


def _value_span(text: str, wanted: str) -> tuple[int, int] | None:
    """Span of the top-level ``wanted`` member's value in the JSON object ``text``, or None
    when it is absent or null."""
    decoder = json.JSONDecoder()
    ws = " \t\n\r"
    i = text.index("{") + 1
    while True:
        while text[i] in ws:
            i += 1
        if text[i] == "}":
            return None
        key, i = decoder.raw_decode(text, i)
        while text[i] in ws:
            i += 1
        i += 1  # ':'
        while text[i] in ws:
            i += 1
        start = i
        value, i = decoder.raw_decode(text, i)
        if key == wanted:
            return None if value is None else (start, i)
        while text[i] in ws:
            i += 1
        if text[i] == "}":
            return None
        i += 1  # ','


def _member_cut(text: str, name: str) -> tuple[int, int] | None:
    """Span of the top-level ``"name": value`` member with one adjacent comma (the one before it, else the one
    after it and the whitespace that follows), or None when absent, null, or its key is written with escapes."""
    decoder = json.JSONDecoder()
    ws = " \t\n\r"
    i = text.index("{") + 1
    comma: int | None = None
    while True:
        while text[i] in ws:
            i += 1
        if text[i] == "}":
            return None
        key_start = i
        key, i = decoder.raw_decode(text, i)
        key_end = i
        while text[i] in ws:
            i += 1
        i += 1  # ':'
        while text[i] in ws:
            i += 1
        value, i = decoder.raw_decode(text, i)
        if key == name:
            if text[key_start:key_end] != f'"{name}"' or (value is None and name == "usage"):
                return None
            if comma is not None:
                return comma, i
            j = i
            while j < len(text) and text[j] in ws:
                j += 1
            if text[j] != ",":
                return key_start, i
            j += 1
            while j < len(text) and text[j] in ws:
                j += 1
            return key_start, j
        while text[i] in ws:
            i += 1
        if text[i] == "}":
            return None
        comma = i
        i += 1  # ','


def _replace_model(text: str, model_lit: str, cut_usage: bool = False) -> str:
    """The OpenAI pass-through: ``model`` replaced and llama.cpp's ``__verbose`` member cut out; with ``cut_usage``
    ``usage`` too, unless its cut would touch the ``__verbose`` one."""
    edits = []
    span = _value_span(text, "model")
    if span is not None:
        edits.append((span[0], span[1], model_lit))
    cut = _member_cut(text, "__verbose") if "__verbose" in text else None
    if cut is not None:
        edits.append((cut[0], cut[1], ""))
    usage = _member_cut(text, "usage") if cut_usage and '"usage"' in text else None
    if usage is not None and (cut is None or usage[1] <= cut[0] or cut[1] <= usage[0]):
        edits.append((usage[0], usage[1], ""))
    for start, end, with_ in sorted(edits, reverse=True):
        text = text[:start] + with_ + text[end:]
    return text


def _sse_lines(payload: str) -> str:
    return "".join(f"data: {line}\n" for line in payload.split("\n")) + "\n"


def ollama_done_reason(finish_reason: str | None) -> str:
    return "length" if finish_reason == "length" else "stop"


def _ollama_tool_calls(calls: list[ToolCall]) -> str:
    parts = []
    for c in calls:
        head = f'"id":{js(c.id)},' if c.id is not None else ""
        parts.append(
            f'{{{head}"function":{{"index":{c.index},"name":{js(c.name)},"arguments":{c.arguments_object()}}}}}'
        )
    return '"tool_calls":[' + ",".join(parts) + "]"


def _ollama_body(generate: bool, content: str, thinking: str, calls: list[ToolCall]) -> str:
    if generate:
        return f'"response":{js(content)}' + (f',"thinking":{js(thinking)}' if thinking else "")
    out = f'"message":{{"role":"assistant","content":{js(content)}'
    if thinking:
        out += f',"thinking":{js(thinking)}'
    if calls:
        out += "," + _ollama_tool_calls(calls)
    return out + "}"


def legacy_logprobs(data: str, offsets: dict[int, int]) -> str:
    """A text choice's chat-shaped logprobs in the completions API's shape (tokens, token_logprobs,
    top_logprobs, text_offset running per choice); ``data`` unchanged when there are none."""
    try:
        value = json.loads(data)
    except ValueError:
        return data
    changed = False
    for choice in value.get("choices") or [] if isinstance(value, dict) else []:
        entries = (choice.get("logprobs") or {}).get("content") if isinstance(choice, dict) else None
        if not isinstance(choice.get("text"), str) or not isinstance(entries, list):
            continue
        index = choice.get("index", 0)
        at = offsets.get(index, 0)
        legacy: dict[str, list[Any]] = {
            "tokens": [],
            "token_logprobs": [],
            "top_logprobs": [],
            "text_offset": [],
        }
        for e in entries:
            token = e.get("token", "")
            legacy["tokens"].append(token)
            legacy["token_logprobs"].append(e.get("logprob"))
            legacy["top_logprobs"].append({t["token"]: t.get("logprob") for t in e.get("top_logprobs") or []})
            legacy["text_offset"].append(at)
            at += len(token)
        offsets[index] = at
        choice["logprobs"] = legacy
        changed = True
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False) if changed else data


def _ollama_logprobs(entries: object) -> str:
    """Ollama's top-level ``logprobs``: the engine's entries as they came (compact JSON, as llama.cpp writes it)."""
    if not isinstance(entries, list) or not entries:
        return ""
    return ',"logprobs":' + json.dumps(entries, separators=(",", ":"), ensure_ascii=False)


def _first_logprobs(chunk: dict[str, Any]) -> object:
    for choice in chunk.get("choices") or []:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            logprobs = choice.get("logprobs")
            return logprobs.get("content") if isinstance(logprobs, dict) else None
    return None


def ollama_delta(
    generate: bool,
    model: str,
    now: int,
    content: str,
    thinking: str,
    calls: list[ToolCall],
    logprobs: object = None,
) -> str:
    return (
        f'{{"model":{model},"created_at":{rfc3339(now)},'
        + _ollama_body(generate, content, thinking, calls)
        + _ollama_logprobs(logprobs)
        + ',"done":false}\n'
    )


def ollama_final(
    generate: bool,
    model: str,
    now: int,
    content: str,
    thinking: str,
    calls: list[ToolCall],
    reason: str,
    metrics: tuple[int, int, int, int, int, int],
    newline: bool,
    logprobs: object = None,
) -> str:
    out = f'{{"model":{model},"created_at":{rfc3339(now)},' + _ollama_body(generate, content, thinking, calls)
    out += _ollama_logprobs(logprobs)
    if generate:
        out += f',"done":true,"done_reason":{js(reason)}'
    else:
        out += f',"done_reason":{js(reason)},"done":true'
    names = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count")
    for name, value in zip((*names, "eval_duration"), metrics, strict=True):
        out += f',"{name}":{value}'
    return out + "}" + ("\n" if newline else "")


def ollama_error(message: str, newline: bool) -> str:
    return f'{{"error":{js(message)}}}' + ("\n" if newline else "")


def anthropic_stop_reason(finish_reason: str | None, stop_sequence: str | None, has_tools: bool) -> str:
    if finish_reason == "length":
        return "max_tokens"
    if finish_reason in ("tool_calls", "function_call"):
        return "tool_use"
    if finish_reason == "content_filter":
        return "refusal"
    if stop_sequence is not None:
        return "stop_sequence"
    return "tool_use" if has_tools else "end_turn"


def anthropic_error_object(err: EngineError) -> str:
    kind = err.kind if err.kind in _ANTHROPIC_ERRORS else "api_error"
    return f'{{"type":"error","error":{{"type":{js(kind)},"message":{js(err.message)}}}}}'


def _event(name: str, data: str) -> str:
    return f"event: {name}\ndata: {data}\n\n"


PING = _event("ping", '{"type":"ping"}')


def _tool_id(call: ToolCall, message_id: str) -> str:
    if call.id is not None:
        return call.id
    prefix = message_id
    while prefix.startswith("msg_"):
        prefix = prefix[4:]
    return f"toolu_{prefix}_{call.index}"


def _tool_use_block(call: ToolCall, message_id: str, input_json: str) -> str:
    return f'{{"type":"tool_use","id":{js(_tool_id(call, message_id))},"name":{js(call.name)},"input":{input_json}}}'


def _usage(input_tokens: int, output_tokens: int) -> str:
    return f'"usage":{{"input_tokens":{input_tokens},"output_tokens":{output_tokens}}}'


def _stop_fields(reason: str, sequence: str | None) -> str:
    return f'"stop_reason":{js(reason)},"stop_sequence":' + ("null" if sequence is None else js(sequence))


def _message_head(message_id: str, model: str) -> str:
    return f'{{"id":{js(message_id)},"type":"message","role":"assistant","model":{model},"content":'


def _stop(col: Collector) -> tuple[str, str | None]:
    reason = anthropic_stop_reason(col.finish_reason, col.stop_sequence, bool(col.tools.calls))
    return reason, col.stop_sequence if reason == "stop_sequence" else None


def anthropic_whole(message_id: str, model: str, col: Collector, hint: int) -> str:
    blocks = []
    if col.reasoning:
        blocks.append(f'{{"type":"thinking","thinking":{js(col.reasoning)},"signature":""}}')
    if col.text:
        blocks.append(f'{{"type":"text","text":{js(col.text)}}}')
    blocks += [_tool_use_block(c, message_id, c.arguments_object()) for c in col.tools.calls]
    reason, sequence = _stop(col)
    return (
        _message_head(message_id, model)
        + "["
        + ",".join(blocks)
        + "],"
        + _stop_fields(reason, sequence)
        + ","
        + _usage(col.prompt_tokens(hint), col.completion_tokens())
        + "}"
    )


class AnthropicStream:
    def __init__(self) -> None:
        self.started = False
        self.open: tuple[str, int] | None = None
        self.next_index = 0
        self.opened: set[int] = set()
        self.sent: dict[int, int] = {}

    def start(self, message_id: str, model: str, input_tokens: int) -> str:
        self.started = True
        message = _message_head(message_id, model) + '[],"stop_reason":null,"stop_sequence":null,'
        message += _usage(input_tokens, 0) + "}"
        return _event("message_start", '{"type":"message_start","message":' + message + "}") + PING

    def _open(self, block: tuple[str, int], content_block: str) -> str:
        out = self.close_block()
        out += _event(
            "content_block_start",
            f'{{"type":"content_block_start","index":{self.next_index},"content_block":{content_block}}}',
        )
        self.open = block
        return out

    def close_block(self) -> str:
        if self.open is None:
            return ""
        self.open = None
        out = _event("content_block_stop", f'{{"type":"content_block_stop","index":{self.next_index}}}')
        self.next_index += 1
        return out

    def _delta(self, delta: str) -> str:
        return _event(
            "content_block_delta",
            f'{{"type":"content_block_delta","index":{self.next_index},"delta":{delta}}}',
        )

    def thinking(self, thinking: str) -> str:
        out = ""
        if self.open != ("thinking", 0):
            out += self._open(("thinking", 0), '{"type":"thinking","thinking":"","signature":""}')
        return out + self._delta(f'{{"type":"thinking_delta","thinking":{js(thinking)}}}')

    def text(self, text: str) -> str:
        out = ""
        if self.open != ("text", 0):
            out += self._open(("text", 0), '{"type":"text","text":""}')
        return out + self._delta(f'{{"type":"text_delta","text":{js(text)}}}')

    def tools(self, calls: list[ToolCall], slots: list[int], message_id: str) -> str:
        out = ""
        for slot in slots:
            call = calls[slot]
            if self.open != ("tool", slot):
                if slot in self.opened or not call.name:
                    continue
                self.opened.add(slot)
                out += self._open(("tool", slot), _tool_use_block(call, message_id, "{}"))
            pending = call.arguments[self.sent.get(slot, 0) :]
            if pending:
                out += self._delta(f'{{"type":"input_json_delta","partial_json":{js(pending)}}}')
                self.sent[slot] = len(call.arguments)
        return out

    def finish(self, col: Collector, hint: int) -> str:
        out = self.close_block()
        reason, sequence = _stop(col)
        delta = '{"type":"message_delta","delta":{' + _stop_fields(reason, sequence) + "},"
        delta += _usage(col.prompt_tokens(hint), col.completion_tokens()) + "}"
        return out + _event("message_delta", delta) + _event("message_stop", '{"type":"message_stop"}')


# ---- the translators ------------------------------------------------------------------------


class StreamTranslator:
    """Same contract as ``blazar._native.StreamTranslator`` (without ``prefill``)."""

    def __init__(
        self,
        dialect: str,
        model: str,
        *,
        include_usage: bool = False,
        load_duration_ns: int = 0,
        message_id: str | None = None,
        prompt_tokens_hint: int = 0,
        start_ns: int | None = None,
        redact: str | None = None,
        n: int = 1,
    ) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"unknown dialect '{dialect}'")
        self.dialect = dialect
        self.model = js(model)
        self.include_usage = include_usage
        self.load_ns = load_duration_ns
        self.hint = prompt_tokens_hint
        self.redact = redact or None
        self.message_id = message_id if message_id is not None else new_message_id()
        self._start = time.time_ns() if start_ns is None else start_ns
        self._mono = time.monotonic_ns()
        self.parser = SseParser(MAX_FRAME)
        self.col = Collector(self._start, n)
        self.usage_event: str | None = None
        self.offsets: dict[int, int] = {}
        self.anthropic = AnthropicStream()
        self.ollama_sent = 0
        self.out: list[str] = []
        self.pending = ""
        self.saw_done = False
        self.closed = False
        self.last_output_ns = self._start

    def _now(self, given: int | None) -> int:
        return given if given is not None else self._start + time.monotonic_ns() - self._mono

    @property
    def done(self) -> bool:
        return self.saw_done or self.closed

    def feed(self, chunk: bytes, now_ns: int | None = None) -> bytes:
        if self.parser.failed is not None:
            raise self.parser.failed
        if self.closed:
            return b""
        now = self._now(now_ns)
        try:
            events = self.parser.feed(chunk)
        except FrameError as err:
            for event, data in err.events:  # type: ignore[attr-defined]
                self._on_event(event, data, now)
            self.pending += "".join(self.out)
            self.out = []
            raise
        for event, data in events:
            self._on_event(event, data, now)
        self._keep_alive(now)
        out, self.out = "".join(self.out), []
        return out.encode()

    def finish(self, now_ns: int | None = None) -> bytes:
        now = self._now(now_ns)
        if not self.closed:
            if self.parser.failed is not None:
                err = EngineError(str(self.parser.failed), "stream_error")
                self.col.errors.append(f"stream error: {err.message}")
                self._fail(err)
            else:
                if not self.parser.finish():
                    self.col.errors.append("engine stream ended inside an event; it was discarded")
                self._close(now)
        out, self.out = self.pending + "".join(self.out), []
        self.pending = ""
        return out.encode()

    def abort(self, message: str, now_ns: int | None = None) -> bytes:
        if not self.closed:
            self.col.errors.append(f"aborted: {message}")
            self._fail(EngineError(message, "server_error"))
        out, self.out = self.pending + "".join(self.out), []
        self.pending = ""
        return out.encode()

    def summary(self) -> dict[str, object]:
        return self.col.summary()

    def _on_event(self, event: str, data: str, now: int) -> None:
        if self.closed:
            return
        if event == "error":
            self._engine_error(EngineError.parse(data))
            return
        if data == "[DONE]":
            self.saw_done = True
            self._close(now)
            return
        if data.strip() == "null":  # llama-server's separator between a multi-prompt completion's prompts
            return
        if self.dialect == "openai" and '"logprobs":{' in data and '"text"' in data:
            data = legacy_logprobs(data, self.offsets)
        try:
            chunk = json.loads(data)
            if not isinstance(chunk, dict):
                raise ValueError("not an object")
        except ValueError as err:
            self.col.errors.append(f"engine chunk is not a chat completion chunk: {err}")
            if self.dialect == "openai":
                self.out.append(
                    _sse_lines(data if self.redact is None else data.replace(self.redact, "<redacted>"))
                )
            return
        if chunk.get("error") is not None:
            self._engine_error(EngineError.parse(data))
            return
        progress = chunk.get("prompt_progress")
        if isinstance(progress, dict):  # llama.cpp's prompt-processing report: no output of its own
            total = progress.get("total", 0)
            if total > 0:
                self.hint = total
            if self.dialect == "anthropic":
                self._start_anthropic(now)
            return
        slots = self.col.absorb(chunk, now)
        message = _first_message(chunk) or {}
        content = message.get("content") or ""
        thinking = message.get("reasoning_content") or ""
        if self.dialect == "openai":
            usage_only = not chunk.get("choices") and chunk.get("usage") is not None
            if self.include_usage and chunk.get("usage") is not None:
                self.usage_event = data  # written at the end, once, with every report added up
            if not usage_only:
                self.out.append(_sse_lines(_replace_model(data, self.model, chunk.get("usage") is not None)))
        elif self.dialect in ("ollama_chat", "ollama_generate"):
            generate = self.dialect == "ollama_generate"
            logprobs = _first_logprobs(chunk)  # with the object that carries their text
            if thinking:
                self.out.append(
                    ollama_delta(generate, self.model, now, "", thinking, [], None if content else logprobs)
                )
            if content:
                self.out.append(ollama_delta(generate, self.model, now, content, "", [], logprobs))
            if not generate:
                self._flush_ollama_tools(now)
        else:
            self._start_anthropic(now)
            if thinking:
                self.out.append(self.anthropic.thinking(thinking))
            if content:
                self.out.append(self.anthropic.text(content))
            self.out.append(self.anthropic.tools(self.col.tools.calls, slots, self.message_id))

    def _usage_event(self, data: str) -> str:
        chunk = json.loads(data)
        total = self.col.usage if self.col.usage_reports > 1 else None
        if total is None and not chunk.get("choices"):
            return _sse_lines(_replace_model(data, self.model))
        chunk["choices"] = []
        if total is not None:
            chunk["usage"] = {
                "completion_tokens": total[1],
                "prompt_tokens": total[0],
                "total_tokens": sum(total),
            }
        edited = json.dumps(chunk, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return _sse_lines(_replace_model(edited, self.model))

    def _start_anthropic(self, now: int) -> None:
        if not self.anthropic.started:
            self.out.append(self.anthropic.start(self.message_id, self.model, self.hint))
            self.last_output_ns = now

    def _flush_ollama_tools(self, now: int) -> None:
        ready = self.col.tools.complete
        if ready > self.ollama_sent:
            calls = self.col.tools.calls[self.ollama_sent : ready]
            self.out.append(ollama_delta(False, self.model, now, "", "", calls))
            self.ollama_sent = ready

    def _keep_alive(self, now: int) -> None:
        if any(self.out):
            self.last_output_ns = now
        elif (
            self.dialect == "anthropic"
            and self.anthropic.started
            and not self.closed
            and now - self.last_output_ns >= PING_AFTER_NS
        ):
            self.out.append(PING)
            self.last_output_ns = now

    def _engine_error(self, err: EngineError) -> None:
        if self.redact is not None:
            cut = "<redacted>"
            err = EngineError(
                err.message.replace(self.redact, cut),
                err.kind.replace(self.redact, cut),
                err.code.replace(self.redact, cut),
            )
        self.col.errors.append(f"engine error: {err.message}")
        if self.col.engine_error is None:
            self.col.engine_error = err.message
        self._fail(err)

    def _close(self, now: int) -> None:
        col = self.col
        if col.finish_reason is None and not self.saw_done:
            err = EngineError("engine stream ended before the response was complete", "upstream_error")
            col.errors.append(err.message)
            self._fail(err)
            return
        self.closed = True
        col.tools.complete_all()
        col.tools.validate(col.errors)
        if self.dialect == "openai":
            if self.usage_event is not None:
                self.out.append(self._usage_event(self.usage_event))
            self.out.append("data: [DONE]\n\n")
        elif self.dialect in ("ollama_chat", "ollama_generate"):
            generate = self.dialect == "ollama_generate"
            if not generate:
                self._flush_ollama_tools(now)
            first = col.first_token_ns if col.first_token_ns is not None else now
            last = col.last_token_ns if col.last_token_ns is not None else first
            metrics = (
                self.load_ns + max(now - col.start_ns, 0),
                self.load_ns,
                col.prompt_tokens(self.hint),
                max(first - col.start_ns, 0),
                col.completion_tokens(),
                max(last - first, 0),
            )
            reason = ollama_done_reason(col.finish_reason)
            self.out.append(ollama_final(generate, self.model, now, "", "", [], reason, metrics, True))
        else:
            self._start_anthropic(now)
            self.out.append(self.anthropic.finish(col, self.hint))

    def _fail(self, err: EngineError) -> None:
        self.closed = True
        self.col.tools.complete_all()
        self.col.tools.validate(self.col.errors)
        if self.dialect == "openai":
            self.out.append(f"data: {openai_error_object(err)}\n\ndata: [DONE]\n\n")
        elif self.dialect in ("ollama_chat", "ollama_generate"):
            self.out.append(ollama_error(err.message, True))
        else:
            self.out.append(self.anthropic.close_block())
            self.out.append(_event("error", anthropic_error_object(err)))


def translate_whole(
    dialect: str,
    model: str,
    engine_body: bytes,
    *,
    load_duration_ns: int = 0,
    message_id: str | None = None,
    total_duration_ns: int = 0,
    now_ns: int | None = None,
    n: int = 1,
) -> tuple[bytes, dict[str, object]]:
    """Same contract as ``blazar._native.translate_whole`` (without ``prefill``)."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect '{dialect}'")
    body = engine_body.decode("utf-8")
    completion = json.loads(body)
    if not isinstance(completion, dict):
        raise ValueError("engine body is not a JSON chat completion")
    model_lit = js(model)
    now = time.time_ns() if now_ns is None else now_ns
    col = Collector(now, n)

    def summary() -> dict[str, object]:
        s = col.summary()
        s["ttft_ms"] = None
        s["tpot_ms"] = None
        return s

    if completion.get("error") is not None:
        err = EngineError.parse(body)
        col.errors.append(f"engine error: {err.message}")
        col.engine_error = err.message
        if dialect == "openai":
            out = openai_error_object(err)
        elif dialect == "anthropic":
            out = anthropic_error_object(err)
        else:
            out = ollama_error(err.message, False)
        return out.encode(), summary()
    col.absorb(completion, now)
    col.tools.complete_all()
    col.tools.validate(col.errors)
    if dialect == "openai":
        if '"logprobs":{' in body and '"text"' in body:
            body = legacy_logprobs(body, {})
        out = _replace_model(body, model_lit)
    elif dialect == "anthropic":
        out = anthropic_whole(message_id if message_id is not None else new_message_id(), model_lit, col, 0)
    else:
        generate = dialect == "ollama_generate"
        timings = completion.get("timings") or {}

        def ns(ms: float | None) -> int:
            return 0 if ms is None or ms != ms else max(int(ms * 1e6), 0)

        metrics = (
            total_duration_ns,
            load_duration_ns,
            col.prompt_tokens(0),
            ns(timings.get("prompt_ms")),
            col.completion_tokens(),
            ns(timings.get("predicted_ms")),
        )
        calls = [] if generate else col.tools.calls
        reason = ollama_done_reason(col.finish_reason)
        out = ollama_final(
            generate,
            model_lit,
            now,
            col.text,
            col.reasoning,
            calls,
            reason,
            metrics,
            False,
            _first_logprobs(completion),
        )
    return out.encode(), summary()
