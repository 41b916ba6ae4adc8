"""Native translators on recorded llama-server streams: what each dialect sends, byte parity
with the Python oracle (tests/oracle) at every chunk boundary and at random ones, whole bodies,
and the ends a real engine rarely shows (errors, truncation, framing errors, pings, aborts)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blazar import _native
from tests.native.streams import BY_NAME, CASE_NAMES, CASES, DIALECTS, MESSAGE_ID, MODEL, START_NS, Case
from tests.oracle import translate as oracle

Factory = Callable[..., Any]


def run(
    factory: Factory, dialect: str, pieces: Sequence[bytes], *, step_ns: int = 0, **kw: Any
) -> tuple[bytes, Any]:
    """Feeds ``pieces`` at START_NS + i * step_ns and finishes; returns (bytes, translator)."""
    kw.setdefault("message_id", MESSAGE_ID)
    tr = factory(dialect, MODEL, start_ns=START_NS, prompt_tokens_hint=7, load_duration_ns=1234, **kw)
    out = b"".join(tr.feed(p, now_ns=START_NS + (i + 1) * step_ns) for i, p in enumerate(pieces))
    out += tr.finish(now_ns=START_NS + (len(pieces) + 1) * step_ns)
    return out, tr


def cut(data: bytes, points: Sequence[int]) -> list[bytes]:
    edges = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def sse_events(body: bytes) -> list[tuple[str, str]]:
    parser = _native.SseParser()
    events = parser.feed(body)
    assert parser.finish(), "client stream must end on an event boundary"
    return events


# ---- what each dialect sends ----------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_openai_passthrough_rewrites_model_only(case: Case) -> None:
    out, tr = run(_native.StreamTranslator, "openai", [case.stream], include_usage=True)
    events = sse_events(out)
    assert events[-1] == ("message", "[DONE]")
    # llama.cpp's prompt-progress reports, asked for by the gateway only, are not relayed
    upstream = [e for e in sse_events(case.stream) if '"prompt_progress":' not in e[1]]
    if case.name == "engine_error":
        assert json.loads(events[-2][1])["error"]["message"].startswith("The model produced output")
        return
    assert len(events) == len(upstream)
    for (_, got), (_, want) in zip(events[:-1], upstream[:-1], strict=True):
        g, w = json.loads(got), json.loads(want)
        assert g["model"] == MODEL
        w["model"] = MODEL
        w.pop("__verbose", None)  # llama.cpp's debug member, asked for by the gateway only
        assert g == w
    assert tr.done
    summary = tr.summary()
    assert summary["usage"] is not None and summary["errors"] == []


def test_openai_drops_usage_chunk_unless_asked() -> None:
    case = BY_NAME["text"]
    without, _ = run(_native.StreamTranslator, "openai", [case.stream])
    with_usage, _ = run(_native.StreamTranslator, "openai", [case.stream], include_usage=True)
    assert b'"usage"' not in without and b'"usage"' in with_usage
    assert len(sse_events(with_usage)) == len(sse_events(without)) + 1


def ollama_lines(body: bytes) -> list[dict[str, Any]]:
    assert body.endswith(b"\n")
    return [json.loads(line) for line in body.decode().splitlines()]


@pytest.mark.parametrize("name", ["text", "max_tokens", "stop", "emoji", "cjk"])
def test_ollama_chat_text(name: str) -> None:
    case = BY_NAME[name]
    out, tr = run(_native.StreamTranslator, "ollama_chat", [case.stream])
    lines = ollama_lines(out)
    whole = json.loads(case.whole)["choices"][0]
    assert "".join(x["message"]["content"] for x in lines) == whole["message"]["content"]
    assert all(x["model"] == MODEL and x["created_at"].endswith("Z") for x in lines)
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    final = lines[-1]
    usage = [json.loads(d)["usage"] for _, d in sse_events(case.stream) if '"usage"' in d][-1]
    assert final["done_reason"] == ("length" if whole["finish_reason"] == "length" else "stop")
    assert final["prompt_eval_count"] == usage["prompt_tokens"]
    assert final["eval_count"] == usage["completion_tokens"]
    assert final["load_duration"] == 1234
    assert final["total_duration"] == 1234  # every feed at START_NS: no time passed
    assert tr.summary()["text"] == whole["message"]["content"]


def test_ollama_durations_come_from_the_clock() -> None:
    case = BY_NAME["stop"]
    events = [e + b"\n\n" for e in case.stream.split(b"\n\n") if e]
    out, _ = run(_native.StreamTranslator, "ollama_generate", events, step_ns=1_000_000)
    final = ollama_lines(out)[-1]
    n = len(events)
    # Event 0 is the role-only chunk; tokens arrive in events 1.. at 1 ms steps.
    assert final["prompt_eval_duration"] == 2_000_000
    assert final["total_duration"] == 1234 + n * 1_000_000  # sent when [DONE], the last event, arrived
    content_events = sum(b'"content":"' in e for e in events)
    assert final["eval_duration"] == (content_events - 1) * 1_000_000
    assert "response" in final and "message" not in final


@pytest.mark.parametrize("name", ["tool_call", "tool_calls_parallel"])
def test_ollama_chat_tool_calls_are_whole_objects(name: str) -> None:
    case = BY_NAME[name]
    out, tr = run(_native.StreamTranslator, "ollama_chat", [case.stream])
    lines = ollama_lines(out)
    calls = [c for x in lines for c in x["message"].get("tool_calls", [])]
    want = json.loads(case.whole)["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == [w["function"]["name"] for w in want]
    assert [c["function"]["arguments"] for c in calls] == [
        json.loads(w["function"]["arguments"]) for w in want
    ]
    assert [c["function"]["index"] for c in calls] == list(range(len(want)))
    summary = tr.summary()
    assert summary["finish_reason"] == "tool_calls" and summary["errors"] == []
    assert [json.loads(c["function"]["arguments"]) for c in summary["tool_calls"]] == [
        c["function"]["arguments"] for c in calls
    ]


def test_ollama_parallel_calls_each_sent_when_complete() -> None:
    case = BY_NAME["tool_calls_parallel"]
    out, _ = run(_native.StreamTranslator, "ollama_chat", [case.stream])
    with_calls = [x for x in ollama_lines(out) if x["message"].get("tool_calls")]
    assert [len(x["message"]["tool_calls"]) for x in with_calls] == [1, 1]


def anthropic_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = [(name, json.loads(data)) for name, data in sse_events(body)]
    for name, data in events:
        assert data["type"] == name
    return events


TEXT_CASES = ["text", "max_tokens", "stop", "stop_verbose", "eos_verbose", "emoji", "cjk"]


def stop_word(whole: dict[str, Any]) -> str | None:
    """The stop word llama.cpp's ``__verbose`` names in a recorded whole body."""
    verbose = whole.get("__verbose") or {}
    return verbose.get("stopping_word") if verbose.get("stop_type") == "word" else None


@pytest.mark.parametrize("name", TEXT_CASES)
def test_anthropic_text_events(name: str) -> None:
    case = BY_NAME[name]
    out, _ = run(_native.StreamTranslator, "anthropic", [case.stream])
    events = anthropic_events(out)
    names = [n for n, _ in events]
    assert names[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["id"] == MESSAGE_ID and start["model"] == MODEL and start["content"] == []
    assert start["usage"] == {"input_tokens": 7, "output_tokens": 0}
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    whole = json.loads(case.whole)["choices"][0]
    assert text == whole["message"]["content"]
    delta = events[-2][1]
    word = stop_word(json.loads(case.whole))
    assert delta["delta"] == {
        "stop_reason": "max_tokens"
        if whole["finish_reason"] == "length"
        else ("stop_sequence" if word else "end_turn"),
        "stop_sequence": word,
    }
    usage = json.loads(case.whole)["usage"]
    assert delta["usage"]["output_tokens"] == usage["completion_tokens"]


def test_anthropic_tool_use_blocks() -> None:
    case = BY_NAME["tool_calls_parallel"]
    out, _ = run(_native.StreamTranslator, "anthropic", [case.stream])
    events = anthropic_events(out)
    starts = [d for n, d in events if n == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["tool_use", "tool_use"]
    assert [s["index"] for s in starts] == [0, 1]
    for s in starts:
        block = s["content_block"]
        assert block["name"] == "get_weather" and block["input"] == {} and block["id"]
        pieces = [
            d["delta"]["partial_json"]
            for n, d in events
            if n == "content_block_delta" and d["index"] == s["index"]
        ]
        assert all(d["delta"]["type"] == "input_json_delta" for n, d in events if n == "content_block_delta")
        assert "city" in json.loads("".join(pieces))
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_stop_sequence_when_engine_names_it() -> None:
    stream = (
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":"END"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    out, tr = run(_native.StreamTranslator, "anthropic", [stream])
    assert anthropic_events(out)[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    assert tr.summary()["stop_sequence"] == "END"


def test_engine_error_mid_stream_in_every_dialect() -> None:
    case = BY_NAME["engine_error"]
    msg = "The model produced output that does not match the expected peg-native format"
    out, tr = run(_native.StreamTranslator, "anthropic", [case.stream])
    events = anthropic_events(out)
    assert events[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": msg}})
    assert [n for n, _ in events][-2] == "content_block_stop"
    assert tr.summary()["errors"][0] == f"engine error: {msg}" and tr.summary()["engine_error"] == msg
    out, _ = run(_native.StreamTranslator, "ollama_chat", [case.stream])
    assert ollama_lines(out)[-1] == {"error": msg}
    out, _ = run(_native.StreamTranslator, "openai", [case.stream])
    assert json.loads(sse_events(out)[-2][1]) == {
        "error": {"message": msg, "type": "server_error", "code": 500}
    }


def test_llama_cpp_error_line() -> None:
    stream = b'error: {"code":503,"message":"Loading model","type":"unavailable_error"}\n\n'
    out, tr = run(_native.StreamTranslator, "anthropic", [stream])
    assert anthropic_events(out) == [
        ("error", {"type": "error", "error": {"type": "api_error", "message": "Loading model"}})
    ]
    assert tr.done


@pytest.mark.parametrize("dialect", DIALECTS)
def test_truncated_stream_ends_with_an_error(dialect: str) -> None:
    stream = BY_NAME["text"].stream
    out, tr = run(_native.StreamTranslator, dialect, [stream[: len(stream) // 2]])
    summary = tr.summary()
    assert "engine stream ended before the response was complete" in summary["errors"]
    assert b"ended before the response was complete" in out
    assert tr.done and tr.finish() == b""


@pytest.mark.parametrize("dialect", DIALECTS)
def test_oversize_line_raises_then_finish_closes(dialect: str) -> None:
    head = b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n'
    tr = _native.StreamTranslator(dialect, MODEL, start_ns=START_NS, message_id=MESSAGE_ID)
    with pytest.raises(_native.StreamError, match="longer than 4194304 bytes"):
        tr.feed(head + b"data: " + b"x" * (4 << 20))
    with pytest.raises(_native.StreamError):
        tr.feed(b"\n\n")
    out = tr.finish(now_ns=START_NS)
    assert b"ok" in out and b"longer than 4194304 bytes" in out
    assert tr.summary()["text"] == "ok"


def test_invalid_utf8_is_a_stream_error() -> None:
    tr = _native.StreamTranslator("openai", MODEL)
    with pytest.raises(_native.StreamError, match="not valid UTF-8"):
        tr.feed(b'data: {"x":"\xff"}\n\n')


def test_anthropic_pings_when_quiet_for_10s() -> None:
    tr = _native.StreamTranslator("anthropic", MODEL, start_ns=0, message_id=MESSAGE_ID)
    first = tr.feed(b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n', now_ns=1)
    assert first.count(b"event: ping") == 1
    assert tr.feed(b"", now_ns=10_000_000_000) == b""
    assert tr.feed(b"", now_ns=10_000_000_001) == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert tr.feed(b": keep-alive\n\n", now_ns=15_000_000_000) == b""
    assert tr.feed(b"", now_ns=20_000_000_001) == b'event: ping\ndata: {"type":"ping"}\n\n'


def test_a_prefilled_anthropic_stream_starts_with_the_prompt_size() -> None:
    # answering a prefill, llama-server sends its role-only chunk before the prompt report (recorded from the
    # real engine with return_progress): message_start waits for the report, so input_tokens is the prompt's
    tr = _native.StreamTranslator("anthropic", MODEL, start_ns=0, message_id=MESSAGE_ID, prefill="A fruit:")
    assert tr.feed(b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}\n\n') == b""
    progress = b'"prompt_progress":{"total":37,"cache":0,"processed":37,"time_ms":9}'
    started = tr.feed(b'data: {"choices":[{"index":0,"delta":{"content":"A fruit:"}}],' + progress + b"}\n\n")
    start = json.loads(started.split(b"data: ")[1].split(b"\n")[0])
    assert start["type"] == "message_start" and start["message"]["usage"]["input_tokens"] == 37
    # without a prefill the role chunk starts the message at once (pings can keep a slow prompt's stream open)
    plain = _native.StreamTranslator("anthropic", MODEL, start_ns=0, message_id=MESSAGE_ID)
    assert b"message_start" in plain.feed(b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')


def test_abort_speaks_the_dialect_and_is_final() -> None:
    tr = _native.StreamTranslator("ollama_generate", MODEL)
    assert tr.abort("client went away") == b'{"error":"client went away"}\n'
    assert tr.abort("again") == b"" and tr.finish() == b"" and tr.feed(b"data: x\n\n") == b""
    assert tr.summary()["errors"] == ["aborted: client went away"]


def test_malformed_fragments_are_reported_not_dropped() -> None:
    stream = (
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function",'
        b'"function":{"name":"f","arguments":"{\\"x\\":"}}]}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b",'
        b'"function":{"name":"g","arguments":"{}"}}]}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"oops"}}]}}]}\n\n'
        b"data: not json\n\n"
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    out, tr = run(_native.StreamTranslator, "ollama_chat", [stream])
    summary = tr.summary()
    calls = summary["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a", "f", '{"x":1}oops'),  # the index-less fragment joined the current call, 0
        ("b", "g", "{}"),
    ]
    errors = summary["errors"]
    assert any("tool call 0 received a fragment after another call had started" in e for e in errors)
    assert any("without an index" in e for e in errors)
    assert any("not a chat completion chunk" in e for e in errors)
    assert any("tool call 0 arguments are not a JSON object" in e for e in errors)
    # Call 0 went out when call 1 started, before its late fragment: the client saw {"x":} cut.
    sent = [c for x in ollama_lines(out) for c in x["message"].get("tool_calls", [])]
    assert [c["function"]["arguments"] for c in sent] == [{}, {}]


def test_unknown_dialect() -> None:
    with pytest.raises(ValueError, match="unknown dialect 'grpc'"):
        _native.StreamTranslator("grpc", MODEL)
    with pytest.raises(ValueError, match="unknown dialect"):
        _native.translate_whole("grpc", MODEL, b"{}")


def test_summary_timing() -> None:
    case = BY_NAME["stop"]
    events = [e + b"\n\n" for e in case.stream.split(b"\n\n") if e]
    _, tr = run(_native.StreamTranslator, "openai", events, step_ns=2_000_000)
    s = tr.summary()
    assert s["ttft_ms"] == 4.0
    tpot = s["tpot_ms"]
    assert isinstance(tpot, dict)
    assert tpot["p50"] == tpot["max"] == tpot["mean"] == 2.0
    assert s["chunks"] == len(events) - 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_recorded_stop_word_from_verbose(dialect: str) -> None:
    """llama.cpp names the matched stop word only in ``__verbose``: Anthropic says stop_sequence with it (streamed
    and whole), every dialect's summary carries it, and no client sees ``__verbose``."""
    case = BY_NAME["stop_verbose"]
    assert stop_word(json.loads(case.whole)) == "vast"
    out, tr = run(_native.StreamTranslator, dialect, [case.stream], include_usage=True)
    body, summary = _native.translate_whole(dialect, MODEL, case.whole, message_id=MESSAGE_ID)
    assert b"__verbose" not in out and b"__verbose" not in body and b"stop_type" not in out + body
    assert tr.summary()["stop_sequence"] == summary["stop_sequence"] == "vast"
    assert tr.summary()["finish_reason"] == summary["finish_reason"] == "stop"
    if dialect == "anthropic":
        delta = anthropic_events(out)[-2][1]["delta"]
        assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "vast"}
        msg = json.loads(body)
        assert (msg["stop_reason"], msg["stop_sequence"]) == ("stop_sequence", "vast")
        assert msg["content"] == [{"type": "text", "text": "The sea is a "}]
    eos = BY_NAME["eos_verbose"]
    out, tr = run(_native.StreamTranslator, dialect, [eos.stream])
    body, summary = _native.translate_whole(dialect, MODEL, eos.whole)
    assert tr.summary()["stop_sequence"] is summary["stop_sequence"] is None
    if dialect == "anthropic":
        assert anthropic_events(out)[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
        assert json.loads(body)["stop_reason"] == "end_turn"


# ---- whole bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_whole_body_matches_oracle(case: Case, dialect: str) -> None:
    kw: dict[str, Any] = {
        "load_duration_ns": 5,
        "message_id": MESSAGE_ID,
        "total_duration_ns": 99,
        "now_ns": START_NS,
    }
    body, summary = _native.translate_whole(dialect, MODEL, case.whole, **kw)
    want_body, want_summary = oracle.translate_whole(dialect, MODEL, case.whole, **kw)
    assert body == want_body
    assert normalised(summary) == normalised(want_summary)


def test_whole_bodies_per_dialect() -> None:
    body = BY_NAME["tool_calls_parallel"].whole
    out, summary = _native.translate_whole("anthropic", MODEL, body, message_id=MESSAGE_ID)
    msg = json.loads(out)
    assert [b["type"] for b in msg["content"]] == ["tool_use", "tool_use"]
    assert [b["input"] for b in msg["content"]] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert msg["stop_reason"] == "tool_use" and summary["errors"] == []
    out, _ = _native.translate_whole("ollama_chat", MODEL, body, total_duration_ns=10, load_duration_ns=3)
    obj = json.loads(out)
    assert obj["done"] is True and obj["total_duration"] == 10 and obj["load_duration"] == 3
    assert obj["prompt_eval_duration"] > 0 and obj["eval_duration"] > 0
    assert [c["function"]["arguments"] for c in obj["message"]["tool_calls"]] == [
        {"city": "Paris"},
        {"city": "Tokyo"},
    ]
    out, _ = _native.translate_whole("openai", MODEL, BY_NAME["text"].whole)
    assert json.loads(out)["model"] == MODEL
    err, summary = _native.translate_whole("anthropic", MODEL, BY_NAME["engine_error"].whole)
    assert json.loads(err)["type"] == "error" and summary["errors"]
    assert summary["engine_error"] == json.loads(err)["error"]["message"]
    assert _native.translate_whole("openai", MODEL, BY_NAME["text"].whole)[1]["engine_error"] is None
    with pytest.raises(_native.StreamError, match="not a JSON chat completion"):
        _native.translate_whole("openai", MODEL, b"[1, 2]")
    with pytest.raises(_native.StreamError, match="not UTF-8"):
        _native.translate_whole("openai", MODEL, b"\xff")


# ---- parity with the oracle at every and at random chunk boundaries --------------------------


_DETAIL = re.compile(r"(arguments are not a JSON object|is not a chat completion chunk): .*")


def normalised(summary: dict[str, object]) -> dict[str, object]:
    """The summary with JSON parser wording (serde's vs Python's) cut from error strings."""
    errors = summary["errors"]
    assert isinstance(errors, list)
    return {**summary, "errors": [_DETAIL.sub(r"\1", e) for e in errors]}


def both(dialect: str, pieces: Sequence[bytes], **kw: Any) -> tuple[bytes, bytes]:
    native, n = run(_native.StreamTranslator, dialect, pieces, **kw)
    ref, o = run(oracle.StreamTranslator, dialect, pieces, **kw)
    assert normalised(n.summary()) == normalised(o.summary())
    assert n.done == o.done
    return native, ref


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_single_cut_matches_whole_and_oracle(case: Case, dialect: str) -> None:
    whole, ref = both(dialect, [case.stream], include_usage=True)
    assert whole == ref
    data = case.stream
    for i in range(len(data) + 1):
        out, _ = run(_native.StreamTranslator, dialect, [data[:i], data[i:]], include_usage=True)
        assert out == whole, f"cut at byte {i}"


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_byte_by_byte_matches_oracle(case: Case, dialect: str) -> None:
    pieces = [case.stream[i : i + 1] for i in range(len(case.stream))]
    native, ref = both(dialect, pieces)
    assert native == ref == run(_native.StreamTranslator, dialect, [case.stream])[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(CASES),
    dialect=st.sampled_from(DIALECTS),
    data=st.data(),
    include_usage=st.booleans(),
)
def test_random_cuts_match_oracle(case: Case, dialect: str, data: st.DataObject, include_usage: bool) -> None:
    stream = case.stream
    points = data.draw(st.lists(st.integers(0, len(stream)), max_size=40))
    pieces = cut(stream, points)
    native, ref = both(dialect, pieces, include_usage=include_usage)
    assert native == ref
    assert native == run(_native.StreamTranslator, dialect, [stream], include_usage=include_usage)[0]


@settings(max_examples=100, deadline=None)
@given(
    case=st.sampled_from(CASES),
    dialect=st.sampled_from(DIALECTS),
    data=st.data(),
)
def test_random_cuts_and_times_match_oracle(case: Case, dialect: str, data: st.DataObject) -> None:
    """With time passing between feeds, durations, created_at and pings must still agree."""
    points = data.draw(st.lists(st.integers(0, len(case.stream)), max_size=30))
    step = data.draw(st.sampled_from([1, 999_999, 3_000_000_000, 11_000_000_000]))
    native, ref = both(dialect, cut(case.stream, points), step_ns=step)
    assert native == ref


@settings(max_examples=200, deadline=None)
@given(
    case=st.sampled_from(CASES),
    dialect=st.sampled_from(DIALECTS),
    data=st.data(),
)
def test_mangled_streams_match_oracle(case: Case, dialect: str, data: st.DataObject) -> None:
    """Recorded streams with events dropped or duplicated, CRLF/CR line ends, comments and
    truncation: still byte-identical to the oracle."""
    events = [e for e in case.stream.split(b"\n\n") if e]
    picked = data.draw(st.lists(st.sampled_from(events), max_size=len(events) + 3)) if events else []
    eol = data.draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    body = b"".join(b": c" + eol + e + eol + eol for e in picked)
    body = body[: data.draw(st.integers(0, len(body)))]
    points = data.draw(st.lists(st.integers(0, len(body)), max_size=10))
    native, ref = both(dialect, cut(body, points))
    assert native == ref


# ---- synthetic streams: shapes the recordings lack (reasoning, interleaving, odd fragments) ---


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}}
    if finish is not None:
        choice["finish_reason"] = finish
    return b"data: " + json.dumps({"choices": [choice], "model": "engine", **extra}).encode() + b"\n\n"


THINKING_STREAM = (
    chunk({"role": "assistant", "content": None})
    + chunk({"reasoning_content": "Let me think "})
    + chunk({"reasoning_content": 'about "it".'})
    + chunk({"content": "Answer: 42 ✓"})
    + chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]
        }
    )
    + chunk(finish="tool_calls")
    + b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}\n\n'
    + b"data: [DONE]\n\n"
)


def test_reasoning_becomes_thinking() -> None:
    out, tr = run(_native.StreamTranslator, "anthropic", [THINKING_STREAM])
    events = anthropic_events(out)
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "text", "tool_use"]
    thinking = "".join(
        d["delta"]["thinking"] for n, d in events if d.get("delta", {}).get("type") == "thinking_delta"
    )
    assert thinking == 'Let me think about "it".' == tr.summary()["reasoning"]
    out, _ = run(_native.StreamTranslator, "ollama_chat", [THINKING_STREAM])
    lines = ollama_lines(out)
    assert "".join(x["message"].get("thinking", "") for x in lines) == thinking
    body = json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "A", "reasoning_content": "R"},
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2},
        }
    ).encode()
    msg = json.loads(_native.translate_whole("anthropic", MODEL, body, message_id=MESSAGE_ID)[0])
    assert msg["content"] == [
        {"type": "thinking", "thinking": "R", "signature": ""},
        {"type": "text", "text": "A"},
    ]
    gen = json.loads(_native.translate_whole("ollama_generate", MODEL, body)[0])
    assert (gen["response"], gen["thinking"]) == ("A", "R")


fragment = st.fixed_dictionaries(
    {},
    optional={
        "index": st.integers(0, 2),
        "id": st.sampled_from(["a", "b", "c"]),
        "type": st.sampled_from(["function", "custom"]),
        "function": st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(["f", "g", ""]),
                "arguments": st.sampled_from(["", "{", '"x": ', "1", "}", "{}", ' {"a": [1, "b c"]} ']),
            },
        ),
    },
)
synthetic_event = st.one_of(
    st.text(max_size=6).map(lambda t: chunk({"content": t})),
    st.text(max_size=6).map(lambda t: chunk({"reasoning_content": t})),
    st.lists(fragment, min_size=1, max_size=2).map(lambda fs: chunk({"tool_calls": fs})),
    st.sampled_from(["stop", "length", "tool_calls", "content_filter"]).map(lambda f: chunk(finish=f)),
    st.just(chunk(finish="stop", choices_extra=1)),
    st.just(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":"END"}]}\n\n'),
    # llama.cpp's __verbose: on the finish chunk or a content chunk, in other stop types and odd shapes
    st.sampled_from(["stop", "length", "tool_calls"]).map(
        lambda f: chunk(finish=f, **{"__verbose": {"stop_type": "word", "stopping_word": "END"}})
    ),
    st.sampled_from(
        [
            {"stop_type": "word", "stopping_word": 'w "q"\n'},
            {"stop_type": "eos", "stopping_word": ""},
            {"stop_type": "limit", "stopping_word": ""},
            {"stop_type": "word"},
            {"stop_type": 1, "stopping_word": "x"},
            ["word", "x"],
            "word",
            None,
        ]
    ).map(lambda v: chunk({"content": "c"}, **{"__verbose": v})),
    st.just(b'data: {"__verbose":{"stop_type":"word","stopping_word":"W"} , "choices":[]}\n\n'),
    st.just(b'data: {"choices":[{"index":1,"delta":{"content":"other"}}]}\n\n'),
    st.just(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":8}}\n\n'),
    st.just(b'data: {"error":{"message":"boom","type":"invalid_request_error","code":400}}\n\n'),
    st.just(b'error: {"code":503,"message":"Loading model","type":"unavailable_error"}\n\n'),
    st.just(b"data: not json\n\n"),
    st.just(b"data: [1, 2]\n\n"),
    st.just(b": comment\n\n"),
    st.just(b"data: [DONE]\n\n"),
)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(synthetic_event, max_size=12),
    dialect=st.sampled_from(DIALECTS),
    data=st.data(),
    include_usage=st.booleans(),
)
def test_synthetic_streams_match_oracle(
    events: list[bytes], dialect: str, data: st.DataObject, include_usage: bool
) -> None:
    body = b"".join(events)
    points = data.draw(st.lists(st.integers(0, len(body)), max_size=6))
    step = data.draw(st.sampled_from([0, 7_000_000_000]))
    native, ref = both(dialect, cut(body, points), include_usage=include_usage, step_ns=step)
    assert native == ref
    if step == 0:
        assert native == run(_native.StreamTranslator, dialect, [body], include_usage=include_usage)[0]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_redact_cuts_a_credential_out_of_relayed_engine_errors(dialect: str) -> None:
    """A remote's mid-stream error may quote the key Blazar sent it: the translators cut it out, as the oracle does."""
    secret = "sk-remote-Zq81"
    stream = (
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        b'data: {"error":{"message":"upstream refused sk-remote-Zq81 mid-stream","type":"auth","code":401}}\n\n'
    )
    outs = []
    for impl in (_native.StreamTranslator, oracle.StreamTranslator):
        out, tr = run(impl, dialect, [stream], redact=secret)
        assert secret.encode() not in out
        assert b"upstream refused <redacted> mid-stream" in out
        assert tr.summary()["engine_error"] == "upstream refused <redacted> mid-stream"
        outs.append(out)
    assert outs[0] == outs[1]
    plain, _ = run(_native.StreamTranslator, dialect, [stream])
    assert secret.encode() in plain
    # a frame that is no chunk, relayed to OpenAI clients as it came, is redacted too
    raw = b"data: proxy says: invalid key sk-remote-Zq81\n\n"
    got = [
        run(impl, "openai", [raw], redact=secret)[0]
        for impl in (_native.StreamTranslator, oracle.StreamTranslator)
    ]
    assert (
        got[0] == got[1] and b"proxy says: invalid key <redacted>" in got[0] and secret.encode() not in got[0]
    )


COMPLETION_CHUNKS = [
    b'{"choices":[{"text":"","index":0,"finish_reason":"length"}],"model":"e","usage":{"prompt_tokens":1},"id":"c"}',
    b'{"usage":{"prompt_tokens":1}, "choices":[{"text":"x","index":0}] ,"model":"e"}',
    b'{"choices":[{"text":"x","index":0}],"usage":null,"model":"e"}',
    b'{"choices":[{"index":0,"text":"x"}],"usage":{"prompt_tokens":1},"__verbose":{"a":1}}',
    b'{"usage":{"prompt_tokens":1},"__verbose":{},"choices":[{"index":0,"text":"x"}]}',
]


@pytest.mark.parametrize("chunk", COMPLETION_CHUNKS)
@pytest.mark.parametrize("include_usage", [False, True])
def test_usage_on_a_chunk_with_choices_goes_only_to_who_asked(chunk: bytes, include_usage: bool) -> None:
    """llama.cpp's /v1/completions stream carries usage on its last chunk with choices; OpenAI sends usage only to
    a client that asked (stream_options.include_usage), in a usage-only chunk of its own before [DONE]. Native and
    oracle cut it alike and leave valid JSON."""
    stream = b"data: " + chunk + b"\n\ndata: [DONE]\n\n"
    outs = [
        run(impl, "openai", [stream], include_usage=include_usage)[0]
        for impl in (_native.StreamTranslator, oracle.StreamTranslator)
    ]
    assert outs[0] == outs[1]
    first = json.loads(sse_events(outs[0])[0][1])
    assert "__verbose" not in first
    adjacent = (
        chunk.startswith(b'{"usage"') and b'"__verbose"' in chunk
    )  # the one cut that would touch another
    assert ("usage" in first) == (b'"usage":null' in chunk or adjacent), first
    events = sse_events(outs[0])
    if include_usage and json.loads(chunk).get("usage") is not None:
        last = json.loads(events[1][1])
        assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 1} and "__verbose" not in last, (
            last
        )
        assert events[2][1] == "[DONE]"
    else:
        assert [data for _, data in events[1:]] == ["[DONE]"]


LOGPROBS = (
    '[{"id":72,"token":"Hi","bytes":[72,105],"logprob":-0.25,'
    '"top_logprobs":[{"id":72,"token":"Hi","bytes":[72,105],"logprob":-0.25}]}]'
)


@pytest.mark.parametrize("dialect", ["ollama_chat", "ollama_generate"])
def test_logprobs_reach_ollama_alike_from_native_and_oracle(dialect: str) -> None:
    stream = (
        f'data: {{"choices":[{{"index":0,"delta":{{"content":"Hi"}},"logprobs":{{"content":{LOGPROBS}}}}}]}}\n\n'
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    ).encode()
    outs = [run(impl, dialect, [stream])[0] for impl in (_native.StreamTranslator, oracle.StreamTranslator)]
    assert outs[0] == outs[1]
    assert json.loads(outs[0].splitlines()[0])["logprobs"] == json.loads(LOGPROBS)
    body = (
        f'{{"choices":[{{"index":0,"message":{{"content":"Hi"}},"logprobs":{{"content":{LOGPROBS}}},'
        '"finish_reason":"stop"}]}'
    ).encode()
    wholes = [
        impl(dialect, MODEL, body, now_ns=START_NS)[0]
        for impl in (_native.translate_whole, oracle.translate_whole)
    ]
    assert wholes[0] == wholes[1] and json.loads(wholes[0])["logprobs"] == json.loads(LOGPROBS)


def test_completions_logprobs_come_in_the_completions_apis_shape() -> None:
    """llama-server gives a text choice's logprobs in the chat shape; an OpenAI client of /v1/completions gets
    tokens, token_logprobs, top_logprobs and text_offset (running across the stream), native and oracle alike."""
    entry = '{{"id":1,"token":"{t}","bytes":[],"logprob":-0.5,"top_logprobs":[{{"id":1,"token":"{t}","bytes":[],"logprob":-0.5}}]}}'
    chunk = (
        '{{"choices":[{{"text":"{t}","index":0,"logprobs":{{"content":[{e}]}}}}],"object":"text_completion"}}'
    )
    stream = (
        b"".join(b"data: " + chunk.format(t=t, e=entry.format(t=t)).encode() + b"\n\n" for t in ("He", "llo"))
        + b'data: {"choices":[{"text":"","index":0,"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    )
    outs = [run(impl, "openai", [stream])[0] for impl in (_native.StreamTranslator, oracle.StreamTranslator)]
    assert outs[0] == outs[1]
    second = json.loads(sse_events(outs[0])[1][1])["choices"][0]["logprobs"]
    assert second == {
        "tokens": ["llo"],
        "token_logprobs": [-0.5],
        "top_logprobs": [{"llo": -0.5}],
        "text_offset": [2],
    }
    body = chunk.format(t="Hi", e=entry.format(t="Hi")).encode()
    wholes = [
        impl("openai", MODEL, body, now_ns=START_NS)[0]
        for impl in (_native.translate_whole, oracle.translate_whole)
    ]
    assert wholes[0] == wholes[1] and json.loads(wholes[0])["choices"][0]["logprobs"]["tokens"] == ["Hi"]
