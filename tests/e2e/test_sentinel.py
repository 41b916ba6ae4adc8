"""End to end: the sentinel watches real llama-server answers; warn-only by default, 422 with sentinel_enforce."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.conftest import HANG, Daemon, wait_for

pytestmark = pytest.mark.e2e

ASK = [{"role": "user", "content": "Tell me a story about a fox."}]
CUT = {"model": "smollm2", "messages": ASK, "max_tokens": 2, "temperature": 0}
WHOLE = {"model": "smollm2", "messages": ASK, "max_tokens": 40, "stop": [" "], "temperature": 0}
"""Stops at the first space: a sound, finished answer of one word."""
TRUNCATED = "[truncated] the answer was cut off at the token limit after 2 tokens (finish_reason length)"


def test_findings_are_logged_and_named_but_the_answer_is_untouched(daemon: Daemon) -> None:
    fine = httpx.post(daemon.url + "/v1/chat/completions", json=WHOLE, timeout=60)
    assert fine.status_code == 200 and fine.json()["choices"][0]["finish_reason"] == "stop", fine.text
    assert "x-blazar-sentinel" not in fine.headers

    r = httpx.post(daemon.url + "/v1/chat/completions", json=CUT, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length", r.text
    assert r.headers["x-blazar-sentinel"] == "truncated"
    trace = r.headers["x-blazar-trace-id"]
    assert f"sentinel: smollm2 answered whole (trace {trace}): {TRUNCATED}" in daemon.log.read_text()

    o = httpx.post(daemon.url + "/api/chat", json={"model": "smollm2", "messages": ASK, "stream": False,
                                                  "options": {"num_predict": 2}}, timeout=60)  # fmt: skip
    assert o.status_code == 200 and o.json()["done_reason"] == "length"
    assert o.headers["x-blazar-sentinel"] == "truncated"

    with httpx.stream(
        "POST", daemon.url + "/v1/chat/completions", json={**CUT, "stream": True}, timeout=60
    ) as s:
        assert s.status_code == 200 and "x-blazar-sentinel" not in s.headers  # the head went out first
        text = s.read().decode()
        trace = s.headers["x-blazar-trace-id"]
    assert text.rstrip().endswith("data: [DONE]")
    line = f"sentinel: smollm2 answered a stream (trace {trace}): {TRUNCATED}"
    wait_for(lambda: line in daemon.log.read_text(), HANG, "the sentinel's line (written as the stream ends)")


def test_enforce_answers_a_faulty_whole_answer_with_422(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("sentinel_enforce = true\n")
    r = httpx.post(d.url + "/v1/chat/completions", json=CUT, timeout=60)
    assert r.status_code == 422, r.text
    assert r.json() == {
        "error": {"message": f"sentinel enforce: {TRUNCATED}", "type": "sentinel_violation", "code": 422}
    }
    a = httpx.post(
        d.url + "/v1/messages",
        json={"model": "smollm2", "messages": ASK, "max_tokens": 2},
        headers={"anthropic-version": "2023-06-01"},
        timeout=60,
    )
    assert a.status_code == 422 and a.json()["error"]["message"] == f"sentinel enforce: {TRUNCATED}", a.text
    assert a.json()["type"] == "error"
    fine = httpx.post(d.url + "/v1/chat/completions", json=WHOLE, timeout=60)
    assert fine.status_code == 200, fine.text
    # a stream is never held back: its bytes are already the client's
    streamed = httpx.post(d.url + "/v1/chat/completions", json={**CUT, "stream": True}, timeout=60)
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")


def test_off_means_off(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("sentinel = false\nsentinel_enforce = true\n")
    r = httpx.post(d.url + "/v1/chat/completions", json=CUT, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length", r.text
    assert "x-blazar-sentinel" not in r.headers
    assert "sentinel" not in d.log.read_text()


def test_a_stalled_stream_is_reported_while_the_client_waits_and_kept_alive(daemon_factory: object) -> None:
    """The engine stops (SIGSTOP) mid-stream: the sentinel warns while the client still waits, the Anthropic
    client gets a ``ping`` after 10 s without output, and the stream completes once the engine resumes."""
    assert callable(daemon_factory)
    # the engine ignores EOS: the 150 tokens are surely not all out when it is stopped after the first
    d: Daemon = daemon_factory(
        'sentinel_stall_secs = 2\n[models."smollm2:latest"]\nextra_args = ["--ignore-eos"]\n'
    )
    assert httpx.post(d.url + "/v1/chat/completions", json=CUT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    story = {"model": "smollm2", "messages": ASK, "max_tokens": 150, "temperature": 0, "stream": True}
    headers = {"anthropic-version": "2023-06-01"}
    with httpx.stream("POST", d.url + "/v1/messages", json=story, headers=headers, timeout=90) as s:
        assert s.status_code == 200
        trace = s.headers["x-blazar-trace-id"]
        lines = s.iter_lines()
        for line in lines:
            if line == "event: content_block_delta":
                break
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            for line in lines:
                assert line != "event: message_stop", "the answer ended before the engine was stopped"
                if line == "event: ping":
                    break
            quiet = time.monotonic() - stopped
            assert "sentinel: smollm2's stream has sent nothing for" in d.log.read_text()
        finally:
            os.kill(pid, signal.SIGCONT)
        rest = "\n".join(lines)
    assert 9 < quiet < 20, quiet
    assert "event: message_stop" in rest, rest[-300:]
    log = d.log.read_text()
    assert f"(trace {trace}; sentinel_stall_secs is 2); the client is still waiting" in log, log[-2000:]
    head = f"sentinel: smollm2 answered a stream (trace {trace}): "

    def judged() -> bool:
        return any(
            head in ln and "[stalled] the stream paused" in ln for ln in d.log.read_text().splitlines()
        )

    wait_for(judged, HANG, "the judgement (written as the stream ends)")
