"""End to end: Ollama's POST /api/pull through a real `blazar serve`, driven by the official `ollama` client,
from a local server laid out like the Hub (HF_ENDPOINT in the daemon's environment); the pulled model then
answers on the real engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import orjson
import pytest

from tests.conftest import HANG, Assets, Daemon, cleanup, closing, make_daemon, provision, wait_for
from tests.fakehub import FakeHub, running, split_gguf, tiny_gguf

pytestmark = pytest.mark.e2e

SMOL_REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
SPLIT_REPO = "org/tiny-split-GGUF"
TINY_REPO = "org/tiny-GGUF"


@pytest.fixture(scope="module")
def hub(model_file: Path) -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.add(SMOL_REPO, SMOL_FILE, model_file)
    fake.add(TINY_REPO, "tiny-Q4_K_M.gguf", tiny_gguf())
    for shard, data in split_gguf("tiny-Q8_0", 2, 50_000).items():
        fake.add(SPLIT_REPO, shard, data)
    with running(fake):
        yield fake


@pytest.fixture(scope="module")
def daemon_with_hub(
    tmp_path_factory: pytest.TempPathFactory, assets: Assets, hub: FakeHub
) -> Iterator[Daemon]:
    """One daemon for the module: the real engine registered, no model, HF_ENDPOINT at the local Hub."""
    d = provision(make_daemon(tmp_path_factory.mktemp("pull")), assets, model=False)
    d.env["HF_ENDPOINT"] = hub.url
    d.start()
    yield d
    cleanup(d)


def test_pull_streams_progress_then_serves(daemon_with_hub: Daemon, hub: FakeHub) -> None:
    c = closing(ollama.Client(host=daemon_with_hub.url, timeout=120))
    try:
        parts = list(c.pull("smollm2:135m", stream=True))
        blob = hub.repos[SMOL_REPO][SMOL_FILE]
        statuses = [p.status for p in parts]
        assert statuses[0] == "pulling manifest"
        assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
        progress = [p for p in parts if p.completed is not None]
        assert {p.status for p in progress} == {f"pulling {blob.sha256[:12]}"}
        assert {p.digest for p in progress} == {f"sha256:{blob.sha256}"}
        assert progress[-1].completed == progress[-1].total == blob.size
        assert [p.completed for p in progress] == sorted(p.completed or 0 for p in progress)
        assert {m.model: m.digest for m in c.list().models}["smollm2:135m"] == blob.sha256  # the LFS sha256

        out = c.generate(model="smollm2:135m", prompt="Hello", options={"num_predict": 4, "temperature": 0})
        assert out.done and (out.eval_count or 0) > 0

        again = list(c.pull("smollm2:135m", stream=True))  # already there: nothing is fetched
        assert [p.status for p in again] == ["pulling manifest", "success"]
    finally:
        c.close()


def test_pull_whole_split_and_errors(daemon_with_hub: Daemon, hub: FakeHub) -> None:
    c = closing(ollama.Client(host=daemon_with_hub.url, timeout=60))
    try:
        whole = c.pull(f"hf.co/{SPLIT_REPO}", stream=False)
        assert whole.status == "success"
        shown = c.show(f"hf.co/{SPLIT_REPO}")
        assert shown.details is not None and shown.details.family == "llama"

        with pytest.raises(ollama.ResponseError, match=r"nope\.gguf is not in org/tiny-GGUF"):
            list(c.pull(f"hf:{TINY_REPO}:nope.gguf", stream=True))  # after the stream began: an error line
        with pytest.raises(ollama.ResponseError) as e:
            c.pull("nosuch:1b", stream=False)  # before it began: an HTTP error in Ollama's shape
        assert e.value.status_code == 404 and "unknown model 'nosuch:1b'" in e.value.error
    finally:
        c.close()

    with httpx.stream(
        "POST", f"{daemon_with_hub.url}/api/pull", json={"model": f"hf:{TINY_REPO}"}, timeout=60
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
        lines = [orjson.loads(line) for line in r.iter_lines() if line]
    assert lines[0] == {"status": "pulling manifest"} and lines[-1] == {"status": "success"}
    # A failure after the stream began is its last line, and the response ends there: Granian ends a stream only
    # when its transport is freed, and the failure's traceback must not keep the handler's frame holding it.
    with httpx.stream(
        "POST", f"{daemon_with_hub.url}/api/pull", json={"model": f"hf:{TINY_REPO}:nope.gguf"}, timeout=20
    ) as r:
        lines = [orjson.loads(line) for line in r.iter_lines() if line]
    assert lines[0] == {"status": "pulling manifest"}
    assert "nope.gguf is not in org/tiny-GGUF" in lines[-1]["error"] and len(lines) == 2
    bad = httpx.post(f"{daemon_with_hub.url}/api/pull", json={}, timeout=10)
    assert bad.status_code == 400 and bad.json() == {
        "error": "'model' is required and must be a non-empty string"
    }


def test_a_client_that_leaves_cancels_and_the_next_pull_resumes(
    daemon_with_hub: Daemon, hub: FakeHub, model_file: Path
) -> None:
    hub.add("org/slow-GGUF", "slow-Q4_K_M.gguf", model_file)
    hub.slow["slow-Q4_K_M.gguf"] = 0.02
    url = f"{daemon_with_hub.url}/api/pull"
    with httpx.stream("POST", url, json={"model": "hf:org/slow-GGUF"}, timeout=60) as r:
        for line in r.iter_lines():
            if (orjson.loads(line).get("completed") or 0) > 0:
                break
    folder = daemon_with_hub.data_dir / "models" / ".downloads" / "org--slow-GGUF"
    wait_for(lambda: not (folder / "slow-Q4_K_M.gguf.lock").exists(), HANG, "the abandoned download to stop")
    kept = (folder / "slow-Q4_K_M.gguf.part").stat().st_size
    assert 0 < kept < model_file.stat().st_size
    hub.slow.clear()
    c = closing(ollama.Client(host=daemon_with_hub.url, timeout=60))
    try:
        assert list(c.pull("hf:org/slow-GGUF", stream=True))[-1].status == "success"
    finally:
        c.close()
    ranges = hub.ranges("slow-Q4_K_M.gguf")
    assert ranges[0] is None and ranges[-1] is not None and int(ranges[-1][6:-1]) >= kept


def test_a_failed_pull_stream_names_no_server_path(daemon_with_hub: Daemon, hub: FakeHub) -> None:
    # the file downloads, then is found not to be a GGUF: the error line is worded as an error body is, with the
    # data directory written as <data dir>, whether the answer streams or not
    hub.add("org/garbage-GGUF", "junk-Q4_K_M.gguf", b"this is not a gguf file" * 100)
    url = f"{daemon_with_hub.url}/api/pull"
    with httpx.stream("POST", url, json={"model": "hf.co/org/garbage-GGUF"}, timeout=60) as r:
        lines = [orjson.loads(line) for line in r.iter_lines() if line]
    streamed = lines[-1]["error"]
    whole = httpx.post(url, json={"model": "hf.co/org/garbage-GGUF", "stream": False}, timeout=60)
    assert whole.status_code == 400
    for message in (streamed, whole.json()["error"]):
        assert "is not a usable GGUF file" in message and "<data dir>" in message, message
        assert str(daemon_with_hub.data_dir) not in message
