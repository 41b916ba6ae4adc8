"""`blazar worker`: a real rpc-server (the one built beside llama-server) run and supervised, restarted when it is
killed, stopped by `blazar worker stop`; and every refusal one red line with the next command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import HANG, Assets, blazar_cmd, free_port, pid_alive, wait_for, worker_rpc_pid


def _rpc_pid(env: dict[str, str], port: int) -> int | None:
    return worker_rpc_pid(Path(env["BLAZAR_DATA_DIR"]), port)


@pytest.fixture()
def configured(env: dict[str, str]) -> dict[str, str]:
    """``env`` with its config file written (empty: the embedded defaults)."""
    cfg = Path(env["BLAZAR_CONFIG"])
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text("")
    return env


@pytest.fixture()
def engine_env(configured: dict[str, str], assets: Assets) -> dict[str, str]:
    blazar_cmd("engine", "add", "--kind", "llama-cpp", "--path", str(assets.llama_server), env=configured)
    return configured


def _new_rpc_pid(proc: subprocess.Popen[str], env: dict[str, str], port: int, old: int | None = None) -> int:
    """The worker's rpc-server once one other than ``old`` listens; the worker's output if it exits first."""
    found: list[int] = []

    def seen() -> bool:
        pid = _rpc_pid(env, port)
        if pid is not None and pid != old:
            found.append(pid)
            return True
        return proc.poll() is not None

    wait_for(seen, HANG, "the worker's rpc-server listening")
    assert found, f"the worker exited {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}"
    return found[0]


def _worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "blazar", "worker", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )


@pytest.fixture()
def running(engine_env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    proc = _worker(engine_env, "--port", str(port))
    _new_rpc_pid(proc, engine_env, port)
    yield proc, port
    if proc.poll() is None:
        proc.kill()
    proc.communicate()  # reaped, its pipe closed


def test_a_killed_rpc_server_is_restarted_and_stop_ends_both(
    running: tuple[subprocess.Popen[str], int], engine_env: dict[str, str]
) -> None:
    proc, port = running
    first = _rpc_pid(engine_env, port)
    assert first is not None
    os.kill(first, signal.SIGKILL)
    second = _new_rpc_pid(proc, engine_env, port, first)
    checked = blazar_cmd("worker", "check", f"127.0.0.1:{port}", env=engine_env)
    assert checked.stdout.startswith(f"127.0.0.1:{port}: RPC protocol 7.")
    twice = blazar_cmd("worker", "--port", str(port), env=engine_env, check=False)
    assert twice.returncode == 1 and f"a worker already runs on port {port}" in twice.stderr
    assert f"`blazar worker stop --port {port}`" in twice.stderr
    stopped = blazar_cmd("worker", "stop", "--port", str(port), env=engine_env, check=False)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the worker on port {port} (pid {proc.pid})" in stopped.stdout
    assert proc.wait(timeout=HANG) == 0
    out = proc.stdout.read() if proc.stdout else ""
    assert f"listens on 127.0.0.1:{port}" in out and "killed by SIGKILL" in out and "worker stopped" in out, (
        out
    )
    state = Path(engine_env["BLAZAR_DATA_DIR"]) / "run" / f"worker-{port}.json"
    assert not pid_alive(second) and not state.exists()


def test_a_sigkilled_worker_takes_its_rpc_server_with_it(
    running: tuple[subprocess.Popen[str], int], engine_env: dict[str, str]
) -> None:
    proc, port = running
    rpc = _rpc_pid(engine_env, port)
    assert rpc is not None
    proc.kill()
    proc.wait()
    wait_for(lambda: not pid_alive(rpc), HANG, "the orphaned rpc-server ending")


def test_a_port_another_program_holds_is_refused(engine_env: dict[str, str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = blazar_cmd("worker", "--port", str(port), env=engine_env, check=False)
    assert r.returncode == 1 and f"127.0.0.1:{port} is in use by another program" in r.stderr


def test_an_rpc_server_that_cannot_start_says_why(engine_env: dict[str, str]) -> None:
    r = blazar_cmd("worker", "--port", str(free_port()), "--device", "NOPE0", env=engine_env, check=False)
    assert r.returncode == 1 and "exited (status 1) before it listened" in r.stderr
    assert "unknown device: NOPE0" in r.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "8.8.8.8"])
def test_a_public_address_is_refused_unless_allowed(configured: dict[str, str], host: str) -> None:
    r = blazar_cmd("worker", "--host", host, env=configured, check=False)
    assert r.returncode == 1 and f"refusing to listen on {host}" in r.stderr
    assert "has no authentication" in r.stderr and "--allow-public" in r.stderr


def test_without_an_engine_the_worker_names_the_install(configured: dict[str, str]) -> None:
    r = blazar_cmd("worker", "--port", str(free_port()), env=configured, check=False)
    assert r.returncode == 1 and "`blazar engine install --kind llama-cpp`" in r.stderr


def test_stop_and_check_without_a_worker(configured: dict[str, str]) -> None:
    env = configured
    port = free_port()
    r = blazar_cmd("worker", "stop", "--port", str(port), env=env, check=False)
    assert r.returncode == 1 and f"no worker runs on port {port} here" in r.stderr
    r = blazar_cmd("worker", "check", f"127.0.0.1:{port}", env=env, check=False)
    assert r.returncode == 1 and f"RPC worker 127.0.0.1:{port} does not answer" in r.stderr
    r = blazar_cmd("worker", "check", "nowhere", env=env, check=False)
    assert r.returncode == 1 and "'nowhere' is not a host:port address" in r.stderr
