"""The Anthropic dialect: /v1/messages and /v1/messages/count_tokens bodies, and the error body."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest

from blazar.dialects import anthropic
from blazar.dialects.canonical import ENGINE_CHAT, DialectError, render_engine

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "input_schema": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}
WEATHER_FN = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "parameters": WEATHER["input_schema"],
    },
}


def msgs(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hello"}],
        **extra,
    }


def refused(parse: Any, body: Any) -> str:
    with pytest.raises(DialectError) as e:
        parse(body)
    assert e.value.status == 400
    return e.value.message


# ---------------------------------------------------------------------------------------------------------------
# /v1/messages: top level


def test_minimal_message() -> None:
    req = anthropic.parse_messages(msgs())
    assert req.kind == "chat" and req.model == "claude-x"
    assert req.messages == [{"role": "user", "content": "Hello"}]
    assert req.params == {"max_tokens": 64}
    assert req.stream is False and req.include_usage is False
    assert req.tools is None and req.tool_choice is None and req.notes == []


def test_max_tokens_is_required() -> None:
    body = msgs()
    del body["max_tokens"]
    assert refused(anthropic.parse_messages, body) == "max_tokens: Field required"
    assert refused(anthropic.parse_messages, msgs(max_tokens=None)) == "max_tokens: Field required"
    assert 'max_tokens: Input should be an integer greater than or equal to 1, got string "5"' in refused(
        anthropic.parse_messages, msgs(max_tokens="5")
    )
    assert "got integer -1" in refused(anthropic.parse_messages, msgs(max_tokens=-1))
    assert refused(anthropic.parse_messages, msgs(max_tokens=2**63 - 1)) == (
        "max_tokens: Input should be less than or equal to 2147483647, got integer 9223372036854775807"
    )
    assert "greater than or equal to 1, got integer 0" in refused(
        anthropic.parse_messages, msgs(max_tokens=0)
    )
    assert anthropic.parse_messages(msgs(max_tokens=1)).params == {"max_tokens": 1}


def test_sampling_and_stop_sequences() -> None:
    req = anthropic.parse_messages(
        msgs(temperature=0, top_p=0.9, top_k=40, stop_sequences=["\n\nHuman:", "END"])
    )
    assert req.params == {
        "max_tokens": 64,
        "temperature": 0,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["\n\nHuman:", "END"],
        "verbose": True,
        "response_fields": ["stop_type", "stopping_word"],
    }
    assert anthropic.parse_messages(msgs(stop_sequences=[])).params == {"max_tokens": 64}
    assert anthropic.parse_messages(msgs(stop_sequences=[""])).params == {"max_tokens": 64}


def test_stop_sequences_ask_the_engine_which_one_matched() -> None:
    """llama-server says which stop word matched only in ``__verbose``: the engine body asks for it, trimmed to the
    two fields the translator reads, and only when there are stop sequences."""
    _, engine = render_engine(anthropic.parse_messages(msgs(stop_sequences=["END"], stream=True)))
    assert engine["stop"] == ["END"]
    assert engine["verbose"] is True
    assert engine["response_fields"] == ["stop_type", "stopping_word"]
    for body in (msgs(), msgs(stop_sequences=[])):
        _, engine = render_engine(anthropic.parse_messages(body))
        assert "verbose" not in engine and "response_fields" not in engine and "stop" not in engine


def test_stream() -> None:
    req = anthropic.parse_messages(msgs(stream=True))
    assert req.stream and req.include_usage
    _, engine = render_engine(req)
    assert engine["stream_options"] == {"include_usage": True}


def test_metadata_is_accepted_and_noted() -> None:
    req = anthropic.parse_messages(msgs(metadata={"user_id": "u-1"}))
    assert req.notes == ["metadata is accepted and not used"]
    assert "metadata" not in render_engine(req)[1]


def test_hosted_and_unknown_fields_are_noted() -> None:
    req = anthropic.parse_messages(msgs(service_tier="auto", frobnicate=1))
    assert req.notes == [
        "service_tier is accepted and not used by a local engine",
        "frobnicate is not a Messages API field Blazar knows and is ignored",
    ]


def test_system_string_and_blocks() -> None:
    req = anthropic.parse_messages(msgs(system="You are terse."))
    assert req.messages[0] == {"role": "system", "content": "You are terse."}
    blocks = [
        {"type": "text", "text": "Rule one."},
        {"type": "text", "text": "Rule two.", "cache_control": {"type": "ephemeral"}},
    ]
    req = anthropic.parse_messages(msgs(system=blocks))
    assert req.messages[0] == {"role": "system", "content": "Rule one.\nRule two."}
    assert req.notes == ["cache_control is ignored: the engine reuses its prompt cache by itself"]
    assert anthropic.parse_messages(msgs(system="")).messages == [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"temperature": "warm"}, 'temperature: Input should be a valid number, got string "warm"'),
        ({"top_p": True}, "top_p: Input should be a valid number, got boolean true"),
        ({"top_k": 1.5}, "top_k: Input should be a valid integer, got number 1.5"),
        ({"stop_sequences": "END"}, 'stop_sequences: Input should be a list of strings, got string "END"'),
        ({"stop_sequences": ["a", 2]}, "stop_sequences: Input should be a list of strings"),
        ({"stream": "true"}, "stream: Input should be a valid boolean"),
        ({"metadata": "x"}, "metadata: Input should be an object"),
        ({"system": 5}, "system: Input should be a string or a list of text blocks, got integer 5"),
        ({"system": [{"type": "image"}]}, "system.0: Input should be a text block"),
        ({"keep_alive": "later"}, "keep_alive must be a number of seconds"),
        (
            {"thinking": {"type": "maybe"}},
            "thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'",
        ),
        ({"thinking": "x"}, "thinking: Input should be an object with a 'type'"),
        (
            {"thinking": {"type": "enabled", "budget_tokens": "x"}},
            'thinking.budget_tokens: Input should be a valid integer, got string "x"',
        ),
        ({"output_config": "json"}, "output_config: Input should be an object"),
        (
            {"output_format": {"type": "json_object"}},
            'output_format: Input should be {"type": "json_schema", "schema": {...}}',
        ),
    ],
)
def test_top_level_errors(extra: dict[str, Any], needle: str) -> None:
    assert needle in refused(anthropic.parse_messages, msgs(**extra))


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([1], "the request body must be a JSON object"),
        ({"max_tokens": 5, "messages": []}, "model: Field required"),
        (
            {"model": 3, "max_tokens": 5, "messages": []},
            "model: Input should be a non-empty string, got integer 3",
        ),
        ({"model": "m", "max_tokens": 5}, "messages: Field required"),
        (
            {"model": "m", "max_tokens": 5, "messages": {}},
            "messages: Input should be a list of messages, got an object",
        ),
        ({"model": "m", "max_tokens": 5, "messages": []}, "messages: at least one message is required"),
    ],
)
def test_required_fields(body: Any, needle: str) -> None:
    assert needle in refused(anthropic.parse_messages, body)


def test_keep_alive_extension() -> None:
    assert anthropic.parse_messages(msgs(keep_alive="2m")).keep_alive == 120.0


def test_thinking() -> None:
    req = anthropic.parse_messages(msgs(thinking={"type": "enabled", "budget_tokens": 1024}))
    assert req.params["chat_template_kwargs"] == {"enable_thinking": True}
    assert req.notes == ["thinking.budget_tokens is not applied: the engine thinks within max_tokens"]
    req = anthropic.parse_messages(msgs(thinking={"type": "disabled"}))
    assert req.params["chat_template_kwargs"] == {"enable_thinking": False}
    assert req.params["reasoning_effort"] == "none"
    assert anthropic.parse_messages(msgs(thinking={"type": "adaptive"})).params == {"max_tokens": 64}


def test_structured_output() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    want = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert (
        anthropic.parse_messages(
            msgs(output_config={"format": {"type": "json_schema", "schema": schema}})
        ).response_format
        == want
    )
    assert (
        anthropic.parse_messages(
            msgs(output_format={"type": "json_schema", "schema": schema})
        ).response_format
        == want
    )
    assert anthropic.parse_messages(msgs(output_config={"effort": "low"})).response_format is None


# ---------------------------------------------------------------------------------------------------------------
# Content blocks


def test_text_blocks_join_with_newlines() -> None:
    req = anthropic.parse_messages(
        msgs(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "<reminder>"}, {"type": "text", "text": "Hi"}],
                }
            ]
        )
    )
    assert req.messages == [{"role": "user", "content": "<reminder>\nHi"}]


def test_images_base64_and_url() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "text", "text": "Compare these."},
    ]
    req = anthropic.parse_messages(msgs(messages=[{"role": "user", "content": content}]))
    assert req.messages == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "text", "text": "Compare these."},
            ],
        }
    ]
    assert req.has_images()


def test_plain_text_documents_become_text() -> None:
    content = [
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "The grass is green."},
        },
        {
            "type": "document",
            "source": {
                "type": "content",
                "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            },
        },
        {"type": "text", "text": "Summarise."},
    ]
    req = anthropic.parse_messages(msgs(messages=[{"role": "user", "content": content}]))
    assert req.messages == [{"role": "user", "content": "The grass is green.\nA\nB\nSummarise."}]


def test_content_documents_as_the_sdk_types_them() -> None:
    # a content source's content is a string or text and image blocks; title, context and citations are noted
    doc = {
        "type": "document",
        "source": {"type": "content", "content": "hello doc"},
        "title": "T",
        "context": "C",
    }
    req = anthropic.parse_messages(msgs(messages=[{"role": "user", "content": [doc]}]))
    assert req.messages == [{"role": "user", "content": "hello doc"}]
    assert "document title, context not shown to the model: only its text is" in req.notes
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    mixed = {
        "type": "document",
        "source": {"type": "content", "content": [{"type": "text", "text": "A"}, image]},
    }
    req = anthropic.parse_messages(msgs(messages=[{"role": "user", "content": [mixed]}]))
    parts = req.messages[0]["content"]
    assert parts[0] == {"type": "text", "text": "A"} and parts[1]["type"] == "image_url"
    bad = {"type": "document", "source": {"type": "content", "content": [{"type": "tool_use"}]}}
    with pytest.raises(
        DialectError, match=r"messages\.0\.content\.0\.source\.content\.0\.type: Input should be"
    ):
        anthropic.parse_messages(msgs(messages=[{"role": "user", "content": [bad]}]))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"metadata": {"user_id": 5}}, "metadata.user_id: Input should be a valid string, got integer 5"),
        ({"metadata": {"foo": 1}}, "metadata.foo: Extra inputs are not permitted"),
        ({"service_tier": "fast"}, "service_tier: Input should be 'auto' or 'standard_only'"),
        ({"tools": [WEATHER, WEATHER]}, "tools: Tool names must be unique; 'get_weather' is given twice"),
        ({"tools": [{**WEATHER, "name": "a b!"}]}, "tools.0.name: String should match pattern"),
    ],
)
def test_fields_the_api_types_strictly(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(DialectError, match=message.replace(".", r"\.").replace("(", r"\(")) as e:
        anthropic.parse_messages(msgs(**extra))
    assert e.value.status == 400
    ok = anthropic.parse_messages(msgs(metadata={"user_id": "u-1"}, service_tier="auto"))
    assert "metadata is accepted and not used" in ok.notes
    anthropic.parse_messages(
        msgs(metadata={"user_id": None}, service_tier=None)
    )  # null is absent, as elsewhere


def test_tool_round_trip_into_the_engine_body() -> None:
    body = msgs(
        tools=[WEATHER],
        tool_choice={"type": "auto"},
        messages=[
            {"role": "user", "content": "What's the weather in SF?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"},
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "get_weather",
                        "input": {"location": "San Francisco, CA"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "15 degrees"},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
    )
    original = copy.deepcopy(body)
    req = anthropic.parse_messages(body)
    assert body == original
    path, engine = render_engine(req)
    assert path == ENGINE_CHAT
    assert engine["messages"] == [
        {"role": "user", "content": "What's the weather in SF?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "I should call the tool.",
            "tool_calls": [
                {
                    "id": "toolu_01",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location":"San Francisco, CA"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01", "content": "15 degrees", "name": "get_weather"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert engine["tools"] == [WEATHER_FN]
    assert engine["tool_choice"] == "auto"
    assert engine["max_tokens"] == 64


def test_assistant_with_only_tool_use_has_empty_text() -> None:
    req = anthropic.parse_messages(
        msgs(
            messages=[
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            ]
        )
    )
    assert req.messages[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }


def test_tool_result_blocks_errors_and_images() -> None:
    req = anthropic.parse_messages(
        msgs(
            messages=[
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "a", "name": "shot", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "a",
                            "is_error": True,
                            "content": [
                                {"type": "text", "text": "partial"},
                                {
                                    "type": "image",
                                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                                },
                            ],
                        },
                        {"type": "tool_result", "tool_use_id": "zzz"},
                    ],
                },
            ]
        )
    )
    assert req.messages[1] == {
        "role": "tool",
        "tool_call_id": "a",
        "name": "shot",
        "content": [
            {"type": "text", "text": "Error:"},
            {"type": "text", "text": "partial"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    }
    assert req.messages[2] == {"role": "tool", "tool_call_id": "zzz", "content": ""}
    assert len(req.messages) == 3  # no empty user message after tool results
    assert req.notes == ["tool_result is_error is passed to the model as an 'Error:' line before the result"]


def test_error_tool_result_text_is_prefixed() -> None:
    req = anthropic.parse_messages(
        msgs(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "boom", "is_error": True}
                    ],
                }
            ]
        )
    )
    assert req.messages == [{"role": "tool", "tool_call_id": "a", "content": "Error:\nboom"}]


def test_consecutive_turns_of_one_role_are_combined() -> None:
    req = anthropic.parse_messages(
        msgs(
            messages=[
                {"role": "user", "content": "one"},
                {"role": "user", "content": [{"type": "text", "text": "two"}]},
                {"role": "assistant", "content": "three"},
                {"role": "assistant", "content": "four"},
            ]
        )
    )
    assert req.messages == [
        {"role": "user", "content": "one\ntwo"},
        {"role": "assistant", "content": "three\nfour"},
    ]


def test_redacted_thinking_is_dropped_with_a_note() -> None:
    req = anthropic.parse_messages(
        msgs(
            messages=[
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": [{"type": "redacted_thinking", "data": "zz"}, {"type": "text", "text": "ok"}],
                },
            ]
        )
    )
    assert req.messages[1] == {"role": "assistant", "content": "ok"}
    assert req.notes == ["redacted_thinking blocks are dropped: only the API that wrote them can read them"]


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        (["hi"], 'messages.0: Input should be an object, got string "hi"'),
        (
            [{"role": "system", "content": "x"}],
            "messages: at least one user or assistant message is required",
        ),
        (
            [{"role": "system", "content": 5}, {"role": "user", "content": "hi"}],
            "messages.0.content: Input should be a string or a list of text blocks, got integer 5",
        ),
        (
            [{"role": "tool", "content": "x"}],
            "messages.0.role: Input should be 'user' or 'assistant', got string \"tool\"",
        ),
        ([{"role": "user"}], "messages.0.content: Field required"),
        (
            [{"role": "user", "content": 5}],
            "messages.0.content: Input should be a string or a list of content blocks, got integer 5",
        ),
        ([{"role": "user", "content": [5]}], "messages.0.content.0: Input should be a content block object"),
        (
            [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}],
            "messages.0.content.0.type: Input should be one of 'text', 'image', 'document', 'tool_result' here, got string \"tool_use\"",
        ),
        (
            [{"role": "assistant", "content": [{"type": "image", "source": {}}]}],
            "messages.0.content.0.type: Input should be one of 'text', 'tool_use', 'thinking', 'redacted_thinking' here",
        ),
        (
            [{"role": "user", "content": [{"type": "text"}]}],
            "messages.0.content.0.text: Input should be a valid string, got null",
        ),
        ([{"role": "user", "content": [{"type": "image"}]}], "messages.0.content.0.source: Field required"),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": PNG}}]}],
            "messages.0.content.0.source.media_type: Input should be an image media type",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "@@"},
                        }
                    ],
                }
            ],
            "messages.0.content.0.source.data is not valid base64",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "url"}}]}],
            "messages.0.content.0.source.url: Field required",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}],
            "file sources need the Files API",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "ftp"}}]}],
            "source.type: Input should be 'base64' or 'url'",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "base64", "media_type": "application/pdf", "data": "x"},
                        }
                    ],
                }
            ],
            "only plain-text documents can be read by a local engine",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
            "messages.0.content.0.id: Field required",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "input": {}}]}],
            "messages.0.content.0.name: Field required",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "{}"}]}],
            "messages.0.content.0.input: Input should be an object of arguments, got string",
        ),
        (
            [{"role": "assistant", "content": [{"type": "thinking"}]}],
            "messages.0.content.0.thinking: Input should be a valid string",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result"}]}],
            "messages.0.content.0.tool_use_id: Field required",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": 3}]}],
            "messages.0.content.0.content: Input should be a string or a list of text and image blocks",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "tool_result"}]}
                    ],
                }
            ],
            "messages.0.content.0.content.0.type: Input should be one of 'text', 'image', 'document' here",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "is_error": "yes"}]}],
            "messages.0.content.0.is_error: Input should be a valid boolean",
        ),
    ],
)
def test_message_errors(messages: Any, needle: str) -> None:
    assert needle in refused(anthropic.parse_messages, msgs(messages=messages))


# ---------------------------------------------------------------------------------------------------------------
# Tools and tool_choice


@pytest.mark.parametrize(
    ("choice", "want", "params"),
    [
        ({"type": "auto"}, "auto", {}),
        ({"type": "any"}, "required", {}),
        ({"type": "none"}, "none", {}),
        (
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
            {},
        ),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", {"parallel_tool_calls": False}),
        ({"type": "any", "disable_parallel_tool_use": False}, "required", {"parallel_tool_calls": True}),
    ],
)
def test_tool_choice(choice: dict[str, Any], want: Any, params: dict[str, Any]) -> None:
    req = anthropic.parse_messages(msgs(tools=[WEATHER], tool_choice=choice))
    assert req.tools == [WEATHER_FN]
    assert req.tool_choice == want
    assert req.params == {"max_tokens": 64, **params}


def test_forced_tool_renders_as_required_over_that_tool() -> None:
    other = {"name": "get_time", "input_schema": {"type": "object"}}
    req = anthropic.parse_messages(
        msgs(tools=[WEATHER, other], tool_choice={"type": "tool", "name": "get_time"})
    )
    _, engine = render_engine(req)
    assert engine["tool_choice"] == "required"
    assert engine["tools"] == [
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    ]


def test_custom_tool_type_and_cache_control_are_accepted() -> None:
    req = anthropic.parse_messages(
        msgs(tools=[{**WEATHER, "type": "custom", "cache_control": {"type": "ephemeral"}}])
    )
    assert req.tools == [WEATHER_FN]
    assert req.notes == ["cache_control is ignored: the engine reuses its prompt cache by itself"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"tools": {"name": "x"}}, "tools: Input should be a list of tools, got an object"),
        ({"tools": ["x"]}, "tools.0: Input should be an object"),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            'tools.0.type: string "web_search_20250305" is an Anthropic-hosted tool that a local engine cannot run',
        ),
        ({"tools": [{"input_schema": {}}]}, "tools.0.name: Field required"),
        ({"tools": [{"name": "f"}]}, "tools.0.input_schema: Field required"),
        (
            {"tools": [{"name": "f", "input_schema": "x"}]},
            "tools.0.input_schema: Input should be a JSON schema object",
        ),
        (
            {"tools": [{"name": "f", "input_schema": {}, "description": 1}]},
            "tools.0.description: Input should be a string",
        ),
        ({"tool_choice": "auto"}, "tool_choice: Input should be an object with a type"),
        (
            {"tool_choice": {"type": "sometimes"}},
            "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'",
        ),
        ({"tool_choice": {"type": "any"}}, 'tool_choice: {"type": "any"} needs at least one tool in tools'),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "tool"}},
            'tool_choice.name: Field required when type is "tool"',
        ),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
            "tool_choice.name: 'nope' is not one of the tools given (get_weather)",
        ),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "auto", "disable_parallel_tool_use": "y"}},
            "tool_choice.disable_parallel_tool_use: Input should be a valid boolean",
        ),
    ],
)
def test_tool_errors(extra: dict[str, Any], needle: str) -> None:
    assert needle in refused(anthropic.parse_messages, msgs(**extra))


# ---------------------------------------------------------------------------------------------------------------
# count_tokens


def test_count_tokens_needs_no_max_tokens() -> None:
    req = anthropic.parse_count_tokens(
        {"model": "m", "system": "S", "messages": [{"role": "user", "content": "Hello"}], "tools": [WEATHER]}
    )
    assert req.kind == "chat" and not req.stream
    assert req.messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "Hello"}]
    assert req.tools == [WEATHER_FN]
    assert req.params == {} and req.notes == []


def test_count_tokens_notes_generation_fields() -> None:
    req = anthropic.parse_count_tokens(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    )
    assert req.notes == ["max_tokens is not a Messages API field Blazar knows and is ignored"]
    assert "messages: Field required" in refused(anthropic.parse_count_tokens, {"model": "m"})


# ---------------------------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (402, "billing_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (409, "conflict_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "api_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ],
)
def test_render_error(status: int, kind: str) -> None:
    assert orjson.loads(anthropic.render_error(status, "msg")) == {
        "type": "error",
        "error": {"type": kind, "message": "msg"},
    }


def test_render_error_with_request_id() -> None:
    body = orjson.loads(anthropic.render_error(400, "max_tokens: Field required", request_id="req_1"))
    assert body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
        "request_id": "req_1",
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"temperature": 2}, "temperature: Input should be between 0 and 1, got integer 2"),
        ({"temperature": -0.5}, "temperature: Input should be between 0 and 1"),
        ({"top_p": 1.5}, "top_p: Input should be between 0 and 1"),
        ({"top_k": -3}, "top_k: Input should be greater than or equal to 0, got integer -3"),
        (
            {"messages": [{"role": "user", "content": ""}]},
            "messages.0: all messages must have non-empty content except for the optional final assistant message",
        ),
        (
            {"messages": [{"role": "user", "content": []}]},
            "messages.0: all messages must have non-empty content",
        ),
    ],
)
def test_values_the_api_refuses_are_refused(change: dict[str, Any], message: str) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **change}
    with pytest.raises(DialectError) as e:
        anthropic.parse_messages(body)
    assert e.value.status == 400 and e.value.message.startswith(message), e.value.message


def test_a_closing_assistant_message_may_be_empty() -> None:
    body = {"model": "m", "max_tokens": 5, "temperature": 1, "top_k": 0}
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]
    assert anthropic.parse_messages({**body, "messages": turns}).params["temperature"] == 1


def test_system_messages_inside_messages_join_the_system_prompt() -> None:
    """Anthropic's API refuses a "system" message role; Claude Code sends one, so its text (a string or text
    blocks) follows the top-level system prompt, in order, and the conversation keeps its turns."""
    req = anthropic.parse_messages(
        {
            "model": "m",
            "max_tokens": 5,
            "system": [
                {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "text", "text": "Answer in English."}]},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "bye"},
            ],
        }
    )
    assert req.messages == [
        {"role": "system", "content": "You are Claude Code.\nBe brief.\nAnswer in English."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"},
    ]
