"""The exchange's paths through a real ``blazar serve`` whose engine is a stand-in llama-server process
(``stand_in_engine.py``): no built engine and no test assets, so these run anywhere in seconds. Each path is one
the real engine cannot be made to take on demand, or takes only after a long answer: success whole and streamed,
an engine that dies before its head (502, and the next request gets a fresh engine) or after it (the stream ends
with the dialect's error), a wedged engine (stopped, and the request retried once on a fresh one), a client that
leaves mid-stream (the engine's connection closed, the slot freed), a quota refusal and an admission timeout.
Nothing here waits on a timer: each test waits on what it observes (a file the stand-in writes, a status)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import httpx

from tests.conftest import HANG, wait_for
from tests.gateway.conftest import ANSWER, Served


def test_a_whole_and_a_streamed_answer_come_back_in_the_callers_dialect(serve: Callable[..., Served]) -> None:
    s = serve()
    r = s.chat("hi", max_tokens=8)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == ANSWER and r.json()["model"] == "m"
    assert r.headers["x-blazar-trace-id"]
    sent = s.requests()[0]["body"]
    assert sent["max_tokens"] == 8 and sent["messages"] == [{"role": "user", "content": "hi"}]
    a = httpx.post(
        s.d.url + "/v1/messages",
        json={"model": "m", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        timeout=120,
    )
    assert a.status_code == 200 and a.headers["content-type"].startswith("text/event-stream")
    deltas = [
        json.loads(line[6:])["delta"]["text"]
        for line in a.text.splitlines()
        if line.startswith("data: ") and '"text_delta"' in line
    ]
    assert "".join(deltas).strip() == ANSWER and "event: message_stop" in a.text
    assert s.requests()[1]["body"]["return_progress"] is True  # the plan for llama-server, as sent


def test_fill_in_the_middle_is_planned_like_a_generation_and_shaped_once(
    serve: Callable[..., Served],
) -> None:
    """Ollama's ``suffix`` runs on llama-server's /infill, asked whole: the plan converts what llama-server does
    not take (Ollama's repeat_last_n -1: the whole context), and a stream is the answer then the done line."""
    s = serve()
    ask = {"model": "m", "prompt": "def f(", "suffix": ")", "options": {"repeat_last_n": -1}}
    whole = httpx.post(s.d.url + "/api/generate", json={**ask, "stream": False}, timeout=120)
    assert whole.status_code == 200, whole.text
    done = whole.json()
    assert done["response"] == ANSWER and done["done_reason"] == "stop" and done["eval_count"] == 4
    sent = s.requests()[0]["body"]
    assert sent["input_prefix"] == "def f(" and sent["input_suffix"] == ")" and sent["stream"] is False
    assert sent["repeat_last_n"] == 4096  # a slot's whole context: the default ctx_size, shared by the slots
    streamed = httpx.post(s.d.url + "/api/generate", json=ask, timeout=120)
    lines = [json.loads(line) for line in streamed.text.splitlines()]
    assert streamed.headers["content-type"] == "application/x-ndjson"
    assert [x["done"] for x in lines] == [False, True] and lines[0]["response"] == ANSWER
    assert s.requests()[1]["body"]["stream"] is False


def test_an_engine_that_dies_before_its_head_is_a_502_and_the_next_request_gets_a_fresh_one(
    serve: Callable[..., Served],
) -> None:
    s = serve()
    r = s.chat("die before headers")
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert "died while serving the request" in message and "logs/m--latest.log" in message
    assert str(s.d.data_dir) not in r.text
    again = s.chat("hi")
    assert again.status_code == 200, again.text
    first, second = (e["pid"] for e in s.requests())
    assert first != second  # a new engine process served it


def test_an_engine_that_dies_after_its_head_ends_the_stream_with_the_dialects_error(
    serve: Callable[..., Served],
) -> None:
    s = serve()
    r = s.chat("die after headers", stream=True)
    assert r.status_code == 200  # the head was sent before the engine died
    events = [line for line in r.text.splitlines() if line.startswith("data: ")]
    # what the engine sent, then OpenAI's in-stream error and its terminator; never a finish
    assert events[-2].startswith('data: {"error":{"message":"engine for \'m:latest\' died while serving the')
    assert events[-1] == "data: [DONE]" and '"finish_reason":"stop"' not in r.text
    assert s.chat("hi").status_code == 200


def test_a_wedged_engine_is_stopped_and_the_request_runs_once_more_on_a_fresh_one(
    serve: Callable[..., Served],
) -> None:
    # the bound a wedged engine is found by: the stand-in stops itself, so nothing answers within it; the fresh
    # engine answers at once, far inside it
    s = serve("child_header_timeout_secs = 10\n")
    r = s.chat("wedge once")
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == ANSWER
    wedged, fresh = (e["pid"] for e in s.requests())
    assert int((s.state / "wedged").read_text()) == wedged != fresh
    log = s.d.log.read_text()
    assert "WARNING blazar.exchange: engine for 'm:latest' sent no response headers within 10s" in log, log
    assert "retrying the request once on a restarted engine" in log, log


def test_a_client_that_leaves_mid_stream_closes_the_engines_stream_and_frees_the_slot(
    serve: Callable[..., Served],
) -> None:
    s = serve("parallel = 1\n")
    body = {"model": "m", "messages": [{"role": "user", "content": "hold"}], "stream": True}
    with httpx.stream("POST", s.d.url + "/v1/chat/completions", json=body, timeout=120) as r:
        chunks = r.iter_bytes()
        assert next(chunks)  # streaming: the engine holds the only slot
    wait_for(lambda: (s.state / "left").exists(), HANG, "the engine to see its stream closed")
    assert s.chat("hi").status_code == 200  # the one slot was freed


def test_a_key_over_its_rate_is_refused_before_the_engine_hears_of_it(serve: Callable[..., Served]) -> None:
    secret = "sk-exchange-test-0123456789abcdef"
    s = serve(f'[[keys]]\nname = "k"\nsecret = "{secret}"\nrpm = 1\n')
    assert s.chat("hi", key=secret).status_code == 200
    r = s.chat("hi", key=secret)
    assert r.status_code == 429, r.text
    assert r.json()["error"]["type"] == "rate_limit_error" and int(r.headers["retry-after"]) >= 1
    assert len(s.requests()) == 1
    assert s.chat("hi").status_code == 401  # and no key is no answer at all


def test_a_request_that_finds_no_slot_freeing_is_a_503_with_a_retry_after(
    serve: Callable[..., Served],
) -> None:
    s = serve("parallel = 1\nqueue_wait_secs = 1\n")
    body = {"model": "m", "messages": [{"role": "user", "content": "hold"}], "stream": True}
    held: dict[str, bytes] = {}

    def hold() -> None:
        with httpx.stream("POST", s.d.url + "/v1/chat/completions", json=body, timeout=120) as r:
            held["body"] = r.read()

    t = threading.Thread(target=hold)
    t.start()
    try:
        wait_for(lambda: len(s.requests()) == 1, HANG, "the held stream to reach the engine")
        r = s.chat("hi")  # waits queue_wait_secs with no slot freeing: the engine holds it until released
        assert r.status_code == 503, r.text
        assert "all_slots_busy" in r.text and 1 <= int(r.headers["retry-after"]) <= 300
    finally:
        (s.state / "release").write_text("")
        t.join(60)
    assert b"data: [DONE]" in held["body"]
    assert len(s.requests()) == 1  # the refused request never reached the engine
