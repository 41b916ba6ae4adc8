"""The native Responses API translator (``"responses"``) on the recorded llama-server streams: every event and
body validated by the official ``openai`` SDK's own pydantic types, the stream's bookkeeping (sequence numbers,
output and content indices, item ids) consistent, the items matching the summary, and the output byte-identical
at every chunk boundary and at random ones."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from blazar import _native
from tests.native.streams import BY_NAME, CASE_NAMES, CASES, MODEL, START_NS, Case
from tests.native.test_translate import cut, run, sse_events

RESPONSE_ID = "resp_0123456789abcdef01234567"
ECHO = '"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"instructions":null'
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def translate(pieces: list[bytes]) -> tuple[bytes, Any]:
    return run(_native.StreamTranslator, "responses", pieces, message_id=RESPONSE_ID, echo=ECHO)


def events_of(out: bytes) -> list[dict[str, Any]]:
    got = []
    for name, data in sse_events(out):
        event = json.loads(data)
        assert name == event["type"], "the SSE event name is the event's type"
        EVENTS.validate_python(event)  # the SDK's own types, required fields and all
        got.append(event)
    return got


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_every_event_is_one_the_sdk_accepts_in_order(case: Case) -> None:
    out, tr = translate([case.stream])
    events = events_of(out)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    summary = tr.summary()
    end = events[-1]
    if case.name == "engine_error":
        assert end["type"] == "response.failed" and end["response"]["status"] == "failed"
        assert end["response"]["error"]["message"].startswith("The model produced output")
        return
    expected = "response.incomplete" if summary["finish_reason"] == "length" else "response.completed"
    assert end["type"] == expected
    final = Response.model_validate(end["response"])
    assert final.id == RESPONSE_ID and final.model == MODEL and final.created_at == START_NS // 10**9
    assert final.usage is not None and final.usage.output_tokens == summary["usage"]["completion_tokens"]
    # items: added, their deltas, done, in output_index order; the text is the summary's
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["id"] for i in done] == added == [i.id for i in final.output]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.done"] == list(
        range(len(done))
    )
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == summary["text"] == final.output_text
    calls = [(i.name, i.arguments) for i in final.output if i.type == "function_call"]
    assert calls == [(c["function"]["name"], c["function"]["arguments"]) for c in summary["tool_calls"]]


def test_a_tool_call_streams_its_arguments() -> None:
    out, _ = translate([BY_NAME["tool_call"].stream])
    events = events_of(out)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    [args_done] = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert deltas == args_done["arguments"] and isinstance(json.loads(deltas), dict)
    [item] = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    ]
    assert item["arguments"] == deltas and item["call_id"] and item["status"] == "completed"


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_the_whole_body_is_a_response_the_sdk_accepts(case: Case) -> None:
    body, summary = _native.translate_whole("responses", MODEL, case.whole, message_id=RESPONSE_ID, echo=ECHO)
    data = json.loads(body)
    if case.name == "engine_error":
        assert data["error"]["message"].startswith("The model produced output")  # OpenAI's error object
        return
    r = Response.model_validate(data)
    assert r.output_text == summary["text"] and r.id == RESPONSE_ID
    assert r.status == ("incomplete" if summary["finish_reason"] == "length" else "completed")
    if r.status == "incomplete":
        assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_every_single_cut_gives_the_same_bytes(case: Case) -> None:
    whole, _ = translate([case.stream])
    data = case.stream
    for i in range(len(data) + 1):
        assert translate([data[:i], data[i:]])[0] == whole, f"cut at byte {i}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), data=st.data())
def test_random_cuts_give_the_same_bytes(case: Case, data: st.DataObject) -> None:
    points = data.draw(st.lists(st.integers(0, len(case.stream)), max_size=40))
    assert translate(cut(case.stream, points))[0] == translate([case.stream])[0]


def test_an_abort_fails_the_response_after_its_open_item() -> None:
    tr = _native.StreamTranslator("responses", MODEL, start_ns=START_NS, message_id=RESPONSE_ID)
    stream = BY_NAME["text"].stream
    out = tr.feed(stream[: len(stream) // 2]) + tr.abort("engine died")
    events = events_of(out)
    assert events[-2]["type"] == "response.output_item.done" and events[-2]["item"]["status"] == "incomplete"
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "engine died"}
    assert tr.done and tr.finish() == b""


def test_reasoning_then_text_are_two_items() -> None:
    """A thinking model's ``reasoning_content`` is a reasoning item of its own, before the message."""
    chunks = [
        {"choices": [{"index": 0, "delta": {"reasoning_content": "The user "}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "greets me."}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hello!"}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 4,
                "completion_tokens": 6,
                "prompt_tokens_details": {"cached_tokens": 3},
            },
        },
    ]
    stream = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    events = events_of(translate([stream])[0])
    final = Response.model_validate(events[-1]["response"])
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.content[0].text == "The user greets me." and message.type == "message"
    assert final.output_text == "Hello!" and final.usage is not None
    # the engine's cached prompt tokens; a chunk of reasoning counted as a reasoning token
    assert final.usage.input_tokens_details.cached_tokens == 3
    assert final.usage.output_tokens_details.reasoning_tokens == 2
    kinds = [e["type"] for e in events]
    assert (
        kinds.count("response.reasoning_text.delta") == 2 and kinds.count("response.output_item.added") == 2
    )
    body = json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "message": chunks[0]["choices"][0]["delta"] | {"content": "Hi"},
                    "finish_reason": "stop",
                }
            ]
        }
    )
    whole = Response.model_validate_json(
        _native.translate_whole("responses", MODEL, body.encode(), echo=ECHO)[0]
    )
    assert [i.type for i in whole.output] == ["reasoning", "message"] and whole.id.startswith("resp_")
