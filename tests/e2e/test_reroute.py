"""End to end: a real llama-server that dies on an architecture it does not know is classified from its log
and re-routed exactly once; with nowhere to go, the client gets a bounded 502 that names the fix."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import Assets, Daemon
from tests.fakehub import gguf_bytes

pytestmark = pytest.mark.e2e

CHAT = {"model": "odd", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def odd_model(tmp_path: Path) -> Path:
    path = tmp_path / "odd.gguf"
    meta: dict[str, object] = {
        "general.architecture": "xyzzy",
        "general.name": "odd",
        "xyzzy.block_count": 1,
        "xyzzy.context_length": 256,
        "xyzzy.embedding_length": 64,
        "xyzzy.attention.head_count": 1,
        "xyzzy.attention.head_count_kv": 1,
    }
    path.write_bytes(gguf_bytes(meta, [("w", 64)]))
    return path


def test_unknown_architecture_is_rerouted_once_then_taught(
    daemon_factory: object, assets: Assets, tmp_path: Path
) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(model=False, start=False)
    d.cli("import", str(odd_model(tmp_path)), "--name", "odd")
    # A second lane that claims the architecture (a "fork" registration of the same real binary): the gateway
    # re-routes to it once; it dies the same way, and the answer is final.
    d.cli("engine", "add", "--kind", "llama-cpp", "--path", str(assets.llama_server), "--tag", "fork",
          "--fork", "--arch", "xyzzy", "--no-activate")  # fmt: skip
    d.start()
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=120)
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert "'xyzzy' architecture" in message and "even after one re-route" in message
    assert "blazar engine build --kind llama-cpp" in message and "--fork --arch xyzzy" in message
    log = d.log.read_text()
    assert "re-routing odd:latest to llama-cpp fork" in log


def test_unknown_architecture_without_a_lane(daemon_factory: object, tmp_path: Path) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(model=False, start=False)
    d.cli("import", str(odd_model(tmp_path)), "--name", "odd")
    d.start()
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=120)
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert "does not know the 'xyzzy' architecture" in message and "even after" not in message
