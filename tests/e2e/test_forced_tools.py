"""End to end: a forced tool call on SmolLM2, whose chat template cannot emit tool calls, comes back as a
well-formed tool call in each dialect, streamed and not; streamed, it is relayed as the engine generates it: the
call's id and name in the first delta, then its arguments piece by piece."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.conftest import Daemon, closing

pytestmark = pytest.mark.e2e

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_openai_required_and_named(daemon: Daemon) -> None:
    c = closing(openai.OpenAI(base_url=daemon.url + "/v1", api_key="x", max_retries=0, timeout=120))
    tools = [{"type": "function", "function": WEATHER}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = c.chat.completions.create(
            model="smollm2", messages=ASK, tools=tools, tool_choice=choice, max_tokens=200, temperature=0
        )
        assert r.choices[0].finish_reason == "tool_calls"
        [call] = r.choices[0].message.tool_calls or []
        assert call.function.name == "get_weather" and call.id
        assert isinstance(json.loads(call.function.arguments)["city"], str)
    stream = c.chat.completions.create(
        model="smollm2",
        messages=ASK,
        tools=tools,
        tool_choice="required",
        max_tokens=200,
        temperature=0,
        stream=True,
    )
    name, args, finish, deltas = "", "", None, []
    for chunk in stream:
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                deltas.append(tc)
                name += tc.function.name or "" if tc.function else ""
                args += tc.function.arguments or "" if tc.function else ""
            assert not ch.delta.content  # never the {"name", "arguments"} JSON Blazar constrained it to
            finish = ch.finish_reason or finish
    assert name == "get_weather" and finish == "tool_calls"
    assert isinstance(json.loads(args)["city"], str)
    # streamed as generated: the head first (before any argument), then the arguments in several pieces
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "get_weather"
    assert all(d.id is None and d.function and not d.function.name for d in deltas[1:])
    assert sum(1 for d in deltas if d.function and d.function.arguments) > 2, deltas


def test_anthropic_any_and_tool(daemon: Daemon) -> None:
    c = closing(anthropic.Anthropic(base_url=daemon.url, api_key="x", max_retries=0, timeout=120))
    tools = [
        {
            "name": WEATHER["name"],
            "description": WEATHER["description"],
            "input_schema": WEATHER["parameters"],
        }
    ]
    prompt_tokens = []
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        r = c.messages.create(
            model="smollm2",
            max_tokens=200,
            messages=ASK,
            tools=tools,
            tool_choice=choice,
            extra_body={"temperature": 0},
        )
        assert r.stop_reason == "tool_use"
        [block] = [b for b in r.content if b.type == "tool_use"]
        assert block.name == "get_weather" and isinstance(block.input, dict) and "city" in block.input
        prompt_tokens.append(r.usage.input_tokens)
    with c.messages.stream(
        model="smollm2",
        max_tokens=200,
        messages=ASK,
        tools=tools,
        tool_choice={"type": "any"},
        extra_body={"temperature": 0},
    ) as s:
        events = list(s)
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    # the engine reports the prompt's size before its first token, so message_start already knows it
    start = next(e for e in events if e.type == "message_start")
    assert start.type == "message_start" and start.message.usage.input_tokens == prompt_tokens[0] > 0
    [block] = [b for b in final.content if b.type == "tool_use"]
    assert block.name == "get_weather" and "city" in block.input
    # the tool_use block opens with its name, and its input comes as several input_json_delta events
    raw = [e.type for e in events]
    opened = next(e for e in events if e.type == "content_block_start")
    assert opened.content_block.type == "tool_use" and opened.content_block.name == "get_weather"
    pieces = [e for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(pieces) > 2 and raw.index("content_block_start") < raw.index("content_block_delta"), raw


def test_responses_streams_a_forced_call_as_it_is_generated(daemon: Daemon) -> None:
    """The Responses API's stream of a forced call: the function_call item (its name and call_id) is added
    before any argument, its arguments come as several delta events, and they join to what the done event and
    the completed response hold."""
    c = closing(openai.OpenAI(base_url=daemon.url + "/v1", api_key="x", max_retries=0, timeout=120))
    tool = {"type": "function", **WEATHER}
    stream = c.responses.create(
        model="smollm2", input="What is the weather in Paris?", tools=[tool],  # type: ignore[list-item]
        tool_choice="required", temperature=0.0, max_output_tokens=200, stream=True,
    )  # fmt: skip
    events = list(stream)
    kinds = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather" and added.item.call_id
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(pieces) > 2 and kinds.index("response.output_item.added") < kinds.index(
        "response.function_call_arguments.delta"
    ), kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert "".join(pieces) == done.arguments and isinstance(json.loads(done.arguments)["city"], str)
    assert not any(k == "response.output_text.delta" for k in kinds), kinds  # never Blazar's JSON wrapper
    completed = events[-1]
    assert completed.type == "response.completed", kinds
    [call] = [item for item in completed.response.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.arguments == done.arguments


def test_forced_call_cut_by_max_tokens_says_so(daemon: Daemon) -> None:
    c = closing(openai.OpenAI(base_url=daemon.url + "/v1", api_key="x", max_retries=0, timeout=120))
    tools = [{"type": "function", "function": WEATHER}]
    r = c.chat.completions.create(
        model="smollm2", messages=ASK, tools=tools, tool_choice="required", max_tokens=3, temperature=0
    )
    # cut before the tool's name was complete: no call yet, and never Blazar's {"name", "arguments"} wrapper
    assert r.choices[0].finish_reason == "length" and not r.choices[0].message.tool_calls
    assert not r.choices[0].message.content, r.choices[0].message.content
    r = c.chat.completions.create(
        model="smollm2", messages=ASK, tools=tools, tool_choice="required", max_tokens=30, temperature=0
    )
    # cut inside the arguments: the call as far as it got, as the API gives one
    assert r.choices[0].finish_reason == "length" and not r.choices[0].message.content
    [call] = r.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather" and '"name"' not in call.function.arguments, call
    a = closing(anthropic.Anthropic(base_url=daemon.url, api_key="x", max_retries=0, timeout=120))
    tool = {"name": WEATHER["name"], "description": "d", "input_schema": WEATHER["parameters"]}
    m = a.messages.create(
        model="smollm2", max_tokens=30, messages=ASK, tools=[tool], tool_choice={"type": "any"},
        extra_body={"temperature": 0},
    )  # fmt: skip
    assert m.stop_reason == "max_tokens" and all(
        b.type != "text" or '"name"' not in b.text for b in m.content
    ), m
    assert [b.name for b in m.content if b.type == "tool_use"] == ["get_weather"], m
    # streamed, the same cut call ends as the whole answer does: length / max_tokens, never a finished call
    chunks = list(
        c.chat.completions.create(
            model="smollm2", messages=ASK, tools=tools, tool_choice="required", max_tokens=30, temperature=0,
            stream=True,
        )
    )  # fmt: skip
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == [
        "length"
    ]
    with a.messages.stream(
        model="smollm2", max_tokens=30, messages=ASK, tools=[tool], tool_choice={"type": "any"},
        extra_body={"temperature": 0},
    ) as stream:  # fmt: skip
        assert stream.get_final_message().stop_reason == "max_tokens"


def test_a_schema_with_definitions_is_forced_too(daemon: Daemon) -> None:
    """A tool whose parameters use $defs (as Pydantic writes nested models): the call schema moves them to its root,
    where the engine resolves each $ref."""
    c = closing(anthropic.Anthropic(base_url=daemon.url, api_key="x", max_retries=0, timeout=120))
    schema = {
        "type": "object",
        "properties": {"where": {"$ref": "#/$defs/Place"}},
        "required": ["where"],
        "$defs": {
            "Place": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        },
    }
    tool = {"name": "get_weather", "description": "d", "input_schema": schema}
    r = c.messages.create(
        model="smollm2", max_tokens=200, messages=ASK, tools=[tool], tool_choice={"type": "any"},
        extra_body={"temperature": 0},
    )  # fmt: skip
    assert r.stop_reason == "tool_use", r
    [block] = [b for b in r.content if b.type == "tool_use"]
    assert isinstance(block.input, dict) and isinstance(block.input["where"]["city"], str), block
