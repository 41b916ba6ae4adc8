"""A daemon in the background: `blazar run` starts `blazar serve` when none answers, `blazar stop --server` ends it.

Owns the background daemon's two files in the data directory, ``serve.pid`` (its pid, written once it has started)
and ``logs/serve.log`` (what it prints), starting it in a session of its own (a Ctrl-C in the terminal that started
it does not reach it), waiting until its ``/healthz`` answers, and stopping it with SIGTERM as a terminal's Ctrl-C
would. A daemon started by hand (``blazar serve`` in a terminal, a service manager) is never touched: it wrote no
pid file. Must not: talk to a daemon beyond ``/healthz`` (``cli.client`` does), or start one for an address that is
not this machine's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from blazar.config import Config
from blazar.errors import BlazarError
from blazar.paths import DataDir, alive

START_SECS = 60.0
"""How long a background daemon may take to answer ``/healthz``: it listens within a second on an idle machine;
the bound is for one that hangs, never a wait on an answer."""

_LOCAL = frozenset({"", "127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0", "::"})


class BackgroundError(BlazarError):
    """The background daemon could not be started or stopped; the message says why and what to run."""


def pid_file(cfg: Config) -> Path:
    return cfg.data_dir / "serve.pid"


def log_file(cfg: Config) -> Path:
    return DataDir(cfg.data_dir).logs / "serve.log"


def is_local(cfg: Config, host: str | None) -> bool:
    """Whether the daemon a command talks to (``--host``, else the config's) is on this machine, where `blazar run`
    may start one."""
    name = (cfg.host if host is None else host).strip().lower()
    return name in _LOCAL or name.startswith("127.")


def listening(url: str) -> bool:
    """Whether anything answers at ``url`` (any HTTP answer, or a connection that is not refused): only where
    nothing listens does `blazar run` start a daemon."""
    try:
        httpx.get(url + "/healthz", timeout=5.0)
    except httpx.ConnectError:
        return False
    except httpx.HTTPError:
        return True
    return True


def healthy(url: str) -> bool:
    """Whether a daemon answers ``GET /healthz`` at ``url`` with 200 now."""
    try:
        return httpx.get(url + "/healthz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def running(cfg: Config) -> int | None:
    """The pid of the background daemon this data directory's ``serve.pid`` names, while it runs, else None (a
    stale file is removed)."""
    path = pid_file(cfg)
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    if alive(pid) and _is_blazar_serve(pid):
        return pid
    path.unlink(missing_ok=True)
    return None


def _is_blazar_serve(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"blazar" in b" ".join(argv) and b"serve" in argv


def start(cfg: Config, url: str, host: str | None, port: int | None, say: Callable[[str], None]) -> int:
    """Start ``blazar serve`` in the background for ``url`` (this machine's), wait until it answers, and return its
    pid. ``host``/``port`` are the ones the caller was given, passed on so the daemon listens where it asked."""
    DataDir(cfg.data_dir).ensure()
    log = log_file(cfg)
    argv = [sys.executable, "-m", "blazar", "serve"]
    if host is not None:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    say(f"no daemon answers at {url}: starting `blazar serve` in the background (log: {log})")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + START_SECS
    while not healthy(url):
        code = proc.poll()
        if code is not None:
            if healthy(url):  # another `blazar run` started one first: this one found the port taken
                return running(cfg) or proc.pid
            raise BackgroundError(
                f"`blazar serve` exited with status {code} before it answered at {url}; its log {log} says why:"
                f" {_tail(log)}"
            )
        if time.monotonic() >= deadline:
            proc.terminate()
            raise BackgroundError(
                f"`blazar serve` did not answer at {url} within {START_SECS:.0f} s; see {log}, or run `blazar"
                " serve` in a terminal"
            )
        time.sleep(0.1)
    tmp = pid_file(cfg).with_suffix(".pid.tmp")
    tmp.write_text(f"{proc.pid}\n")
    tmp.replace(pid_file(cfg))
    say(f"the daemon is up (pid {proc.pid}); `blazar stop --server` ends it")
    return proc.pid


def stop(cfg: Config, grace_s: float) -> int:
    """Stop the background daemon (SIGTERM, then SIGKILL after ``grace_s``) and return its pid."""
    pid = running(cfg)
    if pid is None:
        raise BackgroundError(
            f"no daemon started by `blazar run` is running (no live pid in {pid_file(cfg)}); a daemon started"
            " with `blazar serve` stops with Ctrl-C in its terminal, or a SIGTERM to its pid"
        )
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive(pid):
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.05)
    pid_file(cfg).unlink(missing_ok=True)
    return pid


def _tail(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(unreadable)"
    return " | ".join(lines[-3:]) if lines else "(empty)"
