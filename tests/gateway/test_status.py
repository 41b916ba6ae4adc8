"""The status page (``GET /ui``) and its live stream (``GET /api/events``, server-sent events) through a real
``blazar serve`` on the stand-in engine: the stream opens with a snapshot, a chat shows up as a ``request`` event
and its engine in the next snapshot, the daemon's log lines come as ``log`` events, who may read them when keys
are on (a full-access key, as Bearer or as a browser's Basic password), and a daemon that stops ends the open
streams rather than waiting on them. The page in a real browser is tests/e2e/test_status_page.py."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from tests.conftest import HANG
from tests.gateway.conftest import FULL, SCOPED, TWO_KEYS, Served

KEYS = TWO_KEYS


def read_events(r: httpx.Response) -> Iterator[tuple[str, Any]]:
    """Each server-sent event of a streamed response: (event, parsed data)."""
    kind, data = "", []
    for line in r.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and data:
            yield kind, json.loads("\n".join(data))
            kind, data = "", []


def basic(secret: str, user: str = "admin") -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()}


def test_the_stream_shows_a_chat_its_engine_and_the_log(serve: Callable[..., Served]) -> None:
    s = serve()
    page = httpx.get(s.d.url + "/ui", timeout=60)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'new EventSource("/api/events")' in page.text
    with httpx.stream("GET", s.d.url + "/api/events", timeout=HANG) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        events = read_events(r)
        kind, first = next(events)
        assert kind == "status"
        assert first["engines"] == [] and first["models"] == ["m:latest"] and first["auth"] is False
        assert s.chat("hi", stream=True).status_code == 200
        seen: dict[str, Any] = {}
        for kind, data in events:
            if kind == "request":
                seen["request"] = data
            elif kind == "log" and "engine for m:latest ready" in data["line"]:
                seen["log"] = data  # the line logs/blazar.log has
            elif kind == "status" and "request" in seen and data["engines"]:
                seen["status"] = data
            if len(seen) == 3:
                break
    req = seen["request"]
    assert req["model"] == "m:latest" and req["status"] == 200 and req["route"] == "/v1/chat/completions"
    assert req["key"] is None and req["trace"].startswith("plm-") and req["completion_tokens"] == 4
    assert req["ttft_ms"] > 0 and req["tokens_per_s"] > 0
    assert seen["log"]["level"] == "INFO" and seen["log"]["logger"] == "blazar.supervisor"
    assert seen["log"]["line"] in (s.d.data_dir / "logs" / "blazar.log").read_text()
    (engine,) = seen["status"]["engines"]
    assert engine["model"] == "m:latest" and engine["state"] == "ready" and engine["slots"] == 4
    assert engine["busy"] == 0 and engine["asleep"] is False and engine["memory_bytes"] > 0
    assert engine["uptime_s"] >= 0 and engine["context"] > 0
    assert {"model": "m:latest", "slots": 4, "running": 0, "waiting": 0} in seen["status"]["queues"]
    # a reader that connects later is given the recent requests first
    with httpx.stream("GET", s.d.url + "/api/events", timeout=HANG) as r:
        kinds = {}
        for kind, data in read_events(r):
            kinds[kind] = data
            if "request" in kinds:
                break
        assert kinds["request"]["trace"] == req["trace"]


def test_with_keys_on_a_full_access_key_opens_the_page_and_a_browser_is_asked_for_it(
    serve: Callable[..., Served],
) -> None:
    s = serve(KEYS)
    for path in ("/ui", "/api/events"):
        refused = httpx.get(s.d.url + path, timeout=60)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Basic realm="Blazar", charset="UTF-8"'
        scoped = httpx.get(s.d.url + path, headers={"authorization": f"Bearer {SCOPED}"}, timeout=60)
        assert scoped.status_code == 403 and "full-access key" in scoped.json()["error"]["message"]
        assert httpx.get(s.d.url + path, headers=basic(SCOPED), timeout=60).status_code == 403
        assert httpx.get(s.d.url + path, headers=basic("not-a-key"), timeout=60).status_code == 401
    assert httpx.get(s.d.url + "/ui", headers=basic(FULL), timeout=60).status_code == 200
    assert httpx.get(s.d.url + "/ui", headers=basic("", user=FULL), timeout=60).status_code == 200
    assert httpx.get(s.d.url + "/ui", headers={"authorization": f"Bearer {FULL}"}).status_code == 200
    # Basic counts on the status page's paths only; elsewhere a key is a Bearer token or x-api-key
    models = httpx.get(s.d.url + "/v1/models", headers=basic(FULL), timeout=60)
    assert models.status_code == 401 and "www-authenticate" not in models.headers
    assert s.chat("hi", key=FULL).status_code == 200
    with httpx.stream("GET", s.d.url + "/api/events", headers=basic(FULL), timeout=HANG) as r:
        assert r.status_code == 200
        for kind, data in read_events(r):
            if kind == "status":
                keys = {k["name"]: k for k in data["keys"]}
                break
    assert keys["ops"]["tokens_today"] == 9 and keys["ops"]["daily_tokens"] == 1000  # 5 + 4 from the stand-in
    assert keys["ops"]["daily_tokens_left"] == 991 and keys["ops"]["requests_left"] == 49
    assert keys["other"]["models"] == ["elsewhere:latest"] and keys["other"]["daily_tokens"] is None
    assert FULL not in json.dumps(data) and SCOPED not in json.dumps(data)


def test_a_stopping_daemon_ends_the_open_streams(serve: Callable[..., Served]) -> None:
    s = serve()
    with httpx.stream("GET", s.d.url + "/api/events", timeout=HANG) as r:
        events = read_events(r)
        assert next(events)[0] == "status"
        assert s.d.stop() == 0  # it would wait for the stream if the stream did not end
        for _ in events:  # what was sent before the end, then the end
            pass
