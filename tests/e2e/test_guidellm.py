"""End to end: guidellm, unchanged, benchmarks Blazar at a fixed concurrency, on both its routes.

guidellm (its locked venv under the cache, made by ``scripts/test_assets.py``) runs its ``concurrent`` profile,
four streams, over the prompts shipped beside this file, each asking 32 tokens (guidellm sends them as
``max_tokens`` with ``ignore_eos``, so the test, not the model, decides how long an answer runs). The run must
end with every request successful, none errored or cut, TTFT and ITL reported from streamed answers, and each
request's token counts as Blazar's usage gives them: the prompt as Blazar's tokenizer counts it, 32 out.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import HANG, Assets, Daemon, cleanup, make_daemon, manifest_asset, provision

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parent / "guidellm" / "prompts.jsonl"
MODEL = "smollm2:latest"
STREAMS = 4
REQUESTS = 16
OUTPUT_TOKENS = 32


@pytest.fixture(scope="module")
def guidellm() -> Path:
    return manifest_asset("guidellm", "guidellm")


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[Daemon]:
    daemon = provision(make_daemon(tmp_path_factory.mktemp("guidellm")), assets)  # the default four slots
    daemon.start()
    yield daemon
    cleanup(daemon)


def benchmark(guidellm: Path, d: Daemon, route: str, out: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "HF_HOME": str(out.parent / "hf"),  # the data is a local file and the counts come from Blazar's usage
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "GUIDELLM__PREFERRED_ROUTE": route,
    }
    run = subprocess.run(
        [
            *(str(guidellm), "benchmark", "--target", d.url, "--model", MODEL),
            *("--rate-type", "concurrent", "--rate", str(STREAMS), "--max-requests", str(REQUESTS)),
            *("--data", str(DATA), "--output-path", str(out)),
            *("--disable-progress", "--disable-console-outputs"),
        ],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    (result,) = json.loads(out.read_text())["benchmarks"]
    assert isinstance(result, dict)
    return result


def prompt_tokens(d: Daemon, route: str, prompt: str) -> int:
    """What Blazar counts for the prompt: the text itself, or the one user message in the model's template."""
    if route == "text_completions":
        body: dict[str, Any] = {"model": MODEL, "prompt": prompt}
        r = httpx.post(d.url + "/tokenize", json=body, timeout=HANG)
        assert r.status_code == 200, r.text
        return len(r.json()["tokens"])
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1}
    r = httpx.post(d.url + "/v1/chat/completions", json=body, timeout=HANG)
    assert r.status_code == 200, r.text
    count: int = r.json()["usage"]["prompt_tokens"]
    return count


@pytest.mark.parametrize("route", ["text_completions", "chat_completions"])
def test_guidellm_runs_a_concurrent_profile_with_no_error(
    guidellm: Path, d: Daemon, route: str, tmp_path: Path
) -> None:
    result = benchmark(guidellm, d, route, tmp_path / "benchmarks.json")
    assert (
        result["args"]["profile"]["type_"] == "concurrent"
        and result["args"]["strategy"]["streams"] == STREAMS
    )
    assert result["request_totals"] == {
        "successful": REQUESTS,
        "errored": 0,
        "incomplete": 0,
        "total": REQUESTS,
    }
    metrics = result["metrics"]
    for name in ("time_to_first_token_ms", "inter_token_latency_ms"):
        stats = metrics[name]["successful"]
        assert stats["count"] == REQUESTS and stats["mean"] > 0, (name, stats)
    prompts = [json.loads(line)["prompt"] for line in DATA.read_text().splitlines()]
    expected = {p: prompt_tokens(d, route, p) for p in prompts}
    requests = result["requests"]["successful"]
    assert len(requests) == REQUESTS
    for req in requests:
        assert req["request_type"] == route
        assert req["output_tokens"] == OUTPUT_TOKENS, req
        assert req["prompt_tokens"] == expected[req["prompt"]], req
        # a streamed answer: its first token came before its last, and the text is what was counted
        assert req["first_token_time"] < req["last_token_time"] and req["output"], req
