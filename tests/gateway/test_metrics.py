"""``GET /metrics`` through a real ``blazar serve`` on the stand-in engine (``conftest.py``): what requests leave
in the exposition (counts by model, dialect, route and status class; durations, time to first token and per
output token; tokens by key; engines, slots, queues; quota left), read back with prometheus-client's own parser,
and who may read it when keys are on (a full-access key, or the config's ``metrics_token``). The same page
scraped by a real Prometheus server is in tests/e2e/test_prometheus.py."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import HANG, wait_for
from tests.gateway.conftest import FULL, SCOPED, TWO_KEYS, Served

TOKEN = "scrape-token-0123456789"
KEYS = f'metrics_token = "{TOKEN}"\n' + TWO_KEYS


def scrape(s: Served, token: str | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(s.d.url + "/metrics", headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_requests_leave_counts_durations_tokens_and_the_engines_state(serve: Callable[..., Served]) -> None:
    s = serve("audit = true\n")
    assert s.chat("hi").status_code == 200
    streamed = s.chat("hi", stream=True)
    assert streamed.status_code == 200 and "[DONE]" in streamed.text
    assert httpx.get(s.d.url + "/v1/models/ghost", timeout=60).status_code == 404
    m = scrape(s)
    chat = {"model": "m:latest", "dialect": "openai", "route": "/v1/chat/completions"}
    assert value(m, "blazar_requests_total", **chat, status="2xx") == 2
    assert (
        value(
            m, "blazar_requests_total", model="", dialect="openai", route="/v1/models/{model}", status="4xx"
        )
        == 1
    )
    where = {"dialect": "openai", "route": "/v1/chat/completions"}
    assert value(m, "blazar_request_duration_seconds_count", **where) == 2
    assert value(m, "blazar_request_duration_seconds_bucket", **where, le="+Inf") == 2
    # the stand-in reports 5 prompt and 4 completion tokens per answer
    assert value(m, "blazar_tokens_total", model="m:latest", key="", kind="prompt") == 10
    assert value(m, "blazar_tokens_total", model="m:latest", key="", kind="completion") == 8
    # only the stream has a first token and gaps between tokens of its own
    assert value(m, "blazar_time_to_first_token_seconds_count", model="m:latest") == 1
    assert value(m, "blazar_time_to_first_token_seconds_sum", model="m:latest") > 0
    assert value(m, "blazar_time_per_output_token_seconds_count", model="m:latest") == 1
    assert value(m, "blazar_overhead_seconds_count", route="/v1/chat/completions") == 2
    assert value(m, "blazar_admission_wait_seconds_count", model="m:latest", work_class="interactive") == 2
    assert value(m, "blazar_engine_state", model="m:latest", state="ready") == 1
    assert value(m, "blazar_engine_state", model="m:latest", state="crashed") == 0
    assert value(m, "blazar_slots", model="m:latest") == 4  # parallel "auto": four slots
    assert value(m, "blazar_slots_busy", model="m:latest") == 0
    assert value(m, "blazar_admission_waiting", model="m:latest") == 0
    assert value(m, "blazar_audit_lines_dropped_total") == 0
    # the /metrics request itself is counted once it has ended: the next scrape shows the first
    again = scrape(s)
    assert (
        value(again, "blazar_requests_total", model="", dialect="openai", route="/metrics", status="2xx") == 1
    )


def test_with_keys_on_only_a_full_access_key_or_the_scrapers_token_reads_it(
    serve: Callable[..., Served],
) -> None:
    s = serve(KEYS)
    assert httpx.get(s.d.url + "/metrics", timeout=60).status_code == 401
    scoped = httpx.get(s.d.url + "/metrics", headers={"authorization": f"Bearer {SCOPED}"}, timeout=60)
    assert scoped.status_code == 403 and "metrics_token" in scoped.json()["error"]["message"]
    wrong = httpx.get(
        s.d.url + "/metrics", headers={"authorization": "Bearer not-the-token-at-all"}, timeout=60
    )
    assert wrong.status_code == 401
    # the token opens /metrics and nothing else
    other = httpx.get(s.d.url + "/v1/models", headers={"authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert other.status_code == 401
    assert s.chat("hi", key=FULL).status_code == 200
    m = scrape(s, TOKEN)
    assert value(m, "blazar_tokens_total", model="m:latest", key="ops", kind="completion") == 4
    assert value(m, "blazar_key_daily_tokens_remaining", key="ops") == 1000 - 9
    assert value(m, "blazar_key_requests_remaining", key="ops") == 50 - 1
    assert ("blazar_key_daily_tokens_remaining", (("key", "other"),)) not in m  # no daily_tokens: no gauge
    full = scrape(s, FULL)
    assert value(full, "blazar_requests_total", model="m:latest", dialect="openai",
                 route="/v1/chat/completions", status="2xx") == 1  # fmt: skip
    assert TOKEN not in httpx.get(s.d.url + "/metrics", headers={"authorization": f"Bearer {FULL}"}).text


def test_engine_starts_crashes_and_wedges_are_counted(serve: Callable[..., Served]) -> None:
    """An engine that dies before its head (502), then one that stops answering (wedged, stopped, the request
    retried on a fresh one): three starts, one crash, one wedge, and the 5xx counted under its route."""
    s = serve("child_header_timeout_secs = 10\n")
    assert s.chat("die before headers").status_code == 502
    assert s.chat("hi").status_code == 200  # a fresh engine
    assert s.chat("wedge once").status_code == 200  # stopped, and retried on a third
    m = scrape(s)
    assert value(m, "blazar_engine_events_total", model="m:latest", event="start") == 3
    assert value(m, "blazar_engine_events_total", model="m:latest", event="crash") == 1
    assert value(m, "blazar_engine_events_total", model="m:latest", event="wedge") == 1
    chat = {"model": "m:latest", "dialect": "openai", "route": "/v1/chat/completions"}
    assert value(m, "blazar_requests_total", **chat, status="5xx") == 1
    assert value(m, "blazar_requests_total", **chat, status="2xx") == 2


def test_a_request_waiting_for_a_slot_is_seen_queued_by_work_class(serve: Callable[..., Served]) -> None:
    """One slot, held by a stream the stand-in keeps going until released: a second chat waits for it, and the
    scrape shows it queued (interactive), then none once both have ended."""
    s = serve("parallel = 1\n")
    body = {"model": "m", "messages": [{"role": "user", "content": "hold"}], "stream": True}
    with httpx.stream("POST", s.d.url + "/v1/chat/completions", json=body, timeout=HANG) as r:
        chunks = r.iter_bytes()
        assert next(chunks)  # streaming: the engine holds the only slot
        second: list[httpx.Response] = []
        waiter = threading.Thread(target=lambda: second.append(s.chat("hi")), daemon=True)
        waiter.start()

        def queued() -> float:
            return scrape(s).get(
                ("blazar_admission_queued", (("model", "m:latest"), ("work_class", "interactive"))), 0
            )

        wait_for(lambda: queued() == 1, HANG, "the second chat to wait for the slot")
        assert value(scrape(s), "blazar_admission_waiting", model="m:latest") == 1
        (s.state / "release").write_text("")
        b"".join(chunks)
    waiter.join(HANG)
    assert second and second[0].status_code == 200
    assert queued() == 0
    assert (
        value(scrape(s), "blazar_admission_wait_seconds_count", model="m:latest", work_class="interactive")
        == 2
    )
