"""The event hub behind ``/api/events`` (``gateway/events.py``), on a real event loop: a log record from a worker
thread reaches readers through the loop, a reader that falls behind misses frames (counted) but never blocks a
request, one that connects later gets the recent ones first, and a stop ends even a full reader's stream."""

from __future__ import annotations

import asyncio
import logging

import orjson

from blazar.gateway.events import END, QUEUE, Events, LogHandler
from blazar.gateway.http import Request


def parse(item: bytes) -> tuple[str, dict[str, object]]:
    head, data = item.decode().rstrip("\n").split("\n")
    return head.removeprefix("event: "), orjson.loads(data.removeprefix("data: "))


def test_a_worker_threads_record_reaches_a_reader_through_the_loop() -> None:
    async def run() -> None:
        events = Events()
        events.start(asyncio.get_running_loop())
        handler = LogHandler(events, "%(levelname)s %(name)s: %(message)s")
        logger = logging.getLogger("blazar.test_events")
        logger.addHandler(handler)
        logger.propagate = False
        try:
            q = events.subscribe()
            await asyncio.to_thread(logger.warning, "from a thread: %s", 42)
            kind, data = parse(await q.get())
            assert kind == "log"
            assert data["line"] == "WARNING blazar.test_events: from a thread: 42"
            assert data["level"] == "WARNING" and data["logger"] == "blazar.test_events"
        finally:
            logger.removeHandler(handler)
            logger.propagate = True

    asyncio.run(run())


def test_a_reader_behind_misses_frames_and_a_stop_still_ends_it() -> None:
    async def run() -> None:
        events = Events()
        events.start(asyncio.get_running_loop())
        slow = events.subscribe()
        req = Request("POST", "/v1/chat/completions", "", {}, b"", "trace-1")
        req.model, req.route, req.dialect = "m:latest", "/v1/chat/completions", "openai"
        req.summary = {"usage": {"prompt_tokens": 3, "completion_tokens": 8}}
        for _ in range(QUEUE + 5):
            events.request(req, 200)
        assert slow.qsize() == QUEUE and events.missed == 5
        late = events.subscribe()  # the recent ones first
        kind, data = parse(late.get_nowait())
        assert kind == "request" and data["trace"] == "trace-1" and data["completion_tokens"] == 8
        assert data["model"] == "m:latest" and data["status"] == 200 and data["tokens_per_s"] is not None
        events.close()
        for q in (slow, late):
            items = [q.get_nowait() for _ in range(q.qsize())]
            assert items[-1] == END
        assert events.subscribe().get_nowait() == END  # after the stop a new reader ends at once

    asyncio.run(run())
