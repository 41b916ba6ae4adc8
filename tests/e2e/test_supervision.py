"""End to end: engines start on demand, die, get evicted, and are taught about when missing."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import HANG, Daemon, children_where, free_port, pid_alive, wait_for

pytestmark = pytest.mark.e2e

CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 8}


def engine_metric(d: Daemon, pid: int, name: str) -> float:
    """One of the child's own Prometheus metrics (we start it with --metrics), e.g. ``requests_processing``."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    sock = argv[argv.index("--host") + 1]  # llama-server b11434 listens on the socket Blazar gives it
    assert sock.endswith(".sock"), argv
    key = Path(argv[argv.index("--api-key-file") + 1]).read_text()
    with httpx.Client(transport=httpx.HTTPTransport(uds=sock)) as engine:
        r = engine.get("http://localhost/metrics", headers={"authorization": f"Bearer {key}"}, timeout=5)
    for line in r.text.splitlines():
        if line.startswith(f"llamacpp:{name} "):
            return float(line.split()[-1])
    raise AssertionError(f"no {name} in /metrics: {r.text[:300]}")


def engine_busy(d: Daemon, pid: int) -> bool:
    """Whether the child is processing a request, from its own gauge."""
    return engine_metric(d, pid, "requests_processing") > 0


def engine(d: Daemon) -> dict[str, Any]:
    """The chat engine's /api/ps entry: its slots in use (busy_slots) and the requests queued for one."""
    [entry] = [m for m in httpx.get(d.url + "/api/ps", timeout=30).json()["models"] if m["engine"] == "chat"]
    assert isinstance(entry, dict)
    return entry


def test_child_killed_mid_request_gives_502_then_recovers(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    result: dict[str, httpx.Response] = {}
    long = {
        **CHAT,
        "max_tokens": 4000,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "Write a story."}],
    }

    def slow() -> None:
        result["r"] = httpx.post(d.url + "/v1/chat/completions", json=long, timeout=120)

    t = threading.Thread(target=slow)
    t.start()
    wait_for(lambda: engine_busy(d, pid), HANG, "the engine to be generating")
    # its time, which the overhead header must not count: 3 s of it would be 3000 ms; Blazar's own, even on a
    # loaded machine, stays far below the bound
    time.sleep(3)
    os.kill(pid, signal.SIGKILL)
    t.join(60)
    r = result["r"]
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert "died while serving the request" in message
    assert "logs/smollm2--latest.log in blazar's data directory" in message
    assert str(d.data_dir) not in r.text  # no server path reaches a client
    # the time the engine ran before it died is the engine's, not Blazar's overhead
    assert float(r.headers["x-blazar-overhead-ms"]) < 1500, r.headers
    again = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert again.status_code == 200, again.text
    [new_pid] = d.child_pids()
    assert new_pid != pid and pid_alive(new_pid)


def test_child_killed_mid_stream_ends_the_stream_with_the_dialects_error(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    # the engine ignores EOS, so each answer (4000 tokens) is still running when the engine is killed under it
    d: Daemon = daemon_factory('[models."smollm2:latest"]\nextra_args = ["--ignore-eos"]\n')
    story = [{"role": "user", "content": "Write a long story about the sea."}]
    died = "engine for 'smollm2:latest' died while serving the request"
    for path, body, ending in [
        (
            "/v1/chat/completions",
            {"model": "smollm2", "messages": story, "max_tokens": 4000, "stream": True},
            'data: {"error":{"message":"' + died,
        ),
        (
            "/v1/messages",
            {"model": "smollm2", "messages": story, "max_tokens": 4000, "stream": True},
            'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"' + died,
        ),
        (
            "/api/chat",
            {"model": "smollm2", "messages": story, "options": {"num_predict": 4000}},
            '{"error":"' + died,
        ),
    ]:
        assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
        [pid] = d.child_pids()
        with httpx.stream("POST", d.url + path, json=body, timeout=30) as r:
            chunks = r.iter_bytes()  # keep a reference: a dropped generator closes the stream
            first = next(chunks)
            os.kill(pid, signal.SIGKILL)
            t0 = time.monotonic()
            rest = b"".join(chunks)  # the stream ends: no hang until the client's timeout
        assert time.monotonic() - t0 < 15, path
        assert ending in (first + rest).decode(), (path, rest[-400:])


def test_a_model_deleted_mid_stream_ends_the_stream_saying_so(daemon_factory: object) -> None:
    """Deleting a model stops its engine on purpose: the open stream's error says so (not that the engine died
    and the next request restarts it: the next one gets 404), and the log has no ERROR for a crash."""
    assert callable(daemon_factory)
    # settings of its own, so the copy runs an engine of its own (with smollm2's it would share smollm2's engine,
    # which deleting the copy leaves running: see test_presets)
    d: Daemon = daemon_factory('[models."tmpm:latest"]\nctx_size = 2048\n')
    assert (
        httpx.post(d.url + "/api/copy", json={"source": "smollm2", "destination": "tmpm"}).status_code == 200
    )
    story = [{"role": "user", "content": "Write a long story about the sea."}]
    # cut off by the delete: it cannot end first
    body = {"model": "tmpm", "messages": story, "max_tokens": 1500, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", d.url + "/v1/chat/completions", json=body, timeout=60) as r:
        chunks = r.iter_bytes()
        first = next(chunks)
        gone = httpx.request("DELETE", d.url + "/api/delete", json={"model": "tmpm"}, timeout=60)
        rest = b"".join(chunks)
    assert gone.status_code == 200
    text = (first + rest).decode()
    assert (
        'data: {"error":{"message":"engine for \'tmpm:latest\' was stopped while serving the request'
        ' (model deleted)"' in text
    ), text[-400:]
    assert httpx.post(d.url + "/v1/chat/completions", json={**CHAT, "model": "tmpm"}).status_code == 404
    log = d.log.read_text()
    assert "evicting tmpm:latest (model deleted)" in log and " ERROR " not in log and "died" not in log, log


def test_requests_racing_a_delete_get_404_never_a_missing_file(daemon_factory: object) -> None:
    """Requests that arrive while a delete stops the model's engine wait on it, then find the model gone: 404, not
    a 400 naming the weights file the delete removed under them."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory('[models."tmpm:latest"]\nctx_size = 2048\nparallel = 2\n')
    assert (
        httpx.post(d.url + "/api/copy", json={"source": "smollm2", "destination": "tmpm"}).status_code == 200
    )
    story = [{"role": "user", "content": "Write a long story about the sea."}]
    body = {"model": "tmpm", "messages": story, "max_tokens": 400, "ignore_eos": True, "stream": True}
    quick = {**CHAT, "model": "tmpm", "max_tokens": 2}
    with httpx.stream("POST", d.url + "/v1/chat/completions", json=body, timeout=60) as r:
        next(r.iter_bytes())
        with concurrent.futures.ThreadPoolExecutor(7) as pool:
            gone = pool.submit(
                httpx.request, "DELETE", d.url + "/api/delete", json={"model": "tmpm"}, timeout=60
            )
            racing = [pool.submit(httpx.post, d.url + "/v1/chat/completions", json=quick, timeout=60)
                      for _ in range(6)]  # fmt: skip
            answers = [f.result() for f in racing]
        assert gone.result().status_code == 200
    for a in answers:  # answered, cut by the delete (saying so), or after it: not found
        assert a.status_code in (200, 404) or (a.status_code == 503 and "(model deleted)" in a.text), a.text
        assert "cannot read" not in a.text and str(d.data_dir) not in a.text, a.text


def test_deleting_a_model_whose_engine_others_share_never_cuts_their_answers(daemon_factory: object) -> None:
    """A copy shares smollm2's engine; deleting smollm2 while the copy streams lets that answer finish, then stops
    the engine, and the copy's next request starts an engine of its own."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    assert httpx.post(d.url + "/api/copy", json={"source": "smollm2", "destination": "cc"}).status_code == 200
    story = [{"role": "user", "content": "Write a long story about the sea."}]
    # 300 tokens: still under way when the delete has answered and the engine is seen serving on
    body = {"model": "cc", "messages": story, "max_tokens": 300, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", d.url + "/v1/chat/completions", json=body, timeout=60) as r:
        chunks = r.iter_bytes()
        first = next(chunks)
        [pid] = d.child_pids()
        gone = httpx.request("DELETE", d.url + "/api/delete", json={"model": "smollm2"}, timeout=60)
        assert gone.status_code == 200 and pid_alive(pid)  # answered at once; the engine serves on
        rest = b"".join(chunks)
    text = (first + rest).decode()
    assert '"error"' not in text and text.rstrip().endswith("data: [DONE]"), text[-400:]
    assert text.count('"finish_reason":"length"') == 1
    wait_for(lambda: not pid_alive(pid), HANG, "the retired engine to stop once its answer finished")
    again = httpx.post(d.url + "/v1/chat/completions", json={**CHAT, "model": "cc"}, timeout=60)
    assert again.status_code == 200, again.text
    assert "retiring smollm2:latest once its requests finish (model deleted)" in d.log.read_text()


@pytest.mark.parametrize("second_signal", [False, True])
def test_a_stop_signal_during_a_stream_ends_it_within_the_grace(
    daemon_factory: object, second_signal: bool
) -> None:
    """SIGTERM closes the listener and gives responses in flight stop_grace_secs; then the engines stop and a
    stream still running ends with the dialect's error naming the shutdown. A second signal does that at once."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("stop_grace_secs = 2\n" if not second_signal else "stop_grace_secs = 60\n")
    story = [{"role": "user", "content": "Write a long story about the sea."}]
    body = {"model": "smollm2", "messages": story, "max_tokens": 4000, "ignore_eos": True, "stream": True}
    assert d.proc is not None
    with httpx.stream("POST", d.url + "/v1/chat/completions", json=body, timeout=60) as r:
        chunks = r.iter_bytes()
        first = next(chunks)
        [pid] = d.child_pids()
        d.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        if second_signal:  # once the first has been taken: a second signal, not two at once
            wait_for(
                lambda: "stopping: the listener is closed" in d.log.read_text(), HANG, "the first signal"
            )
            d.proc.send_signal(signal.SIGINT)
        rest = b"".join(chunks)
    took = time.monotonic() - t0
    assert took < (8 if second_signal else 12), took
    text = (first + rest).decode()
    assert "was stopped while serving the request (blazar is shutting down)" in text, text[-300:]
    assert d.proc.wait(timeout=30) == 0
    assert not pid_alive(pid)
    log = d.log.read_text()
    assert " ERROR " not in log and "died" not in log, log
    assert ("stopping now: the engines stop" in log) == second_signal, log


def test_dead_child_is_respawned_on_next_request(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    sock = d.data_dir / "run" / "smollm2--latest.sock"
    assert stat.S_ISSOCK(sock.lstat().st_mode)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), HANG, "the child to die")
    # the dead engine leaves its socket behind; the respawn clears it before llama-server binds (unless the idle
    # loop forgot the dead engine first, which removes it too)
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert r.status_code == 200, r.text


def test_an_engine_stops_when_its_daemon_is_killed(daemon_factory: object) -> None:
    """kill -9 of the daemon (an OOM kill): its engine gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and exits,
    so no engine holds its memory until a next daemon starts."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    assert d.proc is not None
    d.proc.kill()
    d.proc.wait()
    wait_for(lambda: not pid_alive(pid), HANG, "the engine of the killed daemon to exit")


def test_an_engine_a_killed_daemon_left_running_is_stopped_by_the_next(daemon_factory: object) -> None:
    """An engine that outlives its killed daemon anyway (here it is stopped with SIGSTOP, so the SIGTERM its
    daemon's death sends waits) is stopped by the next daemon's start, which serves from an engine of its own on
    the same socket."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    assert d.proc is not None
    os.kill(pid, signal.SIGSTOP)
    d.proc.kill()
    d.proc.wait()
    assert pid_alive(pid)  # orphaned
    d.start()
    wait_for(lambda: not pid_alive(pid), HANG, "the orphaned engine to be stopped")
    assert "stopped 1 engine(s) an earlier daemon left running" in d.log.read_text()
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [new] = d.child_pids()
    assert new != pid and stat.S_ISSOCK((d.data_dir / "run" / "smollm2--latest.sock").lstat().st_mode)


def test_an_idle_engine_that_dies_leaves_ps_at_once_and_is_forgotten(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("idle_timeout_secs = 4\n")  # the idle loop looks every second
    load = httpx.post(d.url + "/api/generate", json={"model": "smollm2", "keep_alive": -1}, timeout=60)
    assert load.json()["done_reason"] == "load"
    [pid] = d.child_pids()
    assert [m["name"] for m in httpx.get(d.url + "/api/ps", timeout=10).json()["models"]] == [
        "smollm2:latest"
    ]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), HANG, "the child to die")
    assert httpx.get(d.url + "/api/ps", timeout=10).json()["models"] == []  # not shown as loaded
    wait_for(lambda: not d.child_pids(), HANG, "the idle loop to forget the dead engine")
    assert "exited with code -9 while idle" in d.log.read_text()
    assert not (d.data_dir / "run" / "smollm2--latest.sock").exists()
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert r.status_code == 200, r.text


def test_the_engine_listens_on_its_unix_socket_and_no_tcp_port(daemon_factory: object) -> None:
    """llama-server b11434 takes a ``--host`` ending in ``.sock``: the child has no TCP port another local
    process could reach, and the socket goes with it."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("idle_timeout_secs = 1\n")
    r = httpx.post(d.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=60)
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text[-300:]
    [pid] = d.child_pids()
    sock = d.data_dir / "run" / "smollm2--latest.sock"
    engine = psutil.Process(pid)
    assert engine.cmdline()[engine.cmdline().index("--host") + 1] == str(sock)
    assert "--port" not in engine.cmdline()
    assert stat.S_ISSOCK(sock.lstat().st_mode)
    assert [c for c in engine.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN] == []
    assert any(c.laddr == str(sock) for c in engine.net_connections(kind="unix"))
    wait_for(lambda: not pid_alive(pid) and d.child_pids() == [], HANG, "idle eviction of the engine child")
    # The stop removes the socket in the step that removes the pid files; a CI run on an overloaded machine once
    # saw the socket a moment after them. A socket left behind for good still fails here.
    wait_for(lambda: not sock.exists(), HANG, "the engine's socket to go with it")


def test_idle_child_is_evicted_and_comes_back(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("idle_timeout_secs = 1\n")
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    wait_for(lambda: not pid_alive(pid) and d.child_pids() == [], HANG, "idle eviction of the engine child")
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert r.status_code == 200
    assert len(d.child_pids()) == 1


def test_an_unload_still_happens_when_the_request_it_waited_for_fails_before_it_runs(
    daemon_factory: object,
) -> None:
    """keep_alive 0 while a request is queued waits for that request; one refused before it reached the engine
    (its prompt cannot fit) must not leave the unload waiting for nothing."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("ctx_size = 512\nqueue_wait_secs = 300\nparallel = 1\n")
    # streamed and cut off by the test once the unload has answered: it runs as long as the test needs, however
    # slow the machine (a whole answer waited for as one read could outlast any read timeout under load)
    busy = {**CHAT, "max_tokens": 4000, "ignore_eos": True, "stream": True}
    too_long = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "word " * 2000}],
        "stream": False,
    }
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        httpx.stream("POST", d.url + "/v1/chat/completions", json=busy, timeout=300) as running,
    ):
        assert running.status_code == 200
        chunks = running.iter_text()  # keep a reference: a dropped generator closes the stream
        seen = next(chunks)  # the engine is generating
        queued = pool.submit(httpx.post, d.url + "/api/chat", json=too_long, timeout=300)
        wait_for(lambda: engine(d)["queued"] == 1, HANG, "it to wait for the only slot")
        stop = httpx.post(d.url + "/api/generate", json={"model": "smollm2", "keep_alive": 0}, timeout=120)
        assert stop.status_code == 200 and stop.json()["done_reason"] == "unload", stop.text
        seen += next(chunks)  # the unload did not cut the answer running on the engine
        assert '"delta"' in seen and "error" not in seen, seen
        assert d.child_pids() != [], "unloaded while an answer still ran on it"
        # leaving the block closes the stream: the slot frees, the queued request is refused, the unload goes on
    assert queued.result().status_code == 400
    wait_for(lambda: d.child_pids() == [], HANG, "the model unloaded once nothing runs on it")
    assert httpx.get(d.url + "/api/ps", timeout=10).json()["models"] == []


def test_a_models_own_idle_timeout_of_zero_never_evicts_it(daemon_factory: object) -> None:
    """0 means never, per model as at the top level (the daemon's 1 s applies to every other model)."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(
        "idle_timeout_secs = 1\n[models.smollm2]\nidle_timeout_secs = 0\n"
        '[models."other:latest"]\nctx_size = 2048\n'  # a copy with an engine of its own and the daemon's 1 s
    )
    assert (
        httpx.post(d.url + "/api/copy", json={"source": "smollm2", "destination": "other"}).status_code == 200
    )
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    other = {**CHAT, "model": "other"}  # used after smollm2's: its 1 s runs out later than smollm2's would
    assert httpx.post(d.url + "/v1/chat/completions", json=other, timeout=60).status_code == 200
    [other_pid] = [p for p in d.child_pids() if p != pid]
    wait_for(lambda: not pid_alive(other_pid), HANG, "the idle loop to evict the other model's engine")
    assert pid_alive(pid) and d.child_pids() == [pid]
    [model] = httpx.get(d.url + "/api/ps", timeout=10).json()["models"]
    assert model["expires_at"] > "2030", model  # shown as kept forever


def test_a_daemon_with_nothing_to_serve_logs_the_commands_that_fix_it(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    bare: Daemon = daemon_factory(engine=False, model=False)
    log = bare.log.read_text()
    assert "no engine is installed, so no model can answer yet: build llama.cpp's llama-server with" in log, (
        log
    )
    assert "`blazar engine add --kind llama-cpp --path /path/to/llama-server`" in log
    assert "the catalog has no model yet: `blazar pull NAME`" in log
    ready: Daemon = daemon_factory()  # an engine and a model: nothing to say
    log = ready.log.read_text()
    assert "listening on" in log and "no engine is installed" not in log and "has no model yet" not in log, (
        log
    )


def test_missing_engine_teaches_same_bytes_in_api_and_cli(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(engine=False)
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert r.status_code == 503
    message = r.json()["error"]["message"]
    assert "blazar engine build --kind llama-cpp" in message
    shown = d.cli("show", "smollm2")
    assert f"unavailable: {message}" in " ".join(shown.stdout.split()) or message in shown.stdout.replace(
        "\n", ""
    )


def test_port_in_use_exits_3(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    r = subprocess.run(
        [sys.executable, "-m", "blazar", "serve"], env=d.env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {d.port}" in lines[0] and "already in use" in lines[0]


def test_a_model_removed_by_the_cli_is_refused_within_the_recheck(daemon_factory: object) -> None:
    """Requests to a ready child skip the catalog query (the fast path), but not for longer than
    CATALOG_RECHECK_SECS: a model `blazar rm` removed from another process is then a 404 naming the model."""
    import time

    from blazar.supervisor.pool import CATALOG_RECHECK_SECS

    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    for _ in range(3):  # the first spawns the child; the next ones take the fast path
        assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    d.cli("rm", "smollm2")
    # the recheck's window running out is the point; a slower machine only lets more of it pass (the idle loop,
    # should it see the removal first, stops the engine for the same reason, which the log names either way)
    time.sleep(CATALOG_RECHECK_SECS + 0.2)
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert r.status_code == 404, r.text
    assert "model 'smollm2:latest' not found" in r.json()["error"]["message"]
    wait_for(lambda: d.child_pids() == [], HANG, "the removed model's engine to stop")
    assert "evicting smollm2:latest (model removed from the catalog)" in d.log.read_text()


def test_a_model_removed_by_the_cli_stops_its_idle_engine(daemon_factory: object) -> None:
    """`blazar rm` from another process with no request after it: the idle loop stops the engine, which would
    otherwise run unseen (ps lists only catalog models) until its idle timeout."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("idle_timeout_secs = 20\n")  # the loop looks every 5 s
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [pid] = d.child_pids()
    d.cli("rm", "smollm2")
    wait_for(lambda: not pid_alive(pid), HANG, "the removed model's engine to stop")
    assert "evicting smollm2:latest (model removed from the catalog)" in d.log.read_text()


def test_other_weights_under_the_same_name_restart_the_engine(daemon_factory: object, tmp_path: Path) -> None:
    """`blazar rm` and an import of other weights under the same name, from another process: within the
    recheck the daemon stops the engine that runs the old file and starts one on the new."""
    import shutil
    import time

    from blazar.supervisor.pool import CATALOG_RECHECK_SECS

    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [before] = d.child_pids()
    other = tmp_path / "other-weights.gguf"  # the same bytes in another file: another inode
    shutil.copyfile(next((d.data_dir / "models" / "smollm2").glob("*.gguf")), other)
    # between the rm and the import the catalog has no smollm2, and the idle loop stops an idle engine whose
    # model is gone; a stream in flight (cut off once the import is done) keeps it from being idle meanwhile
    hold = {**CHAT, "max_tokens": 4000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", d.url + "/v1/chat/completions", json=hold, timeout=60) as s:
        chunks = s.iter_bytes()  # keep a reference: a dropped generator closes the stream
        assert next(chunks).startswith(b"data: ")
        d.cli("rm", "smollm2")
        d.cli("import", str(other), "--name", "smollm2")
    # the recheck's window running out is the point; a slower machine only lets more of it pass
    time.sleep(CATALOG_RECHECK_SECS + 0.2)
    assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    [after] = d.child_pids()
    assert after != before and not pid_alive(before)
    assert "evicting smollm2:latest (its weights changed in the catalog)" in d.log.read_text()


def test_two_daemons_on_one_data_directory_each_get_an_engine(daemon_factory: object) -> None:
    """The second daemon finds the first one's engine socket live: it neither removes it nor binds there, and
    starts its own engine on a TCP port. Both keep answering."""
    assert callable(daemon_factory)
    a: Daemon = daemon_factory()
    assert httpx.post(a.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    sock = a.data_dir / "run" / "smollm2--latest.sock"
    [a_pid] = a.child_pids()
    b = Daemon(root=a.root / "second", env={**a.env, "BLAZAR_PORT": str(free_port())}, port=0)
    b.port = int(b.env["BLAZAR_PORT"])
    b.root.mkdir()
    b.start()
    try:
        r = httpx.post(b.url + "/v1/chat/completions", json=CHAT, timeout=60)
        assert r.status_code == 200, r.text
        b_engine = children_where(b.proc.pid, lambda p: "--model" in p.cmdline())[0]
        argv = b_engine.cmdline()
        assert argv[argv.index("--host") + 1] == "127.0.0.1" and "--port" in argv
        assert "in use by another process" in b.log.read_text()
        assert stat.S_ISSOCK(sock.lstat().st_mode) and pid_alive(a_pid)
        for d in (a, b):
            assert httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
        assert sorted(a.child_pids()) == sorted([a_pid, b_engine.pid])  # each daemon's own pid file
    finally:
        b.stop()
    assert httpx.post(a.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    # the second daemon's stop left the first one's socket, pid and key files alone
    assert stat.S_ISSOCK(sock.lstat().st_mode) and a.child_pids() == [a_pid]
    assert len(list((a.data_dir / "run").glob("smollm2--latest.*.apikey"))) == 1


def test_an_engine_starts_without_blazars_secrets(daemon_factory: object) -> None:
    """The engine is a third-party binary: its environment has none of Blazar's own variables (BLAZAR_KEYS) nor a
    variable holding a remote's key (api_key_env), though the daemon's other variables pass on."""
    assert callable(daemon_factory)
    remote = '[[remotes]]\nname = "up"\nurl = "http://127.0.0.1:9/v1"\napi_key_env = "UPSTREAM_TOKEN"\n'
    d: Daemon = daemon_factory(start=False)
    config = Path(d.env["BLAZAR_CONFIG"])
    config.write_text(config.read_text() + remote)
    d.env |= {
        "BLAZAR_KEYS": "envkey=sk-env-secret-0123456789abcdef",
        "UPSTREAM_TOKEN": "sk-remote-secret-0123456789abcdef",
        "ENGINE_SEES_THIS": "yes",
    }
    d.start()
    key = {"authorization": "Bearer sk-env-secret-0123456789abcdef"}
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, headers=key, timeout=60)
    assert r.status_code == 200, r.text
    [pid] = d.child_pids()
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"ENGINE_SEES_THIS=yes" in environ
    assert (
        b"sk-env-secret" not in environ and b"sk-remote-secret" not in environ and b"BLAZAR_" not in environ
    )
