"""A real Prometheus server (Debian's package, from the test assets) scrapes ``blazar serve`` every second while it
answers chats from the real llama-server and SmolLM2; its HTTP API then gives back the request counter and the
time-to-first-token histogram and the engine's own gauges, and ``promtool check metrics`` accepts the exposition as written."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

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
