"""End to end: the official `ollama` Python client against `blazar serve` and the real engine."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

import blazar
from tests.conftest import HANG, Daemon, closing, pid_alive, wait_for

pytestmark = pytest.mark.e2e

OPTIONS = {"temperature": 0, "seed": 42, "num_predict": 24}
MESSAGES = [{"role": "user", "content": "Name three colors."}]


Make = Callable[[Daemon], ollama.Client]
IGNORE_EOS = '[models."smollm2:latest"]\nextra_args = ["--ignore-eos"]\n'
"""An engine whose answers all run to their num_predict: one that must still be running when something happens
cannot end first."""


def engine(d: Daemon) -> dict[str, Any]:
    """The chat engine's /api/ps entry: its slots in use (busy_slots) and the requests queued for one."""
    [entry] = [m for m in httpx.get(d.url + "/api/ps", timeout=30).json()["models"] if m["engine"] == "chat"]
    assert isinstance(entry, dict)
    return entry


def unread_by_the_daemon(s: socket.socket) -> int:
    """Bytes this client sent that the daemon has not read yet: its end's receive queue in /proc/net/tcp."""
    here, there = s.getsockname()[1], s.getpeername()[1]
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = row.split()
        if int(f[1].split(":")[1], 16) == there and int(f[2].split(":")[1], 16) == here:
            return int(f[4].split(":")[1], 16)
    raise AssertionError(f"no connection from port {here} to {there} in /proc/net/tcp")


@pytest.fixture
def client() -> Iterator[Make]:
    """Ollama clients that are closed after the test (they hold pooled sockets)."""
    made: list[ollama.Client] = []

    def make(d: Daemon) -> ollama.Client:
        c = ollama.Client(host=d.url, timeout=120)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_chat_whole_and_streamed_agree(daemon: Daemon, client: Make) -> None:
    c = client(daemon)
    whole = c.chat(model="smollm2", messages=MESSAGES, options=OPTIONS, stream=False)
    assert whole.message.role == "assistant" and whole.message.content
    assert whole.done and whole.done_reason in ("stop", "length")
    assert (whole.eval_count or 0) > 0 and (whole.prompt_eval_count or 0) > 0
    assert (whole.total_duration or 0) > 0 and (whole.eval_duration or 0) > 0
    parts = list(c.chat(model="smollm2", messages=MESSAGES, options=OPTIONS, stream=True))
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count


def test_generate(daemon: Daemon, client: Make) -> None:
    c = client(daemon)
    whole = c.generate(model="smollm2", prompt="Why is the sky blue?", options=OPTIONS, stream=False)
    assert whole.response and whole.done
    streamed = "".join(
        p.response
        for p in c.generate(model="smollm2", prompt="Why is the sky blue?", options=OPTIONS, stream=True)
    )
    assert streamed == whole.response


def test_generate_raw_and_length(daemon: Daemon, client: Make) -> None:
    r = client(daemon).generate(
        model="smollm2",
        prompt="Once upon a time",
        raw=True,
        options={**OPTIONS, "num_predict": 5},
        stream=False,
    )
    assert r.response and r.done_reason == "length" and r.eval_count == 5


def test_list_show_ps(daemon: Daemon, client: Make, model_file: Path) -> None:
    c = client(daemon)
    names = [m.model for m in c.list().models]
    assert "smollm2:latest" in names
    sha = hashlib.sha256(model_file.read_bytes()).hexdigest()
    assert {m.model: m.digest for m in c.list().models}["smollm2:latest"] == sha
    raw = httpx.get(daemon.url + "/api/tags").json()["models"]
    assert {m["name"]: m["digest"] for m in raw}["smollm2:latest"] == sha  # bare hex, as Ollama's
    shown = c.show("smollm2")
    assert shown.modelfile is not None and f"# digest sha256:{sha}" in shown.modelfile
    assert shown.details is not None and shown.details.family == "llama"
    assert shown.details.quantization_level == "Q4_1"
    assert shown.modelinfo is not None and shown.modelinfo["llama.context_length"] == 8192
    assert shown.template and "im_start" in shown.template
    c.generate(model="smollm2", prompt="hi", options={"num_predict": 1})
    running = c.ps().models
    assert [m.model for m in running] == ["smollm2:latest"]
    assert running[0].expires_at is not None and running[0].digest == sha


def test_embed(daemon: Daemon, client: Make) -> None:
    r = client(daemon).embed(model="smollm2", input=["hello", "world"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 576
    short = client(daemon).embed(model="smollm2", input=["hello", "world"], dimensions=32)
    assert [len(v) for v in short.embeddings] == [32, 32]  # cut and normalised again, as Ollama does
    assert all(abs(sum(x * x for x in v) - 1) < 1e-4 for v in short.embeddings)
    legacy = httpx.post(
        daemon.url + "/api/embeddings", json={"model": "smollm2", "prompt": "hello"}, timeout=60
    )
    assert legacy.status_code == 200 and len(legacy.json()["embedding"]) == 576
    # the legacy endpoint's vector is the model's own, as Ollama's (not normalised); /api/embed's is normalised
    raw = legacy.json()["embedding"]
    unit = client(daemon).embed(model="smollm2", input="hello").embeddings[0]
    norm = sum(x * x for x in raw) ** 0.5
    assert abs(norm - 1) > 0.1 and abs(sum(x * x for x in unit) - 1) < 1e-4
    assert all(abs(a / norm - b) < 1e-4 for a, b in zip(raw, unit, strict=True))
    # no input: the model is loaded and nothing is embedded, in each endpoint's own shape; a missing model is 404
    empty = httpx.post(daemon.url + "/api/embed", json={"model": "smollm2"}, timeout=60)
    assert empty.status_code == 200 and empty.json() == {"model": "smollm2", "embeddings": []}
    for path in ("/api/embed", "/api/embeddings"):
        ghost = httpx.post(daemon.url + path, json={"model": "ghost"}, timeout=60)
        assert ghost.status_code == 404 and "ghost" in ghost.json()["error"], (path, ghost.text)


def test_ignored_fields_are_named_in_a_header(daemon: Daemon) -> None:
    body = {
        "model": "smollm2",
        "prompt": "hi",
        "context": [1, 2, 3],
        "stream": False,
        "options": {"num_predict": 2},
    }
    r = httpx.post(daemon.url + "/api/generate", json=body, timeout=60)
    assert r.status_code == 200 and "context" in r.headers["x-blazar-ignored"], r.headers
    odd = {"model": "smollm2", "input": "hi", "options": {"temperature\u00e9\n": 1}}
    e = httpx.post(daemon.url + "/api/embed", json=odd, timeout=60)  # a note quoting the client's own key
    assert e.status_code == 200 and e.headers["x-blazar-ignored"].isascii(), e.headers
    plain = httpx.post(daemon.url + "/api/generate", json={**body, "context": None}, timeout=60)
    assert "x-blazar-ignored" not in plain.headers
    # SmolLM2's template has no thinking section: think is noted, as Ollama refuses it for such a model
    chat = {"model": "smollm2", "messages": MESSAGES, "stream": False, "options": {"num_predict": 2}}
    for think in (True, "high"):
        r = httpx.post(daemon.url + "/api/chat", json={**chat, "think": think}, timeout=60)
        assert r.status_code == 200, r.text
        assert (
            "think is ignored: the chat template of 'smollm2:latest' has no thinking"
            in r.headers["x-blazar-ignored"]
        )
    off = httpx.post(daemon.url + "/api/chat", json={**chat, "think": False}, timeout=60)
    assert "x-blazar-ignored" not in off.headers


def test_logprobs_come_with_the_tokens(daemon: Daemon) -> None:
    """Ollama's logprobs and top_logprobs: each token's entry on the object that carries its text, streamed, and
    all of them on a whole answer."""
    chat = {
        "model": "smollm2",
        "messages": MESSAGES,
        "logprobs": True,
        "top_logprobs": 2,
        "options": {"num_predict": 4, "temperature": 0},
    }
    with httpx.stream("POST", daemon.url + "/api/chat", json=chat, timeout=60) as r:
        lines = [json.loads(line) for line in r.iter_lines() if line]
    texts = [o for o in lines if not o["done"] and o["message"]["content"]]
    assert texts and all(o["logprobs"] for o in texts), lines
    entry = texts[0]["logprobs"][0]
    assert isinstance(entry["token"], str) and entry["logprob"] <= 0 and len(entry["top_logprobs"]) == 2, (
        entry
    )
    assert "".join(e["token"] for o in texts for e in o["logprobs"]) == "".join(
        o["message"]["content"] for o in texts
    )
    whole = {
        "model": "smollm2",
        "prompt": "Hello",
        "stream": False,
        "logprobs": True,
        # greedy: a sampled fourth token can be the first bytes of a character, which llama-server gives no
        # logprob entry until the character is whole (seen: "Hello there! " with three entries for four tokens)
        "options": {"num_predict": 4, "temperature": 0},
    }
    body = httpx.post(daemon.url + "/api/generate", json=whole, timeout=60).json()
    assert len(body["logprobs"]) == body["eval_count"] == 4, body
    assert "".join(e["token"] for e in body["logprobs"]) == body["response"], body
    # top_logprobs 0 (or none): each token's own logprob and no alternatives, as Ollama sends it
    assert all("top_logprobs" not in e for e in body["logprobs"]), body
    with httpx.stream("POST", daemon.url + "/api/chat", json={**chat, "top_logprobs": 0}, timeout=60) as r:
        entries = [e for line in r.iter_lines() if line for e in json.loads(line).get("logprobs") or []]
    assert entries and all("top_logprobs" not in e and e["logprob"] <= 0 for e in entries), entries
    plain = httpx.post(daemon.url + "/api/generate", json={**whole, "logprobs": False}, timeout=60).json()
    assert "logprobs" not in plain


def test_embed_truncates_a_long_input_by_default(daemon: Daemon, client: Make) -> None:
    """Ollama's /api/embed cuts an input to what the model embeds unless truncate is false; llama-server embeds
    at most one physical batch (late_chunking_max_tokens, 2048 tokens here: not its default of 512) and refuses
    more, naming the setting that raises it."""
    long = "The quick brown fox jumps over the lazy dog. " * 400  # about 4,000 tokens
    r = client(daemon).embed(model="smollm2", input=[long, "short"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 576
    assert r.prompt_eval_count is not None and 2000 < r.prompt_eval_count <= 2048 + 8
    assert r.embeddings[0] != r.embeddings[1]
    refused = httpx.post(
        daemon.url + "/api/embed", json={"model": "smollm2", "input": long, "truncate": False}, timeout=60
    )
    assert refused.status_code == 400 and "too large to process" in refused.json()["error"]
    assert "raise late_chunking_max_tokens in config.toml" in refused.json()["error"]
    same = client(daemon).embed(model="smollm2", input="short")  # short inputs are sent as they are
    assert same.embeddings[0] == r.embeddings[1]


def test_keep_alive_zero_unloads(daemon_factory: object, client: Make) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    c = client(d)
    c.generate(model="smollm2", prompt="hi", options={"num_predict": 2})
    [pid] = d.child_pids()
    c.generate(model="smollm2", prompt="hi", options={"num_predict": 2}, keep_alive=0)
    wait_for(lambda: not pid_alive(pid), HANG, "keep_alive 0 to unload the engine")
    assert c.ps().models == []


def test_an_unload_waits_for_the_requests_in_flight_and_the_latest_keep_alive_wins(
    daemon_factory: object,
) -> None:
    """As in Ollama: a load-only ``keep_alive: 0`` answers at once and unloads the model once the stream in flight
    has finished, instead of cutting it off; a request without keep_alive puts the default back."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(
        IGNORE_EOS
    )  # 300 tokens: the answer is still under way when the unload returns
    ask = {"model": "smollm2", "messages": MESSAGES, "options": {"num_predict": 300, "temperature": 0}}
    with httpx.stream("POST", d.url + "/api/chat", json=ask, timeout=120) as s:
        lines = s.iter_lines()
        assert '"done":false' in next(lines)  # the answer is under way
        [pid] = d.child_pids()
        unload = httpx.post(d.url + "/api/generate", json={"model": "smollm2", "keep_alive": 0}, timeout=60)
        assert unload.status_code == 200 and unload.json()["done_reason"] == "unload", unload.text
        # answered at once: the stream still holds its slot, and the engine runs
        assert engine(d)["busy_slots"] == 1 and pid_alive(pid)
        last = json.loads(list(lines)[-1])
    assert last["done"] is True and last["done_reason"] == "length" and last["eval_count"] == 300, last
    wait_for(lambda: not pid_alive(pid), HANG, "the engine to unload after the stream")

    forever = {"model": "smollm2", "keep_alive": -1}
    assert httpx.post(d.url + "/api/generate", json=forever, timeout=60).status_code == 200
    [far] = httpx.get(d.url + "/api/ps").json()["models"]
    year = time.gmtime().tm_year
    assert int(far["expires_at"][:4]) > year + 5, far  # "forever"
    plain = {"model": "smollm2", "messages": MESSAGES, "stream": False, "options": {"num_predict": 2}}
    assert httpx.post(d.url + "/api/chat", json=plain, timeout=60).status_code == 200
    [back] = httpx.get(d.url + "/api/ps").json()["models"]
    assert int(back["expires_at"][:4]) <= year + 1, back  # the daemon's idle timeout again, not "forever"


def test_a_load_keeps_the_model_for_its_keep_alive_from_the_load(daemon_factory: object) -> None:
    """A load-only request's keep_alive counts from that request, as Ollama's preload does: not from the last
    answer the engine gave, which would unload a model preloaded after a quiet spell at once."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    plain = {"model": "smollm2", "prompt": "hi", "stream": False, "options": {"num_predict": 1}}
    assert httpx.post(d.url + "/api/generate", json=plain, timeout=60).status_code == 200
    # a quiet spell (its length is the point: counted from that answer, the load's 30 s would end 4 s early); a
    # slower machine only makes the spell longer
    time.sleep(4)
    loaded_at = time.time()
    load = httpx.post(d.url + "/api/generate", json={"model": "smollm2", "keep_alive": "30s"}, timeout=60)
    assert load.status_code == 200 and load.json()["done_reason"] == "load", load.text
    [entry] = httpx.get(d.url + "/api/ps").json()["models"]
    expires = datetime.fromisoformat(entry["expires_at"].replace("Z", "+00:00")).timestamp()
    assert expires >= loaded_at + 29, (entry["expires_at"], loaded_at)


def test_a_request_waiting_when_an_unload_is_due_keeps_the_model(daemon_factory: object) -> None:
    """keep_alive 0 on one answer, while another request for the model waits in the queue: that one came later,
    so its keep_alive wins and the model stays loaded."""
    assert callable(daemon_factory)
    # one slot: the second request queues behind the first, as long as a loaded machine may take over it; the
    # engine ignores EOS, so the first runs its 300 tokens and cannot end before the later one is queued
    d: Daemon = daemon_factory(f"queue_wait_secs = {int(HANG)}\nparallel = 1\n" + IGNORE_EOS)
    count = [{"role": "user", "content": "Count from 1 to 100, one number per line."}]
    first = {
        "model": "smollm2",
        "messages": count,
        "keep_alive": 0,
        "options": {"num_predict": 300, "temperature": 0},
    }
    later = {"model": "smollm2", "messages": MESSAGES, "stream": False, "keep_alive": "1h",
             "options": {"num_predict": 2}}  # fmt: skip
    got: list[httpx.Response] = []
    with httpx.stream("POST", d.url + "/api/chat", json=first, timeout=HANG) as s:
        lines = s.iter_lines()
        next(lines)  # the first answer is under way
        [pid] = d.child_pids()
        waiter = threading.Thread(
            target=lambda: got.append(httpx.post(d.url + "/api/chat", json=later, timeout=HANG))
        )
        waiter.start()
        wait_for(lambda: engine(d)["queued"] == 1, HANG, "the later request to queue behind the stream")
        last = json.loads(list(lines)[-1])
    assert last["done_reason"] == "length" and last["eval_count"] == 300, last  # it ran to its end
    waiter.join(HANG)
    assert got and got[0].status_code == 200, (got, got[0].text if got else None)
    assert got[0].json()["load_duration"] == 0  # served by the engine that was already running
    # an unload, had it been decided as the later request ended, would have stopped the engine by now (a wrong
    # one can only go unseen here, never a right one fail); the later request's keep_alive of an hour is kept
    time.sleep(1)
    assert d.child_pids() == [pid] and pid_alive(pid)
    expires = datetime.fromisoformat(engine(d)["expires_at"].replace("Z", "+00:00")).timestamp()
    assert expires > time.time() + 3000, engine(d)


def test_ps_names_every_engine_so_that_it_can_be_unloaded_by_that_name(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    assert (
        httpx.post(d.url + "/api/embed", json={"model": "smollm2", "input": "hi"}, timeout=60).status_code
        == 200
    )
    plain = {"model": "smollm2", "messages": MESSAGES, "stream": False, "options": {"num_predict": 2}}
    assert httpx.post(d.url + "/api/chat", json=plain, timeout=60).status_code == 200
    late = {"model": "smollm2", "input": ["hi", "there"], "late_chunking": True}
    assert httpx.post(d.url + "/v1/embeddings", json=late, timeout=60).status_code == 200
    running = httpx.get(d.url + "/api/ps").json()["models"]
    assert sorted((m["name"], m["engine"]) for m in running) == [
        ("smollm2:latest", "chat"),
        ("smollm2:latest", "embeddings"),
        ("smollm2:latest", "late_chunking"),
    ]
    shown = d.cli("ps").stdout
    assert "smollm2:latest (embeddings)" in shown and "smollm2:latest (late chunking)" in shown
    name = running[0]["name"]
    assert httpx.post(d.url + "/api/show", json={"model": name}, timeout=60).status_code == 200
    # an embedding engine's own keep_alive 0 unloads only that engine
    gone = {"model": "smollm2", "input": "hi", "keep_alive": 0}
    assert httpx.post(d.url + "/api/embed", json=gone, timeout=60).status_code == 200
    wait_for(lambda: len(d.child_pids()) == 2, HANG, "the embedding engine to unload")
    engines = sorted(m["engine"] for m in httpx.get(d.url + "/api/ps").json()["models"])
    assert engines == ["chat", "late_chunking"]
    # the model's unload stops all of its engines
    r = httpx.post(d.url + "/api/generate", json={"model": name, "keep_alive": 0}, timeout=60)
    assert r.status_code == 200 and r.json()["done_reason"] == "unload"
    wait_for(lambda: not d.child_pids(), HANG, "every engine to unload")


def test_copy_and_delete(daemon_factory: object, client: Make) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    c = client(d)
    c.copy("smollm2", "smol2:copy")
    assert "smol2:copy" in [m.model for m in c.list().models]
    c.delete("smol2:copy")
    assert "smol2:copy" not in [m.model for m in c.list().models]
    # a copy onto a model that exists replaces it, as Ollama overwrites the destination; onto itself is a no-op
    c.create(model="other", from_="smollm2", system="Be brief.")
    c.copy("smollm2", "other")
    assert httpx.post(d.url + "/api/show", json={"model": "other"}, timeout=30).json()["system"] == ""
    c.copy("other", "other")
    # a catalog file gone from disk: the error names it under <data dir>, never the server's path
    (d.data_dir / "models" / "other" / "latest.gguf").unlink()
    r = httpx.post(d.url + "/api/show", json={"model": "other"}, timeout=30)
    assert r.status_code >= 400 and str(d.data_dir) not in r.text and "<data dir>" in r.text, r.text
    # null fields are their defaults, as in Ollama
    made = {"model": "nulls", "from": "smollm2", "stream": None, "allow_requantize": None, "system": None}
    assert httpx.post(d.url + "/api/create", json=made, timeout=60).status_code == 200


def test_errors_are_ollama_shaped(daemon: Daemon, client: Make) -> None:
    with pytest.raises(ollama.ResponseError) as e:
        client(daemon).chat(model="ghost", messages=MESSAGES)
    assert e.value.status_code == 404 and "ghost" in e.value.error
    r = httpx.post(daemon.url + "/api/chat", content=b"{bad")
    assert r.status_code == 400 and set(r.json()) == {"error"}
    r = httpx.post(
        daemon.url + "/api/generate", json={"model": "smollm2", "prompt": "x", "keep_alive": "5 parsecs"}
    )
    assert r.status_code == 400 and "keep_alive" in r.json()["error"]


def test_a_chunked_body_cut_off_is_never_acted_on(daemon_factory: object) -> None:
    """A chunked request whose client leaves before the last chunk is not taken for a whole body: a DELETE cut off
    that way deletes nothing. A whole chunked body is read as any other."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory('log_level = "debug"\n')  # its access log says when a request has ended
    assert (
        httpx.post(d.url + "/api/copy", json={"source": "smollm2", "destination": "victim"}).status_code
        == 200
    )
    body = b'{"model":"victim"}'
    host, port = d.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"DELETE /api/delete HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{len(body):x}\r\n".encode()
            + body
            + b"\r\n"
        )
        wait_for(lambda: unread_by_the_daemon(s) == 0, HANG, "the daemon to read the chunk")

    def ended() -> bool:  # refused as cut off (400), or dropped as a client gone before its body arrived
        log = d.log.read_text()
        return (
            "DELETE /api/delete 400 " in log or "DELETE /api/delete: the client closed the connection" in log
        )

    wait_for(ended, HANG, "the daemon to be done with the cut-off request")
    assert "victim:latest" in {m["name"] for m in httpx.get(d.url + "/api/tags").json()["models"]}
    whole = httpx.request(
        "DELETE", d.url + "/api/delete", content=iter([body])
    )  # chunked, with its last chunk
    assert whole.status_code == 200, whole.text
    assert "victim:latest" not in {m["name"] for m in httpx.get(d.url + "/api/tags").json()["models"]}


def test_root_and_version(daemon: Daemon, client: Make) -> None:
    assert httpx.get(daemon.url + "/").text == "Blazar is running"
    head = httpx.head(daemon.url + "/")
    assert head.status_code == 200 and head.content == b""
    # the Ollama API version clients gate features on, and Blazar's own, as `blazar --version` prints it
    assert httpx.get(daemon.url + "/api/version").json() == {
        "version": "0.12.0",
        "blazar": blazar.__version__,
    }


def test_num_ctx_restarts_the_engine_with_that_context(daemon_factory: object, client: Make) -> None:
    """options.num_ctx asking for more context than the engine runs with restarts it with that context per
    request (as Ollama reloads the model), capped at the trained context; the same or a smaller num_ctx, or none,
    is served by what runs, so one client can never shrink a shared engine or make it restart back and forth."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("ctx_size = 1024\n")
    c = client(d)

    def ps() -> tuple[int, int]:
        [m] = c.ps().models
        [pid] = d.child_pids()
        return int(m.context_length or 0), pid

    c.chat(model="smollm2", messages=MESSAGES, options=OPTIONS)
    ctx0, pid0 = ps()
    assert ctx0 == 1024  # the config's
    long = [{"role": "user", "content": "word " * 1500}]
    with pytest.raises(ollama.ResponseError) as exc:
        c.chat(model="smollm2", messages=long, options={**OPTIONS, "num_ctx": 512})  # smaller: no restart
    assert exc.value.status_code == 400 and "1024" in str(exc.value)  # the engine still runs with 1024
    assert ps() == (1024, pid0)
    c.chat(
        model="smollm2", messages=long, options={**OPTIONS, "num_ctx": 4096}
    )  # more: restarted, and it fits
    ctx1, pid1 = ps()
    assert (ctx1, pid1 != pid0) == (4096, True)
    c.chat(model="smollm2", messages=MESSAGES, options=OPTIONS)  # no num_ctx: served as it runs
    c.chat(model="smollm2", messages=MESSAGES, options={**OPTIONS, "num_ctx": 2048})  # smaller: served as is
    c.chat(model="smollm2", messages=MESSAGES, options={**OPTIONS, "num_ctx": 4096})
    assert ps() == (4096, pid1)
    c.chat(
        model="smollm2", messages=MESSAGES, options={**OPTIONS, "num_ctx": 10**6}
    )  # capped at 8192 trained
    assert ps()[0] == 8192


def test_push_is_refused_with_the_way_to_share_a_model(daemon: Daemon, client: Make) -> None:
    c = client(daemon)
    with pytest.raises(ollama.ResponseError) as e:
        c.push("smollm2")
    assert e.value.status_code == 501
    assert "no model registry to push to" in e.value.error and "blazar import FILE" in e.value.error


def test_tools_a_template_cannot_show_are_a_400_as_ollama_says_it(daemon: Daemon) -> None:
    """Ollama answers 400 "<model> does not support tools" (ChatOllama and litellm's ollama_chat read no header,
    so an answer without the tools would pass for one that saw them); SmolLM2's template shows none."""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    r = httpx.post(
        daemon.url + "/api/chat",
        json={"model": "smollm2", "messages": MESSAGES, "tools": [tool], "stream": False},
        timeout=120,
    )
    assert r.status_code == 400, r.text
    message = r.json()["error"]
    assert message.startswith("smollm2:latest does not support tools: its chat template cannot show them"), (
        message
    )
    assert 'chat_template_file under [models."smollm2:latest"] in config.toml' in message
    with pytest.raises(ollama.ResponseError) as e:
        list(
            closing(ollama.Client(host=daemon.url)).chat(
                model="smollm2", messages=MESSAGES, tools=[tool], stream=True
            )
        )
    assert e.value.status_code == 400 and "does not support tools" in e.value.error
    # without tools it answers, and the OpenAI endpoint still notes what it dropped
    assert httpx.post(daemon.url + "/api/chat", json={"model": "smollm2", "messages": MESSAGES, "stream": False,
                      "options": {"num_predict": 4}}, timeout=120).status_code == 200  # fmt: skip
