"""End to end on loopback: two `blazar worker`s, each running llama.cpp's rpc-server, and one head, a `blazar serve`
whose SmolLM2 lists both in ``rpc_workers``. The engine's log shows its layers offloaded to the two workers; the
split model answers the same text at temperature 0 as a local engine; a worker's rpc-server killed mid-request is
a 502, `blazar worker` restarts it, and the next request starts a fresh engine that answers; a worker that is
stopped is a 503 naming the command that starts it, until it runs again."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from blazar.paths import safe_component
from tests.conftest import (
    HANG,
    SHARED_DAEMON_CONFIG,
    Assets,
    Daemon,
    children_named,
    cleanup,
    free_port,
    make_daemon,
    provision,
    wait_for,
    worker_rpc_pid,
)

pytestmark = pytest.mark.e2e


@dataclass
class Worker:
    """A `blazar worker` process on the head's data directory."""

    port: int
    env: dict[str, str]
    data: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def listening_rpc_pid(self) -> int | None:
        """The rpc-server's pid once it listens on the worker's port."""
        return worker_rpc_pid(self.data, self.port)

    def start(self, log: Path) -> None:
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "blazar", "worker", "--port", str(self.port)],
                env=self.env,
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
            )
        wait_for(
            lambda: self.listening_rpc_pid() is not None, HANG, f"the worker on {self.address} listening"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=HANG)


@dataclass
class Split:
    head: Daemon
    workers: list[Worker]

    @property
    def engine_log(self) -> Path:
        return self.head.data_dir / "logs" / f"{safe_component('smollm2:latest')}.log"


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[Split]:
    ports = [free_port(), free_port()]
    listed = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    root = tmp_path_factory.mktemp("rpc")
    # the shared daemon's settings (one slot, no prompt cache), so the two answers are computed alike; llama-server
    # logs where its layers went at verbosity 4 (its default, 3, does not)
    config = SHARED_DAEMON_CONFIG.replace('"--no-cache-prompt"', '"--no-cache-prompt", "-lv", "4"')
    head = provision(make_daemon(root, config + f"rpc_workers = [{listed}]\n"), assets)
    workers = [Worker(p, head.env, head.data_dir) for p in ports]
    try:
        for w in workers:
            w.start(root / f"worker-{w.port}.out")
        head.start()
        yield Split(head, workers)
    finally:
        cleanup(head)
        for w in workers:
            w.stop()


def chat(url: str, max_tokens: int = 16, **extra: Any) -> httpx.Response:
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=HANG)


def test_a_worker_check_reads_its_memory_before_the_head_connects(split: Split) -> None:
    # each worker serves one client at a time: checked before the first request starts the engine, which keeps both
    for w in split.workers:
        out = split.head.cli("worker", "check", w.address).stdout
        assert out.startswith(f"{w.address}: RPC protocol 7.") and "free of" in out, out


def test_the_split_model_answers_as_a_local_engine_does(split: Split, daemon: Daemon) -> None:
    r = chat(split.head.url)
    assert r.status_code == 200, r.text
    local = chat(daemon.url)
    assert local.status_code == 200, local.text
    text = r.json()["choices"][0]["message"]["content"]
    assert text and text == local.json()["choices"][0]["message"]["content"]
    [engine] = children_named(split.head.proc.pid if split.head.proc else 0, "llama-server")
    argv = engine.cmdline()
    assert argv[argv.index("--rpc") + 1] == ",".join(w.address for w in split.workers)
    log = split.engine_log.read_text()
    offloaded = re.findall(r"offloaded (\d+)/(\d+) layers", log)
    assert offloaded and offloaded[-1][0] == offloaded[-1][1], offloaded
    for w in split.workers:  # each worker holds a share of the weights
        sizes = re.findall(rf"RPC\d\[{re.escape(w.address)}\] model buffer size = +([\d.]+) MiB", log)
        assert sizes and float(sizes[-1]) > 1, (w.address, log[-3000:])


def test_a_worker_killed_mid_request_is_a_502_and_the_engine_restarts_once_it_is_back(split: Split) -> None:
    before = chat(split.head.url).json()["choices"][0]["message"]["content"]
    w = split.workers[0]
    rpc_pid = w.listening_rpc_pid()
    assert rpc_pid is not None
    answers: list[httpx.Response] = []
    # an answer the test ends: far longer than what happens meanwhile
    held = threading.Thread(target=lambda: answers.append(chat(split.head.url, 4000, ignore_eos=True)))
    held.start()

    def generating() -> bool:
        models = httpx.get(split.head.url + "/api/ps", timeout=HANG).json()["models"]
        return any(m.get("in_flight") for m in models)

    wait_for(generating, HANG, "the held request on the engine")
    os.kill(rpc_pid, signal.SIGKILL)
    held.join(HANG)
    [r] = answers
    assert r.status_code == 502, r.text
    assert "died while serving the request" in r.text and "blazar worker check" in r.text, r.text
    wait_for(lambda: (w.listening_rpc_pid() or rpc_pid) != rpc_pid, HANG, "the worker's rpc-server restarted")
    again = chat(split.head.url)
    assert again.status_code == 200, again.text
    assert again.json()["choices"][0]["message"]["content"] == before


def test_a_stopped_worker_is_a_503_naming_its_command_until_it_runs_again(
    split: Split, tmp_path: Path
) -> None:
    w = split.workers[1]
    split.head.cli("stop", "smollm2")  # the engine lets go of its workers
    pid = split.head.proc.pid if split.head.proc else 0
    wait_for(lambda: not children_named(pid, "llama-server"), HANG, "the engine stopped")
    stopped = split.head.cli("worker", "stop", "--port", str(w.port))
    assert f"stopped the worker on port {w.port}" in stopped.stdout
    assert w.proc is not None and w.proc.wait(timeout=HANG) == 0
    r = chat(split.head.url)
    assert r.status_code == 503, r.text
    message = r.json()["error"]["message"]
    assert f"RPC worker {w.address} does not answer" in message
    assert f"`blazar worker --host 127.0.0.1 --port {w.port}`" in message
    w.start(tmp_path / "worker-again.out")
    r = chat(split.head.url)
    assert r.status_code == 200, r.text
