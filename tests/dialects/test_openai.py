"""The OpenAI dialect: chat, completion and embedding bodies into the canonical request, and the error body."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from blazar.dialects import openai
from blazar.dialects.canonical import (
    ENGINE_CHAT,
    ENGINE_COMPLETION,
    ENGINE_EMBEDDING,
    ENGINE_INFILL,
    DialectError,
    render_engine,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], **extra}


def refused(parse: Any, body: Any) -> str:
    with pytest.raises(DialectError) as e:
        parse(body)
    assert e.value.status == 400
    return e.value.message


# ---------------------------------------------------------------------------------------------------------------
# chat


def test_minimal_chat() -> None:
    req = openai.parse_chat(chat())
    assert req.model == "smollm2"
    assert req.kind == "chat"
    assert req.messages == [{"role": "user", "content": "hi"}]
    assert req.stream is False and req.include_usage is False
    assert req.params == {} and req.tools is None and req.tool_choice is None and req.response_format is None
    assert req.keep_alive is None and req.notes == [] and not req.load_only


def test_every_documented_chat_parameter_passes_through() -> None:
    body = chat(
        temperature=0.5,
        top_p=0.9,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        seed=42,
        stop="END",
        max_tokens=10,
        logprobs=True,
        top_logprobs=3,
        logit_bias={"15043": -100},
        user="u1",
        metadata={"k": "v"},
        store=False,
        parallel_tool_calls=False,
        reasoning_effort="low",
        service_tier="auto",
        modalities=["text"],
        prediction={"type": "content", "content": "x"},
        prompt_cache_key="k",
        safety_identifier="s",
        verbosity="low",
    )
    req = openai.parse_chat(body)
    assert req.params == {
        "temperature": 0.5,
        "top_p": 0.9,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "seed": 42,
        "stop": ["END"],
        "max_tokens": 10,
        "logprobs": True,
        "top_logprobs": 3,
        "logit_bias": {"15043": -100},
        "user": "u1",
        "metadata": {"k": "v"},
        "store": False,
        "parallel_tool_calls": False,
        "reasoning_effort": "low",
        "service_tier": "auto",
        "modalities": ["text"],
        "prediction": {"type": "content", "content": "x"},
        "prompt_cache_key": "k",
        "safety_identifier": "s",
        "verbosity": "low",
    }


def test_llama_server_extras_pass_through() -> None:
    req = openai.parse_chat(
        chat(top_k=20, min_p=0.05, repeat_penalty=1.1, mirostat=2, chat_template_kwargs={"a": 1})
    )
    assert req.params == {
        "top_k": 20,
        "min_p": 0.05,
        "repeat_penalty": 1.1,
        "mirostat": 2,
        "chat_template_kwargs": {"a": 1},
    }


def test_unknown_extras_pass_through_and_nulls_are_dropped() -> None:
    req = openai.parse_chat(chat(some_future_field={"x": 1}, temperature=None, stop=None))
    assert req.params == {"some_future_field": {"x": 1}}


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert openai.parse_chat(chat(max_completion_tokens=7, max_tokens=99)).params == {"max_tokens": 7}
    assert openai.parse_chat(chat(max_completion_tokens=7)).params == {"max_tokens": 7}
    assert openai.parse_chat(chat(max_tokens=1)).params == {"max_tokens": 1}


def test_stream_and_include_usage() -> None:
    req = openai.parse_chat(chat(stream=True))
    assert req.stream and not req.include_usage
    req = openai.parse_chat(chat(stream=True, stream_options={"include_usage": True}))
    assert req.stream and req.include_usage
    assert not openai.parse_chat(chat(stream=False, stream_options={"include_usage": True})).include_usage
    assert "stream_options" not in req.params


def test_keep_alive_extension_is_taken_out() -> None:
    req = openai.parse_chat(chat(keep_alive="10m"))
    assert req.keep_alive == 600.0
    assert "keep_alive" not in req.params
    assert openai.parse_chat(chat(keep_alive=0)).keep_alive == 0.0
    assert "keep_alive must be" in refused(openai.parse_chat, chat(keep_alive="soon"))


def test_n_above_one_goes_to_the_engine() -> None:
    assert "n" not in openai.parse_chat(chat(n=1)).params
    assert openai.parse_chat(chat(n=3)).params["n"] == 3
    assert openai.parse_completion({"model": "m", "prompt": "x", "n": 2}).params["n"] == 2
    assert "'n' must be a positive integer, got integer 0" in refused(openai.parse_chat, chat(n=0))
    assert "got string" in refused(openai.parse_chat, chat(n="2"))


def test_developer_role_becomes_system_and_other_fields_survive() -> None:
    req = openai.parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": "hi", "name": "ann"},
            ],
        }
    )
    assert req.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi", "name": "ann"},
    ]


def test_images_in_content_parts() -> None:
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
        {"type": "image_url", "image_url": "https://example.com/cat.png"},
    ]
    req = openai.parse_chat({"model": "m", "messages": [{"role": "user", "content": parts}]})
    assert req.messages[0]["content"] == [
        parts[0],
        parts[1],
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]
    assert req.has_images()


def test_tool_conversation_round_trips_into_the_engine_body() -> None:
    messages = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
    ]
    body = {"model": "m", "messages": messages, "tools": [WEATHER], "tool_choice": "auto"}
    original = copy.deepcopy(body)
    req = openai.parse_chat(body)
    assert body == original  # the caller's body is untouched
    path, engine = render_engine(req)
    assert path == ENGINE_CHAT
    assert engine["messages"] == messages
    assert engine["tools"] == [WEATHER]
    assert engine["tool_choice"] == "auto"


def test_tool_call_arguments_given_as_an_object_are_serialised() -> None:
    msg = {
        "role": "assistant",
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}],
    }
    req = openai.parse_chat({"model": "m", "messages": [{"role": "user", "content": "x"}, msg]})
    assert req.messages[1]["tool_calls"] == [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    ]


def test_named_tool_choice() -> None:
    req = openai.parse_chat(
        chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    )
    assert req.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    _, engine = render_engine(req)
    assert engine["tool_choice"] == "required" and engine["tools"] == [WEATHER]


def test_required_tool_choice() -> None:
    assert openai.parse_chat(chat(tools=[WEATHER], tool_choice="required")).tool_choice == "required"
    assert openai.parse_chat(chat(tool_choice="none")).tool_choice == "none"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"tool_choice": "required"}, "'tool_choice' is \"required\" but no 'tools' were given"),
        ({"tools": [WEATHER], "tool_choice": "always"}, '\'tool_choice\' must be "none", "auto", "required"'),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "'tool_choice' names function 'nope', which is not in 'tools' (get_weather)",
        ),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function"}},
            "'tool_choice.function.name' must name a tool",
        ),
        ({"tools": {"a": 1}}, "'tools' must be an array"),
        ({"functions": [{"name": "f"}]}, "'functions' is the deprecated function-calling API"),
        ({"function_call": "auto"}, "send 'tool_choice'"),
    ],
)
def test_tool_errors(extra: dict[str, Any], needle: str) -> None:
    assert needle in refused(openai.parse_chat, chat(**extra))


def test_response_format_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    rf = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}
    req = openai.parse_chat(chat(response_format=rf))
    assert req.response_format == rf
    _, engine = render_engine(req)
    assert engine["response_format"] == rf


def test_response_format_json_object_and_text() -> None:
    assert openai.parse_chat(chat(response_format={"type": "json_object"})).response_format == {
        "type": "json_object"
    }
    assert openai.parse_chat(chat(response_format={"type": "text"})).response_format is None


@pytest.mark.parametrize(
    ("rf", "needle"),
    [
        ("json", "'response_format' must be an object, got string \"json\""),
        (
            {"type": "yaml"},
            '\'response_format.type\' must be "text", "json_object" or "json_schema", got string "yaml"',
        ),
        ({"type": "json_schema"}, "'response_format.json_schema' is required"),
        (
            {"type": "json_schema", "json_schema": {"schema": []}},
            "'response_format.json_schema.schema' must be a JSON schema object",
        ),
        ({"type": "json_object", "schema": "x"}, "'response_format.schema' must be a JSON schema object"),
    ],
)
def test_response_format_errors(rf: Any, needle: str) -> None:
    assert needle in refused(openai.parse_chat, chat(response_format=rf))


def test_logprobs() -> None:
    # llama-server gives none at top_logprobs 0 and 20 without it: one alternative is the fewest it can give
    assert openai.parse_chat(chat(logprobs=True)).params == {"logprobs": True, "top_logprobs": 1}
    assert openai.parse_chat(chat(logprobs=True, top_logprobs=0)).params == {
        "logprobs": True,
        "top_logprobs": 1,
    }
    assert openai.parse_chat(chat(logprobs=False)).params == {"logprobs": False}
    assert "'top_logprobs' needs 'logprobs': true" in refused(openai.parse_chat, chat(top_logprobs=2))
    assert "from 0 to 20, got integer 21" in refused(openai.parse_chat, chat(logprobs=True, top_logprobs=21))
    assert "'logprobs' must be a boolean, got integer 1" in refused(openai.parse_chat, chat(logprobs=1))


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"temperature": "hot"}, "'temperature' must be a number, got string \"hot\""),
        ({"temperature": True}, "'temperature' must be a number, got boolean true"),
        ({"temperature": 2.5}, "'temperature' must be from 0 to 2, got number 2.5"),
        ({"top_p": -0.1}, "'top_p' must be from 0 to 1, got number -0.1"),
        ({"presence_penalty": 3}, "'presence_penalty' must be from -2 to 2, got integer 3"),
        ({"frequency_penalty": -2.5}, "'frequency_penalty' must be from -2 to 2, got number -2.5"),
        ({"top_p": [1]}, "'top_p' must be a number, got an array of 1"),
        ({"seed": 1.5}, "'seed' must be an integer, got number 1.5"),
        ({"top_k": "40"}, "'top_k' must be an integer"),
        (
            {"max_tokens": -1},
            "'max_tokens' must be a positive integer, got integer -1; omit it for no limit",
        ),
        ({"max_tokens": 0}, "'max_tokens' must be a positive integer, got integer 0; omit it for no limit"),
        ({"max_completion_tokens": "9"}, "'max_completion_tokens' must be a positive integer"),
        # llama.cpp counts tokens in 32 bits: 2**31 wrapped to a refusal, 2**63-1 to "no limit"
        ({"max_tokens": 2**31}, "'max_tokens' must be at most 2147483647, got integer 2147483648"),
        ({"max_completion_tokens": 2**63 - 1}, "'max_completion_tokens' must be at most 2147483647"),
        ({"stop": 5}, "'stop' must be a string or an array of strings, got integer 5"),
        ({"stop": ["a", 1]}, "'stop' must be a string or an array of strings"),
        ({"stream": "yes"}, "'stream' must be a boolean, got string \"yes\""),
        ({"stream_options": True}, "'stream_options' must be an object"),
        ({"stream_options": {"include_usage": "y"}}, "'stream_options.include_usage' must be a boolean"),
        ({"user": 7}, "'user' must be a string"),
        ({"logit_bias": 3}, "'logit_bias' must be an object"),
        ({"parallel_tool_calls": "no"}, "'parallel_tool_calls' must be a boolean"),
    ],
)
def test_type_errors_name_field_given_and_allowed(extra: dict[str, Any], needle: str) -> None:
    assert needle in refused(openai.parse_chat, chat(**extra))


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([], "the request body must be a JSON object, got an array of 0"),
        (
            {"messages": [{"role": "user", "content": "x"}]},
            "'model' is required and must be a non-empty string naming a model, got nothing",
        ),
        ({"model": "", "messages": [{"role": "user", "content": "x"}]}, 'got string ""'),
        ({"model": 3, "messages": [{"role": "user", "content": "x"}]}, "got integer 3"),
        ({"model": "m"}, "'messages' is required and must be a non-empty array of message objects, got null"),
        ({"model": "m", "messages": []}, "'messages' is required and must be a non-empty array"),
        ({"model": "m", "messages": ["hi"]}, "'messages[0]' must be a message object, got string \"hi\""),
        (
            {"model": "m", "messages": [{"role": "bot", "content": "x"}]},
            '\'messages[0].role\' must be one of "system", "developer", "user", "assistant", "tool", got string "bot"',
        ),
        (
            {"model": "m", "messages": [{"role": "function", "content": "x"}]},
            "'messages[0].role' must be one of",
        ),
        (
            {"model": "m", "messages": [{"role": "user"}]},
            "'messages[0].content' is required for a user message",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": 5}]},
            "'messages[0].content' must be a string or an array of content parts, got integer 5",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "video"}]}]},
            '\'messages[0].content[0].type\' must be one of "text", "image_url", "input_audio", "input_video" here, got string "video"',
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": ["x"]}]},
            "'messages[0].content[0]' must be a content part object",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
            "'messages[0].content[0].text' must be a string",
        ),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            },
            "'messages[0].content[0].image_url' must be an object with a 'url'",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}
                ],
            },
            'must be one of "text" here',
        ),
        (
            {"model": "m", "messages": [{"role": "assistant"}]},
            "'messages[0]' is an assistant message with neither 'content' nor 'tool_calls'",
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "content": "18C"}]},
            "'messages[0].tool_call_id' is required for a tool message",
        ),
    ],
)
def test_message_errors(body: Any, needle: str) -> None:
    assert needle in refused(openai.parse_chat, body)


@pytest.mark.parametrize(
    ("calls", "needle"),
    [
        ({"id": "c"}, "'messages[1].tool_calls' must be an array of tool calls, got an object"),
        (["c"], "'messages[1].tool_calls[0]' must be a tool call object"),
        (
            [{"function": {"name": "f", "arguments": "{}"}}],
            "'messages[1].tool_calls[0].id' must be a non-empty string, got null",
        ),
        (
            [{"id": "c", "type": "custom", "function": {"name": "f"}}],
            "'messages[1].tool_calls[0].type' must be \"function\"",
        ),
        ([{"id": "c"}], "'messages[1].tool_calls[0].function' must be an object with 'name' and 'arguments'"),
        (
            [{"id": "c", "function": {"arguments": "{}"}}],
            "'messages[1].tool_calls[0].function.name' must be a non-empty string",
        ),
        (
            [{"id": "c", "function": {"name": "f", "arguments": 5}}],
            "'messages[1].tool_calls[0].function.arguments' must be a JSON-encoded string",
        ),
    ],
)
def test_malformed_tool_calls(calls: Any, needle: str) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": calls}],
    }
    assert needle in refused(openai.parse_chat, body)


# ---------------------------------------------------------------------------------------------------------------
# completions


def test_completion() -> None:
    req = openai.parse_completion(
        {
            "model": "m",
            "prompt": "Once",
            "max_tokens": 8,
            "stop": ["\n"],
            "logprobs": 2,
            "stream": True,
            "top_k": 5,
        }
    )
    assert req.kind == "completion" and req.prompt == "Once" and req.suffix is None
    assert req.params == {"max_tokens": 8, "stop": ["\n"], "logprobs": 2, "top_k": 5}
    path, engine = render_engine(req)
    assert path == ENGINE_COMPLETION
    assert engine["prompt"] == "Once" and engine["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("prompt", ["", "x", ["a", "b"], [1, 2, 3], [[1, 2], [3]], [12, "mixed"]])
def test_completion_prompt_shapes(prompt: Any) -> None:
    assert openai.parse_completion({"model": "m", "prompt": prompt}).prompt == prompt


def test_completion_suffix_renders_to_infill() -> None:
    req = openai.parse_completion(
        {"model": "m", "prompt": "def f():", "suffix": "  return 1", "max_tokens": 4}
    )
    assert req.suffix == "  return 1"
    path, engine = render_engine(req)
    assert path == ENGINE_INFILL and engine["n_predict"] == 4


def test_completion_response_format_becomes_json_schema() -> None:
    req = openai.parse_completion({"model": "m", "prompt": "p", "response_format": {"type": "json_object"}})
    assert render_engine(req)[1]["json_schema"] == {"type": "object"}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            {"prompt": None},
            "'prompt' is required and must be a string, an array of strings or an array of token ids, got null",
        ),
        ({"prompt": 5}, "got integer 5"),
        ({"prompt": [{"a": 1}]}, "'prompt' is required"),
        (
            {"prompt": "x", "best_of": 2},
            "'best_of' is integer 2, but the llama.cpp engine generates one candidate",
        ),
        ({"prompt": "x", "echo": 1}, "'echo' must be a boolean, got integer 1"),
        ({"prompt": "x", "echo": True, "stream": True}, "'echo' is answered whole: send stream false"),
        ({"prompt": "x", "echo": True, "suffix": "y"}, "'echo' and 'suffix' cannot be sent together"),
        ({"prompt": "x", "echo": True, "n": 2}, "'n' is integer 2, but 'echo' scores one choice per prompt"),
        ({"prompt": "", "echo": True}, "with 'echo', 'prompt' must not be empty"),
        ({"prompt": [], "echo": True}, "with 'echo', 'prompt' must be a string, an array of token ids"),
        ({"prompt": [1, "a"], "echo": True}, "(each scored alone), got"),
        ({"prompt": ["a", []], "echo": True}, "(each scored alone), got"),
        ({"prompt": "x", "max_tokens": 0, "echo": False}, "'max_tokens' must be a positive integer"),
        ({"prompt": "x", "suffix": 1}, "'suffix' must be a string"),
        ({"prompt": "x", "logprobs": True}, "'logprobs' must be an integer from 0"),
        ({"prompt": "x", "n": 0}, "'n' must be a positive integer"),
        ({"prompt": "x", "max_tokens": "1"}, "'max_tokens' must be a positive integer"),
        ({"prompt": "x", "max_tokens": 0}, "'max_tokens' must be a positive integer, got integer 0"),
    ],
)
def test_completion_errors(extra: dict[str, Any], needle: str) -> None:
    assert needle in refused(openai.parse_completion, {"model": "m", **extra})


def test_completion_accepts_best_of_one_and_echo_false() -> None:
    req = openai.parse_completion({"model": "m", "prompt": "x", "best_of": 1, "echo": False})
    assert req.params == {} and not req.echo_prompt


@pytest.mark.parametrize("prompt", ["The sky", [504, 3575], [[504, 3575], [12]], ["a", "b c"]])
def test_completion_echo_with_logprobs_scores_the_prompt(prompt: Any) -> None:
    req = openai.parse_completion(
        {"model": "m", "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0}
    )
    assert req.echo_prompt and req.params["max_tokens"] == 0 and req.params["logprobs"] == 1
    assert req.prompt == prompt


# ---------------------------------------------------------------------------------------------------------------
# embeddings


def test_embedding() -> None:
    req = openai.parse_embedding(
        {
            "model": "e",
            "input": ["a", "b"],
            "encoding_format": "base64",
            "dimensions": 64,
            "user": "u",
            "keep_alive": "1m",
        }
    )
    assert req.kind == "embedding" and req.input == ["a", "b"] and req.keep_alive == 60.0
    assert req.params == {"encoding_format": "base64", "dimensions": 64, "user": "u"}
    path, engine = render_engine(req)
    assert path == ENGINE_EMBEDDING
    assert engine == {
        "model": "e",
        "encoding_format": "base64",
        "dimensions": 64,
        "user": "u",
        "input": ["a", "b"],
    }


def test_late_chunking() -> None:
    req = openai.parse_embedding({"model": "e", "input": ["a", "b"], "late_chunking": True, "dimensions": 8})
    assert req.late_chunking and req.input == ["a", "b"] and "late_chunking" not in req.params
    assert req.notes == ["dimensions: late_chunking vectors have the model's own size"]
    one = openai.parse_embedding({"model": "e", "input": "one text", "late_chunking": True})
    assert one.input == ["one text"] and not one.notes
    off = openai.parse_embedding({"model": "e", "input": [1, 2], "late_chunking": False})
    assert not off.late_chunking and off.input == [1, 2]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"input": "a", "late_chunking": "yes"}, "'late_chunking' must be a boolean, got string"),
        (
            {"input": [1, 2], "late_chunking": True},
            "array of non-empty strings (the chunks of one text, in order)",
        ),
        ({"input": ["a", ""], "late_chunking": True}, 'got string "" at input[1]'),
        ({"input": ["a"] * 2049, "late_chunking": True}, "late_chunking takes at most 2048 chunks, got 2049"),
        (
            {},
            "'input' is required and must be a non-empty string, an array of strings, an array of token ids or an"
            " array of arrays of token ids (one kind throughout), got nothing",
        ),
        ({"input": ["a", 5]}, "(one kind throughout), got an array of 2"),  # would get one vector back
        ({"input": [5, "a", "b"]}, "(one kind throughout), got an array of 3"),
        ({"input": ""}, 'got string ""'),
        ({"input": []}, "got an array of 0"),
        ({"input": {"text": "a"}}, "got an object"),
        ({"input": "a", "encoding_format": "int8"}, '\'encoding_format\' must be "float" or "base64"'),
        ({"input": "a", "dimensions": 0}, "'dimensions' must be a positive integer"),
    ],
)
def test_embedding_errors(extra: dict[str, Any], needle: str) -> None:
    assert needle in refused(openai.parse_embedding, {"model": "e", **extra})


# ---------------------------------------------------------------------------------------------------------------
# errors


def test_render_error() -> None:
    assert orjson.loads(openai.render_error(400, "bad")) == {
        "error": {"message": "bad", "type": "invalid_request_error", "code": 400}
    }
    assert orjson.loads(openai.render_error(404, "no model"))["error"]["type"] == "invalid_request_error"
    assert orjson.loads(openai.render_error(503, "busy")) == {
        "error": {"message": "busy", "type": "blazar_error", "code": 503}
    }
    assert (
        orjson.loads(openai.render_error(502, "crash", kind="engine_error"))["error"]["type"]
        == "engine_error"
    )
    assert orjson.loads(openai.render_error(401, "key", kind="blazar_error"))["error"] == {
        "message": "key",
        "type": "blazar_error",
        "code": 401,
    }


def test_an_assistant_refusal_part_reaches_the_engine_as_text() -> None:
    req = openai.parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
                {"role": "user", "content": "ok"},
            ],
        }
    )
    assert req.messages[1]["content"] == [{"type": "text", "text": "I cannot."}]
    bad = {"model": "m", "messages": [{"role": "assistant", "content": [{"type": "refusal", "refusal": 1}]}]}
    assert "'messages[0].content[0].refusal' must be a string" in refused(openai.parse_chat, bad)


def test_openai_fields_no_engine_reads_are_named() -> None:
    req = openai.parse_chat(chat(store=True, metadata={"a": "b"}, verbosity="low"))
    assert req.notes == [
        "store: Blazar keeps no completions",
        "metadata: accepted and not used",
        "verbosity: the model's length follows the prompt and max_tokens",
    ]
    assert openai.parse_chat(chat(store=False, modalities=["text"])).notes == []
    # audio output is refused (a client would read message.audio), not answered as text
    for asked in (
        {"modalities": ["text", "audio"], "audio": {"voice": "alloy"}},
        {"audio": {"voice": "alloy"}},
    ):
        assert "asks for audio output, which local models do not make" in refused(
            openai.parse_chat, chat(**asked)
        )


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"logit_bias": {"123": "x"}}, "'logit_bias' must be an object mapping token ids"),
        ({"logit_bias": {"123": 200}}, "biases from -100 to 100"),
        ({"logit_bias": {"abc": 1}}, "'logit_bias' must be"),
        ({"reasoning_effort": "extreme"}, "'reasoning_effort' must be \"none\""),
        ({"service_tier": 5}, "'service_tier' must be \"auto\""),
        ({"metadata": {"a": 1}}, "'metadata.a' must be a string of at most 512 characters"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "'metadata' must be an object of at most 16"),
        ({"metadata": {"k" * 65: "v"}}, "keys up to 64 characters"),
        ({"modalities": "audio"}, "'modalities' must be an array"),
        ({"reasoning_format": "bogus"}, "'reasoning_format' must be \"none\""),
        ({"messages": [{"role": "user", "content": "x", "name": 5}]}, "'messages[0].name' must be a string"),
        (
            {"messages": [{"role": "assistant", "content": "y", "reasoning_content": 5}]},
            "'messages[0].reasoning_content' must be a string",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}}},
            "'response_format.json_schema.name' must be a name of 1 to 64 letters",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"strict": "yes", "schema": {}}}},
            "'response_format.json_schema.strict' must be a boolean",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]},
            "'tools[0].function.strict' must be a boolean",
        ),
    ],
)
def test_typed_openai_fields(extra: dict[str, Any], needle: str) -> None:
    spaced = chat(response_format={"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}})
    assert "'response_format.json_schema.name' must be a name" in refused(openai.parse_chat, spaced)
    assert needle in refused(openai.parse_chat, chat(**extra))
    ok = chat(logit_bias={"123": -100, "7": 5.5}, reasoning_effort="low", service_tier="auto")
    assert openai.parse_chat(ok).params["logit_bias"] == {"123": -100, "7": 5.5}
