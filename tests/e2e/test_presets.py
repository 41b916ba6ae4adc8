"""End to end: a model made by Ollama's `/api/create` with a Modelfile's SYSTEM, PARAMETER and MESSAGE (sent by
the official `ollama` client as `ollama create -f Modelfile` sends them) answers on the real engine exactly as its
source answers a request that carries the same system prompt, conversation and options itself."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.conftest import HANG, Daemon, closing, wait_for

pytestmark = pytest.mark.e2e

SYSTEM = "You are a pirate. Answer every question in one short sentence."
OPTIONS = {"temperature": 0, "seed": 7, "num_predict": 5}
USER = {"role": "user", "content": "What is the capital of France?"}


def chat(
    client: ollama.Client, model: str, messages: list[dict[str, Any]], **options: Any
) -> ollama.ChatResponse:
    return client.chat(model=model, messages=messages, options=options or None)


def test_a_created_models_preset_is_its_requests_defaults(daemon: Daemon) -> None:
    client = closing(ollama.Client(host=daemon.url, timeout=120))
    raw = httpx.post(
        daemon.url + "/api/create",
        json={
            "model": "pirate",
            "from": "smollm2",
            "system": SYSTEM,
            "parameters": {**OPTIONS, "num_gpu": 99},
            "stream": False,
            "renderer": "qwen3",  # Ollama's, which Blazar does not take: named, not silently dropped
            "bogus": 1,
        },
        timeout=60,
    )
    assert raw.status_code == 200 and raw.json() == {"status": "success"}
    ignored = raw.headers["x-blazar-ignored"]
    assert "option num_gpu is set when the engine starts" in ignored
    assert "renderer: Blazar renders prompts with the model's own chat template" in ignored, ignored
    assert "bogus is not an /api/create field Blazar knows" in ignored, ignored

    mine = chat(client, "pirate", [USER])
    same = chat(client, "smollm2", [{"role": "system", "content": SYSTEM}, USER], **OPTIONS)
    assert mine.message.content and mine.message.content == same.message.content
    plain = chat(client, "smollm2", [USER], **OPTIONS)
    assert plain.message.content != mine.message.content  # the system prompt is what made the difference
    assert (mine.eval_count, mine.done_reason) == (5, "length")  # num_predict from the preset
    # a request's own system prompt and options win
    own = [{"role": "system", "content": "Answer in French."}, USER]
    assert chat(client, "pirate", own, num_predict=3).message.content == (
        chat(client, "smollm2", own, **{**OPTIONS, "num_predict": 3}).message.content
    )
    # the other dialects get it too; generate's prompt is the user's turn after the system prompt
    oa = closing(openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120))
    via_openai = oa.chat.completions.create(model="pirate", messages=[USER])  # type: ignore[list-item]
    assert via_openai.choices[0].message.content == same.message.content
    gen = client.generate(model="pirate", prompt=USER["content"])
    assert gen.response == same.message.content

    body = httpx.post(daemon.url + "/api/show", json={"model": "pirate"}, timeout=30).json()
    assert body["system"] == SYSTEM and body["messages"] == []
    params = body["parameters"].splitlines()
    assert any(p.split() == ["temperature", "0"] for p in params) and any(
        p.split() == ["num_predict", "5"] for p in params
    )
    assert "num_gpu" not in body["parameters"]
    assert f'SYSTEM """{SYSTEM}"""' in body["modelfile"] and "PARAMETER seed" in body["modelfile"]

    # made from a model with a preset: its fields kept, the ones given replace theirs
    history = [
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": "Captain Blazar."},
    ]
    steps = list(
        client.create(
            model="captain", from_="pirate", messages=history, parameters={"num_predict": 7}, stream=True
        )
    )
    assert steps[-1].status == "success"
    got = chat(client, "captain", [USER])
    want = chat(
        client,
        "smollm2",
        [{"role": "system", "content": SYSTEM}, *history, USER],
        **{**OPTIONS, "num_predict": 7},
    )
    assert got.message.content == want.message.content
    cap = httpx.post(daemon.url + "/api/show", json={"model": "captain"}, timeout=30).json()
    assert cap["system"] == SYSTEM and cap["messages"] == history
    assert 'MESSAGE assistant """Captain Blazar."""' in cap["modelfile"]
    # a copy keeps it; the source is untouched; deleting one leaves the other
    client.copy("captain", "captain2")
    assert (
        httpx.post(daemon.url + "/api/show", json={"model": "captain2"}, timeout=30).json()["messages"]
        == history
    )
    assert httpx.post(daemon.url + "/api/show", json={"model": "smollm2"}, timeout=30).json()["system"] == ""
    shown = daemon.cli("show", "captain2").stdout
    assert f'preset            SYSTEM """{SYSTEM}"""' in shown and "PARAMETER num_predict" in shown
    client.delete("captain")
    assert chat(client, "captain2", [USER]).message.content == want.message.content
    # a request that only loads the model is left alone, and embeddings have no preset
    assert client.chat(model="pirate", messages=[]).done
    assert len(client.embed(model="pirate", input="hi").embeddings[0]) == 576


def test_a_preset_stop_and_a_model_made_again(daemon: Daemon) -> None:
    client = closing(ollama.Client(host=daemon.url, timeout=120))
    plain = chat(client, "smollm2", [USER], temperature=0, seed=7, num_predict=24).message.content
    word = plain.split()[2]  # the same prompt and options stop at this word once it is a preset stop
    client.create(
        model="terse",
        from_="smollm2",
        parameters={"stop": [word], "temperature": 0, "seed": 7, "repeat_last_n": -1},
    )
    an = closing(anthropic.Anthropic(base_url=daemon.url, api_key="unused", max_retries=0, timeout=120))
    msg = an.messages.create(model="terse", max_tokens=24, messages=[USER])  # type: ignore[list-item]
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", word)
    assert msg.content[0].text == plain[: plain.index(word)]  # type: ignore[union-attr]
    # made again from itself (an edited Modelfile): only its preset changes, its engine keeps serving
    pids = daemon.child_pids()
    client.create(model="terse", from_="terse", system=SYSTEM, license="MIT")
    body = httpx.post(daemon.url + "/api/show", json={"model": "terse"}, timeout=30).json()
    assert (
        body["system"] == SYSTEM
        and body["license"] == "MIT"
        and f'stop                           "{word}"' in body["parameters"]
    )
    assert set(pids) <= set(daemon.child_pids())
    # made again from its source: the source has no preset, so now neither has it
    client.create(model="terse", from_="smollm2")
    again = httpx.post(daemon.url + "/api/show", json={"model": "terse"}, timeout=30).json()
    assert again["system"] == "" and "stop" not in again["parameters"]
    # made again from other weights: replaced, as Ollama overwrites a model
    made = {
        "model": "other",
        "from": "smollm2",
        "quantize": "q8_0",
        "allow_requantize": True,
        "stream": False,
    }
    assert httpx.post(daemon.url + "/api/create", json=made, timeout=300).status_code == 200
    client.create(model="terse", from_="other", system=SYSTEM)
    tags = {m.model: m for m in client.list().models}
    assert (
        tags["terse:latest"].details is not None and tags["terse:latest"].details.quantization_level == "Q8_0"
    )
    assert chat(client, "terse", [USER], num_predict=4).message.content
    # a quantized create of a name that exists replaces it once the new weights are made (with the source's preset)
    again_q = {
        "model": "terse",
        "from": "smollm2",
        "quantize": "q5_0",
        "allow_requantize": True,
        "stream": False,
    }
    assert httpx.post(daemon.url + "/api/create", json=again_q, timeout=300).status_code == 200
    tags = {m.model: m for m in client.list().models}
    assert (
        tags["terse:latest"].details is not None and tags["terse:latest"].details.quantization_level == "Q5_0"
    )
    assert chat(client, "terse", [USER], num_predict=4).message.content


def test_models_over_one_weights_file_share_one_engine(daemon_factory: Any) -> None:
    """A model made from another (its weights file hard-linked) runs on that model's llama-server, as Ollama keeps
    one runner per weights file: the memory of one engine, each name with its own preset."""
    d: Daemon = daemon_factory()
    client = closing(ollama.Client(host=d.url, timeout=120))
    client.create(model="persona", from_="smollm2", system=SYSTEM, parameters={"num_predict": 3})
    assert chat(client, "smollm2", [USER], num_predict=2).eval_count == 2
    pids = d.child_pids()
    assert len(pids) == 1
    got = chat(client, "persona", [USER])
    assert (got.eval_count, got.done_reason) == (3, "length")  # its own preset, on the same engine
    assert d.child_pids() == pids and [m.model for m in client.ps().models] == ["smollm2:latest"]
    # keep_alive 0 for the persona unloads the engine it runs on
    assert client.chat(model="persona", messages=[], keep_alive=0).done_reason == "unload"
    wait_for(lambda: not client.ps().models, HANG, "the shared engine to unload")
    # with the model it shared removed, the persona keeps its weights and starts an engine of its own
    client.delete("smollm2")
    assert chat(client, "persona", [USER]).eval_count == 3
    assert [m.model for m in client.ps().models] == ["persona:latest"] and len(d.child_pids()) == 1
