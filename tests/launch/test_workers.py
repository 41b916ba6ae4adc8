"""RPC workers as a launch sees them: the memory a real llama.cpp ``rpc-server`` reports through its own protocol,
a busy or absent worker named with its fix, declared memory standing in when a report cannot be read, workers'
devices counted by the fit, and which addresses a worker may listen on."""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from blazar._native import read_gguf_metadata
from blazar.config.model import RpcWorker
from blazar.engines.build import RPC_SERVER
from blazar.launch import workers
from blazar.launch.fit import FitRequest, KvSettings, fit, kv_shape
from blazar.launch.hardware import Gpu, Hardware
from blazar.supervisor.worker import listening
from tests.conftest import Assets, free_port, wait_for

GIB = 1 << 30
HANG = 600.0


@pytest.fixture(scope="module")
def rpc_server(assets: Assets) -> Iterator[RpcWorker]:
    """A real rpc-server (built beside llama-server) on a loopback port."""
    port = free_port()
    binary = assets.llama_server.with_name(RPC_SERVER)
    proc = subprocess.Popen(
        [str(binary), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    wait_for(lambda: listening(proc.pid, port), HANG, "rpc-server listening")
    yield RpcWorker("127.0.0.1", port)
    proc.kill()
    proc.wait()


def test_a_worker_reports_its_protocol_and_its_devices_memory(rpc_server: RpcWorker) -> None:
    report = workers.read(rpc_server)
    assert report.version[0] == workers.PROTOCOL_MAJOR
    assert len(report.devices) >= 1  # its CPU
    free, total = report.devices[0]
    ram = psutil.virtual_memory().total
    assert 0 < free <= total and total <= ram * 1.01, (free, total, ram)
    line = workers.describe(report)
    assert line.startswith(f"{rpc_server.address}: RPC protocol {report.version[0]}.") and "free of" in line


def _hello(sock: socket.socket) -> None:
    sock.sendall(
        struct.pack("<BQ", workers.CMD_HELLO, workers.CONN_CAPS_SIZE) + bytes(workers.CONN_CAPS_SIZE)
    )
    (size,) = struct.unpack("<Q", sock.recv(8, socket.MSG_WAITALL))
    sock.recv(size, socket.MSG_WAITALL)


def test_a_busy_worker_is_named_and_declared_memory_stands_in(rpc_server: RpcWorker) -> None:
    with socket.create_connection((rpc_server.host, rpc_server.port)) as held:
        _hello(held)  # this client now holds the worker: it serves one at a time
        with pytest.raises(workers.WorkerUnreachable) as exc:
            workers.read(rpc_server, timeout=1.0)
        assert "serves one client at a time" in str(exc.value) and rpc_server.address in str(exc.value)
        declared = RpcWorker(rpc_server.host, rpc_server.port, memory_mib=2048)
        lent = workers.lend(_machine(), [declared], timeout=1.0)
        [device] = lent.gpus
        assert device.remote and device.free_bytes == device.total_bytes == 2048 << 20
    # released, it answers again
    assert workers.read(rpc_server).version[0] == workers.PROTOCOL_MAJOR


def test_an_absent_worker_names_the_command_that_starts_it() -> None:
    gone = RpcWorker("127.0.0.1", free_port(), memory_mib=2048)  # declared, yet no engine starts without it
    with pytest.raises(workers.WorkerDown) as exc:
        workers.lend(_machine(), [gone])
    assert f"RPC worker {gone.address} does not answer" in str(exc.value)
    assert f"`blazar worker --host 127.0.0.1 --port {gone.port}`" in str(exc.value)


def test_a_port_that_speaks_something_else_is_no_worker() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]

        def answer() -> None:  # an HTTP server's answer to the handshake
            conn, _ = srv.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        t = threading.Thread(target=answer)
        t.start()
        try:
            with pytest.raises(workers.WorkerUnreachable) as exc:
                workers.read(RpcWorker("127.0.0.1", port), timeout=HANG)
        finally:
            t.join()
    assert "broke off the RPC handshake" in str(exc.value) and f"--port {port}" in str(exc.value)


def _machine(ram: int = 4 * GIB) -> Hardware:
    return Hardware((), None, "no GPU in this test", "test CPU", 2, 2, ram, ram)


def test_the_fit_counts_the_workers_devices(rpc_server: RpcWorker, model_file: Path) -> None:
    lent = workers.lend(_machine(), [rpc_server])
    assert lent.gpus and all(g.remote and g.free_bytes > 0 for g in lent.gpus)
    assert lent.ram_available == _machine().ram_available  # the head's own RAM is its own
    md = read_gguf_metadata(str(model_file), 0)["metadata"]
    assert isinstance(md, dict)
    req = FitRequest(
        model="big", shape=kv_shape(md), weights=40 * GIB, requested_ctx=4096,
        settings=KvSettings("f16", "f16", "auto", False, 1, False),
    )  # fmt: skip
    alone = fit(req, _machine(), headroom=0)
    assert alone.refusal is not None and "of RAM is free" in alone.refusal and "rpc_workers" in alone.refusal
    two = replace(
        _machine(), gpus=tuple(Gpu(i, f"RPC0 10.0.0.{i}:50052", 30 * GIB, 30 * GIB, True) for i in range(2))
    )
    est = fit(req, two, headroom=0).require()
    assert est.placement == "gpu" and est.ctx_size == 4096
    short = fit(req, replace(two, gpus=two.gpus[:1]), headroom=0)
    assert short.refusal is not None and "the memory of the GPUs and RPC workers" in short.refusal


@pytest.mark.parametrize(
    ("host", "public"),
    [
        ("127.0.0.1", False), ("localhost", False), ("::1", False), ("10.1.2.3", False), ("192.168.0.9", False),
        ("172.20.0.1", False), ("100.100.1.1", False), ("fd00::5", False),
        ("0.0.0.0", True), ("::", True), ("8.8.8.8", True), ("2001:4860:4860::8888", True),
    ],
)  # fmt: skip
def test_a_worker_listens_only_on_loopback_or_private_addresses(host: str, public: bool) -> None:
    problem = workers.listen_problem(host)
    assert (problem is not None) == public, problem
