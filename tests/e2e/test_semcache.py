"""End to end: the semantic cache on the real llama-server. The model's own embedding engine embeds each
conversation; the same conversation again is answered from the cache (in any dialect of the same key), a
different one, a stream, another key or an expired entry is not."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import Daemon

pytestmark = pytest.mark.e2e

A = "sk-blazar-cache-a-0123456789abcdef01234567"
B = "sk-blazar-cache-b-0123456789abcdef01234567"
CONFIG = f"""semantic_cache = true
semantic_cache_model = "smollm2"  # the one model the tests have; a real setup names an embedding model
semantic_cache_threshold = 0.999  # a chat model's embeddings: only the same conversation is alike enough
semantic_cache_ttl_secs = 20  # the hits below come well within it, even on a loaded machine

[[keys]]
name = "a"
secret = "{A}"

[[keys]]
name = "b"
secret = "{B}"
"""
ASK = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


def chat(d: Daemon, messages: list[dict[str, str]], key: str = A, **extra: object) -> httpx.Response:
    body = {"model": "smollm2", "messages": messages, "max_tokens": 16, "temperature": 0, **extra}
    return httpx.post(d.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"},
                      timeout=60)  # fmt: skip


def test_the_same_conversation_is_answered_from_the_cache(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(CONFIG)
    first = chat(d, ASK)
    stored = time.monotonic()
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["finish_reason"] == "stop", first.text  # only clean answers are kept
    assert first.headers["x-blazar-cache"] == "miss"
    [_chat_engine, _embed_engine] = d.child_pids()  # the model's own embedding engine embeds conversations

    again = chat(d, ASK)
    assert again.status_code == 200 and again.headers["x-blazar-cache"] == "hit"
    assert again.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    assert again.json()["model"] == "smollm2"

    # the same key in another dialect: the stored answer, in Ollama's shape
    o = httpx.post(d.url + "/api/chat", json={"model": "smollm2", "messages": ASK, "stream": False,
                   "options": {"num_predict": 16, "temperature": 0}},
                   headers={"authorization": f"Bearer {A}"}, timeout=60)  # fmt: skip
    assert o.status_code == 200 and o.headers["x-blazar-cache"] == "hit", o.text
    assert o.json()["message"]["content"] == first.json()["choices"][0]["message"]["content"]

    other = chat(d, [{"role": "user", "content": "Write one line about the sea."}])
    assert other.headers["x-blazar-cache"] == "miss"
    assert chat(d, ASK, key=B).headers["x-blazar-cache"] == "miss"  # never across keys
    streamed = chat(d, ASK, stream=True)
    assert streamed.status_code == 200 and "x-blazar-cache" not in streamed.headers  # streams bypass it
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with_tools = chat(d, ASK, tools=tools, tool_choice="none")  # SmolLM2's template cannot show them
    assert with_tools.status_code == 200 and "x-blazar-cache" not in with_tools.headers  # so do tools
    hotter = chat(d, ASK, temperature=0.7)  # other settings: not the answer the first request got
    assert hotter.status_code == 200 and hotter.headers["x-blazar-cache"] == "miss"
    prompt = httpx.post(d.url + "/v1/completions", json={"model": "smollm2", "prompt": f"user: {ASK[0]['content']}",
                        "max_tokens": 16, "temperature": 0}, headers={"authorization": f"Bearer {A}"}, timeout=60)  # fmt: skip
    assert (
        prompt.status_code == 200 and prompt.headers["x-blazar-cache"] == "miss"
    )  # the same text as a prompt
    assert prompt.json()["object"] == "text_completion"

    # until the entry's semantic_cache_ttl_secs have run out: it was stored before the first answer came back, so
    # by then it surely has (a slower machine only waits longer)
    time.sleep(max(0.0, stored + 20.5 - time.monotonic()))
    assert chat(d, ASK).headers["x-blazar-cache"] == "miss"
