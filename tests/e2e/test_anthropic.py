"""End to end: the official `anthropic` Python client against `blazar serve` and the real engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest
from anthropic.types import Message

from tests.conftest import SHARED_DAEMON_CONFIG, Assets, Daemon, cleanup, closing, make_daemon, provision

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


def test_tools_a_template_cannot_show_are_a_400_in_the_callers_terms(daemon: Daemon) -> None:
    """SmolLM2's template cannot show tools: a request the model may answer with a call (tool_choice auto) is
    refused, in each dialect's error shape, naming the model and how this dialect forces a call or leaves the
    tools unused; the request that leaves them unused is answered."""
    tool = {"name": "get_weather", "description": "d", "input_schema": {"type": "object", "properties": {}}}
    body = {"model": "smollm2", "max_tokens": 4, "messages": MESSAGES, "tools": [tool]}
    with pytest.raises(anthropic.BadRequestError) as e:
        client(daemon).messages.create(**body)  # type: ignore[arg-type]
    message = e.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("smollm2:latest does not support tools: its chat template cannot show them"), (
        message
    )
    assert 'send tool_choice {"type": "any"}' in message and "chat_template_file" in message, message
    unused = httpx.post(
        daemon.url + "/v1/messages", json={**body, "tool_choice": {"type": "none"}}, timeout=60
    )
    assert unused.status_code == 200 and unused.json()["content"], unused.text
    openai_tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    chat = {"model": "smollm2", "max_tokens": 4, "messages": MESSAGES, "tools": [openai_tool]}
    r = httpx.post(daemon.url + "/v1/chat/completions", json=chat, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
    assert "send tool_choice required" in r.json()["error"]["message"], r.text
    responses = {"model": "smollm2", "max_output_tokens": 16, "input": "hi",
                 "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]}  # fmt: skip
    r = httpx.post(daemon.url + "/v1/responses", json=responses, timeout=60)
    assert r.status_code == 400 and 'send tool_choice "required"' in r.json()["error"]["message"], r.text


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


# Claude Code's request shapes, written after the requests it sends (its system prompt as text blocks with
# cache_control, a system message inside messages, tools with input_schema and tool_choice auto, metadata's
# user_id, thinking, and a turn of parallel tool results), shortened.
READ = {"name": "Read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {
    "file_path": {"type": "string"}}, "required": ["file_path"]}}  # fmt: skip
CLAUDE_CODE = {
    "model": "smollm2",
    "max_tokens": 12,
    "system": [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": "Answer in one short line.", "cache_control": {"type": "ephemeral"}},
    ],
    "messages": [
        {"role": "system", "content": "The working directory is /src."},
        {"role": "user", "content": [{"type": "text", "text": "Read a.txt and b.txt."}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "a.txt"}},
            {"type": "tool_use", "id": "toolu_02", "name": "Read", "input": {"file_path": "b.txt"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "apples"},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": [{"type": "text", "text": "pears"}]},
            {"type": "text", "text": "What fruits were they?", "cache_control": {"type": "ephemeral"}}]},
    ],
    "tools": [READ],
    "tool_choice": {"type": "auto"},
    "metadata": {"user_id": "user_0123_account__session_4567"},
    "temperature": 1,
}  # fmt: skip


TOOLS_TEMPLATE = Path(__file__).parents[1] / "fixtures" / "streams" / "tools.jinja"


@pytest.fixture(scope="module")
def tool_daemon(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[Daemon]:
    """The shared daemon's settings, SmolLM2 given a ChatML template that shows tools (its own cannot, and tools
    the model may call on such a template are a 400): Claude Code sends tools on every request."""
    config = SHARED_DAEMON_CONFIG + f"chat_template_file = {json.dumps(str(TOOLS_TEMPLATE))}\n"
    d = provision(make_daemon(tmp_path_factory.mktemp("tools"), config), assets)
    d.start()
    yield d
    cleanup(d)


@pytest.mark.parametrize("thinking", [False, True])
def test_claude_codes_requests_are_answered_whole_and_streamed_with_usage_throughout(
    tool_daemon: Daemon, thinking: bool
) -> None:
    daemon = tool_daemon
    body = {**CLAUDE_CODE, **({"thinking": {"type": "enabled", "budget_tokens": 1024}} if thinking else {})}
    count = httpx.post(daemon.url + "/v1/messages/count_tokens",
                       json={k: v for k, v in body.items() if k not in ("max_tokens", "temperature")}, timeout=60)  # fmt: skip
    assert count.status_code == 200, count.text
    whole = httpx.post(daemon.url + "/v1/messages", json=body, timeout=600)
    assert whole.status_code == 200, whole.text
    answer = whole.json()
    assert answer["content"] and answer["stop_reason"] in ("end_turn", "max_tokens", "tool_use"), answer
    assert answer["usage"]["input_tokens"] == count.json()["input_tokens"] > 0  # counted as the engine counts
    assert answer["usage"]["output_tokens"] > 0
    events: list[tuple[str, dict[str, object]]] = []
    with httpx.stream("POST", daemon.url + "/v1/messages", json={**body, "stream": True}, timeout=600) as r:
        assert r.status_code == 200
        kind = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind != "ping":
                events.append((kind, json.loads(line[6:])))
    kinds = [k for k, _ in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    start = events[0][1]["message"]
    assert isinstance(start, dict) and start["usage"]["input_tokens"] == count.json()["input_tokens"], start
    # the first content comes as its own delta, before the answer is done
    first = kinds.index("content_block_delta")
    assert kinds[first - 1] == "content_block_start" and first < kinds.index("message_delta")
    [(_, delta)] = [e for e in events if e[0] == "message_delta"]
    usage = delta["usage"]
    assert (
        isinstance(usage, dict)
        and usage["output_tokens"] > 0
        and usage["input_tokens"] == count.json()["input_tokens"]
    ), delta
