"""``semcache.text_of``: which requests the semantic cache may answer twice, and the text they are cached under."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from blazar.config import load_config_text
from blazar.dialects import openai
from blazar.errors import ConfigError
from blazar.gateway.semcache import MAX_TEXT_CHARS, text_of, worth_keeping

ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def chat(**extra: Any) -> Any:
    return openai.parse_chat({"model": "m", "messages": ASK, **extra})


def test_a_plain_whole_chat_is_cached_under_its_whole_conversation() -> None:
    assert text_of(chat()) == "system: Be brief.\nuser: Hi"
    completion = openai.parse_completion({"model": "m", "prompt": "Once upon"})
    assert text_of(completion) == "Once upon"


def test_answers_that_must_not_be_given_twice_are_not_cached() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert text_of(chat(stream=True)) is None
    assert text_of(chat(n=2)) is None
    assert text_of(chat(tools=[tool])) is None
    assert text_of(chat(response_format={"type": "json_object"})) is None
    assert text_of(chat(grammar='root ::= "a"')) is None
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    assert (
        text_of(openai.parse_chat({"model": "m", "messages": [{"role": "user", "content": image}]})) is None
    )
    long = [{"role": "user", "content": "x" * MAX_TEXT_CHARS}]
    assert text_of(openai.parse_chat({"model": "m", "messages": long})) is None


def test_only_clean_answers_are_kept() -> None:
    assert worth_keeping({"finish_reason": "stop", "errors": []}, 0)
    assert not worth_keeping({"finish_reason": "length", "errors": []}, 0)
    assert not worth_keeping({"finish_reason": "stop", "errors": []}, 1)
    assert not worth_keeping({"finish_reason": "stop", "errors": ["engine error: x"]}, 0)


def test_the_cache_needs_an_embedding_model_named() -> None:
    with pytest.raises(ConfigError, match="semantic_cache is on but semantic_cache_model is not set"):
        load_config_text("semantic_cache = true\n", Path("/etc/blazar/config.toml"), {})
    cfg = load_config_text(
        'semantic_cache = true\nsemantic_cache_model = "nomic-embed-text"\n',
        Path("/etc/blazar/config.toml"),
        {},
    )
    assert cfg.semantic_cache_model == "nomic-embed-text:latest"
