"""End to end: the official `anthropic` Python client against `blazar serve` and the real engine."""

from __future__ import annotations

import anthropic
import httpx
import pytest
from anthropic.types import Message

from tests.conftest import Daemon, closing

pytestmark = pytest.mark.e2e

MESSAGES = [{"role": "user", "content": "Name three colors."}]


def client(d: Daemon) -> anthropic.Anthropic:
    return closing(anthropic.Anthropic(base_url=d.url, api_key="unused", max_retries=0, timeout=120))


def test_messages_whole_and_streamed_agree(daemon: Daemon) -> None:
    c = client(daemon)
    whole = c.messages.create(
        model="smollm2", max_tokens=24, extra_body={"temperature": 0}, messages=MESSAGES
    )
    assert whole.type == "message" and whole.role == "assistant"
    assert whole.content[0].type == "text" and whole.content[0].text
    assert whole.stop_reason in ("end_turn", "max_tokens")
    assert whole.usage.output_tokens > 0 and whole.usage.input_tokens > 0
    with c.messages.stream(
        model="smollm2", max_tokens=24, extra_body={"temperature": 0}, messages=MESSAGES
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason


def test_a_prefill_is_continued_not_repeated(daemon: Daemon) -> None:
    """A conversation ending with an assistant message: the answer is its continuation only, as Anthropic's API
    gives it (llama-server repeats the prefill at the start of its answer; Blazar cuts it), whole and streamed,
    and in the other dialects too."""
    count = [
        {"role": "user", "content": "Count to ten"},
        {"role": "assistant", "content": "1, 2, 3,"},
    ]
    c = client(daemon)
    whole = c.messages.create(model="smollm2", max_tokens=6, extra_body={"temperature": 0}, messages=count)
    first = whole.content[0]
    assert first.type == "text" and first.text.startswith(" 4"), first
    with c.messages.stream(model="smollm2", max_tokens=6, extra_body={"temperature": 0}, messages=count) as s:
        events = list(s)
        assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == first.text
    # message_start carries the prompt's size, as the whole answer's usage does (llama-server sends its role
    # chunk before the prompt report when it continues a prefill)
    start = next(e for e in events if e.type == "message_start")
    assert start.message.usage.input_tokens == whole.usage.input_tokens > 0
    blocks = [
        {"role": "user", "content": "Count to ten"},
        {"role": "assistant", "content": [{"type": "text", "text": "1, 2, 3,"}]},
    ]
    again = c.messages.create(model="smollm2", max_tokens=6, extra_body={"temperature": 0}, messages=blocks)
    assert again.content[0].type == "text" and again.content[0].text == first.text
    ollama = {
        "model": "smollm2",
        "messages": count,
        "stream": False,
        "options": {"temperature": 0, "num_predict": 6},
    }
    r = httpx.post(daemon.url + "/api/chat", json=ollama, timeout=60)
    assert r.status_code == 200 and r.json()["message"]["content"] == first.text, r.text
    openai = {"model": "smollm2", "messages": count, "max_tokens": 6, "temperature": 0}
    r = httpx.post(daemon.url + "/v1/chat/completions", json=openai, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == first.text, r.text


def test_the_sdk_sees_the_trace_id_as_the_request_id(daemon: Daemon) -> None:
    c = client(daemon)
    raw = c.messages.with_raw_response.create(model="smollm2", max_tokens=2, messages=MESSAGES)  # type: ignore[arg-type]
    assert raw.request_id == raw.headers["x-blazar-trace-id"] and raw.parse()._request_id == raw.request_id
    with pytest.raises(anthropic.NotFoundError) as e:
        c.messages.create(model="no-such-model", max_tokens=2, messages=MESSAGES)  # type: ignore[arg-type]
    assert e.value.request_id == e.value.response.headers["x-blazar-trace-id"]


def test_thinking_on_a_template_without_it_is_noted_by_its_anthropic_name(daemon: Daemon) -> None:
    body = {
        "model": "smollm2",
        "max_tokens": 4,
        "messages": MESSAGES,
        "thinking": {"type": "enabled", "budget_tokens": 2000},
    }
    r = httpx.post(daemon.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    noted = r.headers["x-blazar-ignored"]
    assert "thinking is ignored: the chat template of 'smollm2:latest' has no thinking section" in noted, (
        noted
    )
    assert "think is ignored" not in noted


def test_a_template_without_tool_calls_is_noted_in_the_callers_terms(daemon: Daemon) -> None:
    """SmolLM2's template cannot emit tool calls: the x-blazar-ignored note says how this dialect forces one."""
    tool = {"name": "get_weather", "description": "d", "input_schema": {"type": "object", "properties": {}}}
    body = {"model": "smollm2", "max_tokens": 4, "messages": MESSAGES, "tools": [tool]}
    r = httpx.post(daemon.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert 'send tool_choice {"type": "any"}' in r.headers["x-blazar-ignored"], r.headers
    openai_tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    chat = {"model": "smollm2", "max_tokens": 4, "messages": MESSAGES, "tools": [openai_tool]}
    r = httpx.post(daemon.url + "/v1/chat/completions", json=chat, timeout=60)
    assert "send tool_choice required" in r.headers["x-blazar-ignored"], r.headers


def test_stream_event_order(daemon: Daemon) -> None:
    events = list(
        client(daemon).messages.create(model="smollm2", max_tokens=8, messages=MESSAGES, stream=True)
    )
    kinds = [e.type for e in events if e.type != "ping"]
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    # message_start carries the prompt's size before any token, as Anthropic's API does
    start = next(e for e in events if e.type == "message_start")
    delta = next(e for e in events if e.type == "message_delta")
    assert start.type == "message_start" and delta.type == "message_delta"
    assert start.message.usage.input_tokens > 0
    assert start.message.usage.input_tokens == delta.usage.input_tokens


def test_max_tokens_stop_reason(daemon: Daemon) -> None:
    r = client(daemon).messages.create(
        model="smollm2", max_tokens=3, messages=[{"role": "user", "content": "Write a long story."}]
    )
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 3


SEA = [{"role": "user", "content": "Say hello and tell me one fact about the sea."}]
NEVER = "zq-never-written"


def sea(c: anthropic.Anthropic, max_tokens: int, stops: list[str] | None = None) -> tuple[Message, Message]:
    """The SEA question at temperature 0, whole and streamed: (the message, the stream's final message)."""
    stop_sequences = anthropic.omit if stops is None else stops
    whole = c.messages.create(
        model="smollm2",
        max_tokens=max_tokens,
        messages=SEA,
        stop_sequences=stop_sequences,
        extra_body={"temperature": 0},
    )
    with c.messages.stream(
        model="smollm2",
        max_tokens=max_tokens,
        messages=SEA,
        stop_sequences=stop_sequences,
        extra_body={"temperature": 0},
    ) as s:
        final = s.get_final_message()
    return whole, final


def text_of(message: Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_stop_sequence_names_the_one_that_matched(daemon: Daemon) -> None:
    """A stop sequence the model really writes (picked from its own temperature-0 answer) ends the message with
    stop_reason "stop_sequence" and that string, streamed and whole, and the text stops right before it."""
    c = client(daemon)
    answer = text_of(sea(c, 48)[0])
    words = [w for w in answer.split()[2:] if w.isalpha() and len(w) >= 4]
    assert words, answer
    stop = words[0]
    for message in sea(c, 48, [NEVER, stop]):
        assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
        assert stop not in text_of(message)
        assert text_of(message) == answer[: answer.index(stop)]


def test_stop_sequence_never_written_keeps_the_natural_end(daemon: Daemon) -> None:
    c = client(daemon)
    for max_tokens, reason in ((4, "max_tokens"), (200, "end_turn")):
        for message in sea(c, max_tokens, [NEVER]):
            assert (message.stop_reason, message.stop_sequence) == (reason, None)


def test_system_and_stop_sequences(daemon: Daemon) -> None:
    r = client(daemon).messages.create(
        model="smollm2",
        max_tokens=40,
        extra_body={"temperature": 0},
        system="You answer in lists.",
        messages=[{"role": "user", "content": "List 1 to 9 separated by commas."}],
        stop_sequences=["5"],
    )
    assert r.stop_reason in ("stop_sequence", "end_turn", "max_tokens")
    if r.stop_reason == "stop_sequence":
        assert r.stop_sequence == "5"


def test_count_tokens(daemon: Daemon) -> None:
    c = client(daemon)
    short = c.messages.count_tokens(model="smollm2", messages=[{"role": "user", "content": "hi"}])
    longer = c.messages.count_tokens(model="smollm2", messages=[{"role": "user", "content": "hi " * 50}])
    assert 0 < short.input_tokens < longer.input_tokens
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError, match="cannot read images"):  # as /v1/messages refuses it
        c.messages.count_tokens(model="smollm2", messages=[{"role": "user", "content": [image]}])


def test_errors_are_anthropic_shaped(daemon: Daemon) -> None:
    with pytest.raises(anthropic.NotFoundError) as nf:
        client(daemon).messages.create(model="ghost", max_tokens=5, messages=MESSAGES)
    assert "ghost" in str(nf.value)
    r = httpx.post(daemon.url + "/v1/messages", json={"model": "smollm2", "messages": MESSAGES})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    r = httpx.post(daemon.url + "/v1/messages", content=b"not json")
    assert r.status_code == 400 and r.json()["type"] == "error"
