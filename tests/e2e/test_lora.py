"""End to end: a LoRA adapter GGUF (written as llama.cpp's converter writes one, with random weights strong
enough to change what the model says) served by name on the real SmolLM2 engine through a real `blazar serve`:
added while the base model's engine runs, applied to its own requests only, listed as Ollama and OpenAI list
models, and removed."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import Daemon, closing
from tests.fakehub import lora_gguf

pytestmark = pytest.mark.e2e

CONFIG = '[models."smollm2:latest"]\nextra_args = ["--no-cache-prompt"]\n'


def _ask(d: Daemon, model: str, **extra: object) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 12,
        "temperature": 0,
        **extra,
    }
    return httpx.post(d.url + "/v1/chat/completions", json=body, timeout=120)


def _text(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["message"]["content"]
    assert isinstance(text, str)
    return text


def test_an_adapter_is_served_by_name_on_its_base_models_engine(
    daemon_factory: object, tmp_path: Path
) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(CONFIG)
    base_before = _text(_ask(d, "smollm2"))
    [pid_before] = d.child_pids()

    adapter = tmp_path / "pirate.gguf"
    adapter.write_bytes(lora_gguf("llama", 30, 576, {"attn_q": 576, "attn_v": 192}, spread=0.5))
    added = d.cli("lora", "add", str(adapter), "--base", "smollm2", "--name", "pirate")
    assert "added LoRA pirate:latest on smollm2:latest" in added.stdout
    assert "pirate:latest" in d.cli("lora", "ls").stdout

    # the running engine lacks it: it restarts once to load it, then serves both names
    pirate = _text(_ask(d, "pirate"))
    assert pirate != base_before
    [pid] = d.child_pids()
    assert pid != pid_before
    assert _text(_ask(d, "smollm2")) == base_before  # the base model's requests apply no adapter
    assert _text(_ask(d, "pirate:latest")) == pirate
    assert d.child_pids() == [pid]

    # a stream through the official client names the adapter and says the same
    client = closing(openai.OpenAI(base_url=d.url + "/v1", api_key="none"))
    chunks = list(
        client.chat.completions.create(
            model="pirate",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=12,
            temperature=0,
            stream=True,
        )
    )
    assert {c.model for c in chunks} == {"pirate"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == pirate

    # listed as models: OpenAI's list and retrieve, Ollama's tags and show
    assert "pirate:latest" in {m.id for m in client.models.list().data}
    assert client.models.retrieve("pirate:latest").id == "pirate:latest"
    tags = {m["name"]: m for m in httpx.get(d.url + "/api/tags").json()["models"]}
    assert tags["pirate:latest"]["details"]["parent_model"] == "smollm2:latest"
    assert tags["pirate:latest"]["size"] > tags["smollm2:latest"]["size"]
    show = httpx.post(d.url + "/api/show", json={"model": "pirate"}).json()
    assert "ADAPTER " in show["modelfile"] and show["details"]["parent_model"] == "smollm2:latest"

    # an Ollama generate with the adapter, and what an adapter cannot do
    gen = httpx.post(
        d.url + "/api/generate",
        json={"model": "pirate", "prompt": "Hi", "stream": False, "options": {"num_predict": 4}},
        timeout=120,
    )
    assert gen.status_code == 200 and gen.json()["model"] == "pirate"
    emb = httpx.post(d.url + "/v1/embeddings", json={"model": "pirate", "input": "x"}, timeout=60)
    assert (
        emb.status_code == 400
        and "embed with its base model 'smollm2:latest'" in emb.json()["error"]["message"]
    )
    refused = d.cli("rm", "smollm2", check=False)
    assert refused.returncode == 1 and "has LoRA adapters (pirate:latest)" in refused.stderr
    r = httpx.request("DELETE", d.url + "/api/delete", json={"model": "smollm2"})
    assert r.status_code == 400 and "has LoRA adapters" in r.json()["error"]
    assert d.child_pids() == [pid]  # the refused delete left the engine serving

    # removed as Ollama removes a model
    assert httpx.request("DELETE", d.url + "/api/delete", json={"model": "pirate"}).status_code == 200
    gone = _ask(d, "pirate")
    assert gone.status_code == 404
    assert "pirate:latest" not in {m["name"] for m in httpx.get(d.url + "/api/tags").json()["models"]}
    assert _text(_ask(d, "smollm2")) == base_before


def test_adding_a_bad_adapter_is_one_teaching_line(daemon_factory: object, tmp_path: Path) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(CONFIG, start=False)
    wrong = tmp_path / "qwen.gguf"
    wrong.write_bytes(lora_gguf("qwen2", 1, 576, {"attn_q": 576}))
    r = d.cli("lora", "add", str(wrong), "--base", "smollm2", check=False)
    assert r.returncode == 1 and "an adapter for the 'qwen2' architecture" in r.stderr
    assert "Traceback" not in r.stderr
    r = d.cli("lora", "add", str(wrong), "--base", "nope", check=False)
    assert r.returncode == 1 and "not found" in r.stderr
    assert d.cli("lora", "ls").stdout.startswith("no LoRA adapters")


def test_an_adapter_the_engine_cannot_load_does_not_take_its_base_down(
    daemon_factory: object, tmp_path: Path
) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(CONFIG)
    wrong = tmp_path / "big.gguf"  # a llama adapter for a wider model: llama-server refuses its shapes
    wrong.write_bytes(lora_gguf("llama", 2, 1024, {"attn_q": 1024}))
    d.cli("lora", "add", str(wrong), "--base", "smollm2", "--name", "big")
    assert _text(_ask(d, "smollm2"))  # the base starts without it
    r = _ask(d, "big")
    assert r.status_code == 502
    message = r.json()["error"]["message"]
    assert (
        "LoRA adapter 'big:latest' could not be loaded" in message and "blazar lora rm big:latest" in message
    )
    assert _text(_ask(d, "smollm2"))
    assert httpx.get(d.url + "/api/breakers").json() == {"held": []}
    assert "could not load LoRA adapter(s)" in d.log.read_text()
