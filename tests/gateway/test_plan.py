"""The pure half of a chat or completion's dispatch (``gateway/plan.py``): the engine request and the
translation decided from the canonical request and the launch spec alone, for llama-server and for an engine
with OpenAI's endpoints only. The golden replay runs the same function on recorded traffic."""

from __future__ import annotations

import orjson
import pytest

from blazar.dialects import anthropic, ollama, openai
from blazar.gateway import plan
from blazar.gateway.http import HttpError
from blazar.launch.preflight import PromptTooLong
from blazar.launch.spec import LLAMA_SERVER, LaunchSpec

LLAMA = LaunchSpec(("llama-server",), ctx_size=4096, parallel=4, kv_unified=True, can=LLAMA_SERVER)
SGLANG = LaunchSpec(("sglang",), ctx_size=4096, parallel=4, kv_unified=True, engine_model="qwen")
HI = [{"role": "user", "content": "hi"}]


def messages(**extra: object) -> object:
    return anthropic.parse_messages({"model": "m", "max_tokens": 8, "messages": HI, **extra})


def test_an_anthropic_stream_asks_llama_server_for_progress_and_no_other_engine() -> None:
    assert plan.plan(messages(stream=True), LLAMA, plan.ANTHROPIC, slots=4).body["return_progress"] is True
    assert "return_progress" not in plan.plan(messages(stream=True), SGLANG, plan.ANTHROPIC, slots=4).body
    assert "return_progress" not in plan.plan(messages(), LLAMA, plan.ANTHROPIC, slots=4).body
    chat = openai.parse_chat({"model": "m", "messages": HI, "stream": True})
    assert "return_progress" not in plan.plan(chat, LLAMA, plan.OPENAI, slots=4).body


def test_an_engine_that_routes_by_model_name_gets_its_own_name() -> None:
    chat = openai.parse_chat({"model": "m", "messages": HI})
    assert plan.plan(chat, SGLANG, plan.OPENAI, slots=4).body["model"] == "qwen"
    assert plan.plan(chat, LLAMA, plan.OPENAI, slots=4).body["model"] == "m"


def test_ollamas_whole_context_repeat_window_becomes_the_slots_context() -> None:
    chat = ollama.parse_chat({"model": "m", "messages": HI, "options": {"repeat_last_n": -1}})
    assert plan.plan(chat, LLAMA, plan.OLLAMA_CHAT, slots=4).body["repeat_last_n"] == 4096
    split = LaunchSpec(("llama-server",), ctx_size=4096, parallel=4, can=LLAMA_SERVER)  # 1024 per slot
    assert plan.plan(chat, split, plan.OLLAMA_CHAT, slots=4).body["repeat_last_n"] == 1024


def test_a_pinned_slot_and_a_lora_choice_go_into_the_body() -> None:
    chat = openai.parse_chat({"model": "m", "messages": HI})
    lora = [{"id": 1, "scale": 0.5}]
    body = plan.plan(chat, LLAMA, plan.OPENAI, slots=4, slot=2, lora=lora).body
    assert body["id_slot"] == 2 and body["cache_prompt"] is True and body["lora"] == lora
    bare = plan.plan(chat, LLAMA, plan.OPENAI, slots=4).body
    assert not {"id_slot", "lora"} & set(bare)


def test_more_choices_than_slots_are_refused_only_where_each_takes_a_slot() -> None:
    chat = openai.parse_chat({"model": "m", "messages": HI, "n": 5})
    with pytest.raises(HttpError) as e:
        plan.plan(chat, LLAMA, plan.OPENAI, slots=4, owner="base")
    assert e.value.status == 400 and "runs 4 parallel slot(s)" in e.value.message
    assert '[models."base"]' in e.value.message  # the model whose engine it is, where parallel is set
    assert plan.plan(chat, SGLANG, plan.OPENAI, slots=4).n == 5


def test_a_prompt_over_the_slot_is_refused_before_it_is_sent() -> None:
    small = LaunchSpec(("llama-server",), ctx_size=64, parallel=1, can=LLAMA_SERVER)
    chat = openai.parse_chat({"model": "m", "messages": [{"role": "user", "content": "word " * 2000}]})
    with pytest.raises(PromptTooLong) as e:
        plan.plan(chat, small, plan.OPENAI, slots=1, body_bytes=10_000)
    assert e.value.status == 400 and "a slot holds 64 tokens" in e.value.message


def test_the_prefill_is_cut_only_on_an_engine_that_repeats_it() -> None:
    canon = messages(messages=[*HI, {"role": "assistant", "content": "Sure:"}])
    assert plan.plan(canon, LLAMA, plan.ANTHROPIC, slots=4).prefill == "Sure:"
    assert plan.plan(canon, SGLANG, plan.ANTHROPIC, slots=4).prefill is None


def test_the_plans_translator_renders_the_engines_answer_for_the_client() -> None:
    engine = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "x",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    out, summary = plan.plan(messages(), LLAMA, plan.ANTHROPIC, slots=4).whole(orjson.dumps(engine))
    body = orjson.loads(out)
    assert body["model"] == "m" and body["content"] == [{"type": "text", "text": "Hello"}]
    assert summary["usage"] == {"prompt_tokens": 3, "completion_tokens": 1}
    tr = plan.plan(messages(stream=True), LLAMA, plan.ANTHROPIC, slots=4).stream(0)
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}
    streamed = tr.feed(b"data: " + orjson.dumps(chunk) + b"\n\n") + tr.finish()
    assert b"message_start" in streamed and b'"text":"Hi"' in streamed
