"""A venv lane end to end with a stand-in package: the sglang lane pip-installed from a local wheel whose module is
a tiny OpenAI-style HTTP server. A quantized safetensors model directory is imported with `blazar import DIR`,
`blazar serve` routes it to that lane, the supervisor starts it from the compiled launch profile (the launcher
hands it the API key read from the key file), and a chat request comes back through the gateway. The stand-in answers only with the right key and the model name the profile
serves under, so the reply proves both arrived; the key never shows on the child's command line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from blazar.engines.installer import install
from blazar.paths import DataDir
from blazar.store import Store
from tests.conftest import Daemon, cleanup, make_daemon
from tests.engines.conftest import write_manifest
from tests.engines.test_venv import sglang_lane, stand_in_wheel
from tests.fakehub import write_model_dir

STAND_IN_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]


def opt(name):
    return args[args.index(name) + 1] if name in args else None


KEY, SERVED = opt("--api-key"), opt("--served-model-name")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(200, {"status": "ok"}) if self.path == "/health" else self.reply(404, {})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        if KEY is None or self.headers.get("authorization") != "Bearer " + KEY:
            return self.reply(401, {"error": "Unauthorized"})
        if req.get("model") != SERVED:
            return self.reply(400, {"error": "no model " + repr(req.get("model"))})
        if req["messages"][-1]["content"] == "answer 200 with an error object":
            return self.reply(200, {"object": "chat.completion", "choices": [],
                                    "error": {"message": "scheduler ran out of KV cache", "type": "server_error"}})
        text = "stand-in for " + SERVED + " with " + opt("--context-length") + " tokens"
        self.reply(200, {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": SERVED,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
        })

    def log_message(self, *a):
        pass


ThreadingHTTPServer((opt("--host"), int(opt("--port"))), Handler).serve_forever()
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Daemon]:
    d = make_daemon(tmp_path / "d", 'ctx_size = 8192\n[models."qwen-awq"]\nparallel = 2\n')
    data = DataDir(d.data_dir).ensure()
    wheels = tmp_path / "wheels"
    stand_in_wheel(wheels, server=STAND_IN_SERVER)
    manifest = write_manifest(tmp_path / "m.json", {"sglang": sglang_lane(wheels)})
    weights = write_model_dir(tmp_path / "Qwen2.5-0.5B-Instruct-AWQ", "awq")
    store = Store.open(data.db)
    try:
        install(store, data, manifest, "sglang", platform="linux-x86_64")
    finally:
        store.close()
    imported = d.cli("import", str(weights), "--name", "qwen-awq").stdout
    assert "imported qwen-awq:latest" in imported and "safetensors-quantized, AWQ" in imported
    assert "serving lane      sglang " in d.cli("show", "qwen-awq").stdout
    d.start()
    yield d
    cleanup(d)


def test_the_supervisor_starts_a_venv_lane_child_that_answers_through_the_gateway(served: Daemon) -> None:
    r = httpx.post(
        served.url + "/v1/chat/completions",
        json={"model": "qwen-awq", "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "stand-in for qwen-awq--latest with 4096 tokens"
    assert body["model"] == "qwen-awq" and body["usage"]["total_tokens"] == 11

    (pid,) = served.child_pids()
    key = next((served.data_dir / "run").glob("qwen-awq--latest.*.apikey")).read_text()
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert (
        cmdline[cmdline.index(b"--model-path") + 1]
        == str(served.data_dir / "models" / "qwen-awq" / "latest").encode()
    )
    assert b"--max-running-requests" in cmdline
    assert key.encode() not in b"\0".join(cmdline), "the engine's key is never on its command line"


def test_llama_server_only_features_are_refused_with_the_fix_on_another_lane(served: Daemon) -> None:
    """Token counting (/apply-template + /tokenize) and fill-in-the-middle (/infill) exist only in llama-server:
    on the sglang lane they are a 503 that names the lane and the fix, in the caller's dialect."""
    count = httpx.post(
        served.url + "/v1/messages/count_tokens",
        json={"model": "qwen-awq", "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert count.status_code == 503, count.text
    err = count.json()
    assert err["type"] == "error" and "runs on the sglang lane" in err["error"]["message"]
    infill = httpx.post(
        served.url + "/api/generate",
        json={"model": "qwen-awq", "prompt": "def f(", "suffix": "return 1", "stream": False},
        timeout=60,
    )
    assert infill.status_code == 503, infill.text
    assert "fill-in-the-middle (suffix) needs llama-server's /infill" in infill.json()["error"]


def test_a_200_carrying_an_error_object_is_a_502_with_the_engines_message(served: Daemon) -> None:
    """An engine that answers 200 with empty ``choices`` and an ``error`` object failed: the client gets a 502
    with the engine's message in its own dialect, never a 200 it would read as an answer."""
    ask = {"model": "qwen-awq", "messages": [{"role": "user", "content": "answer 200 with an error object"}]}
    r = httpx.post(served.url + "/v1/chat/completions", json=ask, timeout=60)
    assert r.status_code == 502, r.text
    assert r.json()["error"]["message"] == "scheduler ran out of KV cache"
    a = httpx.post(served.url + "/v1/messages", json={**ask, "max_tokens": 8}, timeout=60)
    assert a.status_code == 502, a.text
    assert a.json()["type"] == "error" and a.json()["error"]["message"] == "scheduler ran out of KV cache"
    o = httpx.post(served.url + "/api/chat", json={**ask, "stream": False}, timeout=60)
    assert o.status_code == 502 and o.json() == {"error": "scheduler ran out of KV cache"}, o.text
    fine = httpx.post(
        served.url + "/v1/chat/completions",
        json={**ask, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert fine.status_code == 200, fine.text  # the engine keeps serving
