"""The Ollama dialect: /api/chat, /api/generate, /api/embed and /api/embeddings bodies, and the error body."""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import orjson
import pytest

from blazar.dialects import ollama
from blazar.dialects.canonical import (
    ENGINE_CHAT,
    ENGINE_COMPLETION,
    ENGINE_EMBEDDING,
    ENGINE_INFILL,
    DialectError,
    render_engine,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\0" * 16).decode()

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather in a given city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "llama3.2", "messages": [{"role": "user", "content": "why is the sky blue?"}], **extra}


def refused(parse: Any, body: Any) -> str:
    with pytest.raises(DialectError) as e:
        parse(body)
    assert e.value.status == 400
    return e.value.message


# ---------------------------------------------------------------------------------------------------------------
# /api/chat


def test_chat_streams_by_default() -> None:
    req = ollama.parse_chat(chat())
    assert req.kind == "chat" and req.model == "llama3.2"
    assert req.stream is True and req.include_usage is True
    assert req.messages == [{"role": "user", "content": "why is the sky blue?"}]
    assert req.params == {} and req.notes == [] and not req.load_only
    assert not ollama.parse_chat(chat(stream=False)).stream
    assert ollama.parse_chat(chat(stream=None)).stream


def test_empty_messages_only_load_the_model() -> None:
    assert ollama.parse_chat({"model": "m"}).load_only
    req = ollama.parse_chat({"model": "m", "messages": [], "keep_alive": 0})
    assert req.load_only and req.keep_alive == 0.0


def test_roles_are_lowercased() -> None:
    assert (
        ollama.parse_chat({"model": "m", "messages": [{"role": "User", "content": "x"}]}).messages[0]["role"]
        == "user"
    )


def test_options_are_mapped_to_engine_names() -> None:
    options = {
        "num_keep": 5,
        "seed": 42,
        "num_predict": 100,
        "top_k": 20,
        "top_p": 0.9,
        "min_p": 0.0,
        "typical_p": 0.7,
        "repeat_last_n": 33,
        "temperature": 0.8,
        "repeat_penalty": 1.2,
        "presence_penalty": 1.5,
        "frequency_penalty": 1.0,
        "mirostat": 1,
        "mirostat_tau": 5.0,
        "mirostat_eta": 0.1,
        "stop": ["\n", "user:"],
        "num_ctx": 1024,
    }
    req = ollama.parse_chat(chat(options=options))
    assert req.params == {
        "n_keep": 5,
        "seed": 42,
        "max_tokens": 100,
        "top_k": 20,
        "top_p": 0.9,
        "min_p": 0.0,
        "typical_p": 0.7,
        "repeat_last_n": 33,
        "temperature": 0.8,
        "repeat_penalty": 1.2,
        "presence_penalty": 1.5,
        "frequency_penalty": 1.0,
        "mirostat": 1,
        "mirostat_tau": 5.0,
        "mirostat_eta": 0.1,
        "stop": ["\n", "user:"],
    }
    assert req.options_ctx == 1024
    assert req.notes == []


@pytest.mark.parametrize(
    ("n", "params"),
    # -1 (unlimited) and -2 (fill the context) are the engine's default: null, which also overrides a preset's
    [
        (-1, {"max_tokens": None}),
        (-2, {"max_tokens": None}),
        (0, {"max_tokens": 0}),
        (7, {"max_tokens": 7}),
        (7.9, {"max_tokens": 7}),
    ],
)
def test_num_predict(n: float, params: dict[str, int]) -> None:
    assert ollama.parse_chat(chat(options={"num_predict": n})).params == params


def test_what_llama_server_refuses_is_refused_here_and_minus_one_is_the_whole_context() -> None:
    for options, needle in (
        ({"repeat_penalty": 0}, 'option "repeat_penalty" must be greater than 0'),
        ({"repeat_last_n": -2}, 'option "repeat_last_n" must be -1 (the whole context)'),
        ({"num_keep": -100}, 'option "num_keep" must be -1 (the whole prompt), 0 or more, got integer -100'),
    ):
        with pytest.raises(DialectError, match=re.escape(needle)):
            ollama.parse_chat(chat(options=options))
    assert ollama.parse_chat(chat(options={"repeat_last_n": -1})).params == {"repeat_last_n": -1}
    assert ollama.parse_chat(chat(options={"num_keep": -1})).params == {"n_keep": -1}


def test_integer_options_accept_any_number_as_go_does() -> None:
    assert ollama.parse_chat(chat(options={"top_k": 40.0, "num_ctx": 2048.0})).params == {"top_k": 40}
    assert ollama.parse_chat(chat(options={"temperature": 1})).params == {"temperature": 1}


def test_load_time_retired_and_unknown_options_become_notes() -> None:
    req = ollama.parse_chat(
        chat(
            options={
                "num_gpu": 1,
                "use_mmap": True,
                "num_thread": 8,
                "tfs_z": 1.0,
                "penalize_newline": True,
                "bogus": 1,
                "temperature": None,
            }
        )
    )
    assert req.params == {}
    assert req.notes == [
        "option num_gpu is set when the engine starts and is ignored per request",
        "option use_mmap is set when the engine starts and is ignored per request",
        "option num_thread is set when the engine starts and is ignored per request",
        "option tfs_z is no longer supported by llama.cpp and is ignored",
        "option penalize_newline is no longer supported by llama.cpp and is ignored",
        "option bogus is not a known option and is ignored",
    ]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ("hot", 'options must be an object, got string "hot"'),
        ({"temperature": "hot"}, 'option "temperature" must be a number, got string "hot"'),
        ({"top_k": True}, 'option "top_k" must be an integer, got boolean true'),
        ({"num_ctx": "2048"}, 'option "num_ctx" must be an integer'),
        ({"num_ctx": 1e308}, 'option "num_ctx" must be at most 2147483647, got number 1e+308'),
        ({"num_predict": 2**31}, 'option "num_predict" must be at most 2147483647, got integer 2147483648'),
        ({"use_mmap": 1}, 'option "use_mmap" must be a boolean, got integer 1'),
        ({"seed": 1e20}, 'option "seed" must be an integer within 64 bits, got number 1e+20'),
        ({"top_k": -1e19}, 'option "top_k" must be an integer within 64 bits, got number -1e+19'),
        ({"seed": 2**63}, 'option "seed" must be an integer within 64 bits, got integer 9223372036854775808'),
        ({"stop": [1]}, 'option "stop" must be a string or an array of strings'),
    ],
)
def test_option_type_errors(options: Any, needle: str) -> None:
    assert needle in refused(ollama.parse_chat, chat(options=options))


def test_stop_option_accepts_a_single_string() -> None:
    assert ollama.parse_chat(chat(options={"stop": "END"})).params == {"stop": ["END"]}


def test_format_json_and_schema() -> None:
    assert ollama.parse_chat(chat(format="json")).response_format == {"type": "json_object"}
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    req = ollama.parse_chat(chat(format=schema))
    assert req.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema},
    }
    _, engine = render_engine(req)
    assert engine["response_format"]["json_schema"]["schema"] == schema
    assert ollama.parse_chat(chat(format="")).response_format is None
    assert 'invalid format: expected "json" or a JSON schema object, got string "yaml"' in refused(
        ollama.parse_chat, chat(format="yaml")
    )


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(0, 0.0), (-1, -1.0), ("5m", 300.0), ("1h", 3600.0), ("-1", -1.0), (300, 300.0), (None, None)],
)
def test_keep_alive(value: Any, seconds: float | None) -> None:
    assert ollama.parse_chat(chat(keep_alive=value)).keep_alive == seconds


def test_bad_keep_alive() -> None:
    assert refused(ollama.parse_chat, chat(keep_alive="forever")).startswith(
        "keep_alive must be a number of seconds"
    )
    assert "got boolean true" in refused(ollama.parse_chat, chat(keep_alive=True))


def test_images_become_data_uri_parts_before_the_text() -> None:
    req = ollama.parse_chat(
        {
            "model": "llava",
            "messages": [{"role": "user", "content": "what is in this image?", "images": [PNG, JPEG]}],
        }
    )
    assert req.messages == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
                {"type": "text", "text": "what is in this image?"},
            ],
        }
    ]
    assert req.has_images()


def test_bad_images() -> None:
    assert "messages[0].images[0] is not valid base64" in refused(
        ollama.parse_chat, {"model": "m", "messages": [{"role": "user", "content": "x", "images": ["%%%"]}]}
    )
    assert "messages[0].images must be an array of base64-encoded images" in refused(
        ollama.parse_chat, {"model": "m", "messages": [{"role": "user", "content": "x", "images": PNG}]}
    )


def test_tool_conversation_round_trips_into_the_engine_body() -> None:
    body = {
        "model": "llama3.2",
        "messages": [
            {"role": "user", "content": "what is the weather in Toronto?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Toronto"}}}],
            },
            {"role": "tool", "content": "11 degrees celsius", "tool_name": "get_weather"},
        ],
        "stream": False,
        "tools": [WEATHER],
    }
    original = copy.deepcopy(body)
    req = ollama.parse_chat(body)
    assert body == original
    path, engine = render_engine(req)
    assert path == ENGINE_CHAT
    assert engine["messages"] == [
        {"role": "user", "content": "what is the weather in Toronto?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Toronto"}'},
                }
            ],
        },
        {"role": "tool", "content": "11 degrees celsius", "tool_call_id": "call_1_0", "name": "get_weather"},
    ]
    assert engine["tools"] == [WEATHER]
    assert "tool_choice" not in engine
    assert engine["stream"] is False


def test_tool_replies_link_by_id_then_name_then_order() -> None:
    calls = [
        {"id": "a", "function": {"name": "f", "arguments": {}}},
        {"function": {"index": 1, "name": "g", "arguments": '{"x": 1}'}},
        {"function": {"name": "h", "arguments": {"y": [1]}}},
    ]
    req = ollama.parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "content": "G", "tool_name": "g"},
                {"role": "tool", "content": "A", "tool_call_id": "a"},
                {"role": "tool", "content": "H"},
            ],
        }
    )
    assert [c["id"] for c in req.messages[0]["tool_calls"]] == ["a", "call_0_1", "call_0_2"]
    assert [c["function"]["arguments"] for c in req.messages[0]["tool_calls"]] == [
        "{}",
        '{"x": 1}',
        '{"y":[1]}',
    ]
    assert req.messages[1] == {"role": "tool", "content": "G", "tool_call_id": "call_0_1", "name": "g"}
    assert req.messages[2] == {"role": "tool", "content": "A", "tool_call_id": "a", "name": "f"}
    assert req.messages[3] == {"role": "tool", "content": "H", "tool_call_id": "call_0_2", "name": "h"}


def test_thinking_in_history_becomes_reasoning_content() -> None:
    req = ollama.parse_chat(
        {"model": "m", "messages": [{"role": "assistant", "content": "4", "thinking": "2+2"}]}
    )
    assert req.messages == [{"role": "assistant", "content": "4", "reasoning_content": "2+2"}]


def test_think() -> None:
    assert ollama.parse_chat(chat(think=True)).params == {"chat_template_kwargs": {"enable_thinking": True}}
    assert ollama.parse_chat(chat(think=False)).params == {
        "chat_template_kwargs": {"enable_thinking": False},
        "reasoning_effort": "none",
    }
    assert ollama.parse_chat(chat(think="high")).params == {"reasoning_effort": "high"}
    assert 'think must be true, false, "low"' in refused(ollama.parse_chat, chat(think="extreme"))


def test_logprobs() -> None:
    assert ollama.parse_chat(chat(logprobs=True, top_logprobs=3)).params == {
        "logprobs": True,
        "top_logprobs": 3,
    }
    assert ollama.parse_chat(chat(logprobs=True)).params == {"logprobs": True, "top_logprobs": 1}  # not 20
    assert ollama.parse_chat(chat(logprobs=False, top_logprobs=3)).params == {}
    assert "top_logprobs must be an integer from 0 to 20" in refused(
        ollama.parse_chat, chat(logprobs=True, top_logprobs=50)
    )


def test_truncate_shift_and_unknown_fields_become_notes() -> None:
    req = ollama.parse_chat(chat(truncate=True, shift=False, _debug_render_only=True))
    assert req.notes == [
        "truncate is not applied: the engine refuses a prompt longer than its context",
        "shift is not applied: the engine refuses a prompt longer than its context",
        "_debug_render_only is not an Ollama request field here and is ignored",
    ]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("x", "the request body must be a JSON object"),
        ({"messages": []}, "model is required and must be a non-empty string, got nothing"),
        ({"model": 1}, "model is required and must be a non-empty string, got integer 1"),
        ({"model": "m", "messages": {}}, "messages must be an array of message objects, got an object"),
        ({"model": "m", "messages": [1]}, "messages[0] must be a message object, got integer 1"),
        (
            {"model": "m", "messages": [{"content": "x"}]},
            "messages[0].role must be one of system, user, assistant or tool, got null",
        ),
        ({"model": "m", "messages": [{"role": "bot", "content": "x"}]}, 'got string "bot"'),
        (
            {"model": "m", "messages": [{"role": "user", "content": ["x"]}]},
            "messages[0].content must be a string, got an array of 1",
        ),
        (
            {"model": "m", "messages": [{"role": "assistant", "content": "", "thinking": 3}]},
            "messages[0].thinking must be a string",
        ),
        ({"model": "m", "stream": "no"}, 'stream must be a boolean, got string "no"'),
        ({"model": "m", "tools": "x"}, "'tools' must be an array of function tools"),
        (
            {"model": "m", "messages": [{"role": "tool", "content": "x", "tool_name": 3}]},
            "messages[0].tool_name must be a string",
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "content": "x", "tool_call_id": 3}]},
            "messages[0].tool_call_id must be a string",
        ),
        ({"model": "m", "truncate": "yes"}, "truncate must be a boolean"),
        ({"model": "m", "logprobs": 1}, "logprobs must be a boolean"),
    ],
)
def test_chat_errors(body: Any, needle: str) -> None:
    assert needle in refused(ollama.parse_chat, body)


@pytest.mark.parametrize(
    ("calls", "needle"),
    [
        ({"function": {}}, "messages[0].tool_calls must be an array of tool calls, got an object"),
        ([3], "messages[0].tool_calls[0] must be an object, got integer 3"),
        (
            [{"name": "f"}],
            "messages[0].tool_calls[0].function is required and must be an object with name and arguments",
        ),
        (
            [{"function": {"arguments": {}}}],
            "messages[0].tool_calls[0].function.name must be a non-empty string",
        ),
        (
            [{"function": {"name": "f", "arguments": [1]}}],
            "'messages[0].tool_calls[0].function.arguments' must be a JSON object of argument values, got an array of 1",
        ),
        ([{"function": {"name": "f", "arguments": "oops"}}], "must be a JSON object of argument values"),
        (
            [{"id": 5, "function": {"name": "f", "arguments": {}}}],
            "messages[0].tool_calls[0].id must be a string",
        ),
    ],
)
def test_malformed_tool_calls(calls: Any, needle: str) -> None:
    body = {"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": calls}]}
    assert needle in refused(ollama.parse_chat, body)


# ---------------------------------------------------------------------------------------------------------------
# /api/generate


def test_generate_is_a_chat_of_one_user_message_after_the_system() -> None:
    req = ollama.parse_generate(
        {"model": "m", "prompt": "Why?", "system": "Be brief.", "options": {"temperature": 0}}
    )
    assert req.kind == "chat" and not req.raw and req.stream
    assert req.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]
    assert req.params == {"temperature": 0}
    assert render_engine(req)[0] == ENGINE_CHAT


def test_generate_with_images() -> None:
    req = ollama.parse_generate({"model": "llava", "prompt": "describe", "images": [PNG]})
    assert req.messages == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "text", "text": "describe"},
            ],
        }
    ]


def test_raw_generate_is_a_completion_with_the_prompt_verbatim() -> None:
    prompt = "[INST] why is the sky blue? [/INST]"
    req = ollama.parse_generate(
        {"model": "mistral", "prompt": prompt, "raw": True, "stream": False, "system": "ignored"}
    )
    assert req.kind == "completion" and req.raw and req.prompt == prompt and req.messages == []
    assert req.notes == ["system is ignored with raw: true or a suffix: no template is applied"]
    path, engine = render_engine(req)
    assert path == ENGINE_COMPLETION
    assert engine == {"model": "mistral", "stream": False, "prompt": prompt}


def test_raw_generate_logprobs_use_the_completion_form() -> None:
    req = ollama.parse_generate(
        {"model": "m", "prompt": "p", "raw": True, "logprobs": True, "top_logprobs": 4}
    )
    assert req.params == {"logprobs": 4}
    req = ollama.parse_generate({"model": "m", "prompt": "p", "raw": True, "logprobs": True})
    assert req.params == {"logprobs": 1}


def test_raw_generate_with_format_constrains_by_json_schema() -> None:
    req = ollama.parse_generate({"model": "m", "prompt": "p", "raw": True, "format": "json"})
    assert render_engine(req)[1]["json_schema"] == {"type": "object"}


def test_suffix_makes_a_fill_in_the_middle_completion() -> None:
    req = ollama.parse_generate(
        {
            "model": "codellama:code",
            "prompt": "def compute_gcd(a, b):",
            "suffix": "    return result",
            "options": {"temperature": 0},
            "stream": False,
        }
    )
    assert req.kind == "completion" and not req.raw and req.suffix == "    return result"
    path, engine = render_engine(req)
    assert path == ENGINE_INFILL
    assert engine == {
        "model": "codellama:code",
        "temperature": 0,
        "input_prefix": "def compute_gcd(a, b):",
        "input_suffix": "    return result",
        "prompt": "",
        "stream": False,
    }


def test_images_with_raw_are_refused() -> None:
    msg = refused(ollama.parse_generate, {"model": "m", "prompt": "p", "raw": True, "images": [PNG]})
    assert "images cannot be sent with raw: true" in msg


def test_generate_without_prompt_only_loads() -> None:
    assert ollama.parse_generate({"model": "m"}).load_only
    req = ollama.parse_generate({"model": "m", "keep_alive": 0})
    assert req.load_only and req.keep_alive == 0.0
    assert not ollama.parse_generate({"model": "m", "prompt": "x"}).load_only
    assert not ollama.parse_generate({"model": "m", "images": [PNG]}).load_only


def test_context_and_template_are_noted() -> None:
    req = ollama.parse_generate(
        {"model": "m", "prompt": "x", "context": [1, 2, 3], "template": "{{ .Prompt }}"}
    )
    assert req.notes == [
        "template is ignored: the engine applies the model's own chat template",
        "context is ignored: Blazar keeps no token context between requests; send the conversation as /api/chat messages",
    ]
    assert "context" not in render_engine(req)[1]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"prompt": 5}, "prompt must be a string, got integer 5"),
        ({"system": ["x"]}, "system must be a string"),
        ({"suffix": 1}, "suffix must be a string"),
        ({"raw": "yes"}, "raw must be a boolean"),
        ({"template": 3}, "template must be a string"),
        ({"context": "abc"}, "context must be an array of token ids"),
        ({"images": "x"}, "images must be an array of base64-encoded images"),
        ({"images": ["!!"]}, "images[0] is not valid base64"),
        ({"format": 3}, "invalid format"),
    ],
)
def test_generate_errors(extra: dict[str, Any], needle: str) -> None:
    assert needle in refused(ollama.parse_generate, {"model": "m", **extra})


# ---------------------------------------------------------------------------------------------------------------
# /api/embed and /api/embeddings


def test_embed() -> None:
    req = ollama.parse_embed(
        {
            "model": "all-minilm",
            "input": ["Why is the sky blue?", "Why is the grass green?"],
            "keep_alive": "10m",
        }
    )
    assert req.kind == "embedding" and req.input == ["Why is the sky blue?", "Why is the grass green?"]
    assert req.keep_alive == 600.0 and not req.load_only
    path, engine = render_engine(req)
    assert path == ENGINE_EMBEDDING
    assert engine == {"model": "all-minilm", "input": ["Why is the sky blue?", "Why is the grass green?"]}


def test_embed_single_string_becomes_a_list() -> None:
    assert ollama.parse_embed({"model": "e", "input": "x"}).input == ["x"]


def test_embed_without_input_only_loads() -> None:
    for body in ({"model": "e"}, {"model": "e", "input": ""}, {"model": "e", "input": []}):
        assert ollama.parse_embed(body).load_only


def test_embed_options_truncate_dimensions() -> None:
    req = ollama.parse_embed(
        {
            "model": "e",
            "input": "x",
            "truncate": False,
            "dimensions": 128,
            "options": {"num_ctx": 512, "temperature": 0.1},
        }
    )
    assert req.params == {"dimensions": 128}
    assert req.options_ctx == 512 and req.truncate is False
    assert req.notes == ["option temperature does not apply to embeddings and is ignored"]
    assert ollama.parse_embed({"model": "e", "input": "x"}).truncate is True  # Ollama's default
    assert ollama.parse_embed({"model": "e", "input": "x", "truncate": True}).truncate is True


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"input": 3}, "input must be a string or an array of strings, got integer 3"),
        ({"input": ["a", 1]}, "input must be a string or an array of strings"),
        ({"input": "a", "truncate": 1}, "truncate must be a boolean"),
        ({"input": "a", "dimensions": 0}, "dimensions must be a positive integer"),
        ({"input": "a", "keep_alive": []}, "keep_alive must be a number of seconds"),
        ({"input": "a", "options": []}, "options must be an object"),
    ],
)
def test_embed_errors(extra: dict[str, Any], needle: str) -> None:
    assert needle in refused(ollama.parse_embed, {"model": "e", **extra})


def test_embeddings_legacy() -> None:
    req = ollama.parse_embeddings_legacy(
        {"model": "all-minilm", "prompt": "Here is an article about llamas...", "keep_alive": -1}
    )
    assert (
        req.kind == "embedding"
        and req.input == "Here is an article about llamas..."
        and req.keep_alive == -1.0
    )
    assert render_engine(req) == (
        ENGINE_EMBEDDING,
        {"model": "all-minilm", "input": "Here is an article about llamas..."},
    )
    assert ollama.parse_embeddings_legacy({"model": "e"}).load_only
    assert "prompt must be a string" in refused(
        ollama.parse_embeddings_legacy, {"model": "e", "prompt": ["a"]}
    )
    assert (
        "input is not an Ollama request field here"
        in ollama.parse_embeddings_legacy({"model": "e", "input": "a"}).notes[0]
    )


# ---------------------------------------------------------------------------------------------------------------
# errors


def test_render_error() -> None:
    assert orjson.loads(ollama.render_error(404, "model 'x' not found")) == {"error": "model 'x' not found"}
    assert ollama.render_error(500, 'quote " here') == b'{"error":"quote \\" here"}'


def test_a_number_past_64_bits_is_refused_and_shown() -> None:
    """A client (or a Modelfile's PARAMETER) may send any integer: past 64 bits it is refused by value, not a 500."""
    with pytest.raises(DialectError) as e:
        ollama.parse_chat(chat(options={"num_predict": 10**30}))
    assert e.value.status == 400 and "got integer 1000000000000000000000000000000" in e.value.message
