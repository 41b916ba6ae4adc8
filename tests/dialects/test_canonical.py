"""The canonical request: engine rendering, keep_alive durations, the shared helpers, and the hub-and-spoke rule."""

from __future__ import annotations

import ast
import base64
import copy
from pathlib import Path
from typing import Any

import pytest

from blazar.dialects import canonical
from blazar.dialects.canonical import (
    ENGINE_CHAT,
    ENGINE_COMPLETION,
    ENGINE_EMBEDDING,
    ENGINE_INFILL,
    CanonicalRequest,
    DialectError,
    arguments_json,
    forced_tool_schema,
    function_tools,
    image_data_uri,
    parse_duration,
    render_engine,
    schema_of,
    shown,
    stop_list,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\0" * 16).decode()

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
OTHER = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


# ---------------------------------------------------------------------------------------------------------------
# render_engine


def test_chat_renders_to_chat_completions_with_all_fields() -> None:
    req = CanonicalRequest(
        model="smollm2:latest",
        kind="chat",
        messages=[{"role": "user", "content": "hi"}],
        params={"temperature": 0.2, "max_tokens": 5, "stop": ["x"]},
        tools=[TOOL],
        tool_choice="auto",
        response_format={"type": "json_object"},
    )
    path, body = render_engine(req)
    assert path == ENGINE_CHAT
    assert body == {
        "model": "smollm2:latest",
        "temperature": 0.2,
        "max_tokens": 5,
        "stop": ["x"],
        "stream": False,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [TOOL],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
    }


def test_streaming_always_asks_the_engine_for_usage() -> None:
    req = CanonicalRequest(model="m", kind="chat", messages=[], stream=True, include_usage=False)
    _, body = render_engine(req)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_non_streaming_has_no_stream_options() -> None:
    _, body = render_engine(CanonicalRequest(model="m", kind="chat", messages=[]))
    assert "stream_options" not in body
    assert "tools" not in body and "tool_choice" not in body and "response_format" not in body


def test_params_cannot_override_structural_fields() -> None:
    req = CanonicalRequest(
        model="m",
        kind="chat",
        messages=[{"role": "user", "content": "a"}],
        params={"stream": True, "messages": []},
    )
    _, body = render_engine(req)
    assert body["stream"] is False
    assert body["messages"] == [{"role": "user", "content": "a"}]


def test_named_tool_choice_becomes_required_over_that_tool_alone() -> None:
    req = CanonicalRequest(
        model="m",
        kind="chat",
        messages=[],
        tools=[TOOL, OTHER],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    _, body = render_engine(req)
    assert body["tool_choice"] == "required"
    assert body["tools"] == [OTHER]
    assert req.tools == [TOOL, OTHER]  # not mutated


def test_completion_renders_prompt_and_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = CanonicalRequest(
        model="m",
        kind="completion",
        prompt="[INST] hi [/INST]",
        params={"max_tokens": 3},
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        stream=True,
    )
    path, body = render_engine(req)
    assert path == ENGINE_COMPLETION
    assert body == {
        "model": "m",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
        "prompt": "[INST] hi [/INST]",
        "json_schema": schema,
    }


def test_completion_json_object_becomes_any_object_schema() -> None:
    req = CanonicalRequest(model="m", kind="completion", prompt="p", response_format={"type": "json_object"})
    assert render_engine(req)[1]["json_schema"] == {"type": "object"}


def test_suffix_renders_to_infill_with_native_names() -> None:
    req = CanonicalRequest(
        model="m",
        kind="completion",
        prompt="def f(a, b):",
        suffix="    return r",
        params={"max_tokens": 16, "logprobs": 2, "temperature": 0},
        stream=True,
    )
    path, body = render_engine(req)
    assert path == ENGINE_INFILL
    assert body == {
        "model": "m",
        "n_predict": 16,
        "n_probs": 2,
        "temperature": 0,
        "input_prefix": "def f(a, b):",
        "input_suffix": "    return r",
        "prompt": "",
        "stream": False,  # asked whole even for a stream (gateway.ollama shapes it)
    }
    assert req.params == {"max_tokens": 16, "logprobs": 2, "temperature": 0}


def test_embedding_renders_input_and_params_without_stream() -> None:
    req = CanonicalRequest(model="e", kind="embedding", input=["a", "b"], params={"encoding_format": "float"})
    path, body = render_engine(req)
    assert path == ENGINE_EMBEDDING
    assert body == {"model": "e", "encoding_format": "float", "input": ["a", "b"]}


def test_render_does_not_mutate_the_request() -> None:
    req = CanonicalRequest(
        model="m",
        kind="chat",
        messages=[{"role": "user", "content": "x"}],
        params={"stop": ["a"]},
        tools=[TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    before = copy.deepcopy(req)
    render_engine(req)
    assert req == before


def _call(name: str) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def test_forced_tool_schema() -> None:
    def req(choice: object, tools: list[dict[str, Any]] | None = None) -> CanonicalRequest:
        return CanonicalRequest(
            model="m", kind="chat", tools=[TOOL, OTHER] if tools is None else tools, tool_choice=choice
        )

    assert forced_tool_schema(req("required")) == {"anyOf": [_call("get_weather"), _call("get_time")]}
    assert forced_tool_schema(req({"type": "function", "function": {"name": "get_time"}})) == _call(
        "get_time"
    )
    assert forced_tool_schema(req("required", [TOOL])) == _call("get_weather")
    assert forced_tool_schema(req("auto")) is None
    assert forced_tool_schema(req(None)) is None
    assert forced_tool_schema(req("none")) is None
    assert forced_tool_schema(req("required", [])) is None


def test_schema_of() -> None:
    assert schema_of({"type": "json_object"}) == {"type": "object"}
    assert schema_of({"type": "json_object", "schema": {"type": "array"}}) == {"type": "array"}
    assert schema_of({"type": "json_schema", "json_schema": {"name": "n"}}) == {"type": "object"}
    assert schema_of({"type": "json_schema", "json_schema": {"schema": {"type": "string"}}}) == {
        "type": "string"
    }


def test_has_images_and_has_tools() -> None:
    plain = CanonicalRequest(model="m", kind="chat", messages=[{"role": "user", "content": "x"}])
    assert not plain.has_images() and not plain.has_tools()
    vision = CanonicalRequest(
        model="m",
        kind="chat",
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}],
    )
    assert vision.has_images()
    assert CanonicalRequest(model="m", kind="chat", tools=[TOOL]).has_tools()
    assert not CanonicalRequest(model="m", kind="chat", tools=[TOOL], tool_choice="none").has_tools()


# ---------------------------------------------------------------------------------------------------------------
# parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (0, 0.0),
        (300, 300.0),
        (1.5, 1.5),
        (-1, -1.0),
        ("0", 0.0),
        ("300", 300.0),
        ("-1", -1.0),
        ("2.5", 2.5),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("10s", 10.0),
        ("1m30s", 90.0),
        ("2h45m10s", 9910.0),
        ("500us", 0.0005),
        ("500\u00b5s", 0.0005),
        ("500\u03bcs", 0.0005),
        ("1000000ns", 0.001),
        ("-5m", -300.0),
        ("+5m", 300.0),
        (".5s", 0.5),
        (" 5m ", 300.0),
    ],
)
def test_parse_duration(value: object, seconds: float | None) -> None:
    got = parse_duration(value)
    if seconds is None:
        assert got is None
    else:
        assert got == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        *("", "five minutes", "5x", "m", "-", "5m3", "1d", "h5", True, False, [], {"s": 1}, "5 m", "1.2.3s"),
        *("1" + "0" * 400, "-" + "9" * 400, "9" * 400 + "h"),  # float overflow: no clock adds inf
    ],
)
def test_parse_duration_refuses_with_a_teaching_400(value: object) -> None:
    with pytest.raises(DialectError) as e:
        parse_duration(value)
    assert e.value.status == 400
    assert e.value.message.startswith("keep_alive must be a number of seconds or a duration string, got ")
    assert '"5m"' in e.value.message and "-1 (keep loaded)" in e.value.message


def test_parse_duration_names_the_field() -> None:
    with pytest.raises(DialectError, match=r"^ttl must be"):
        parse_duration("soon", "ttl")


# ---------------------------------------------------------------------------------------------------------------
# Helpers


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"),
        (True, "boolean true"),
        (3, "integer 3"),
        (1.5, "number 1.5"),
        ("hot", 'string "hot"'),
        ("x" * 50, 'string "' + "x" * 40 + '..."'),
        ([1, 2], "an array of 2"),
        ({}, "an object"),
    ],
)
def test_shown(value: object, text: str) -> None:
    assert shown(value) == text


def test_image_data_uri_sniffs_media_type() -> None:
    assert image_data_uri(PNG, "images[0]") == f"data:image/png;base64,{PNG}"
    assert image_data_uri(JPEG, "images[0]") == f"data:image/jpeg;base64,{JPEG}"
    assert image_data_uri(JPEG, "x", "image/webp") == f"data:image/webp;base64,{JPEG}"
    assert image_data_uri("data:image/gif;base64,R0lGOD", "x") == "data:image/gif;base64,R0lGOD"


@pytest.mark.parametrize("bad", ["not base64!", "", 12, None])
def test_image_data_uri_refuses_non_base64(bad: object) -> None:
    with pytest.raises(DialectError, match=r"^images\[1\]"):
        image_data_uri(bad, "images[1]")


def test_stop_list() -> None:
    assert stop_list("x", "stop") == ["x"]
    assert stop_list(["a", "b"], "stop") == ["a", "b"]
    assert stop_list([], "stop") == []
    assert stop_list("", "stop") == [] and stop_list(["", "a", ""], "stop") == ["a"]  # "" would stop at once
    with pytest.raises(DialectError, match="stop must be a string or an array of strings, got an array of 1"):
        stop_list([1], "stop")


def test_function_tools_normalises_and_defaults_parameters() -> None:
    tools = function_tools(
        [{"type": "function", "function": {"name": "f", "description": "d", "strict": True}}]
    )
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "f",
                "description": "d",
                "parameters": {"type": "object", "properties": {}},
                "strict": True,
            },
        }
    ]
    assert function_tools(None) is None
    assert function_tools([{"function": {"name": "g"}}]) is not None  # type defaults to function


@pytest.mark.parametrize(
    ("tools", "needle"),
    [
        ({}, "'tools' must be an array of function tools, got an object"),
        (["x"], "'tools[0]' must be an object"),
        ([{"type": "web_search"}], "only function tools are supported"),
        ([{"type": "function"}], "'tools[0].function' is required"),
        ([{"type": "function", "function": {}}], "'tools[0].function.name' is required"),
        (
            [{"type": "function", "function": {"name": "f", "parameters": "x"}}],
            "parameters' must be a JSON schema",
        ),
        (
            [{"type": "function", "function": {"name": "f", "description": 1}}],
            "description' must be a string",
        ),
    ],
)
def test_function_tools_errors(tools: object, needle: str) -> None:
    with pytest.raises(DialectError) as e:
        function_tools(tools)
    assert needle in e.value.message


def test_arguments_json() -> None:
    assert arguments_json({"city": "Paris", "n": 1}, "a") == '{"city":"Paris","n":1}'
    assert arguments_json(None, "a") == "{}"
    assert arguments_json("", "a") == "{}"
    assert arguments_json('{"a": 1}', "a") == '{"a": 1}'
    for bad in ([1], 3, "not json", "[1]"):
        with pytest.raises(DialectError, match="must be a JSON object of argument values"):
            arguments_json(bad, "a")


# ---------------------------------------------------------------------------------------------------------------
# The rules of the package: pure, and hub and spoke

_PKG = Path(canonical.__file__).parent
_FORBIDDEN = {
    "asyncio",
    "httpx",
    "aiohttp",
    "granian",
    "logging",
    "socket",
    "os",
    "subprocess",
    "blazar.gateway",
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", ["canonical", "openai", "ollama", "anthropic"])
def test_modules_are_pure_and_spokes_import_only_the_hub(module: str) -> None:
    imports = _imports(_PKG / f"{module}.py")
    assert not {i for i in imports if i.split(".")[0] in _FORBIDDEN or i in _FORBIDDEN}
    blazar = {i for i in imports if i.startswith("blazar")}
    # the hub may use pure helpers that import nothing of Blazar's themselves (schema_subset: a schema walk; errors:
    # the tree its DialectError belongs to)
    hub_helpers = {"blazar.dialects.schema_subset", "blazar.errors"}
    assert blazar <= ({"blazar.dialects.canonical"} if module != "canonical" else hub_helpers)
    for helper in hub_helpers:
        path = _PKG.parent.parent / (helper.replace(".", "/") + ".py")
        assert not {i for i in _imports(path) if i.startswith("blazar")}


def test_prefill_is_the_text_of_a_closing_assistant_message() -> None:
    def chat(*messages: dict[str, Any]) -> CanonicalRequest:
        return CanonicalRequest(model="m", kind="chat", messages=list(messages))

    user = {"role": "user", "content": "Count"}
    assert chat(user).prefill() is None
    assert chat(user, {"role": "assistant", "content": "1, 2,"}).prefill() == "1, 2,"
    parts = {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert chat(user, parts).prefill() == "a\n\nb"  # as llama-server joins them into the prompt
    assert chat(user, {"role": "assistant", "content": ""}).prefill() is None
    calls = {"role": "assistant", "content": "x", "tool_calls": [{"id": "1"}]}
    assert chat(user, calls).prefill() is None
    image = {"role": "assistant", "content": [{"type": "image_url", "image_url": {}}]}
    assert chat(user, image).prefill() is None
    assert CanonicalRequest(model="m", kind="completion", prompt="x").prefill() is None


def test_forced_call_schema_moves_each_tools_definitions_to_its_root() -> None:
    """``$ref`` resolves from the root of the schema the engine gets: each tool's ``$defs`` / ``definitions`` move
    there under a prefix of its own, and its refs (to them, or to its own root "#") follow."""

    def tool(name: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": params}}

    a = {"type": "object", "properties": {"p": {"$ref": "#/$defs/X"}}, "$defs": {"X": {"type": "integer"}}}
    b = {
        "type": "object",
        "properties": {"q": {"$ref": "#/definitions/X"}, "again": {"$ref": "#"}},
        "definitions": {"X": {"type": "string"}},
    }
    req = CanonicalRequest(model="m", kind="chat", tools=[tool("a", a), tool("b", b)], tool_choice="required")
    schema = canonical.forced_tool_schema(req)
    assert schema is not None
    [first, second] = schema["anyOf"]
    assert first["properties"]["arguments"] == {
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/t0_X"}},
    }
    args = second["properties"]["arguments"]
    assert args["properties"] == {"q": {"$ref": "#/$defs/t1_X"}, "again": {"$ref": "#/$defs/t1_root"}}
    assert schema["$defs"] == {"t0_X": {"type": "integer"}, "t1_X": {"type": "string"}, "t1_root": args}
    plain = CanonicalRequest(
        model="m", kind="chat", tools=[tool("c", {"type": "object"})], tool_choice="required"
    )
    assert "$defs" not in (canonical.forced_tool_schema(plain) or {})
