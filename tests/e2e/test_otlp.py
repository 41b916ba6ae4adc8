"""End to end: OTLP export. A daemon with ``otlp_endpoint`` sends one span per request to a collector (a real HTTP
server on a real port, recording what it gets) in OTLP/HTTP JSON; what is buffered at shutdown is sent too. A
collector that is down costs the requests nothing and is logged."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.conftest import Daemon, free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def collector() -> Iterator[tuple[int, list[dict[str, object]]]]:
    got: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            got.append({"path": self.path, "type": self.headers["content-type"], "body": json.loads(body)})
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *_a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], got
    server.shutdown()
    server.server_close()


def spans_of(got: list[dict[str, object]]) -> list[dict[str, object]]:
    out = []
    for post in got:
        assert post["path"] == "/v1/traces" and post["type"] == "application/json"
        body = post["body"]
        assert isinstance(body, dict)
        for rs in body["resourceSpans"]:
            service = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
            assert service["service.name"] == {"stringValue": "blazar"}
            for ss in rs["scopeSpans"]:
                out += ss["spans"]
    return out


def test_each_request_becomes_a_span_at_the_collector(
    daemon_factory: object, collector: tuple[int, list[dict[str, object]]]
) -> None:
    assert callable(daemon_factory)
    port, got = collector
    d: Daemon = daemon_factory(
        f'otlp_endpoint = "http://127.0.0.1:{port}/v1/traces"\n', engine=False, model=False
    )
    listed = httpx.get(d.url + "/v1/models")
    missing = httpx.post(d.url + "/v1/chat/completions", json={"model": "ghost", "messages": []})
    assert listed.status_code == 200 and missing.status_code in (400, 404)
    assert d.stop() == 0  # what is buffered goes at shutdown
    spans = {s["name"]: s for s in spans_of(got)}
    models = spans["GET /v1/models"]
    attrs = {a["key"]: a["value"] for a in models["attributes"]}
    assert attrs["http.response.status_code"] == {"intValue": "200"}
    assert attrs["blazar.trace_id"] == {"stringValue": listed.headers["x-blazar-trace-id"]}
    assert len(models["traceId"]) == 32 and len(models["spanId"]) == 16 and models["kind"] == 2
    assert int(models["endTimeUnixNano"]) >= int(models["startTimeUnixNano"]) > 0
    chat = {a["key"]: a["value"] for a in spans["POST /v1/chat/completions"]["attributes"]}
    assert chat["http.response.status_code"] == {"intValue": str(missing.status_code)}


def test_a_collector_that_is_down_costs_requests_nothing(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(
        f'otlp_endpoint = "http://127.0.0.1:{free_port()}/v1/traces"\n', engine=False, model=False
    )
    assert httpx.get(d.url + "/healthz").status_code == 200
    assert d.stop() == 0
    log = d.log.read_text()  # the span of this request, and of the start-up polls of /healthz
    assert "otlp: sending " in log and " span(s) to http://127.0.0.1:" in log and "failed (" in log, log
