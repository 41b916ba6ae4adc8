"""End to end: a model quantized by the real `llama-quantize` (built beside the test llama-server), through
Ollama's `POST /api/create` driven by the official `ollama` client and raw HTTP, and through `blazar quantize`;
the new model then answers on the real engine."""

from __future__ import annotations

import httpx
import ollama
import orjson
import psutil
import pytest

from tests.conftest import HANG, Daemon, children_named, closing, wait_for

pytestmark = pytest.mark.e2e


def _lines(resp: httpx.Response) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in resp.text.splitlines() if line.strip()]


def _quantizers(d: Daemon) -> list[psutil.Process]:
    """The daemon's own llama-quantize children."""
    assert d.proc is not None
    return children_named(d.proc.pid, "llama-quantize")


def test_create_quantizes_with_the_official_client_and_the_model_answers(daemon: Daemon) -> None:
    client = closing(ollama.Client(host=daemon.url))
    with pytest.raises(ollama.ResponseError) as refused:
        client.create(model="smol8", from_="smollm2", quantize="q8_0")
    assert refused.value.status_code == 400
    assert "already quantized (Q4_1)" in refused.value.error and "allow_requantize" in refused.value.error

    with httpx.stream(
        "POST",
        daemon.url + "/api/create",
        json={"model": "smol8", "from": "smollm2", "quantize": "q8_0", "allow_requantize": True},
        timeout=120,
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "application/x-ndjson"
        resp.read()
    lines = _lines(resp)
    assert lines[0] == {"status": "quantizing Q4_1 model to Q8_0"}
    progress = [ln for ln in lines if "total" in ln]
    assert progress and progress[-1]["completed"] == progress[-1]["total"]
    assert lines[-2:] == [{"status": "writing manifest"}, {"status": "success"}]

    tags = {m.model: m for m in client.list().models}
    assert (
        tags["smol8:latest"].details is not None and tags["smol8:latest"].details.quantization_level == "Q8_0"
    )
    answer = client.chat(
        model="smol8", messages=[{"role": "user", "content": "Say hello."}], options={"num_predict": 8}
    )
    assert answer.message.content and answer.done_reason in ("stop", "length")

    # the official client's stream, and a copy when nothing is to be quantized
    steps = list(client.create(model="smol-copy", from_="smol8", stream=True))
    assert steps[-1].status == "success" and steps[0].status.startswith("using existing layer sha256:")
    assert "smol-copy:latest" in {m.model for m in client.list().models}

    # a name that exists is made again from other weights, as Ollama overwrites it: the name has the new
    # weights (swapped in one step) and answers with them. A copy runs on its source's engine (one weights
    # file, one engine) when their settings are the same: smol-copy ran on smol8's; smollm2 has settings of its
    # own in this daemon's config.toml, so smol-copy now starts an engine of its own.
    say = [{"role": "user", "content": "Say hello."}]
    assert client.chat(model="smol-copy", messages=say, options={"num_predict": 2}).message.content
    assert {m.model for m in client.ps().models} == {"smol8:latest"}
    client.create(model="smol-copy", from_="smollm2")
    tags = {m.model: m for m in client.list().models}
    assert tags["smol-copy:latest"].digest == tags["smollm2:latest"].digest != tags["smol8:latest"].digest
    details = tags["smol-copy:latest"].details
    assert details is not None and details.quantization_level == "Q4_1"
    assert client.chat(model="smol-copy", messages=say, options={"num_predict": 2}).message.content
    assert "smol-copy:latest" in {m.model for m in client.ps().models}
    assert not any((daemon.data_dir / "models" / ".importing").iterdir())


def test_create_refuses_what_it_cannot_build_in_ollamas_shape(daemon: Daemon) -> None:
    def post(body: object) -> httpx.Response:
        return httpx.post(daemon.url + "/api/create", json=body, timeout=30)

    r = post({"model": "x", "from": "smollm2", "template": "{{ .Prompt }}"})
    assert (
        r.status_code == 400
        and "'template' is not supported: Blazar applies the model's own chat" in r.json()["error"]
    )
    r = post({"model": "x", "files": {"m.gguf": "sha256:00"}})
    assert r.status_code == 400 and "must be sha256:<64 lowercase hex digits>" in r.json()["error"]
    r = post({"model": "x", "from": "smollm2", "system": 5})
    assert r.status_code == 400 and "'system' must be a string" in r.json()["error"]
    r = post({"model": "x", "from": "smollm2", "parameters": {"temperature": "hot"}})
    assert r.status_code == 400 and 'option "temperature" must be a number' in r.json()["error"]
    r = post({"model": "x", "from": "smollm2", "messages": [{"role": "wizard", "content": "hi"}]})
    assert r.status_code == 400 and "messages[0].role must be one of" in r.json()["error"]
    r = post({"model": "x"})
    assert r.status_code == 400 and r.json()["error"].startswith("'from' is required")
    r = post({"from": "smollm2"})
    assert r.status_code == 400 and r.json()["error"].startswith("'model' is required")
    r = post({"model": "x", "from": "nope", "quantize": "q8_0"})
    assert r.status_code == 404
    r = post({"model": "x", "from": "smollm2", "quantize": "q9"})
    assert r.status_code == 400 and "unknown quantization type 'q9': use one of Q4_0" in r.json()["error"]
    r = post({"model": "x", "from": "smollm2", "stream": "false"})
    assert r.status_code == 400 and "'stream' must be true or false" in r.json()["error"]
    r = post({"model": "a/../../b", "from": "smollm2"})
    assert r.status_code == 400 and "invalid model name" in r.json()["error"]
    r = post({"model": "x", "from": "smollm2", "quantize": 8})
    assert r.status_code == 400 and "'quantize' must be a string" in r.json()["error"]
    r = post({"model": "x", "from": "smollm2", "quantize": "q8_0", "allow_requantize": "yes"})
    assert r.status_code == 400
    r = post({"model": "smollm2:q4_1", "from": "smollm2", "quantize": "q4_1", "allow_requantize": True})
    assert r.status_code == 400 and "is Q4_1 already" in r.json()["error"]
    r = httpx.post(daemon.url + "/api/create", content=b"{bad", timeout=30)
    assert r.status_code == 400
    r = post({"name": "x", "modelfile": "FROM smollm2\nTEMPLATE {{ .Prompt }}"})
    assert r.status_code == 400 and "'template' is not supported" in r.json()["error"]
    r = post({"name": "x", "modelfile": "FROM ./model.gguf"})
    assert r.status_code == 400 and r.json()["error"].startswith("modelfile: line 1: FROM './model.gguf'")
    r = post({"name": "x", "modelfile": 7})
    assert r.status_code == 400 and "'modelfile' must be the Modelfile's text" in r.json()["error"]
    names = {m["name"] for m in httpx.get(daemon.url + "/api/tags").json()["models"]}
    assert "x:latest" not in names


def test_an_older_clients_modelfile_text_makes_the_model(daemon: Daemon) -> None:
    """`{"name", "modelfile"}`, what Ollama clients sent before the create API took JSON fields; what /api/show
    gives back as `modelfile` makes the same model again."""
    text = 'FROM smollm2\nPARAMETER num_predict 3\nPARAMETER stop "###"\nSYSTEM """Answer in French."""\n'
    r = httpx.post(
        daemon.url + "/api/create", json={"name": "french", "modelfile": text, "stream": False}, timeout=60
    )
    assert r.status_code == 200 and r.json() == {"status": "success"}, r.text
    shown = httpx.post(daemon.url + "/api/show", json={"model": "french"}, timeout=30).json()
    assert shown["system"] == "Answer in French." and "num_predict" in shown["parameters"]
    answer = httpx.post(
        daemon.url + "/api/chat",
        json={"model": "french", "messages": [{"role": "user", "content": "Hi"}], "stream": False},
        timeout=60,
    ).json()
    assert answer["done_reason"] == "length" and answer["eval_count"] == 3  # the preset's num_predict
    again = {"name": "french2", "modelfile": shown["modelfile"], "stream": False}
    assert httpx.post(daemon.url + "/api/create", json=again, timeout=60).status_code == 200
    copy = httpx.post(daemon.url + "/api/show", json={"model": "french2"}, timeout=30).json()
    assert (copy["system"], copy["parameters"]) == (shown["system"], shown["parameters"])


def test_a_client_that_leaves_stops_the_tool_and_leaves_nothing(daemon: Daemon) -> None:
    with httpx.stream(
        "POST",
        daemon.url + "/api/create",
        json={"model": "smol-gone", "from": "smollm2", "quantize": "q6_k", "allow_requantize": True},
        timeout=60,
    ) as resp:
        lines = resp.iter_lines()
        assert orjson.loads(next(lines)) == {"status": "quantizing Q4_1 model to Q6_K"}
    wait_for(lambda: not _quantizers(daemon), HANG, "llama-quantize to be stopped")
    staged = daemon.data_dir / "models" / ".importing"
    wait_for(lambda: not any(p.is_file() for p in staged.rglob("*")), HANG, "the partial file to be removed")
    names = {m["name"] for m in httpx.get(daemon.url + "/api/tags").json()["models"]}
    assert "smol-gone:latest" not in names


def test_a_client_that_leaves_after_the_last_progress_line_gets_nothing_made(daemon: Daemon) -> None:
    """The tool has finished; its output is hashed and imported in one step of the stream: a client gone by
    then stops that too, and a model of that name stays as it was."""
    before = {m["name"]: m["digest"] for m in httpx.get(daemon.url + "/api/tags").json()["models"]}
    left = "create of smollm2: the client went away"
    seen = daemon.log.read_text().count(left)
    body = {"model": "smollm2", "from": "smollm2", "quantize": "q4_0", "allow_requantize": True}
    with httpx.stream("POST", daemon.url + "/api/create", json=body, timeout=60) as resp:
        for raw in resp.iter_lines():
            line = orjson.loads(raw)
            if "total" in line and line["completed"] == line["total"]:
                break  # the last progress line: the client leaves
    wait_for(lambda: not _quantizers(daemon), HANG, "llama-quantize to end")
    # the daemon's word that it saw the client go, which stops the hash and import; then its output goes
    wait_for(
        lambda: daemon.log.read_text().count(left) > seen, HANG, "the create to stop for the client gone"
    )
    staged = daemon.data_dir / "models" / ".importing"
    wait_for(
        lambda: not any(p.is_file() for p in staged.rglob("*")), HANG, "the quantized file to be removed"
    )
    after = {m["name"]: m["digest"] for m in httpx.get(daemon.url + "/api/tags").json()["models"]}
    assert after == before
    shown = httpx.post(daemon.url + "/api/show", json={"model": "smollm2"}, timeout=30).json()
    assert shown["details"]["quantization_level"] == "Q4_1"


def test_blazar_quantize_cli(daemon: Daemon) -> None:
    refused = daemon.cli("quantize", "smollm2", "--type", "q5_1", check=False)
    assert refused.returncode == 1
    assert "already quantized (Q4_1)" in refused.stderr + refused.stdout
    done = daemon.cli("quantize", "smollm2", "--type", "q5_1", "--allow-requantize", "--name", "smol5")
    assert "quantized smollm2:latest -> smol5:latest" in done.stdout and "Q5_1" in done.stdout
    assert "smol5:latest" in daemon.cli("ls").stdout
    # the running daemon serves the model the CLI added
    r = httpx.post(
        daemon.url + "/api/generate",
        json={"model": "smol5", "prompt": "Hello", "stream": False, "options": {"num_predict": 4}},
        timeout=120,
    )
    assert r.status_code == 200 and r.json()["done"] is True
