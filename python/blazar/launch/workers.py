"""llama.cpp RPC workers as a launch sees them: each worker's devices and their memory, read through the RPC
server's own protocol, lent to the memory fit as devices beside the local GPUs; and which addresses a worker may
listen on.

The protocol is ggml's (``ggml/src/ggml-rpc/ggml-rpc.cpp``; build b11434 speaks version 7.0.0): a request is
``cmd (1 byte) | size (u64, little-endian) | data``, a response ``size (u64) | data``, and ``HELLO`` comes first
on every connection. An RPC server serves one client at a time, so a worker that is already serving a
llama-server does not answer until that one disconnects: a read waits ``READ_SECS`` and then says the worker is
busy. No authentication exists in the protocol, so ``listen_problem`` refuses a public address unless asked.

Blocking sockets: the compiler runs in a worker thread (``Supervisor`` calls it through ``asyncio.to_thread``).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace

from blazar.config.model import RpcWorker
from blazar.errors import LaneError
from blazar.launch.hardware import Gpu, Hardware, human_bytes

CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
PROTOCOL_MAJOR = 7
CONN_CAPS_SIZE = 24
"""``RPC_CONN_CAPS_SIZE``: the transport capabilities both HELLO messages carry (all zero: plain TCP, no RDMA)."""
READ_SECS = 5.0
"""How long a read waits for a worker's answer; a worker serving another client answers nothing until it ends."""
MIB = 1 << 20


class WorkerUnreachable(LaneError):
    """A model's RPC worker cannot be used now (down, busy with another client, or another protocol version);
    the message names the worker and the command that fixes it."""


class WorkerDown(WorkerUnreachable):
    """Nothing accepts a connection at the worker's address: no engine can start with it."""


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """What one worker said: its protocol version and each device's (free, total) bytes."""

    address: str
    version: tuple[int, int, int]
    devices: tuple[tuple[int, int], ...]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionResetError("the worker closed the connection")
        out += chunk
    return bytes(out)


def _call(sock: socket.socket, cmd: int, data: bytes, answer: int) -> bytes:
    sock.sendall(struct.pack("<BQ", cmd, len(data)) + data)
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if size != answer:
        raise ValueError(f"command {cmd} answered {size} bytes, not {answer}")
    return _recv_exact(sock, size)


def _start_hint(w: RpcWorker) -> str:
    return f"start it there with `blazar worker --host {w.host} --port {w.port}`"


def _answer_later(sock: socket.socket, size: int) -> None:
    """Wait (in a daemon thread) for the HELLO answer a busy worker owes, then close: closing before it answers
    would make it write to a closed connection once it gets to this one, and an RPC server that does not ignore
    SIGPIPE (one started by hand) dies of that."""

    def drain() -> None:
        try:
            sock.settimeout(None)
            _recv_exact(sock, 8 + size)
        except OSError:
            pass
        finally:
            sock.close()

    threading.Thread(target=drain, name="rpc-hello-drain", daemon=True).start()


def read(worker: RpcWorker, *, timeout: float = READ_SECS) -> WorkerReport:
    """Ask ``worker`` for its version and its devices' memory; ``WorkerUnreachable`` says why it cannot be used."""
    where = f"RPC worker {worker.address}"
    try:
        sock = socket.create_connection((worker.host, worker.port), timeout=timeout)
    except OSError as e:
        raise WorkerDown(
            f"{where} does not answer ({e.strerror or e}): {_start_hint(worker)}, or remove it from rpc_workers"
        ) from None
    hello_size = 4 + CONN_CAPS_SIZE
    owned = True
    try:
        try:
            hello = _call(sock, CMD_HELLO, bytes(CONN_CAPS_SIZE), hello_size)
        except TimeoutError:
            _answer_later(sock, hello_size)
            owned = False
            raise WorkerUnreachable(
                f"{where} accepted but did not answer in {timeout:g} s: an RPC server serves one client at a time,"
                " and it is serving another (a second engine of this model, or another host's); stop that one,"
                " or run one more `blazar worker` on another port for it"
            ) from None
        version = (hello[0], hello[1], hello[2])
        if version[0] != PROTOCOL_MAJOR:
            raise WorkerUnreachable(
                f"{where} speaks RPC protocol {'.'.join(map(str, version))}, this llama-server"
                f" {PROTOCOL_MAJOR}.x: run the same llama.cpp build on both (`blazar engine install` there)"
            )
        (count,) = struct.unpack("<I", _call(sock, CMD_DEVICE_COUNT, b"", 4))
        devices = []
        for d in range(count):
            free, total = struct.unpack("<QQ", _call(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", d), 16))
            devices.append((free, total))
    except (OSError, ValueError) as e:  # a timeout after the handshake included: it answered, then stopped
        raise WorkerUnreachable(
            f"{where} broke off the RPC handshake ({e}); is it an RPC server? {_start_hint(worker)}"
        ) from None
    finally:
        if owned:
            sock.close()
    return WorkerReport(worker.address, version, tuple(devices))


def lend(hw: Hardware, workers: Iterable[RpcWorker], *, timeout: float = READ_SECS) -> Hardware:
    """``hw`` with each worker's devices added as remote devices: the memory it reports, else its declared
    ``memory_mib`` when its report cannot be read (busy, or another protocol). A worker that is down is a
    ``WorkerDown`` even when declared: no engine starts without it."""
    lent = list(hw.gpus)
    for w in workers:
        try:
            report = read(w, timeout=timeout)
        except WorkerDown:
            raise
        except WorkerUnreachable:
            if w.memory_mib is None:
                raise
            lent.append(
                Gpu(len(lent), f"RPC {w.address}", w.memory_mib * MIB, w.memory_mib * MIB, remote=True)
            )
            continue
        for i, (free, total) in enumerate(report.devices):
            lent.append(Gpu(len(lent), f"RPC{i} {w.address}", total, free, remote=True))
    return replace(hw, gpus=tuple(lent))


def describe(report: WorkerReport) -> str:
    """One line per worker for ``blazar worker check``."""
    version = ".".join(map(str, report.version))
    devices = ", ".join(
        f"device {i}: {human_bytes(free)} free of {human_bytes(total)}"
        for i, (free, total) in enumerate(report.devices)
    )
    return f"{report.address}: RPC protocol {version}; {devices or 'no devices'}"


def listen_problem(host: str) -> str | None:
    """Why ``host`` is not safe for an RPC server to listen on (it has no authentication: anyone who reaches it
    can run code on its devices and read their memory), or None for a loopback or private address. A host name
    is judged by every address it resolves to; the unspecified address (all interfaces) is public."""
    try:
        infos = {str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except OSError as e:
        return f"{host} does not resolve ({e.strerror or e})"
    for text in sorted(infos):
        addr = ipaddress.ip_address(text.split("%", 1)[0])
        if addr.is_unspecified:
            return f"{host} listens on every interface, public ones included"
        if addr.is_global:  # loopback, private, link-local and shared (CGNAT, tailnets) ranges are not
            return f"{host} ({addr}) is a public address"
    return None
