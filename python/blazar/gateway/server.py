"""Binding and running Granian (RSGI, embedded) in the daemon's process, with a clean stop on SIGINT/SIGTERM.

It owns the port check (a taken port is exit code 3, one line), the Granian settings, and shutdown order: stop
accepting; give responses in flight ``stop_grace_secs``; then stop every engine child by PID, which ends a stream
still running with its dialect's error. A second signal stops the engines at once.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import sys

from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server

from blazar.config import Config
from blazar.engines.check import check_loop
from blazar.errors import ConfigError
from blazar.gateway import exchange
from blazar.gateway.app import App
from blazar.gateway.tenancy import Gate
from blazar.supervisor import Supervisor

EXIT_BIND_CONFLICT = 3

log = logging.getLogger("blazar.server")


class BindConflict(Exception):
    pass


def check_port(host: str, port: int) -> None:
    """Bind once without SO_REUSEPORT so a port held by anyone (another blazar included) is detected."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise BindConflict(
                    f"blazar: port {port} on {host} is already in use; stop the other server or choose another"
                    " port with --port or BLAZAR_PORT"
                ) from None
            why = e.strerror or str(e)
            raise ConfigError(
                f"cannot listen on {host}:{port}: {why}; set host (and port) in config.toml, or BLAZAR_HOST and"
                " BLAZAR_PORT, to an address of this machine such as 127.0.0.1 or 0.0.0.0"
            ) from None


FORCED_STOP_SECS = 1.0
"""After a second stop signal, how long an engine gets between SIGTERM and SIGKILL."""


async def run(cfg: Config, sup: Supervisor, gate: Gate) -> None:
    server = Server(
        App(sup, gate),
        address=cfg.host,
        port=cfg.port,
        interface=Interfaces.RSGI,
        http=HTTPModes.http1,
        websockets=False,
        backpressure=1024,
        log_enabled=cfg.log_level == "debug",
    )
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    engines_stopping: list[asyncio.Task[None]] = []
    timers: list[asyncio.TimerHandle] = []
    runners: list[asyncio.Task[None]] = []
    grace = float(cfg.stop_grace_secs)

    def stop_engines(now: bool = False) -> None:
        # Granian waits for every response in flight; an engine stopped under a stream ends that stream with the
        # dialect's error event, so the server can finish. ``now``: SIGKILL after 1 s, not stop_grace_secs.
        if not engines_stopping:
            engines_stopping.append(loop.create_task(sup.stop_all(grace=FORCED_STOP_SECS if now else None)))

    def on_signal() -> None:
        if not stopping.is_set():
            log.info(
                "stopping: the listener is closed; responses in flight have %.0f s, then the engines stop"
                " (a second signal stops them now)",
                grace,
            )
            stopping.set()
            gate.events.close()  # the live event streams end now: the server waits for open responses
            # batch jobs stop first: a request of theirs cut off by the shutdown is not a failed answer, and
            # the batch, still in_progress, runs again when the daemon comes back
            if gate.batches is not None:
                runners.append(loop.create_task(gate.batches.close()))
            server.stop()  # type: ignore[no-untyped-call]
            timers.append(loop.call_later(grace, stop_engines))
        elif not engines_stopping:
            log.info("stopping now: the engines stop and the responses in flight end")
            stop_engines(now=True)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    checker = loop.create_task(check_loop(cfg, sup.store, logging.getLogger("blazar.engines")))
    try:
        shown = f"[{cfg.host}]" if ":" in cfg.host else cfg.host  # an IPv6 address, as a URL writes it
        print(f"blazar listening on http://{shown}:{cfg.port}", file=sys.stderr, flush=True)
        await server.serve()
    finally:
        checker.cancel()
        for task in runners:
            await task
        for timer in timers:
            timer.cancel()
        if engines_stopping:
            await engines_stopping[0]
        await exchange.unloads_done(grace + FORCED_STOP_SECS)
        await sup.stop_all()
        await gate.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
