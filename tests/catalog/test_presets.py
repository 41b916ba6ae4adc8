"""Model presets (``blazar.catalog.presets``): what a create may give a model, how presets merge, and how one fills a
request (the whole path runs in tests/e2e/test_presets.py)."""

from __future__ import annotations

import pytest

from blazar.catalog import presets
from blazar.dialects.canonical import CanonicalRequest


def test_check_keeps_what_a_request_can_carry_and_names_the_rest() -> None:
    fields, notes = presets.check(
        {
            "system": "Be brief.",
            "parameters": {
                "temperature": 0.2,
                "stop": ["</s>"],
                "num_ctx": 2048,
                "num_gpu": 99,
                "tfs_z": 1.0,
            },
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
            "license": "MIT",
        }
    )
    assert fields == {
        "system": "Be brief.",
        "license": ["MIT"],
        "parameters": {"temperature": 0.2, "stop": ["</s>"], "num_ctx": 2048},
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    }
    assert notes == [
        "option num_gpu is set when the engine starts and is ignored per request",
        "option tfs_z is no longer supported by llama.cpp and is ignored",
    ]
    assert presets.check({"system": "", "parameters": {}, "messages": []}) == ({}, [])
    kept, _ = presets.check(
        {"messages": [{"role": "ASSISTANT", "content": "hi", "foo": 1}, {"role": "user", "content": None}]}
    )
    assert kept == {"messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": ""}]}


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({"system": ["a"]}, "'system' must be a string"),
        ({"license": 3}, "'license' must be a string or an array of strings"),
        ({"parameters": "temperature 1"}, "options must be an object"),
        ({"parameters": {"top_k": "many"}}, 'option "top_k" must be an integer'),
        ({"messages": {"role": "user"}}, "messages must be an array of message objects"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content must be a string"),
        ({"parameters": {"repeat_penalty": 0}}, 'option "repeat_penalty" must be greater than 0'),
        (
            {"parameters": {"repeat_last_n": -2}},
            'option "repeat_last_n" must be -1 (the whole context), 0 (off) or more',
        ),
        (
            {"messages": [{"role": "user", "content": "look", "images": ["aGVsbG8="]}]},
            "a preset's messages carry text only",
        ),
    ],
)
def test_check_refuses_bad_fields(given: dict[str, object], needle: str) -> None:
    with pytest.raises(presets.PresetError) as e:
        presets.check(given)
    assert needle in str(e.value)


def test_merge_replaces_fields_and_parameters_one_by_one() -> None:
    base = {"system": "A", "parameters": {"temperature": 0.1, "top_k": 5}, "license": ["MIT"]}
    merged = presets.merge(
        base, {"system": "B", "parameters": {"top_k": 9}, "license": ["MIT", "Apache-2.0"]}
    )
    assert merged == {
        "system": "B",
        "parameters": {"temperature": 0.1, "top_k": 9},
        "license": ["MIT", "Apache-2.0"],  # added to the source's, as Ollama does
    }
    assert base["system"] == "A"  # the source's preset is untouched
    assert presets.merge(None, {"system": "C"}) == {"system": "C"}


def chat(*messages: dict[str, str], **params: object) -> CanonicalRequest:
    return CanonicalRequest(model="m", kind="chat", messages=list(messages), params=dict(params))


def test_apply_fills_what_the_request_left_open() -> None:
    preset = presets.compile(
        {
            "system": "Be brief.",
            "parameters": {"temperature": 0.2, "num_predict": 8, "num_ctx": 1024},
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        }
    )
    assert preset is not None and preset.params == {"temperature": 0.2, "max_tokens": 8}
    user = {"role": "user", "content": "q"}
    req = chat(user, temperature=0.9)
    presets.apply(preset, req)
    assert [m["content"] for m in req.messages] == ["Be brief.", "hi", "yo", "q"]
    assert req.params == {"temperature": 0.9, "max_tokens": 8} and req.options_ctx == 1024
    own = chat({"role": "system", "content": "Mine."}, user)
    presets.apply(preset, own)
    assert [m["content"] for m in own.messages] == ["Mine.", "hi", "yo", "q"]  # the request's system wins
    completion = CanonicalRequest(model="m", kind="completion", prompt="raw")
    presets.apply(preset, completion)
    assert completion.prompt == "raw" and completion.params == {"temperature": 0.2, "max_tokens": 8}
    load = CanonicalRequest(model="m", kind="chat", load_only=True)
    presets.apply(preset, load)  # a load starts the engine its chats need: with the preset's context
    assert load.messages == [] and load.params == {} and load.options_ctx == 1024
    embedding = CanonicalRequest(model="m", kind="embedding", input="x")
    presets.apply(preset, embedding)
    assert embedding.params == {} and embedding.options_ctx is None
    unlimited = chat(user, max_tokens=None)  # Ollama's num_predict -1: the engine's default, not the preset's
    presets.apply(preset, unlimited)
    assert unlimited.params["max_tokens"] is None
    assert presets.compile(None) is None and presets.compile({}) is None


def test_what_show_prints() -> None:
    stored = {
        "system": "Be brief.",
        "parameters": {"temperature": 0.2, "stop": ["</s>", "User:"], "mirostat": 0},
        "messages": [{"role": "user", "content": "hi"}],
        "license": ["MIT", "other"],
    }
    assert presets.show_parameters(stored).splitlines() == [
        f"{'temperature':<30} 0.2",
        f'{"stop":<30} "</s>"',
        f'{"stop":<30} "User:"',
        f"{'mirostat':<30} 0",
    ]
    odd = {"system": 'Say """hi"""', "parameters": {"stop": ["\n", "[/INST]"]}}
    assert presets.show_parameters(odd).splitlines() == [f'{"stop":<30} "\\n"', f'{"stop":<30} "[/INST]"']
    assert presets.modelfile_lines(odd)[0] == r'SYSTEM "Say \"\"\"hi\"\"\""'
    assert presets.modelfile_lines({"system": 'say "hi"'})[0] == r'SYSTEM "say \"hi\""'  # a quote at the end
    assert presets.modelfile_lines({"license": ["a\x00b"]})[0] == r'LICENSE "a\u0000b"'
    assert presets.modelfile_lines({"system": "line\n\tnext"})[0] == 'SYSTEM """line\n\tnext"""'
    assert presets.modelfile_lines(stored) == [
        'SYSTEM """Be brief."""',
        *(f"PARAMETER {line}" for line in presets.show_parameters(stored).splitlines()),
        'MESSAGE user """hi"""',
        'LICENSE """MIT"""',
        'LICENSE """other"""',
    ]
    assert presets.modelfile_lines(None) == [] and presets.show_parameters(None) == ""
