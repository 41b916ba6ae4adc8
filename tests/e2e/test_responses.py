"""End to end: OpenAI's Responses API (`/v1/responses`) through the official `openai` client's `responses`
resource and its stream helper, against `blazar serve` and a real llama-server + SmolLM2."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Daemon, closing

pytestmark = pytest.mark.e2e

ASK = "Name three colors."
SAMPLING: dict[str, Any] = {"temperature": 0.0, "max_output_tokens": 24, "extra_body": {"seed": 42}}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(d: Daemon) -> openai.OpenAI:
    return closing(openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=120))


def test_a_whole_response(daemon: Daemon) -> None:
    r = client(daemon).responses.create(model="smollm2", input=ASK, instructions="Be brief.", **SAMPLING)
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "smollm2"
    assert r.status in ("completed", "incomplete") and r.output_text
    assert r.instructions == "Be brief." and r.max_output_tokens == 24 and r.tools == []
    [message] = r.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert r.usage is not None and r.usage.input_tokens > 5 and 0 < r.usage.output_tokens <= 24
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_the_sdk_stream_helper_reassembles_the_whole_answer(daemon: Daemon) -> None:
    c = client(daemon)
    whole = c.responses.create(model="smollm2", input=ASK, **SAMPLING)
    with c.responses.stream(model="smollm2", input=ASK, **SAMPLING) as stream:
        events = list(stream)
        final = stream.get_final_response() if whole.status == "completed" else None
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-1] == ("response.completed" if whole.status == "completed" else "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text  # same sampling, same text
    last = events[-1].response  # type: ignore[union-attr]
    assert last.output_text == whole.output_text and last.usage is not None
    assert last.usage.output_tokens == whole.usage.output_tokens  # type: ignore[union-attr]
    if final is not None:
        assert final.output_text == whole.output_text


def test_a_response_cut_at_max_output_tokens_is_incomplete(daemon: Daemon) -> None:
    c = client(daemon)
    cut = {"temperature": 0.0, "max_output_tokens": 3}
    r = c.responses.create(model="smollm2", input="Write a long story about a dragon.", **cut)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 3  # type: ignore[union-attr]
    events = list(
        c.responses.create(model="smollm2", input="Write a long story about a dragon.", stream=True, **cut)
    )
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]


def test_a_conversation_with_a_function_call_and_its_output(daemon: Daemon) -> None:
    c = client(daemon)
    forced = c.responses.create(
        model="smollm2",
        input="What is the weather in Paris?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0.0,
        max_output_tokens=60,
    )
    calls = [item for item in forced.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert isinstance(json.loads(calls[0].arguments), dict) and calls[0].call_id
    # the call and its output go back as input items, as the SDK's users send them
    follow = c.responses.create(
        model="smollm2",
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "type": "function_call",
                "call_id": calls[0].call_id,
                "name": "get_weather",
                "arguments": calls[0].arguments,
            },
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 24 C"},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",  # the answer: SmolLM2's template cannot show tools, so "auto" would be a 400
        **SAMPLING,
    )
    assert follow.status in ("completed", "incomplete") and follow.output


def test_structured_output_through_text_format(daemon: Daemon) -> None:
    schema = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
    r = client(daemon).responses.create(
        model="smollm2",
        input="Name one color as JSON.",
        text={"format": {"type": "json_schema", "name": "color", "schema": schema}},
        temperature=0.0,
        max_output_tokens=40,
    )
    assert isinstance(json.loads(r.output_text)["color"], str)
    assert r.text is not None and r.text.format.type == "json_schema"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"model": "smollm2", "input": "hi", "previous_response_id": "resp_1"}, "keeps no responses"),
        ({"model": "smollm2", "input": "hi", "tools": [{"type": "web_search"}]}, "built-in tools"),
        (
            {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]},
            "send the conversation as 'input'",
        ),
        ({"model": "smollm2", "input": []}, "'input' is required"),
        ({"model": "smollm2", "input": [{"type": "item_reference", "id": "msg_1"}]}, "keeps no items"),
        ({"model": "smollm2", "input": "hi", "max_output_tokens": 0}, "'max_output_tokens' must be"),
        ({"model": "smollm2", "input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        ({"model": "smollm2", "input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ],
)
def test_bad_requests_get_openai_errors(daemon: Daemon, body: dict[str, Any], needle: str) -> None:
    r = httpx.post(daemon.url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert needle in error["message"] and error["type"] == "invalid_request_error"


def test_an_unknown_model_is_the_sdks_not_found(daemon: Daemon) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client(daemon).responses.create(model="ghost", input="hi")
    assert "ghost" in str(e.value)


def test_input_tokens_are_counted_by_the_models_template(daemon: Daemon) -> None:
    c = client(daemon)
    counted = c.responses.input_tokens.count(model="smollm2", input=ASK, instructions="Be brief.")
    assert counted.object == "response.input_tokens"
    r = c.responses.create(model="smollm2", input=ASK, instructions="Be brief.", **SAMPLING)
    assert r.usage is not None and counted.input_tokens == r.usage.input_tokens  # what the engine then read
    more = c.responses.input_tokens.count(model="smollm2", input=ASK + " And three animals.")
    assert more.input_tokens > 0
    with pytest.raises(openai.NotFoundError):
        c.responses.input_tokens.count(model="ghost", input="hi")
