"""With temperature 0 and a fixed seed, every dialect produces the same text for the same prompt."""

from __future__ import annotations

import anthropic
import ollama
import openai
import pytest

from tests.conftest import Daemon, closing

pytestmark = pytest.mark.e2e

PROMPT = "Say something about the sea."


def test_same_text_in_all_three_dialects(daemon: Daemon) -> None:
    oa = closing(openai.OpenAI(base_url=daemon.url + "/v1", api_key="x", max_retries=0))
    an = closing(anthropic.Anthropic(base_url=daemon.url, api_key="x", max_retries=0))
    ol = closing(ollama.Client(host=daemon.url))
    messages = [{"role": "user", "content": PROMPT}]
    a = oa.chat.completions.create(
        model="smollm2", messages=messages, extra_body={"temperature": 0}, seed=7, max_tokens=20
    )
    b = an.messages.create(
        model="smollm2",
        messages=messages,
        extra_body={"temperature": 0},
        max_tokens=20,
        metadata={"user_id": "u"},
    )
    c = ol.chat(model="smollm2", messages=messages, options={"temperature": 0, "seed": 7, "num_predict": 20})
    text = a.choices[0].message.content
    assert text
    assert b.content[0].type == "text" and b.content[0].text == text
    assert c.message.content == text
