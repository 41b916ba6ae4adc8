"""Model names are taken exactly, against a real daemon: a name with a leading or trailing space or a control
character is a 400 naming that character, in each dialect's error shape and on every route and CLI command that
takes a model name, and it never reaches the model it resembles (``DELETE /api/delete {"model": "smollm2\\n"}``
used to delete smollm2). No engine is needed: the name is refused before one would start."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import Assets, Daemon, cleanup, make_daemon, provision

pytestmark = pytest.mark.e2e

TAIL = "names take no spaces or control characters"
BAD: dict[str, str] = {
    "smollm2\n": r"invalid model name 'smollm2\n': it ends with U+000A (a line feed); " + TAIL,
    " smollm2": f"invalid model name ' smollm2': it starts with U+0020 (a space); {TAIL}",
    "smollm2\u00a0": r"invalid model name 'smollm2\xa0': it ends with U+00A0 (a no-break space); " + TAIL,
}
REMOTE_BAD = {
    "far:gpt-4o\n": r"invalid model name 'far:gpt-4o\n': it ends with U+000A (a line feed); " + TAIL,
    "far:gpt-4o\u2028": r"invalid model name 'far:gpt-4o\u2028': it ends with U+2028 (a line separator); "
    + TAIL,
}
CONFIG = (
    '[[remotes]]\nname = "far"\nurl = "http://127.0.0.1:9/v1"\n'  # never reached: the name is refused first
)

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[Daemon]:
    """One daemon for the module: smollm2 imported, a remote named ``far``, no engine (none is needed)."""
    daemon = provision(make_daemon(tmp_path_factory.mktemp("names"), CONFIG), assets, engine=False)
    daemon.start()
    yield daemon
    cleanup(daemon)


def listed(d: Daemon) -> list[str]:
    return sorted(m["name"] for m in httpx.get(d.url + "/api/tags", timeout=30).json()["models"])


def openai_error(r: httpx.Response, message: str) -> None:
    assert r.status_code == 400, r.text
    assert r.json() == {"error": {"message": message, "type": "invalid_request_error", "code": 400}}


def anthropic_error(r: httpx.Response, message: str) -> None:
    assert r.status_code == 400, r.text
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def ollama_error(r: httpx.Response, message: str) -> None:
    assert r.status_code == 400, r.text
    assert r.json() == {"error": message}


def post(d: Daemon, path: str, body: dict[str, Any], method: str = "POST") -> httpx.Response:
    return httpx.request(method, d.url + path, json=body, timeout=30)


OPENAI_ROUTES: list[tuple[str, Any]] = [
    ("/v1/chat/completions", lambda m: {"model": m, "messages": MSGS, "max_tokens": 1}),
    ("/v1/completions", lambda m: {"model": m, "prompt": "hi", "max_tokens": 1}),
    ("/v1/embeddings", lambda m: {"model": m, "input": "hi"}),
    ("/v1/responses", lambda m: {"model": m, "input": "hi", "max_output_tokens": 16}),
    ("/v1/responses/input_tokens", lambda m: {"model": m, "input": "hi"}),
]
ANTHROPIC_ROUTES: list[tuple[str, Any]] = [
    ("/v1/messages", lambda m: {"model": m, "messages": MSGS, "max_tokens": 1}),
    ("/v1/messages/count_tokens", lambda m: {"model": m, "messages": MSGS}),
]
OLLAMA_ROUTES: list[tuple[str, Any]] = [
    ("/api/chat", lambda m: {"model": m, "messages": MSGS, "stream": False}),
    ("/api/chat", lambda m: {"model": m, "messages": []}),  # a load
    ("/api/generate", lambda m: {"model": m, "prompt": "hi", "stream": False}),
    ("/api/generate", lambda m: {"model": m, "keep_alive": 0}),  # an unload: what `blazar stop` sends
    ("/api/embed", lambda m: {"model": m, "input": "hi"}),
    ("/api/embeddings", lambda m: {"model": m, "prompt": "hi"}),
    ("/api/show", lambda m: {"model": m}),
    ("/api/pull", lambda m: {"model": m, "stream": False}),
    ("/api/pull", lambda m: {"model": m}),
    ("/api/copy", lambda m: {"source": m, "destination": "twin"}),
    ("/api/copy", lambda m: {"source": "smollm2", "destination": m}),
    ("/api/create", lambda m: {"model": m, "from": "smollm2", "stream": False}),
    ("/api/create", lambda m: {"model": "made", "from": m, "stream": False}),
]


@pytest.mark.parametrize(("path", "body"), OPENAI_ROUTES, ids=[p for p, _ in OPENAI_ROUTES])
def test_openai_routes_refuse_the_name_in_their_shape(d: Daemon, path: str, body: Any) -> None:
    for name, message in BAD.items():
        openai_error(post(d, path, body(name)), message)


@pytest.mark.parametrize(("path", "body"), ANTHROPIC_ROUTES, ids=[p for p, _ in ANTHROPIC_ROUTES])
def test_anthropic_routes_refuse_the_name_in_their_shape(d: Daemon, path: str, body: Any) -> None:
    for name, message in BAD.items():
        anthropic_error(post(d, path, body(name)), message)


@pytest.mark.parametrize(
    ("path", "body"), OLLAMA_ROUTES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(OLLAMA_ROUTES)]
)
def test_ollama_routes_refuse_the_name_in_their_shape(d: Daemon, path: str, body: Any) -> None:
    for name, message in BAD.items():
        ollama_error(post(d, path, body(name)), message)
    assert listed(d) == ["smollm2:latest"]  # nothing was copied or made under a trimmed name


def test_a_delete_of_a_name_with_a_line_feed_leaves_the_model(d: Daemon) -> None:
    for name, message in BAD.items():
        ollama_error(post(d, "/api/delete", {"model": name}, method="DELETE"), message)
    assert listed(d) == ["smollm2:latest"]
    assert post(d, "/api/show", {"model": "smollm2"}).status_code == 200  # the exact name still works


def test_retrieving_a_model_takes_its_id_exactly(d: Daemon) -> None:
    for name, message in BAD.items():
        openai_error(httpx.get(d.url + "/v1/models/" + quote(name, safe=""), timeout=30), message)
    ok = httpx.get(d.url + "/v1/models/smollm2", timeout=30)
    assert ok.status_code == 200 and ok.json()["id"] == "smollm2"


def test_a_transcription_takes_its_form_model_exactly(d: Daemon) -> None:
    files = {"file": ("a.wav", b"RIFF0000WAVE")}
    for name, message in BAD.items():
        r = httpx.post(d.url + "/v1/audio/transcriptions", files=files, data={"model": name}, timeout=30)
        openai_error(r, message)


def test_a_remote_model_name_is_taken_exactly(d: Daemon) -> None:
    """``far:model`` goes to the remote ``far`` with ``model`` as it was given: a control character in it is refused
    here, before anything is sent."""
    for name, message in REMOTE_BAD.items():
        openai_error(post(d, "/v1/chat/completions", {"model": name, "messages": MSGS}), message)
        anthropic_error(post(d, "/v1/messages", {"model": name, "messages": MSGS, "max_tokens": 1}), message)
        ollama_error(post(d, "/api/chat", {"model": name, "messages": MSGS, "stream": False}), message)
        openai_error(httpx.get(d.url + "/v1/models/" + quote(name, safe=""), timeout=30), message)


def test_a_batch_line_with_a_bad_name_fails_with_the_400(d: Daemon) -> None:
    lines = [
        {"custom_id": f"n{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": name, "messages": MSGS, "max_tokens": 1}}
        for i, name in enumerate(BAD)
    ]  # fmt: skip
    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    f = httpx.post(
        d.url + "/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"}, timeout=30
    )
    assert f.status_code == 200, f.text
    b = httpx.post(d.url + "/v1/batches", json={"input_file_id": f.json()["id"], "endpoint": "/v1/chat/completions",
                                                "completion_window": "24h"}, timeout=30).json()  # fmt: skip
    deadline = time.monotonic() + 60
    while b["status"] not in ("completed", "failed", "cancelled", "expired"):
        assert time.monotonic() < deadline, b
        time.sleep(0.2)
        b = httpx.get(d.url + f"/v1/batches/{b['id']}", timeout=30).json()
    assert b["status"] == "completed" and b["error_file_id"], b
    text = httpx.get(d.url + f"/v1/files/{b['error_file_id']}/content", timeout=30).text
    got = {r["custom_id"]: r["response"] for r in map(json.loads, text.splitlines())}
    for i, message in enumerate(BAD.values()):
        assert got[f"n{i}"]["status_code"] == 400
        assert got[f"n{i}"]["body"]["error"]["message"] == message


# ---- the CLI: one red line, exit 1, and nothing done under the trimmed name ----------------------------------


def one_line(d: Daemon, *args: str, message: str) -> None:
    r = d.cli(*args, check=False)
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (1, "", [f"error: {message}"])


def test_cli_commands_take_names_exactly(d: Daemon, assets: Assets) -> None:
    model = str(assets.model)
    lead = BAD[" smollm2"]
    one_line(d, "rm", " smollm2", message=lead)
    one_line(d, "show", " smollm2", message=lead)
    one_line(d, "cp", " smollm2", "twin", message=lead)
    one_line(d, "cp", "smollm2", "twin\n", message=BAD["smollm2\n"].replace("smollm2", "twin"))
    one_line(d, "import", model, "--name", "smollm2\u00a0", message=BAD["smollm2\u00a0"])
    one_line(d, "pull", " smollm2", message=lead)
    one_line(d, "pull", "hf:org/repo", "--name", " smollm2", message=lead)
    one_line(d, "quantize", "smollm2", "--type", "Q8_0", "--name", " smollm2", message=lead)
    one_line(d, "quantize", " smollm2", "--type", "Q8_0", message=lead)
    one_line(d, "lora", "add", model, "--base", " smollm2", message=lead)
    one_line(d, "lora", "add", model, "--base", "smollm2", "--name", " smollm2", message=lead)
    one_line(d, "stop", " smollm2", "--port", str(d.port), message=lead)
    one_line(d, "run", " smollm2", "hi", "--port", str(d.port), message=lead)
    assert listed(d) == ["smollm2:latest"]
    assert d.cli("show", "smollm2").returncode == 0  # the exact name still works
