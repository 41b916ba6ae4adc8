"""A real Prometheus server (Debian's package, from the test assets) scrapes ``blazar serve`` every second while it
answers chats from the real llama-server and SmolLM2; its HTTP API then gives back the request counter and the
time-to-first-token histogram and the engine's own gauges (its KV cache in use while an answer runs, from its ``/slots``), and ``promtool check metrics`` accepts the exposition as written."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import HANG, Daemon, _existing, _manifest, free_port, wait_for

SCRAPE = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: blazar
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""


@pytest.fixture(scope="module")
def prometheus_bin() -> Path:
    """The folder with Debian's ``prometheus`` and ``promtool``."""
    m = _manifest()
    if "prometheus" not in m:
        pytest.fail(
            "assets.json has no Prometheus: run `make assets` (scripts/test_assets.py) again", pytrace=False
        )
    folder = Path(m["prometheus"])
    _existing(folder / "prometheus")
    return folder


@pytest.fixture
def prometheus(tmp_path: Path, daemon: Daemon, prometheus_bin: Path) -> Iterator[str]:
    """A Prometheus server scraping ``daemon``; its URL."""
    (tmp_path / "prometheus.yml").write_text(SCRAPE.format(port=daemon.port))
    port = free_port()
    with (tmp_path / "prometheus.log").open("wb") as out:
        proc = subprocess.Popen(
            [
                str(prometheus_bin / "prometheus"),
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(url + "/-/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None  # a server that exited is reported below, not waited for

    try:
        wait_for(ready, HANG, "Prometheus to be ready")
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(url: str, promql: str) -> float | None:
    r = httpx.get(url + "/api/v1/query", params={"query": promql}, timeout=10)
    r.raise_for_status()
    result = r.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_the_request_counter_and_the_first_token_histogram(
    daemon: Daemon, prometheus: str, prometheus_bin: Path
) -> None:
    body = {"model": "smollm2", "max_tokens": 8, "messages": [{"role": "user", "content": "Say hi."}]}
    for stream in (False, True, True):
        r = httpx.post(daemon.url + "/v1/chat/completions", json={**body, "stream": stream}, timeout=300)
        assert r.status_code == 200, r.text
    chats = 'sum(blazar_requests_total{route="/v1/chat/completions",status="2xx"})'
    first = 'sum(blazar_time_to_first_token_seconds_count{model="smollm2:latest"})'

    def scraped() -> bool:  # the chats counted on this daemon, as Prometheus stored them
        return (query(prometheus, chats) or 0) >= 3 and (query(prometheus, first) or 0) >= 2

    wait_for(scraped, HANG, "Prometheus to scrape the chats")
    up = query(prometheus, 'up{job="blazar"}')
    assert up == 1
    # the engine's own gauges, republished (what the Gateway API Inference Extension routes by)
    assert query(prometheus, 'blazar_engine_requests_running{model="smollm2:latest"}') == 0
    assert query(prometheus, 'blazar_engine_requests_waiting{model="smollm2:latest"}') == 0
    p50 = query(
        prometheus, "histogram_quantile(0.5, sum by (le) (blazar_time_to_first_token_seconds_bucket))"
    )
    assert p50 is not None and p50 > 0
    exposition = httpx.get(daemon.url + "/metrics", timeout=60).text
    checked = subprocess.run(
        [str(prometheus_bin / "promtool"), "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_engines_kv_cache_use_is_read_from_its_slots_while_an_answer_runs(daemon: Daemon) -> None:
    """A stream that cannot end first (``ignore_eos``, thousands of tokens) holds the only slot: the gauge of
    the engine's KV cache in use is above 0 while it runs (its prompt and the tokens so far, over the context,
    from llama-server's ``/slots``) and back at 0 once the client has closed it."""

    def kv() -> float:
        text = httpx.get(daemon.url + "/metrics", timeout=60).text
        for family in text_string_to_metric_families(text):
            if family.name == "blazar_engine_kv_cache_utilization":
                for sample in family.samples:
                    if sample.labels == {"model": "smollm2:latest"}:
                        return sample.value
        raise AssertionError("no blazar_engine_kv_cache_utilization for smollm2:latest:\n" + text[-2000:])

    body = {
        "model": "smollm2",
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": True,
        "messages": [{"role": "user", "content": "Count from one upwards."}],
    }
    with httpx.stream("POST", daemon.url + "/v1/chat/completions", json=body, timeout=HANG) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        while '"content"' not in next(lines):  # the first token: the slot is processing
            pass
        running = kv()
        assert 0 < running <= 1
    wait_for(lambda: kv() == 0, HANG, "the slot to be released after the client closed the stream")
