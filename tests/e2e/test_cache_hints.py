"""End to end: the supervisor reads a real llama-server's ``/metrics`` every ``engine_metrics_secs`` and shows
the share of prompt tokens its prompt cache saved in ``/api/ps`` (``cache_hint``) and ``blazar ps``."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.conftest import HANG, Daemon, wait_for
from tests.e2e.test_session_bank import ASK

pytestmark = pytest.mark.e2e


def running(d: Daemon) -> dict[str, Any]:
    [model] = httpx.get(d.url + "/api/ps", timeout=30).json()["models"]
    assert isinstance(model, dict)
    return model


def test_the_prompt_cache_hit_rate_is_measured_and_shown(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("engine_metrics_secs = 1\n")  # prompt caching on, as by default
    cached = []
    for _ in range(2):
        r = httpx.post(d.url + "/v1/chat/completions", json=ASK, timeout=60)
        assert r.status_code == 200, r.text
        cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert cached[0] == 0 and cached[1] > 100, cached
    assert running(d)["spec_accept"] is None  # no draft source: nothing to measure
    # Half of all prompt tokens came from the cache: 0.5 when one scrape saw both requests; 0.3 x the second's
    # share when a scrape fell between them (its sample, the first request's, was 0); 0.7 x that when a scrape
    # also fell between the second's cached and evaluated counts, which llama-server adds at different moments
    wait_for(lambda: (running(d)["cache_hint"] or 0) > 0.15, HANG, "a scrape after the second request")

    def shown() -> tuple[float, str, float]:
        before = running(d)["cache_hint"]
        row = d.cli("ps").stdout.splitlines()[1]
        return before, row, running(d)["cache_hint"]

    # `blazar ps` shows what /api/ps says: compared across a `ps` call no scrape changed it during (the scrapes
    # go on every second, and the counters stop moving once the two answers are in)
    for _ in range(20):
        before, row, after = shown()
        if before == after:
            break
    assert before == after, (before, after)
    assert 0.15 < before < 0.6, before
    assert re.search(rf" {round(before * 100)}%  in ", row), row
