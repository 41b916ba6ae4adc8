"""One engine child process and its state machine: stopped -> starting -> ready -> stopping -> evicted/crashed.

It owns spawning (its unix socket or a free port; API key file and pid file named with this daemon's pid; log
file), waiting for health, and stopping by PID (SIGTERM, grace, SIGKILL). It never signals a process group and
never decides when to evict; the pool does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from blazar.errors import ChildError
from blazar.launch.spec import LaunchSpec, remove_stale_socket, socket_in_use
from blazar.paths import DataDir
from blazar.supervisor.hints import CacheHints
from blazar.supervisor.keepalive import KeepAlive
from blazar.supervisor.links import ENGINE_KEEPALIVE_SECS, Links

logger = logging.getLogger("blazar.supervisor")


START_MARK = "--- blazar: starting "
"""Written to the engine log before each start; the start's own lines follow it."""

BIND_FAILED = "couldn't bind HTTP server socket"
"""llama-server's log line when it cannot listen where it was told (``server-http.cpp``)."""


_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's ``prctl`` (Linux), resolved once: an engine's process only calls it between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def die_with_daemon() -> Callable[[], None] | None:
    """For an engine's process (and ``blazar worker``'s rpc-server), between fork and exec (Linux): SIGTERM when
    the daemon's thread that started it (the event loop's, which lives as long as the daemon) ends, so a daemon
    killed with SIGKILL (an OOM kill) leaves no engine holding its memory. One that survives anyway (it ignores SIGTERM, or the daemon died before
    this was set) is stopped by the next daemon's start (``DataDir.sweep_run``)."""
    prctl = _PRCTL
    if prctl is None:
        return None
    daemon = os.getpid()  # this process, at this spawn

    def set_parent_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != daemon:  # it died before the signal was set
            os._exit(1)

    return set_parent_death_signal


class State(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    EVICTED = "evicted"
    CRASHED = "crashed"


MOVES: dict[State, frozenset[State]] = {
    State.STOPPED: frozenset({State.STARTING, State.CRASHED, State.EVICTED}),
    State.STARTING: frozenset({State.READY, State.STOPPING, State.STOPPED, State.CRASHED}),
    State.READY: frozenset({State.STOPPING, State.STOPPED, State.CRASHED}),
    State.STOPPING: frozenset({State.STOPPED, State.CRASHED}),
    State.CRASHED: frozenset({State.STARTING, State.EVICTED}),
    State.EVICTED: frozenset({State.STARTING, State.STOPPED}),
}
"""A child's state machine: the states each may move to. Only ``Child``'s own methods move it (``start``,
``stop``, ``crashed``, ``evicted``). STOPPED -> CRASHED is a start whose engine never became healthy (stopped,
then marked); CRASHED and EVICTED end a child the pool has let go, which only a test starts again."""


def weights_id(path: Path) -> tuple[int, int] | None:
    """Which file (or model directory) ``path`` is: (device, inode); None when it cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(deque(data.splitlines(), maxlen=lines))


class Child:
    """A supervised engine process serving one model key (a model name, or name@embed, name@tokens)."""

    def __init__(self, key: str, model: str, spec: LaunchSpec, data: DataDir) -> None:
        self.key = key
        self.model = model
        self.spec = spec
        self.data = data
        self._state = State.STOPPED
        self.port = 0
        self.api_key = ""
        self.proc: asyncio.subprocess.Process | None = None
        self.inflight = 0
        self.last_used = time.monotonic()
        self.started_at = 0.0
        self.load_seconds = 0.0
        self.keep = KeepAlive()  # how long it stays loaded idle (keepalive.py; the pool sets it at spawn)
        self.kept_awake = 0.0  # when a wake-up or keep-awake ping last reset its idle sleep clock (sleep.py)
        self.waking: asyncio.Task[bool] | None = None  # the wake-up requests to it share (sleep.py)
        self.env: dict[str, str] | None = None
        """The environment it starts with (``engine_environment``); None: the daemon's."""
        self.hints = CacheHints()  # its prompt cache hit rate and draft acceptance (hints.py)
        self.weights: tuple[int, int] | None = None
        """The model file's (device, inode) when this child was spawned: other weights under the same name (a
        re-import) make the supervisor restart it."""
        self.stopped_for: str | None = None
        """Why the supervisor stopped this child on purpose (evicted: idle, deleted, keep_alive 0, ...)."""
        self.token_frame: tuple[list[int], list[int]] | None = None
        """Late chunking: the special tokens this engine's model puts before and after a text, found once."""
        self.model_gone = (
            False  # stopped because its model left the catalog: a request given it is not retried
        )
        self.crash_counted = False  # its crash went to the breaker once (many requests may find it dead)
        self.wedge_check: asyncio.Future[bool] | None = None  # the header-bound check requests share
        self.base_url = ""
        self.http: aiohttp.ClientSession | None = None  # for its GET endpoints; its own on a unix socket
        self._own_http = False
        self.request_headers: dict[str, str] = {}
        self.links = Links(0, "")  # the gateway's pooled connections to it; replaced at start
        self.lane = "llama-cpp"  # the engine kind serving it (set by the pool from the routed engine)
        self.num_ctx: int | None = None  # the Ollama num_ctx it was started for (None: the config's context)
        self.catalog_checked = 0.0  # monotonic time the catalog last confirmed this child's model
        self.adapters: dict[str, tuple[int, float]] = {}  # LoRA name -> (engine id, scale) (adapters.py)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def ask(self, path: str, body: dict[str, str] | None = None, timeout: float | None = None) -> Any:
        """The engine's JSON answer to a GET (or, with ``body``, a POST) of ``path``, for the supervisor's own
        calls (the session bank, waking a sleeping engine); an error answer is raised as ``aiohttp.ClientError``
        with the engine's message."""
        http = self.http
        if http is None or http.closed:
            raise aiohttp.ClientError("the engine's connection is closed")
        method = "GET" if body is None else "POST"
        async with http.request(
            method,
            self.base_url + path,
            json=body,
            headers=self.request_headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as r:
            answer = await r.json(content_type=None)
            if r.status != 200:
                err = answer.get("error") if isinstance(answer, dict) else None
                message = err.get("message") if isinstance(err, dict) else None
                raise aiohttp.ClientError(f"{method} {path} answered HTTP {r.status}: {message or answer}")
            return answer

    def alive(self) -> bool:
        """True while the process runs; peeks at an unreaped exit (WNOWAIT) so a death the loop has not yet
        processed still counts, without stealing the exit status from asyncio's child watcher."""
        if self.proc is None or self.proc.returncode is not None:
            return False
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    @property
    def state(self) -> State:
        return self._state

    def _move(self, to: State) -> None:
        """Move to ``to``; a move ``MOVES`` does not allow is a bug, logged with both states and made all the
        same: the process's real state (running, exited) is what the supervisor acts on, never this field."""
        if to is not self._state and to not in MOVES[self._state]:
            logger.error(
                "engine for %s moved from %s to %s, which MOVES does not allow", self.key, self._state, to
            )
        self._state = to

    def crashed(self) -> None:
        """Its process died while it served (the pool's health check found it exited)."""
        self._move(State.CRASHED)

    def evicted(self) -> None:
        """The pool stopped it on purpose and took it out of its table (an unload, a restart for more context)."""
        self._move(State.EVICTED)

    async def start(self, http: aiohttp.ClientSession, timeout: float) -> None:
        """Spawn the engine and wait until its health endpoint answers 200, or raise ChildError.

        On a unix socket another process listens on (another blazar on this data directory), or that the engine
        could not bind (a build that does not take sockets after all, or a second daemon starting the same model
        at the same moment), it starts on a 127.0.0.1 port instead."""
        self._move(State.STARTING)
        sock = self.spec.socket_path
        if sock is not None and socket_in_use(sock):
            logger.warning(
                "%s is in use by another process (another blazar on this data directory?); %s gets a TCP port",
                sock.name,
                self.key,
            )
            self.spec = self.spec.on_tcp()
        t0 = time.monotonic()
        try:
            await self._launch(http, timeout)
        except ChildError:
            if self.spec.socket_path is None or BIND_FAILED not in self._last_start_log():
                raise
            logger.warning(
                "engine for %s could not bind its unix socket; starting it on a TCP port", self.key
            )
            self.spec = self.spec.on_tcp()
            self._move(State.STARTING)
            await self._launch(http, timeout)
        self.load_seconds = time.monotonic() - t0
        self.started_at = time.time()
        self.last_used = time.monotonic()
        self._move(State.READY)

    async def _launch(self, http: aiohttp.ClientSession, timeout: float) -> None:
        self.api_key = secrets.token_urlsafe(32)
        sock = self.spec.socket_path
        self.port = 0 if sock is not None else free_port()
        self.base_url = "http://localhost" if sock is not None else f"http://127.0.0.1:{self.port}"
        self.links = Links(sock if sock is not None else self.port, self.api_key)
        self.request_headers = {"authorization": f"Bearer {self.api_key}", "content-type": "application/json"}
        key_file = self.data.child_file(self.key, "apikey")
        key_file.unlink(missing_ok=True)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.api_key)
        log_path = self.data.log_file(self.key)
        argv = self.spec.argv(port=self.port, api_key_file=key_file)
        with log_path.open("ab") as log:
            log.write(f"\n{START_MARK}{self.key} on {self.address}\n".encode())
            log.flush()
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    preexec_fn=die_with_daemon(),
                    env=self.env,
                )
            except OSError as e:
                self._move(State.CRASHED)
                logger.error("cannot start engine for %s: %s: %s", self.model, argv[0], e.strerror)
                raise ChildError(
                    f"cannot start engine for '{self.model}': its binary could not be run ({e.strerror});"
                    " check `blazar engine ls` and the daemon log"
                ) from None
        self.data.child_file(self.key, "pid").write_text(str(self.proc.pid))
        # On a socket, its own session for the GETs; closed by stop, which every failure below reaches.
        if sock is not None:
            http = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(
                    path=str(sock), limit=0, keepalive_timeout=ENGINE_KEEPALIVE_SECS
                )
            )
            self._own_http = True
        self.http = http
        try:
            await self._wait_healthy(timeout)
        except BaseException:
            await self.stop(grace=2.0)
            self._move(State.CRASHED)
            raise

    def _last_start_log(self) -> str:
        """The engine log since the last start's mark."""
        return log_tail(self.data.log_file(self.key), lines=200).rpartition(START_MARK)[2]

    async def _wait_healthy(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            if self.proc.returncode is not None:
                raise ChildError(
                    f"engine for '{self.model}' exited with code {self.proc.returncode} while starting;"
                    f" last log lines ({self.data.log_name(self.key)}):\n{self._public_tail()}"
                )
            if await self.responsive():
                return
            if time.monotonic() > deadline:
                raise ChildError(
                    f"engine for '{self.model}' did not become healthy within {timeout:.0f}s"
                    f" (child_start_timeout_secs); see {self.data.log_name(self.key)}"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    async def responsive(self, timeout: float = 2.0, any_answer: bool = False) -> bool:
        """Whether the engine answers its health endpoint within ``timeout`` (healthy; with ``any_answer``, with
        any status, as while it reloads its model). A running engine that is slow to answer a request still does
        (llama-server serves ``/health`` beside its slots); a wedged one (stopped, deadlocked) does not."""
        http = self.http
        if http is None or http.closed or not self.alive():
            return False
        with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
            async with http.get(
                self.base_url + self.spec.health_path, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as r:
                return r.status == 200 or any_answer
        return False

    @property
    def address(self) -> str:
        """Where it listens, for logs: its socket relative to the data directory, or its port."""
        sock = self.spec.socket_path
        if sock is None:
            return f"port {self.port}"
        with contextlib.suppress(ValueError):
            return f"socket {sock.relative_to(self.data.root)}"
        return f"socket {sock.name}"

    def _public_tail(self) -> str:
        """The last lines this start wrote to the engine log (never an earlier run's), for an error a client
        sees (``DataDir.redact``); "(nothing)" when it wrote none."""
        lines = self._last_start_log().splitlines()[1:]  # after the mark's own line
        return self.data.redact("\n".join(lines[-15:])) or "(nothing)"

    async def stop(self, grace: float) -> None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; by PID only. Removes the run files."""
        proc = self.proc
        self.links.close()
        if proc is not None and proc.returncode is None:
            self._move(State.STOPPING)
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
                os.kill(proc.pid, signal.SIGCONT)  # a stopped (SIGSTOP, a debugger) engine acts on it now
            try:
                await asyncio.wait_for(proc.wait(), timeout=grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                await proc.wait()
        elif proc is not None:
            await proc.wait()
        for suffix in ("pid", "apikey"):
            self.data.child_file(self.key, suffix).unlink(missing_ok=True)
        if self.spec.socket_path is not None:  # with the run files, before anything awaits: gone together
            remove_stale_socket(self.spec.socket_path)  # the engine leaves it behind
        if self._own_http and self.http is not None:
            self._own_http = False
            await self.http.close()
        if self._state is not State.CRASHED:
            self._move(State.STOPPED)
