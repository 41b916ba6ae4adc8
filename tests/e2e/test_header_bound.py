"""End to end: the header-phase bound (``child_header_timeout_secs``) on a real llama-server.

An engine that sends no response headers in time is either wedged (it no longer answers its health check: here
it is stopped with SIGSTOP) or working on a long whole answer. A wedged one is stopped and the request retried
once on a fresh engine; a working one keeps running and only the slow request ends.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import httpx
import pytest

from tests.conftest import HANG, Daemon, pid_alive, wait_for
from tests.e2e.test_supervision import CHAT, engine_busy

pytestmark = pytest.mark.e2e

BOUND = "child_header_timeout_secs = 10\n"
"""Wide enough for a short answer on a loaded 2-core machine; the wedge tests wait it out."""
QUICK = {**CHAT, "max_tokens": 2}
"""A whole answer well inside the bound, even on a loaded machine."""
LONG = {
    **CHAT,
    "max_tokens": 4000,
    "ignore_eos": True,
    "messages": [{"role": "user", "content": "Write a story."}],
}
"""A whole answer that takes far longer than the bound on this CPU: llama-server sends its head at the end."""


def chat(d: Daemon, body: dict[str, Any], timeout: float = 90) -> httpx.Response:
    return httpx.post(d.url + "/v1/chat/completions", json=body, timeout=timeout)


def busy_slots(d: Daemon) -> int:
    """The slots the chat engine's requests hold (Blazar's admission, from /api/ps: the engine is not asked)."""
    return sum(m["busy_slots"] for m in httpx.get(d.url + "/api/ps", timeout=30).json()["models"])


def cancelled(d: Daemon) -> int:
    """How many tasks the engine has cancelled, from its own log (asking its /metrics meanwhile would delay that:
    while those answers come, llama-server does not look at a whole answer's connection)."""
    return (d.data_dir / "logs" / "smollm2--latest.log").read_text().count("stop: cancel task")


def serving(d: Daemon) -> int:
    """The pid of the engine after one quick answer."""
    assert chat(d, QUICK).status_code == 200
    [pid] = d.child_pids()
    return pid


def wedge(d: Daemon) -> int:
    """The pid of a serving engine, now stopped with SIGSTOP: it no longer answers anything."""
    pid = serving(d)
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_a_token_count_on_a_wedged_engine_is_asked_again_of_a_fresh_one(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(BOUND)
    pid = wedge(d)
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]}
    r = httpx.post(d.url + "/v1/messages/count_tokens", json=body, timeout=90)
    assert r.status_code == 200 and r.json()["input_tokens"] > 0, r.text
    wait_for(lambda: not pid_alive(pid), HANG, "the wedged engine to be gone")


def test_a_wedged_engine_is_stopped_and_the_request_retried_on_a_fresh_one(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(BOUND)
    pid = wedge(d)
    r = chat(d, QUICK)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
    wait_for(lambda: not pid_alive(pid), HANG, "the wedged engine to be gone")
    [fresh] = d.child_pids()
    assert fresh != pid
    log = d.log.read_text()
    assert (
        "engine for 'smollm2:latest' sent no response headers within 10s (child_header_timeout_secs);"
        " retrying the request once on a restarted engine"
    ) in log, log[-2000:]

    # a stream too: nothing reached the client before the retry, so it gets one whole stream
    os.kill(fresh, signal.SIGSTOP)
    with httpx.stream(
        "POST", d.url + "/v1/chat/completions", json={**QUICK, "stream": True}, timeout=90
    ) as s:
        assert s.status_code == 200
        text = s.read().decode()
    assert text.count("data: [DONE]") == 1 and text.rstrip().endswith("data: [DONE]"), text[-300:]
    assert '"content"' in text
    wait_for(lambda: not pid_alive(fresh), HANG, "the second wedged engine to be gone")


def test_a_request_that_was_waiting_on_the_wedged_engine_is_retried_too(daemon_factory: object) -> None:
    """B went out to the wedged engine after A did; A's timeout stops the engine under B, which never got a
    byte of its answer either: B is retried on the fresh engine, not failed."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(
        "child_header_timeout_secs = 8\nparallel = 2\n"
    )  # two retries share one engine
    pid = wedge(d)
    results: dict[str, httpx.Response] = {}
    first = threading.Thread(target=lambda: results.setdefault("a", chat(d, QUICK)))
    first.start()
    wait_for(lambda: busy_slots(d) == 1, HANG, "A to go out to the wedged engine")
    second = threading.Thread(target=lambda: results.setdefault("b", chat(d, QUICK)))
    second.start()
    wait_for(lambda: busy_slots(d) == 2, HANG, "B to go out to it too")  # long before A's 8 s bound
    first.join(90)
    second.join(90)
    assert results["a"].status_code == 200, results["a"].text
    assert results["b"].status_code == 200, results["b"].text
    wait_for(lambda: not pid_alive(pid), HANG, "the wedged engine to be gone")
    assert len(d.child_pids()) == 1
    # both were on the wedged engine, and each was retried once on the fresh one
    assert d.log.read_text().count("retrying the request once on a restarted engine") == 2, d.log.read_text()


def test_a_client_that_leaves_during_the_check_still_gets_the_wedged_engine_stopped(
    daemon_factory: object,
) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(BOUND)
    pid = wedge(d)
    with pytest.raises(httpx.ReadTimeout):
        chat(d, QUICK, timeout=11)  # gone after the 10 s bound, while the health check (2 s) runs
    wait_for(lambda: not pid_alive(pid), HANG, "the wedged engine to be stopped all the same")
    assert chat(d, QUICK).status_code == 200


def test_an_engine_that_wedges_again_on_the_retry_is_a_504(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(BOUND)
    first = wedge(d)
    result: dict[str, httpx.Response] = {}
    t = threading.Thread(target=lambda: result.setdefault("r", chat(d, LONG)))
    t.start()

    def fresh_engine_generating() -> int | None:
        pids = [p for p in d.child_pids() if p != first]
        try:
            return pids[0] if pids and engine_busy(d, pids[0]) else None
        except (AssertionError, httpx.HTTPError, OSError, ValueError):  # still loading, or files in flux
            return None

    wait_for(fresh_engine_generating, HANG, "the restarted engine to be generating the retried request")
    second = fresh_engine_generating()
    assert second is not None
    os.kill(second, signal.SIGSTOP)  # wedged too, before its 10 s bound runs out
    t.join(60)
    r = result["r"]
    assert r.status_code == 504, r.text
    message = r.json()["error"]["message"]
    assert message == (
        "engine for 'smollm2:latest' sent no response headers within 10s (child_header_timeout_secs), and again"
        " when the request was retried once on a restarted engine; both were stopped and the next request"
        " starts it again"
    )
    wait_for(lambda: not pid_alive(first) and not pid_alive(second), HANG, "both wedged engines to be gone")
    assert chat(d, QUICK).status_code == 200  # a third engine


def test_a_long_whole_answer_ends_only_itself_and_the_engine_keeps_running(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(BOUND)
    pid = serving(d)
    before = cancelled(d)
    r = chat(d, LONG)
    assert r.status_code == 504, r.text
    message = r.json()["error"]["message"]
    assert message.startswith(
        "engine for 'smollm2:latest' is running but sent no response headers within 10s"
        " (child_header_timeout_secs): a whole (non-streamed) answer comes only when it is complete;"
    ), message
    assert d.child_pids() == [pid] and pid_alive(pid)  # not stopped, not retried
    wait_for(lambda: cancelled(d) > before, HANG, "the engine to drop the abandoned generation")
    assert chat(d, QUICK).status_code == 200
    assert d.child_pids() == [pid]
    assert "retrying the request" not in d.log.read_text()


def test_a_stream_whose_engine_wedges_midway_ends_with_the_error_event(daemon_factory: object) -> None:
    """Past its head, a stream that goes quiet for the same bound gets the engine's health checked: a wedged
    engine is stopped and the client's stream ends with the dialect's error event, not pings for ever."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(BOUND)  # the answers before and after must come within it too
    pid = serving(d)
    body = {**LONG, "stream": True, "max_tokens": 2000}
    t0 = time.monotonic()
    with httpx.stream("POST", d.url + "/v1/chat/completions", json=body, timeout=120) as s:
        assert s.status_code == 200
        lines = s.iter_lines()
        first = next(line for line in lines if '"content"' in line)
        assert first.startswith("data: ")
        os.kill(pid, signal.SIGSTOP)  # wedged mid-stream
        stopped = time.monotonic()
        rest = "\n".join(lines)
    assert time.monotonic() - stopped < 60, "the stream should end soon after the bound"
    assert "was stopped while serving the request (nothing sent mid-stream" in rest, rest[-500:]
    assert rest.rstrip().endswith("data: [DONE]")
    wait_for(lambda: not pid_alive(pid), HANG, "the wedged engine to be gone")
    # logged once the eviction returns, which may be after the stream it ended reached the client
    said = "sent nothing mid-stream for 10s and failed its health check"
    wait_for(lambda: said in d.log.read_text(), HANG, "the wedge to be logged")
    assert chat(d, QUICK).status_code == 200  # a fresh engine
    assert time.monotonic() - t0 < 120
