"""The sentinel: warn-only observation of a finished answer against what its request asked for.

It owns judging one response from the native end-of-response summary (``StreamTranslator.summary`` or
``translate_whole``'s) and the ``CanonicalRequest``: findings, each a code and a detail. It never alters response
bytes. ``gateway.core`` logs the findings, names their codes in ``x-blazar-sentinel`` on a whole response, and,
with ``sentinel_enforce``, answers a non-streamed request that has findings with a 422 instead.

Codes: ``truncated`` (finish_reason length, unless the request asked for ``ignore_eos``: an answer that must run
to its limit, as benchmark harnesses ask, is not cut off), ``empty`` (no text, no tool call), ``reasoning_only``
(reasoning but no answer), ``tool_unknown`` (a call to a tool the request did not offer), ``tool_args_json``
(arguments that are not a JSON object), ``tool_args_schema`` (arguments outside the tool's parameters schema),
``json_invalid`` (a ``response_format`` of JSON answered with something else), ``json_schema`` (JSON outside the
``json_schema``), ``stalled`` (a gap between streamed tokens over ``sentinel_stall_secs``).

Tool parameters and ``response_format`` schemas are the client's: they are checked for their structural
subset only (``blazar.dialects.schema_subset``: types, required and known properties, enums, bounds), which is bounded
and runs on the loop; ``$ref``, combinators and regexes are not followed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from blazar.dialects.canonical import CanonicalRequest, schema_of
from blazar.dialects.schema_subset import violation

_DETAIL_MAX = 300


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.detail}"


def enforce_message(findings: list[Finding]) -> str:
    """The 422 message under ``sentinel_enforce``, in the seed's shape."""
    return "sentinel enforce: " + "; ".join(map(str, findings))


def header_value(findings: list[Finding]) -> str:
    """``x-blazar-sentinel``: the codes, comma separated (the details go to the log)."""
    return ", ".join(dict.fromkeys(f.code for f in findings))


def judge(canon: CanonicalRequest, summary: Mapping[str, Any], stall_secs: float) -> list[Finding]:
    """What is wrong with the answer ``summary`` describes, given the request ``canon``; [] for a sound one."""
    out: list[Finding] = []
    given = summary.get("text")
    text = given if isinstance(given, str) else ""
    said = bool(text.strip())
    calls = [c for c in summary.get("tool_calls") or [] if isinstance(c, dict)]
    finish = summary.get("finish_reason")
    if finish == "length" and canon.params.get("ignore_eos") is not True:
        usage = summary.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        n = f" after {tokens} tokens" if isinstance(tokens, int) else ""
        out.append(
            Finding("truncated", f"the answer was cut off at the token limit{n} (finish_reason length)")
        )
    elif not said and not calls and canon.suffix is None:  # an empty fill-in-the-middle is an answer
        reasoning = summary.get("reasoning")
        if isinstance(reasoning, str) and reasoning.strip():
            detail = f"the model reasoned ({len(reasoning)} characters) but gave no answer"
            out.append(Finding("reasoning_only", detail))
        else:
            out.append(Finding("empty", "the model answered nothing"))
    if calls:
        out += _look_at_calls(canon, calls)
    elif canon.response_format is not None and said:
        out += _look_at_json(canon.response_format, text, finish == "length")
    gaps = summary.get("tpot_ms")
    worst = gaps.get("max") if isinstance(gaps, dict) else None
    if isinstance(worst, int | float) and stall_secs > 0 and worst > stall_secs * 1000:
        detail = f"the stream paused {worst / 1000:.1f}s between two tokens (sentinel_stall_secs is {stall_secs:g})"
        out.append(Finding("stalled", detail))
    return out


def _look_at_calls(canon: CanonicalRequest, calls: list[dict[str, Any]]) -> list[Finding]:
    offered: dict[str, Any] = {}
    for tool in canon.tools or []:
        spec = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            offered[spec["name"]] = spec.get("parameters")
    out: list[Finding] = []
    for call in calls:
        given = call.get("function")
        fn: dict[str, Any] = given if isinstance(given, dict) else {}
        name = str(fn.get("name") or "")
        if name not in offered:
            names = ", ".join(offered) or "none"
            out.append(
                Finding(
                    "tool_unknown", _cut(f"a call to '{name}', which the request did not offer ({names})")
                )
            )
            continue
        raw = fn.get("arguments")
        try:
            args = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
        except orjson.JSONDecodeError as e:
            out.append(Finding("tool_args_json", _cut(f"the arguments of '{name}' are not JSON: {e}")))
            continue
        if not isinstance(args, dict):
            out.append(Finding("tool_args_json", f"the arguments of '{name}' are not a JSON object"))
            continue
        problem = violation(offered[name], args)
        if problem:
            out.append(
                Finding(
                    "tool_args_schema", _cut(f"the arguments of '{name}' break its parameters: {problem}")
                )
            )
    return out


def _look_at_json(response_format: dict[str, Any], text: str, truncated: bool) -> list[Finding]:
    kind = response_format.get("type")
    if kind not in ("json_object", "json_schema"):
        return []
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        if truncated:
            return []  # a cut-off answer is reported as truncated; its JSON cannot be whole
        return [
            Finding("json_invalid", _cut(f"response_format asks for JSON, but the answer is not JSON: {e}"))
        ]
    if kind == "json_object" and not isinstance(value, dict):
        return [
            Finding(
                "json_invalid", "response_format json_object asks for an object; the answer is other JSON"
            )
        ]
    problem = violation(schema_of(response_format), value) if kind == "json_schema" else None
    if problem:
        return [Finding("json_schema", _cut(f"the answer breaks the response_format schema: {problem}"))]
    return []


def _cut(text: str) -> str:
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 3] + "..."
