"""The sentinel's judgement alone: summaries shaped as the native translators give them, real request shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from blazar.dialects.canonical import CanonicalRequest
from blazar.sentinel.judge import Finding, enforce_message, header_value, judge

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    },
}


def request(**kw: Any) -> CanonicalRequest:
    return CanonicalRequest(model="m", kind="chat", messages=[{"role": "user", "content": "hi"}], **kw)


def summary(text: str = "Hello.", finish: str | None = "stop", **kw: Any) -> dict[str, Any]:
    return {"text": text, "reasoning": "", "tool_calls": [], "finish_reason": finish, "usage": None,
            "tpot_ms": None, **kw}  # fmt: skip


def call(name: str, arguments: str) -> dict[str, Any]:
    return {"index": 0, "id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


def test_a_sound_answer_has_no_findings() -> None:
    assert judge(request(), summary(), 30) == []
    assert judge(request(tools=[WEATHER]), summary("", "tool_calls", tool_calls=[call("get_weather", '{"city": "Paris"}')]), 30) == []  # fmt: skip
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "object", "required": ["a"]}},
    }
    assert judge(request(response_format=fmt), summary('{"a": 1}'), 30) == []


def test_truncated_empty_and_reasoning_only() -> None:
    [f] = judge(request(), summary("Once upon", "length", usage={"completion_tokens": 2}), 30)
    assert f == Finding(
        "truncated", "the answer was cut off at the token limit after 2 tokens (finish_reason length)"
    )
    # an answer asked to run to its limit (ignore_eos, as benchmark harnesses send) reached it: not cut off
    assert judge(request(params={"ignore_eos": True}), summary("Once upon", "length"), 30) == []
    assert codes(judge(request(params={"ignore_eos": False}), summary("Once", "length"), 30)) == ["truncated"]
    assert codes(judge(request(), summary("  ", "stop"), 30)) == ["empty"]
    assert judge(request(suffix="}"), summary("", "stop"), 30) == []  # fill-in-the-middle may fill nothing
    [f] = judge(request(), summary("", "stop", reasoning="Let me think."), 30)
    assert f == Finding("reasoning_only", "the model reasoned (13 characters) but gave no answer")


def test_tool_calls_are_checked_against_the_tools_offered() -> None:
    req = request(tools=[WEATHER])
    findings = judge(req, summary("", "tool_calls", tool_calls=[
        call("get_time", "{}"),
        call("get_weather", '{"city": "Par'),
        call("get_weather", "[1]"),
        call("get_weather", '{"days": 0}'),
    ]), 30)  # fmt: skip
    assert codes(findings) == ["tool_unknown", "tool_args_json", "tool_args_json", "tool_args_schema"]
    assert findings[0].detail == "a call to 'get_time', which the request did not offer (get_weather)"
    assert findings[1].detail.startswith("the arguments of 'get_weather' are not JSON: ")
    assert findings[2].detail == "the arguments of 'get_weather' are not a JSON object"
    assert (
        findings[3].detail
        == "the arguments of 'get_weather' break its parameters: 'city' is a required property"
    )
    [f] = judge(req, summary("", tool_calls=[call("get_weather", '{"city": "Oslo", "days": 0}')]), 30)
    assert (
        f.detail
        == "the arguments of 'get_weather' break its parameters: 0 is less than the minimum of 1 (at days)"
    )
    assert codes(judge(request(), summary("", tool_calls=[call("x", "{}")]), 30)) == ["tool_unknown"]


def test_json_answers_are_checked_against_the_response_format() -> None:
    obj = request(response_format={"type": "json_object"})
    assert codes(judge(obj, summary("Sure! {"), 30)) == ["json_invalid"]
    assert judge(obj, summary("[1, 2]"), 30)[0].detail == (
        "response_format json_object asks for an object; the answer is other JSON"
    )
    assert codes(judge(obj, summary('{"a": ', "length"), 30)) == ["truncated"]  # not reported twice
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = request(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    [f] = judge(fmt, summary('{"n": "three"}'), 30)
    assert f == Finding("json_schema", "the answer breaks the response_format schema: 'three' is not of type 'integer' (at n)")  # fmt: skip
    broken = {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": 12}}}
    assert judge(request(response_format=broken), summary('{"n": 1}'), 30) == []  # a schema it cannot use
    assert judge(request(response_format={"type": "text"}), summary("plain"), 30) == []


def test_a_stream_that_paused_too_long() -> None:
    gaps = {"count": 9, "mean": 3500.0, "p50": 20.0, "p90": 30.0, "p99": 31000.0, "max": 31000.0}
    [f] = judge(request(stream=True), summary(tpot_ms=gaps), 30)
    assert f == Finding("stalled", "the stream paused 31.0s between two tokens (sentinel_stall_secs is 30)")
    assert judge(request(stream=True), summary(tpot_ms=gaps), 0) == []  # off
    assert judge(request(stream=True), summary(tpot_ms=gaps), 40) == []


def test_the_enforce_message_and_the_header() -> None:
    findings = [Finding("truncated", "cut"), Finding("tool_unknown", "a"), Finding("tool_unknown", "b")]
    assert (
        enforce_message(findings) == "sentinel enforce: [truncated] cut; [tool_unknown] a; [tool_unknown] b"
    )
    assert header_value(findings) == "truncated, tool_unknown"


# ---- the client's schema must not cost the gateway what it cannot bound ---------------------------------------


def test_a_ref_is_never_followed(tmp_path: Path) -> None:
    """A file the client points at would change the verdict if it were read: it is not (nor a URL, nor a
    reference inside the schema: the subset follows none)."""
    elsewhere = tmp_path / "string.json"
    elsewhere.write_text('{"type": "string"}')
    for ref in (elsewhere.as_uri(), "http://127.0.0.1:9/schema.json", "#/$defs/s"):
        schema = {"$defs": {"s": {"type": "string"}}, "$ref": ref}
        fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
        assert judge(request(response_format=fmt), summary('{"a": 1}'), 30) == []


def test_no_regex_is_run_and_the_rest_is_still_checked() -> None:
    """``re`` holds the GIL while it backtracks: these patterns would freeze the loop for hours."""
    evil = "^(a+)+$"
    schema = {
        "type": "object",
        "required": ["must"],
        "properties": {
            "a": {"pattern": evil},
            "o": {"patternProperties": {evil: {}}, "additionalProperties": False},
        },
        "patternProperties": {evil: {}},
        "propertyNames": {"pattern": evil},
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
    bomb = "a" * 60 + "!"
    answer = orjson.dumps({"a": bomb, "o": {bomb: 1}, bomb: 1}).decode()
    [f] = judge(request(response_format=fmt), summary(answer), 30)
    assert f.detail == "the answer breaks the response_format schema: 'must' is a required property"


def test_a_schema_that_would_take_forever_is_not_walked() -> None:
    """Forty nested ``allOf`` of two ``$ref``s each are 2**40 checks to a full validator."""
    defs = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}] * 2} for i in range(40)}
    schema = {"$defs": {**defs, "a40": {"type": "string"}}, "$ref": "#/$defs/a0", "type": "object"}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    assert judge(request(response_format=fmt), summary('{"n": 1}'), 30) == []
    huge = orjson.dumps([["x"]] * 30_000 + [[1]]).decode()  # the break lies past the budget of visits
    fmt = {"type": "json_schema", "json_schema": {"name": "y", "schema": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}}}  # fmt: skip
    assert judge(request(response_format=fmt), summary(huge), 30) == []


def test_schemas_that_are_not_objects_or_odd_judge_nothing() -> None:
    for schema in ({"$schema": 5, "type": "object"}, {"type": 12}, {"type": ["nope"]}, {"required": "x"}):
        fmt = {"type": "json_schema", "json_schema": {"name": "b", "schema": schema}}
        assert judge(request(response_format=fmt), summary('{"n": 1}'), 30) == [], schema
