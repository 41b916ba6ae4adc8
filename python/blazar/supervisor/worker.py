"""`blazar worker`: one llama.cpp ``rpc-server`` on this host, started, watched, and restarted when it dies, until a
SIGTERM or a Ctrl-C (``blazar worker stop`` sends the SIGTERM).

It owns the worker's state file ``run/worker-<port>.json`` in the data directory (this process's pid, the
rpc-server's, where it listens), the rpc-server's log ``logs/worker-<port>.log``, its argv, and its health: alive
and listening on its port, read from the process table, since a connection would take the one client an RPC
server serves at a time. Must not: listen on a public address unless told (``launch.workers.listen_problem``,
checked by the command), or speak the RPC protocol (``launch.workers`` does, for ``blazar worker check`` and the
memory fit).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from blazar.errors import EngineError
from blazar.paths import DataDir, alive
from blazar.supervisor.child import die_with_daemon

HEALTH_SECS = 0.5
"""How often the rpc-server is looked at: alive, and listening."""
START_POLL_SECS = 0.05
"""How often a starting rpc-server is looked at until it listens (it takes well under a second)."""
LISTEN_SECS = 60.0
"""How long an rpc-server may take to listen (it starts in well under a second) before it is restarted."""
STABLE_SECS = 60.0
"""An rpc-server up this long is restarted at once when it dies; one that dies sooner waits, doubling up to
``RESTART_MAX_SECS``."""
RESTART_MAX_SECS = 30.0
STOP_SECS = 10.0
"""How long a stopped rpc-server (and ``blazar worker stop``'s worker) may take to exit before SIGKILL."""


class WorkerError(EngineError):
    """The worker cannot start or be stopped; the message says what to run."""


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What ``blazar worker`` runs: llama.cpp's ``rpc-server`` and its flags."""

    binary: Path
    host: str
    port: int
    devices: tuple[str, ...] = ()
    threads: int = 0
    cache: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def argv(self) -> list[str]:
        argv = [str(self.binary), "--host", self.host, "--port", str(self.port)]
        if self.devices:
            argv += ["--device", ",".join(self.devices)]
        if self.threads:
            argv += ["--threads", str(self.threads)]
        if self.cache:
            argv.append("--cache")
        return argv


def state_file(data: DataDir, port: int) -> Path:
    return data.run / f"worker-{port}.json"


def log_file(data: DataDir, port: int) -> Path:
    return data.logs / f"worker-{port}.log"


def read_state(data: DataDir, port: int) -> dict[str, object] | None:
    """The state file of the worker on ``port`` while its process runs, else None (a stale file is removed)."""
    path = state_file(data, port)
    try:
        state = json.loads(path.read_text())
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if alive(pid) and _is_worker(pid):
        return dict(state)
    path.unlink(missing_ok=True)
    return None


def _is_worker(pid: int) -> bool:
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return "worker" in argv and any("blazar" in a for a in argv)


def listening(pid: int, port: int) -> bool:
    """Whether process ``pid`` listens on TCP ``port``: its health, read without connecting."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


def _port_free(host: str, port: int) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return True  # rpc-server says why it cannot listen
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError:
            return False
    return True


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"status {code}"


def _tail(path: Path, start: int, lines: int = 8) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


class Worker:
    """One supervised rpc-server: ``run`` blocks until ``stop`` (a SIGTERM or SIGINT once ``run`` has set its
    handlers)."""

    def __init__(self, spec: WorkerSpec, data: DataDir, say: Callable[[str], None]) -> None:
        self.spec = spec
        self.data = data
        self.say = say
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None

    def stop(self, *_: object) -> None:
        self._stop.set()

    def _write_state(self) -> None:
        path = state_file(self.data, self.spec.port)
        tmp = path.with_suffix(".tmp")
        state = {
            "pid": os.getpid(),
            "rpc_pid": self._proc.pid if self._proc else None,
            "host": self.spec.host,
        }
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)

    def _check_free(self) -> None:
        running = read_state(self.data, self.spec.port)
        if running is not None:
            raise WorkerError(
                f"a worker already runs on port {self.spec.port} (pid {running['pid']}); stop it with"
                f" `blazar worker stop --port {self.spec.port}`, or give this one another --port"
            )
        if not _port_free(self.spec.host, self.spec.port):
            raise WorkerError(
                f"{self.spec.address} is in use by another program; give the worker another --port (and list"
                " that address in the model's rpc_workers)"
            )

    def _spawn(self) -> tuple[subprocess.Popen[bytes], int]:
        log = log_file(self.data, self.spec.port)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            start = out.tell()
            proc = subprocess.Popen(
                self.spec.argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C reaches this process, which stops it in order
                preexec_fn=die_with_daemon(),  # and a SIGKILL of this process stops it too
                # Python's SIGPIPE ignored, kept across exec: an RPC server writing to a client that has gone (an
                # engine that died mid-answer) then gets EPIPE and serves the next, rather than dying of SIGPIPE
                restore_signals=False,
            )
        return proc, start

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_SECS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _watch(self, proc: subprocess.Popen[bytes]) -> bool:
        """Until ``proc`` exits or the worker stops: whether it listened. One that does not listen within
        ``LISTEN_SECS`` is ended, to be started again."""
        began = time.monotonic()
        listened = False
        while not self._stop.is_set() and proc.poll() is None:
            if not listened and listening(proc.pid, self.spec.port):
                listened = True
                log = log_file(self.data, self.spec.port)
                self.say(f"rpc-server (pid {proc.pid}) listens on {self.spec.address}; log: {log}")
            elif not listened and time.monotonic() - began > LISTEN_SECS:
                self.say(f"rpc-server did not listen within {LISTEN_SECS:.0f} s; restarting it")
                self._end(proc)
            self._stop.wait(HEALTH_SECS if listened else START_POLL_SECS)
        return listened

    def run(self) -> None:
        """Start the rpc-server and keep it running until stopped. One that exits by itself before it ever listened
        is a ``WorkerError`` with its last lines (a bad ``--device``, a binary that cannot run); one that dies later,
        or is killed, is restarted."""
        self._check_free()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        log = log_file(self.data, self.spec.port)
        wait = 0.0
        ever_listened = False
        try:
            while not self._stop.is_set():
                proc, start = self._spawn()
                self._proc = proc
                self._write_state()
                began = time.monotonic()
                ever_listened = self._watch(proc) or ever_listened
                if self._stop.is_set():
                    break
                code = proc.wait()
                up = time.monotonic() - began
                if (
                    not ever_listened and code >= 0
                ):  # it refused to start (a bad --device); a signal is outside's
                    lines = " | ".join(_tail(log, start, 4)) or "no output"
                    raise WorkerError(
                        f"rpc-server exited ({_exit_text(code)}) before it listened on {self.spec.address}:"
                        f" {lines}; the full log is {log}"
                    )
                wait = 0.0 if up >= STABLE_SECS else min(max(1.0, wait * 2), RESTART_MAX_SECS)
                after = f" in {wait:.0f} s" if wait else ""
                self.say(f"rpc-server exited ({_exit_text(code)}) after {up:.0f} s up; restarting it{after}")
                self._stop.wait(wait)
        finally:
            if self._proc is not None:
                self._end(self._proc)
            state_file(self.data, self.spec.port).unlink(missing_ok=True)


def stop(data: DataDir, port: int) -> int:
    """SIGTERM the worker on ``port`` (this data directory's) and wait for it to end; its pid."""
    state = read_state(data, port)
    if state is None:
        raise WorkerError(
            f"no worker runs on port {port} here (no {state_file(data, port).name} in the data directory's run/);"
            " `blazar worker --port PORT` starts one"
        )
    pid = int(str(state["pid"]))
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECS + 5
    while alive(pid):  # an exited worker its parent has not reaped yet counts as stopped
        if time.monotonic() > deadline:
            raise WorkerError(
                f"the worker (pid {pid}) did not stop within {STOP_SECS + 5:.0f} s; `kill -9 {pid}`"
            )
        time.sleep(0.05)
    return pid
