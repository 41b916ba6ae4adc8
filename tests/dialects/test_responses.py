"""The Responses API dialect, request side: what a body becomes, and errors that name the Responses fields the
client sent (its checks run on the Chat Completions body made of it, whose field names it must not see)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from blazar.dialects.canonical import DialectError
from blazar.dialects.responses import parse_responses

CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
USER = {"role": "user", "content": "weather?"}


def refused(body: dict[str, Any]) -> str:
    with pytest.raises(DialectError) as e:
        parse_responses(body)
    assert e.value.status == 400
    return e.value.message


def test_a_conversation_with_a_call_and_its_output() -> None:
    req = parse_responses(
        {"model": "m", "instructions": "Be brief.", "input": [USER, CALL, OUTPUT], "max_output_tokens": 9}
    )
    assert req.messages == [
        {"role": "system", "content": "Be brief."},
        USER,
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]  # fmt: skip
    assert req.params["max_tokens"] == 9 and not req.stream
    echo = orjson.loads("{" + (req.echo or "") + "}")
    assert echo["instructions"] == "Be brief." and echo["tools"] == [] and echo["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"tools": [{"type": "function", "parameters": {}}]}, "'tools[0].name' is required"),
        (
            {"tool_choice": "bogus"},
            '\'tool_choice\' must be "auto", "none", "required" or {"type": "function", "name": ...}',
        ),
        (
            {"input": [{"role": "assistant", "content": [{"type": "refusal"}]}, USER]},
            "input[0].content[0].refusal must be a string",
        ),
        (
            {
                "input": [
                    {"role": "system", "content": [{"type": "input_image", "image_url": "data:,"}]},
                    USER,
                ]
            },
            '\'input[0].content[0].type\' must be one of "input_text" here, got string "input_image"',
        ),
        ({"input": [USER, {**CALL, "name": ""}, OUTPUT]}, "input[1].name must be a non-empty string"),
        (
            {"input": [USER, {**CALL, "arguments": 5}, OUTPUT]},
            "input[1].arguments must be a non-empty string",
        ),
        (
            {"input": [USER, OUTPUT]},
            'input[1] is the output of call_id string "c1", but no function_call item',
        ),
        ({"input": [USER, CALL]}, "input[1] is a function_call with no function_call_output after it"),
        ({"input": [USER, CALL, OUTPUT, OUTPUT]}, 'input[3] is the output of call_id string "c1"'),
        ({"input": [USER, CALL, CALL, OUTPUT]}, 'input[2].call_id string "c1" is the call_id of input[1]'),
        (
            {"text": {"format": {"type": "json_schema", "schema": {}}}},
            "'text.format.name' must name the format",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": "o"}}},
            "'text.format.schema' must be",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {}, "strict": "y"}}},
            "'text.format.strict' must be a boolean",
        ),
        ({"text": {"verbosity": 5}}, "'text.verbosity' must be"),
        ({"user": 5}, "'user' must be a string, got integer 5"),
        ({"metadata": {"a": 1}}, "'metadata.a' must be a string of at most 512 characters"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "'metadata' must be an object of at most 16 keys"),
        ({"store": "yes"}, "'store' must be a boolean"),
        ({"truncation": "bogus"}, '\'truncation\' must be "auto" or "disabled"'),
        ({"temperature": 5}, "'temperature' must be from 0 to 2"),
        ({"max_output_tokens": 0}, "'max_output_tokens' must be an integer from 1"),
        ({"previous_response_id": "resp_1"}, "Blazar keeps no responses"),
        ({"messages": [USER]}, "'messages' is a Chat Completions field"),
    ],
)
def test_errors_name_the_responses_fields(body: dict[str, Any], said: str) -> None:
    message = refused({"model": "m", "input": "hi", **body})
    assert said in message, message
    for chat_word in ("messages[", "tool_calls", ".function.", "response_format", "max_completion_tokens"):
        assert chat_word not in message, message
