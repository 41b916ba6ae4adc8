"""The status page: ``GET /ui`` (one HTML file with its script, ``status.html``, shipped in the package: no build
step, no CDN) and the live stream it reads, ``GET /api/events`` (server-sent events).

The stream opens with a ``status`` snapshot and sends one every ``STATUS_SECS``: each engine (state, slots busy and
total, context per slot, resident memory, uptime, asleep), the queue per model, each key's tokens today against its
quotas, the crash breakers holding restarts back, the engine updates the last check found, and the catalog's
models. Between snapshots come the hub's ``log`` and ``request`` events (``gateway/events.py``), the recent ones
first. Both routes are gated like the management routes when keys exist: a full-access key, which a browser sends
as the password of HTTP Basic (``Gate.authenticate`` asks for it on these paths). Reading the state here changes
nothing: an asleep engine is asked through ``/props``, which does not wake it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

import psutil

from blazar.engines.check import read_check
from blazar.gateway.events import END, frame
from blazar.supervisor import sleep
from blazar.supervisor.child import State

if TYPE_CHECKING:
    from blazar.gateway.http import Request
    from blazar.gateway.tenancy import Gate
    from blazar.supervisor import Supervisor
    from blazar.supervisor.child import Child

log = logging.getLogger("blazar.gateway")

PAGE_PATH = "/ui"
EVENTS_PATH = "/api/events"
PATHS = frozenset({PAGE_PATH, EVENTS_PATH})
STATUS_SECS = 1.0
"""How often the stream sends a snapshot."""
SLOW_SECS = 10.0
"""How often a stream reads the catalog and the engine-update check again (a database and a file)."""
PAGE_HEADERS = [
    ("content-type", "text/html; charset=utf-8"),
    ("cache-control", "no-store"),
    ("content-security-policy",
     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self';"
     " img-src data:; frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
]  # fmt: skip


def check_viewer(req: Request) -> None:
    """With keys on, the page and its stream show every model and key: a full-access key only."""
    req.require_full_access("the status page (it shows every model and key)")


async def page(sup: Supervisor, req: Request, proto: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """``GET /ui``."""
    check_viewer(req)
    html = resources.files("blazar.gateway").joinpath("status.html").read_bytes()
    return 200, PAGE_HEADERS, html


def _memory(child: Child) -> int | None:
    proc = child.proc
    if proc is None or proc.returncode is not None:
        return None
    try:
        return int(psutil.Process(proc.pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None


async def _engine(child: Child, queue: Any, now: float) -> dict[str, Any]:
    ready = child.state is State.READY
    spec = child.spec
    return {
        "engine": child.key,
        "model": child.model,
        "lane": child.lane,
        "state": child.state.value,
        "slots": spec.parallel,
        "busy": queue.running if queue else 0,
        "queued": queue.waiting if queue else 0,
        "context": spec.ctx_per_slot or spec.ctx_size,
        "memory_bytes": _memory(child) if ready else None,
        "uptime_s": round(now - child.started_at) if ready and child.started_at else None,
        "asleep": await sleep.asleep(child) if ready else False,
    }


async def snapshot(gate: Gate, sup: Supervisor, slow: dict[str, Any]) -> dict[str, Any]:
    """What the page shows now; ``slow``: the catalog's models and the update check, read every ``SLOW_SECS``."""
    now = time.time()
    queues = gate.admission.stats()
    children = list(sup.children.values())
    engines = await asyncio.gather(*(_engine(c, queues.get(c.key), now) for c in children))
    keys = []
    for info in gate.keys.listing():
        left_tokens, left_requests = gate.quotas.remaining(info.name, info.limits)
        keys.append(
            {
                "name": info.name,
                "models": list(info.models),
                "tokens_today": gate.quotas.used_today(info.name),
                "daily_tokens": info.limits.daily_tokens or None,
                "daily_tokens_left": left_tokens,
                "rpm": info.limits.rpm or None,
                "requests_left": left_requests,
            }
        )
    return {
        "ts": now,
        "engines": engines,
        "queues": [
            {"model": m, "slots": q.slots, "running": q.running, "waiting": q.waiting}
            for m, q in sorted(queues.items())
        ],
        "keys": keys,
        "auth": gate.keys.auth_active,
        "breakers": [
            {"model": h.model, "engine": h.key, "crashes": h.crashes, "retry_in_secs": h.retry_in_secs}
            for h in sup.breakers.held()
        ],
        **slow,
    }


async def _slow(sup: Supervisor) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        found = read_check(sup.data)
        checked_at, lanes = found if found is not None else (None, [])
        return {
            "models": [m.name for m in sup.catalog.list()],
            "updates_checked_at": checked_at,
            "updates": [{"kind": s.kind, "newest": s.newest, "line": s.line()} for s in lanes if s.update],
        }

    return await asyncio.to_thread(read)


async def events(sup: Supervisor, req: Request, proto: Any) -> None:
    """``GET /api/events``: the stream, until the client goes or the daemon stops."""
    check_viewer(req)
    gate = req.gate
    slow = await _slow(sup)
    slow_at = time.monotonic()
    queue = gate.events.subscribe()
    req.mark_overhead()
    transport = proto.response_stream(
        200,
        [*req.extra_headers, ("content-type", "text/event-stream"), ("cache-control", "no-store")],
    )
    try:
        item = frame("status", await snapshot(gate, sup, slow))
        due = time.monotonic() + STATUS_SECS
        while True:
            try:
                await transport.send_bytes(item)
            except Exception as e:  # granian raises when the client has gone
                log.debug("%s: the client went away (%s)", EVENTS_PATH, e)
                return
            got: bytes | None = None
            wait = due - time.monotonic()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    got = await asyncio.wait_for(queue.get(), wait)
            if got == END:  # the daemon is stopping
                return
            if got is not None:
                item = got
                continue
            if time.monotonic() - slow_at >= SLOW_SECS:  # a snapshot is due
                slow, slow_at = await _slow(sup), time.monotonic()
            item = frame("status", await snapshot(gate, sup, slow))
            due = time.monotonic() + STATUS_SECS
    finally:
        gate.events.unsubscribe(queue)
        del transport  # Granian ends the response when the transport is freed
