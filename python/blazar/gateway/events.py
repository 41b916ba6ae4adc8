"""The daemon's live events, as server-sent event frames: what ``GET /api/events`` streams and the status page shows.

Two kinds come through here: ``log``, every line the daemon logs (the same lines ``logs/blazar.log`` gets, which
``blazar log`` prints), and ``request``, each request that named a model as it ended (status, model, key name,
dialect, time to first token, tokens per second, trace id; never a prompt or a secret). The last ``RECENT`` of
each are kept, so a reader that connects sees what just happened. ``gateway/status.py`` adds the ``status``
snapshots and serves the stream. A reader that falls ``QUEUE`` frames behind misses frames, never slows a
request: a request's end keeps a tuple, and its frame is built only while someone reads.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from blazar.gateway.http import Request

RECENT = 100
"""Frames of each kind kept for a reader that connects later."""
QUEUE = 1024
"""Frames a reader may fall behind before it misses some."""
END = b""
"""Put on a reader's queue when the daemon stops: its stream ends."""


def frame(kind: str, data: object) -> bytes:
    """One server-sent event: ``event: kind`` and ``data`` as one JSON line."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


Row = tuple[float, str, int, str | None, str | None, str, str, float, float | None, float | None, int | None]
"""A request as it ended: wall time, trace, status, model, key name, dialect, route, seconds, time to first token
(ms), mean gap between tokens (ms), completion tokens. Kept raw: its frame is built only for a reader."""


def request_frame(row: Row) -> bytes:
    ts, trace, status, model, key, dialect, route, secs, ttft, gap, completion = row
    ms = secs * 1000
    rate = 1000 / gap if gap else completion * 1000 / ms if completion and ms > 0 else None
    return frame(
        "request",
        {
            "ts": ts,
            "trace": trace,
            "status": status,
            "model": model,
            "key": key,
            "dialect": dialect,
            "route": route,
            "ms": round(ms, 1),
            "ttft_ms": None if ttft is None else round(ttft, 1),
            "tokens_per_s": None if rate is None else round(rate, 1),
            "completion_tokens": completion,
        },
    )


class Events:
    """The hub: ``log`` and ``request`` on the event loop (``LogHandler`` brings other threads' records there),
    ``subscribe`` for each reader. One per gateway, on the ``Gate``."""

    def __init__(self) -> None:
        self.logs: deque[bytes] = deque(maxlen=RECENT)
        self.requests: deque[Row] = deque(maxlen=RECENT)
        self.readers: set[asyncio.Queue[bytes]] = set()
        self.missed = 0
        self.closed = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.thread = loop, threading.get_ident()

    def _send(self, item: bytes) -> None:
        for q in self.readers:
            try:
                q.put_nowait(item)
            except asyncio.QueueFull:
                self.missed += 1

    def log(self, data: dict[str, Any]) -> None:
        item = frame("log", data)
        self.logs.append(item)
        self._send(item)

    def request(self, req: Request, status: int) -> None:
        """``req`` (which named a model) ended with ``status``: a row kept, a frame only when someone reads."""
        usage = req.summary.get("usage") if req.summary else None
        completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
        row: Row = (
            time.time(),
            req.trace_id,
            status,
            req.model,
            req.key.name if req.key is not None else None,
            req.dialect,
            req.route,
            time.perf_counter() - req.t0,
            req.first_token_ms(),
            req.token_gap_ms(),
            completion if isinstance(completion, int) else None,
        )
        self.requests.append(row)
        if self.readers:
            self._send(request_frame(row))

    def subscribe(self) -> asyncio.Queue[bytes]:
        """A reader's queue, filled first with the recent frames (logs, then requests)."""
        q: asyncio.Queue[bytes] = asyncio.Queue(QUEUE)
        if self.closed:
            q.put_nowait(END)
            return q
        for item in self.logs:
            q.put_nowait(item)
        for row in self.requests:
            q.put_nowait(request_frame(row))
        self.readers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[bytes]) -> None:
        self.readers.discard(q)

    def close(self) -> None:
        """The daemon is stopping: every stream ends now (the server waits for open responses)."""
        self.closed = True
        for q in self.readers:
            while True:
                try:
                    q.put_nowait(END)
                    break
                except asyncio.QueueFull:
                    q.get_nowait()  # a reader that far behind loses a frame, not its end
        self.readers.clear()


class LogHandler(logging.Handler):
    """Each record the daemon logs, as a ``log`` event: the line the log file gets, its level and logger."""

    def __init__(self, events: Events, fmt: str) -> None:
        super().__init__()
        self.events = events
        self.setFormatter(logging.Formatter(fmt))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data: dict[str, Any] = {
                "ts": record.created,
                "level": record.levelname,
                "logger": record.name,
                "line": self.format(record),
            }
        except Exception:
            self.handleError(record)
            return
        ev = self.events
        if ev.loop is None or ev.loop.is_closed():
            return
        if threading.get_ident() == ev.thread:
            ev.log(data)
        else:  # a worker thread's record (asyncio.to_thread): published on the loop
            ev.loop.call_soon_threadsafe(ev.log, data)
