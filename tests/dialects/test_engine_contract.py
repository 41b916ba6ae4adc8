"""The engine contract: every body ``render_engine`` produces from each dialect is accepted by the real llama-server
(SmolLM2, started with the flags Blazar's launch profile uses), streams end with a usage chunk, and a forced tool
call constrained by ``forced_tool_schema`` comes back as a well-formed call even though SmolLM2's template cannot
call tools."""

from __future__ import annotations

import base64
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from blazar.dialects import anthropic, ollama, openai
from blazar.dialects.canonical import ENGINE_INFILL, CanonicalRequest, forced_tool_schema, render_engine

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}
A_WEATHER = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}  # type: ignore[index]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# a 1x1 PNG, for requests that carry an image to a model without vision (the engine must refuse it, not crash)
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360f8cfc0f01f0005"
        "0001ff89993d1d0000000049454e44ae426082"
    )
).decode()


def _start(args: list[str]) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [*args, "--host", "127.0.0.1", "--port", str(port), "--no-webui"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"llama-server exited {proc.returncode}"
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("llama-server did not become healthy")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def engine(assets: Any) -> Iterator[str]:
    yield from _start(
        [
            str(assets.llama_server),
            "--model",
            str(assets.model),
            "--ctx-size",
            "2048",
            "--parallel",
            "1",
            "--jinja",
        ]
    )


@pytest.fixture(scope="module")
def embedder(assets: Any) -> Iterator[str]:
    yield from _start(
        [str(assets.llama_server), "--model", str(assets.model), "--embeddings", "--pooling", "mean"]
    )


def _send(url: str, req: CanonicalRequest) -> httpx.Response:
    path, body = render_engine(req)
    return httpx.post(url + path, content=orjson.dumps(body), timeout=120)


CASES: dict[str, tuple[Callable[[Any], CanonicalRequest], dict[str, Any]]] = {
    "openai chat, every sampling knob": (
        openai.parse_chat,
        {
            "model": "m",
            "messages": ASK,
            "max_tokens": 3,
            "temperature": 0.2,
            "top_p": 0.9,
            "presence_penalty": 0.1,
            "frequency_penalty": 0.1,
            "seed": 1,
            "stop": "\n\n",
            "logprobs": True,
            "top_logprobs": 2,
            "logit_bias": {"1": -1},
            "user": "u",
            "top_k": 20,
            "min_p": 0.05,
        },
    ),
    "openai chat, tools and history": (
        openai.parse_chat,
        {
            "model": "m",
            "max_tokens": 3,
            "tools": [WEATHER, TIME],
            "tool_choice": "auto",
            "messages": [
                *ASK,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "18C"},
            ],
        },
    ),
    "openai chat, named tool": (
        openai.parse_chat,
        {
            "model": "m",
            "messages": ASK,
            "max_tokens": 3,
            "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        },
    ),
    "openai chat, json_schema": (
        openai.parse_chat,
        {
            "model": "m",
            "messages": ASK,
            "max_tokens": 3,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": {"type": "object"}},
            },
        },
    ),
    "openai completion, logprobs and json": (
        openai.parse_completion,
        {
            "model": "m",
            "prompt": "JSON:",
            "max_tokens": 3,
            "logprobs": 2,
            "response_format": {"type": "json_object"},
        },
    ),
    "ollama chat, options, format schema, think": (
        ollama.parse_chat,
        {
            "model": "m",
            "messages": ASK,
            "stream": False,
            "think": False,
            "format": {"type": "object", "properties": {"age": {"type": "integer"}}},
            "options": {
                "num_predict": 3,
                "num_keep": 4,
                "seed": 1,
                "top_k": 10,
                "top_p": 0.9,
                "min_p": 0.05,
                "typical_p": 0.9,
                "repeat_last_n": 32,
                "temperature": 0,
                "repeat_penalty": 1.1,
                "presence_penalty": 0.1,
                "frequency_penalty": 0.1,
                "mirostat": 0,
                "stop": ["\n\n"],
                "num_ctx": 2048,
            },
        },
    ),
    "ollama chat, tool history by name": (
        ollama.parse_chat,
        {
            "model": "m",
            "stream": False,
            "tools": [WEATHER],
            "options": {"num_predict": 3},
            "messages": [
                *ASK,
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
                },
                {"role": "tool", "content": "18C", "tool_name": "get_weather"},
            ],
        },
    ),
    "ollama generate, system": (
        ollama.parse_generate,
        {
            "model": "m",
            "prompt": "Why?",
            "system": "Be brief.",
            "stream": False,
            "options": {"num_predict": 3},
        },
    ),
    "ollama generate, raw with logprobs and json": (
        ollama.parse_generate,
        {
            "model": "m",
            "prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
            "raw": True,
            "format": "json",
            "stream": False,
            "logprobs": True,
            "options": {"num_predict": 3},
        },
    ),
    "anthropic, system blocks, tool_use and tool_result": (
        anthropic.parse_messages,
        {
            "model": "m",
            "max_tokens": 3,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "tools": [A_WEATHER],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
            "stop_sequences": ["\n\n"],
            "temperature": 0,
            "top_p": 0.9,
            "top_k": 5,
            "thinking": {"type": "disabled"},
            "metadata": {"user_id": "u"},
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "call it", "signature": "s"},
                        {"type": "text", "text": "Checking."},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C", "is_error": True},
                        {"type": "text", "text": "Thanks"},
                    ],
                },
            ],
        },
    ),
    "anthropic, assistant prefill": (
        anthropic.parse_messages,
        {
            "model": "m",
            "max_tokens": 3,
            "messages": [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2,"}],
        },
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_engine_accepts_the_rendered_body(engine: str, case: str) -> None:
    parse, body = CASES[case]
    r = _send(engine, parse(body))
    assert r.status_code == 200, r.text
    assert r.json()["choices"]


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        (openai.parse_chat, {"model": "m", "messages": ASK, "max_tokens": 2, "stream": True}),
        (ollama.parse_chat, {"model": "m", "messages": ASK, "options": {"num_predict": 2}}),
        (anthropic.parse_messages, {"model": "m", "messages": ASK, "max_tokens": 2, "stream": True}),
        (openai.parse_completion, {"model": "m", "prompt": "Once", "max_tokens": 2, "stream": True}),
    ],
)
def test_streams_end_with_usage(
    engine: str, parse: Callable[[Any], CanonicalRequest], body: dict[str, Any]
) -> None:
    req = parse(body)
    assert req.stream
    r = _send(engine, req)
    assert r.status_code == 200
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    last = orjson.loads(events[-2])
    assert last["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_time"}}], ids=["required", "named"]
)
def test_forced_tool_schema_yields_a_tool_call_on_a_template_without_tools(engine: str, choice: Any) -> None:
    req = openai.parse_chat(
        {
            "model": "m",
            "messages": ASK,
            "max_tokens": 60,
            "temperature": 0,
            "tools": [WEATHER, TIME],
            "tool_choice": choice,
        }
    )
    schema = forced_tool_schema(req)
    assert schema is not None
    req.tools, req.tool_choice = None, None
    req.response_format = {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}
    r = _send(engine, req)
    assert r.status_code == 200, r.text
    call = orjson.loads(r.json()["choices"][0]["message"]["content"])
    assert call["name"] in (["get_weather", "get_time"] if choice == "required" else ["get_time"])
    assert isinstance(call["arguments"], dict)


def test_suffix_reaches_the_engine_fill_in_the_middle_endpoint(engine: str) -> None:
    req = ollama.parse_generate(
        {"model": "m", "prompt": "def f(a, b):", "suffix": "    return r", "stream": False}
    )
    assert render_engine(req)[0] == ENGINE_INFILL
    r = _send(engine, req)
    # SmolLM2 has no FIM tokens: the engine says so itself, in its own error shape, which the gateway relays
    assert r.status_code == 501
    assert "Infill is not supported by this model" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        (openai.parse_embedding, {"model": "m", "input": ["a", "b"], "encoding_format": "float"}),
        (ollama.parse_embed, {"model": "m", "input": ["a", "b"]}),
        (ollama.parse_embeddings_legacy, {"model": "m", "prompt": "hello"}),
    ],
)
def test_embeddings(embedder: str, parse: Callable[[Any], CanonicalRequest], body: dict[str, Any]) -> None:
    r = _send(embedder, parse(body))
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == (1 if isinstance(parse(body).input, str) else 2)


def test_dimensions_is_not_applied_by_the_engine(embedder: str) -> None:
    """llama-server ignores ``dimensions``: the gateway has to truncate (and renormalise) on the way back."""
    r = _send(embedder, openai.parse_embedding({"model": "m", "input": "a", "dimensions": 8}))
    assert r.status_code == 200
    assert len(r.json()["data"][0]["embedding"]) > 8


def test_an_image_for_a_model_without_vision_is_refused_by_the_engine(engine: str) -> None:
    req = ollama.parse_chat(
        {"model": "m", "stream": False, "messages": [{"role": "user", "content": "what?", "images": [PNG]}]}
    )
    r = _send(engine, req)
    assert r.status_code in (400, 500)
    assert "image" in r.text.lower()
