"""End to end: keys, quotas, admission, sessions, CORS and the audit lane through `blazar serve`."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from tests.conftest import HANG, Daemon, wait_for
from tests.e2e.test_supervision import engine_metric

pytestmark = pytest.mark.e2e

ADMIN = "sk-admin-0123456789abcdef"
SCOPED = "sk-scoped-0123456789abcdef"
ONE = "sk-one-0123456789abcdefghij"
RATED = "sk-rated-0123456789abcdefgh"
KEYS = f"""
# team keys
[[keys]]
name = "admin"
secret = "{ADMIN}"

[[keys]]
name = "scoped"
secret = "{SCOPED}"
models = ["other"]

[[keys]]
name = "one"
secret = "{ONE}"
max_concurrent = 1

[[keys]]
name = "rated"
secret = "{RATED}"
rpm = 2
"""
CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
UNAUTHORIZED = (
    b'{"error":{"message":"missing or invalid API key (Authorization: Bearer or x-api-key)",'
    b'"type":"blazar_error","code":401}}'
)


def bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def post(d: Daemon, path: str, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(d.url + path, json=body, headers=headers or {}, timeout=120)


def test_auth_statuses_and_bodies(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("audit = true\n" + KEYS)
    assert httpx.get(d.url + "/healthz").status_code == 200  # never gated
    r = post(d, "/v1/chat/completions", CHAT)
    assert r.status_code == 401 and r.content == UNAUTHORIZED
    assert post(d, "/v1/chat/completions", CHAT, bearer("sk-wrong-0123456789abc")).status_code == 401
    ok = post(d, "/v1/chat/completions", CHAT, bearer(ADMIN))
    assert ok.status_code == 200, ok.text
    via_x_api_key = post(d, "/v1/messages", {**CHAT, "max_tokens": 4}, {"x-api-key": ADMIN})
    assert via_x_api_key.status_code == 200, via_x_api_key.text
    anth = post(d, "/v1/messages", CHAT)
    assert anth.status_code == 401 and anth.json()["type"] == "error"
    assert post(d, "/api/chat", CHAT).json() == {
        "error": "missing or invalid API key (Authorization: Bearer or x-api-key)"
    }
    scoped = post(d, "/v1/chat/completions", CHAT, bearer(SCOPED))
    assert scoped.status_code == 403 and "scoped" in scoped.json()["error"]["message"]
    assert SCOPED not in scoped.text
    # rpm = 2: the third request in a minute is refused with retry-after
    for _ in range(2):
        assert post(d, "/v1/chat/completions", CHAT, bearer(RATED)).status_code == 200
    limited = post(d, "/v1/chat/completions", CHAT, bearer(RATED))
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    # the audit lane wrote one line per request, without secrets
    d.stop()
    lines = (d.data_dir / "audit" / "audit.log").read_bytes().splitlines()
    assert len(lines) >= 9
    rec = orjson.loads(lines[-1])
    assert {
        "ts",
        "trace",
        "key",
        "method",
        "path",
        "model",
        "status",
        "ms",
        "priority",
        "queue_depth",
    } <= set(rec)
    assert rec["key"] == "rated" and rec["status"] == 429
    text = b"\n".join(lines).decode()
    assert ADMIN not in text and RATED not in text


def test_a_scoped_key_reaches_no_other_model_by_a_side_door(daemon_factory: object) -> None:
    """Loads, unloads, fill-in-the-middle and token counts run a model's engine; copy and delete change the
    catalog: each is refused for a model outside the key's scope, and no engine is started for it."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(KEYS)
    model = {"model": "smollm2"}
    doors = [
        ("/api/chat", model),  # no messages: load only
        ("/api/generate", model),
        ("/api/generate", {**model, "keep_alive": 0}),  # unload only
        ("/api/embed", model),
        ("/api/embeddings", model),
        ("/api/generate", {**model, "prompt": "def f(", "suffix": ")", "stream": False}),
        ("/v1/messages/count_tokens", {**model, "messages": [{"role": "user", "content": "hi"}]}),
    ]
    for path, body in doors:
        r = post(d, path, body, bearer(SCOPED))
        assert r.status_code == 403 and "may not use model 'smollm2:latest'" in r.text, (path, body, r.text)
    for method, path, body in [
        ("POST", "/api/copy", {"source": "smollm2", "destination": "mine"}),
        ("DELETE", "/api/delete", model),
    ]:
        r = httpx.request(method, d.url + path, json=body, headers=bearer(SCOPED))
        assert r.status_code == 403 and "needs a full-access key" in r.json()["error"], (path, r.text)
    assert d.child_pids() == []
    listed = httpx.get(d.url + "/api/tags", headers=bearer(ADMIN)).json()["models"]
    assert [m["name"] for m in listed] == ["smollm2:latest"]
    assert post(d, "/api/chat", model, bearer(ADMIN)).json()["done_reason"] == "load"  # the admin key may
    # ... and sees none in a listing, /api/show or GET /v1/models/{id}, which the admin key sees
    for path in ("/v1/models", "/api/tags", "/api/ps"):
        r = httpx.get(d.url + path, headers=bearer(SCOPED))
        assert r.status_code == 200 and "smollm2" not in r.text, (path, r.text)
    assert [m["id"] for m in httpx.get(d.url + "/v1/models", headers=bearer(ADMIN)).json()["data"]] == [
        "smollm2:latest"
    ]
    assert "smollm2" in httpx.get(d.url + "/api/ps", headers=bearer(ADMIN)).text  # loaded by the admin above
    shown = post(d, "/api/show", model, bearer(SCOPED))
    assert shown.status_code == 403 and shown.json() == {
        "error": "key 'scoped' may not use model 'smollm2:latest'; it is limited to other:latest. Use one of "
        "those, or add the model to this key's models in config.toml"
    }
    assert post(d, "/api/show", model, bearer(ADMIN)).status_code == 200
    one = httpx.get(d.url + "/v1/models/smollm2", headers=bearer(SCOPED))
    assert one.status_code == 403 and one.json()["error"]["type"] == "permission_error"
    # crash breakers: a scoped key may read its own, never reset any
    r = post(d, "/api/breakers/reset", {}, bearer(SCOPED))
    assert r.status_code == 403 and "resetting crash breakers needs a full-access key" in r.text, r.text
    assert post(d, "/api/breakers/reset", {"model": "smollm2"}, bearer(ADMIN)).json() == {"reset": []}
    bad = post(d, "/api/breakers/reset", {"model": 5}, bearer(ADMIN))
    assert bad.status_code == 400 and "'model' must be a model name" in bad.text, bad.text
    assert httpx.get(d.url + "/api/breakers", headers=bearer(SCOPED)).json() == {"held": []}
    assert httpx.get(d.url + "/api/breakers").status_code == 401
    # its own model is not in the catalog: the 404 names no model it may not see
    for path, body in [
        ("/v1/chat/completions", {**CHAT, "model": "other"}),
        ("/api/show", {"model": "other"}),
    ]:
        r = post(d, path, body, bearer(SCOPED))
        assert r.status_code == 404 and "smollm2" not in r.text and "(no models you can use)" in r.text, (
            r.text
        )
    admin = post(d, "/v1/chat/completions", {**CHAT, "model": "other"}, bearer(ADMIN))
    assert admin.status_code == 404 and "(known models: smollm2:latest)" in admin.text


def test_a_scoped_key_sees_its_shared_engine_under_its_own_name_only(daemon_factory: object) -> None:
    """A copy runs on its source's engine: the scoped key of the copy sees that engine in /api/ps as its own
    model, and never the other names it answers for."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(KEYS)
    copy = httpx.post(
        d.url + "/api/copy", json={"source": "smollm2", "destination": "other"}, headers=bearer(ADMIN)
    )
    assert copy.status_code == 200, copy.text
    assert post(d, "/v1/chat/completions", {**CHAT, "model": "other"}, bearer(SCOPED)).status_code == 200
    [mine] = httpx.get(d.url + "/api/ps", headers=bearer(SCOPED)).json()["models"]
    assert (mine["name"], mine["model"], mine["names"]) == ("other:latest", "other:latest", ["other:latest"])
    [seen] = httpx.get(d.url + "/api/ps", headers=bearer(ADMIN)).json()["models"]
    assert seen["name"] == "smollm2:latest" and seen["names"] == ["smollm2:latest", "other:latest"]
    # the engine dies under its stream: the error names its model, never the engine's owner it may not see
    story = {**CHAT, "model": "other", "max_tokens": 4000, "ignore_eos": True, "stream": True}  # killed first
    with httpx.stream(
        "POST", d.url + "/v1/chat/completions", json=story, headers=bearer(SCOPED), timeout=60
    ) as r:
        chunks = r.iter_bytes()
        first = next(chunks)
        [pid] = d.child_pids()
        os.kill(pid, signal.SIGKILL)
        text = (first + b"".join(chunks)).decode()
    assert "died while serving the request" in text and "other:latest" in text, text[-300:]
    assert "smollm2" not in text, text[-300:]


def test_concurrency_lease_freed_when_client_drops_stream(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("audit = true\n" + KEYS)
    # ignore_eos and 4000 tokens: it cannot end while the block runs, and it is cut off after it
    long = {**CHAT, "max_tokens": 4000, "stream": True, "ignore_eos": True}
    with httpx.stream(
        "POST", d.url + "/v1/chat/completions", json=long, headers=bearer(ONE), timeout=120
    ) as s:
        chunks = s.iter_bytes()  # keep a reference: a dropped generator closes the stream
        first = next(chunks)
        assert first.startswith(b'data: {"choices"'), first
        [pid] = d.child_pids()
        busy = post(d, "/v1/chat/completions", CHAT, bearer(ONE))
        assert busy.status_code == 429 and "max_concurrent" in busy.json()["error"]["message"], (
            busy.text,
            d.log.read_text(),
        )
        # reading a model's metadata runs no model: no lease (Ollama clients call it during a chat)
        shown = post(d, "/api/show", {"model": "smollm2"}, bearer(ONE))
        assert shown.status_code == 200, shown.text
    # the client dropped the stream: the lease comes back without waiting for the generation to end, while the
    # engine has decoded (once a token) far less than its 4000 tokens; a model that does not exist is refused once
    # the lease is taken: 404, not 429
    nosuch = {**CHAT, "model": "nosuch"}
    wait_for(
        lambda: post(d, "/v1/chat/completions", nosuch, bearer(ONE)).status_code == 404, HANG, "the lease"
    )
    assert engine_metric(d, pid, "n_decode_total") < 3000
    assert post(d, "/v1/chat/completions", CHAT, bearer(ONE)).status_code == 200
    # and the audit lane records that the client left (499), as it does for a whole answer
    audited = [orjson.loads(line) for line in (d.data_dir / "audit" / "audit.log").read_bytes().splitlines()]
    assert 499 in [a["status"] for a in audited if a["key"] == "one"], audited


def test_usage_survives_restart(daemon_factory: object, tmp_path: Path) -> None:
    assert callable(daemon_factory)
    cfg = KEYS.replace('name = "rated"\nsecret', 'name = "rated"\ndaily_tokens = 40\nsecret').replace(
        "rpm = 2\n", ""
    )
    d: Daemon = daemon_factory(cfg)
    spent = 0
    while spent < 40:
        r = post(d, "/v1/chat/completions", {**CHAT, "max_tokens": 8}, bearer(RATED))
        assert r.status_code == 200, r.text
        spent += r.json()["usage"]["total_tokens"]
    assert post(d, "/v1/chat/completions", CHAT, bearer(RATED)).status_code == 429
    d.stop()
    d.start()
    again = post(d, "/v1/chat/completions", CHAT, bearer(RATED))
    assert again.status_code == 429 and "daily_tokens" in again.json()["error"]["message"]


def test_a_stream_the_client_cuts_off_is_still_charged(daemon_factory: object) -> None:
    """A client that reads part of a stream and hangs up before its usage report is charged the prompt the engine
    read and a token per chunk it got: hanging up early cannot read past daily_tokens for free."""
    assert callable(daemon_factory)
    cfg = KEYS.replace('name = "rated"\nsecret', 'name = "rated"\ndaily_tokens = 100\nsecret').replace(
        "rpm = 2\n", ""
    )
    d: Daemon = daemon_factory(cfg)
    # its reservation (body / 4 + max_tokens) fits the limit, so only what earlier streams were charged refuses it
    body = {**CHAT, "stream": True, "max_tokens": 24, "ignore_eos": True, "messages": [
        {"role": "user", "content": "Write a long story."}]}  # fmt: skip
    refused = None
    for _ in range(6):
        with httpx.stream(
            "POST", d.url + "/v1/chat/completions", json=body, headers=bearer(RATED), timeout=60
        ) as r:
            if r.status_code == 429:
                refused = r.read()
                break
            assert r.status_code == 200
            chunks = 0
            for line in r.iter_lines():
                chunks += line.startswith("data: {")
                if chunks == 12:
                    break  # hang up before the 24 tokens and the usage report
    assert refused is not None and b"daily_tokens" in refused, "cut-off streams were charged nothing"


def test_requests_in_flight_hold_their_tokens_against_tpm(daemon_factory: object) -> None:
    """Concurrent requests cannot overshoot tpm by more than one request's worth: each holds its estimate (body
    and max_tokens) until it finishes, so once those fill the limit the next is refused, naming them."""
    assert callable(daemon_factory)
    cfg = KEYS.replace('name = "rated"\nsecret', 'name = "rated"\ntpm = 100\nsecret').replace("rpm = 2\n", "")
    d: Daemon = daemon_factory(cfg)
    assert post(d, "/v1/chat/completions", CHAT, bearer(ADMIN)).status_code == 200  # the engine is up
    body = {**CHAT, "max_tokens": 40, "ignore_eos": True}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post(d, "/v1/chat/completions", body, bearer(RATED)), range(8)))
    ok = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code == 429]
    assert len(ok) + len(refused) == 8 and 1 <= len(ok) <= 3, [r.status_code for r in answers]
    assert any("requests in flight may use" in r.json()["error"]["message"] for r in refused), refused[0].text


def test_a_request_without_max_tokens_holds_its_slots_context(daemon_factory: object) -> None:
    """With no max_tokens an answer may fill its slot's context, so that is what it holds: while one runs, a key
    whose daily_tokens it would exceed admits no second (they could all have run unbounded, far past the limit)."""
    assert callable(daemon_factory)
    # a small context: the unbounded answer holds all 512 tokens of it, more than the key's 300, and fills it soon
    cfg = "ctx_size = 512\n" + KEYS.replace(
        'name = "rated"\nsecret', 'name = "rated"\ndaily_tokens = 300\nsecret'
    ).replace("rpm = 2\n", "")
    d: Daemon = daemon_factory(cfg)
    assert post(d, "/v1/chat/completions", CHAT, bearer(ADMIN)).status_code == 200  # the engine is up
    unbounded = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Count to 100."}],
        "ignore_eos": True,
    }
    # the first streams (its head comes at once, so its length cannot run past child_header_timeout_secs): the
    # second is asked once it runs, and it runs until its slot's context is full
    streamed = {**unbounded, "stream": True}
    with httpx.stream(
        "POST", d.url + "/v1/chat/completions", json=streamed, headers=bearer(RATED), timeout=120
    ) as first:
        chunks = first.iter_bytes()  # keep a reference: a dropped generator closes the stream
        assert first.status_code == 200 and next(chunks).startswith(b"data: ")
        second = post(d, "/v1/chat/completions", unbounded, bearer(RATED))
        rest = b"".join(chunks)
    assert b'"finish_reason":"length"' in rest and rest.rstrip().endswith(b"data: [DONE]"), rest[-300:]
    message = second.json()["error"]["message"]
    assert second.status_code == 429 and "requests in flight may use" in message, second.text
    bounded = {
        **unbounded,
        "max_tokens": 4,
    }  # once it is done, what it used is charged: the day's limit is spent
    assert "used" in post(d, "/v1/chat/completions", bounded, bearer(RATED)).json()["error"]["message"]


def test_embeddings_are_charged_to_the_keys_daily_tokens(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    cfg = KEYS.replace('name = "rated"\nsecret', 'name = "rated"\ndaily_tokens = 40\nsecret').replace(
        "rpm = 2\n", ""
    )
    d: Daemon = daemon_factory(cfg)
    body = {"model": "smollm2", "input": "hello " * 60}
    first = post(d, "/v1/embeddings", body, bearer(RATED))
    assert first.status_code == 200 and first.json()["usage"]["prompt_tokens"] > 40, first.json()["usage"]
    for path, what in (("/v1/embeddings", body), ("/v1/chat/completions", CHAT)):
        over = post(d, path, what, bearer(RATED))
        assert over.status_code == 429 and "daily_tokens" in over.json()["error"]["message"], over.text


def test_every_choice_of_an_n_request_is_charged(daemon_factory: object) -> None:
    """llama-server's usage for n choices counts one choice's completion tokens: the key is charged for all."""
    assert callable(daemon_factory)
    cfg = "parallel = 2\n" + KEYS.replace(
        'name = "rated"\nsecret', 'name = "rated"\ndaily_tokens = 1\nsecret'
    ).replace("rpm = 2\n", "")
    for stream in (False, True):
        d: Daemon = daemon_factory(cfg)
        body = {**CHAT, "n": 2, "max_tokens": 6, "ignore_eos": True}
        prompt = post(d, "/v1/chat/completions", body, bearer(ADMIN)).json()["usage"]["prompt_tokens"]
        with httpx.stream(
            "POST",
            d.url + "/v1/chat/completions",
            json={**body, "stream": stream},
            headers=bearer(RATED),
            timeout=60,
        ) as r:
            assert r.status_code == 200 and r.read()
        over = post(d, "/v1/chat/completions", CHAT, bearer(RATED))
        assert over.status_code == 429
        assert f"used {prompt + 2 * 6} tokens today" in over.json()["error"]["message"], (stream, over.text)
        d.stop()


def test_every_prompt_of_a_prompt_list_is_charged(daemon_factory: object) -> None:
    """A /v1/completions prompt list runs a task per prompt: streamed, every task's usage is added up (and the client
    gets it in one usage chunk); whole, llama-server reports one task's, and each is charged as much."""
    assert callable(daemon_factory)
    cfg = "parallel = 2\n" + KEYS.replace(
        'name = "rated"\nsecret', 'name = "rated"\ndaily_tokens = 1\nsecret'
    ).replace("rpm = 2\n", "")
    body = {"model": "smollm2", "prompt": ["Once upon a time", "Hi"], "max_tokens": 4, "ignore_eos": True}
    d: Daemon = daemon_factory(cfg)
    whole = post(d, "/v1/completions", body, bearer(RATED))
    assert whole.status_code == 200 and len(whole.json()["choices"]) == 2, whole.text
    usage = whole.json()["usage"]  # one task's, as the engine reports it
    over = post(d, "/v1/completions", body, bearer(RATED))
    charged = 2 * usage["prompt_tokens"] + 2 * usage["completion_tokens"]
    assert over.status_code == 429 and f"used {charged} tokens today" in over.json()["error"]["message"], (
        over.text
    )
    d.stop()
    d = daemon_factory(cfg)
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream(
        "POST", d.url + "/v1/completions", json=streamed, headers=bearer(RATED), timeout=60
    ) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    usages = [json.loads(e)["usage"] for e in events if e != "[DONE]" and json.loads(e).get("usage")]
    assert len(usages) == 1 and usages[0]["completion_tokens"] == 8, usages
    total = usages[0]["prompt_tokens"] + 8
    over = post(d, "/v1/completions", body, bearer(RATED))
    assert over.status_code == 429 and f"used {total} tokens today" in over.json()["error"]["message"], (
        over.text
    )
    d.stop()


def test_all_slots_busy_after_bounded_wait(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("queue_wait_secs = 1\nparallel = 1\n")
    with the_only_slot_taken(d):
        r = post(d, "/v1/chat/completions", CHAT)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["message"].startswith("all_slots_busy: every slot of model 'smollm2:latest'")
    assert "stayed busy for 1s" in r.json()["error"]["message"]
    # clients back off on it: about one slot's hold, nobody else waiting (the daemon's earlier answers set the
    # mean hold, so on a slow machine it is 2 s or more; the formula is tests/test_admission.py's)
    assert 1 <= int(r.headers["retry-after"]) <= 60
    # Anthropic's API says "overloaded" with 529 (its SDK raises OverloadedError), never 503
    client = anthropic.Anthropic(base_url=d.url, api_key="unused", max_retries=0)
    with the_only_slot_taken(d), pytest.raises(anthropic.APIStatusError) as e:
        client.messages.create(model="smollm2", max_tokens=4, messages=CHAT["messages"])  # type: ignore[arg-type]
    client.close()
    assert e.value.status_code == 529 and type(e.value).__name__ == "OverloadedError", e.value
    assert e.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert "all_slots_busy" in e.value.body["error"]["message"]  # type: ignore[index]


def test_the_default_parallel_runs_four_answers_at_once_over_one_context(daemon_factory: object) -> None:
    """``parallel = "auto"``, the default, as llama-server's own ``--parallel -1``: four slots over one unified KV
    cache, each able to use the whole context, so four clients stream at once and a fifth waits for a slot (16
    clients on the old default of one slot waited, and were refused after 30 s)."""
    assert callable(daemon_factory)
    # 12288 cells: room for all four answers' 3000 tokens at once, so none can end while the test looks
    d: Daemon = daemon_factory("queue_wait_secs = 300\nctx_size = 12288\n")
    assert post(d, "/v1/chat/completions", CHAT).status_code == 200
    [pid] = d.child_pids()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert argv[argv.index(b"--parallel") + 1] == b"4" and b"--kv-unified" in argv, argv
    # ignore_eos and 3000 tokens: none can end while the test looks; each is cut off when its client leaves
    long = {**CHAT, "max_tokens": 3000, "ignore_eos": True, "stream": True}
    # the pool outside the streams: the streams close first (their clients leave), then the fifth can finish
    with concurrent.futures.ThreadPoolExecutor(1) as pool, contextlib.ExitStack() as streams:
        for _ in range(4):
            s = streams.enter_context(
                httpx.stream("POST", d.url + "/v1/chat/completions", json=long, timeout=120)
            )
            assert s.status_code == 200  # admitted at once: its headers came
        fifth = pool.submit(post, d, "/v1/chat/completions", CHAT)
        wait_for(lambda: engine(d)["queued"] == 1, HANG, "the fifth request to wait for a slot")
        entry = engine(d)
        assert (entry["busy_slots"], entry["slots"], entry["shared_context"]) == (4, 4, True), entry
        assert entry["context_length"] == 12288  # what one request may use: the whole context
        assert not fifth.done()
    assert fifth.result().status_code == 200  # a slot freed when the streams' clients left


def test_a_client_that_leaves_while_queued_is_never_run(daemon_factory: object) -> None:
    """Requests waiting for the only slot whose clients hang up leave the queue at once: the engine never runs them
    (a prefill cannot be cut short once llama-server has it), and the next request is not stuck behind them."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("queue_wait_secs = 300\nparallel = 1\n")
    body = json.dumps({**CHAT, "max_tokens": 50}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    host, port = d.url.removeprefix("http://").split(":")
    with the_only_slot_taken(d):
        gone = [socket.create_connection((host, int(port)), timeout=10) for _ in range(4)]
        for s in gone:
            s.sendall(head + body)
        wait_for(lambda: engine(d)["queued"] == 4, HANG, "the four requests to queue behind the long one")
        for s in gone:
            s.close()
        wait_for(
            lambda: d.log.read_text().count("while it waited for a slot; it was never run") == 4,
            HANG,
            "them to leave",
        )
        assert engine(d)["queued"] == 0  # out of the queue while the long one still runs
    assert post(d, "/v1/chat/completions", CHAT).status_code == 200


@contextlib.contextmanager
def the_only_slot_taken(d: Daemon) -> Iterator[None]:
    """A long stream holds the model's only slot while the block runs; then its client leaves, and the slot is
    free again before the block's successor runs."""
    assert post(d, "/v1/chat/completions", CHAT).status_code == 200  # the engine is up
    # ignore_eos and 4000 tokens: it cannot end while the block runs, and it is cut off after it
    long = {**CHAT, "max_tokens": 4000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", d.url + "/v1/chat/completions", json=long, timeout=120) as s:
        chunks = s.iter_bytes()  # keep a reference: a dropped generator closes the stream
        assert next(chunks).startswith(b"data: ")  # admitted: it holds the slot
        assert engine(d)["busy_slots"] == 1
        yield
    wait_for(lambda: engine(d)["busy_slots"] == 0, HANG, "the slot of the stream cut off to be free")


def engine(d: Daemon) -> dict[str, Any]:
    """The chat engine's /api/ps entry: its slots in use and its requests queued for one."""
    [entry] = [m for m in httpx.get(d.url + "/api/ps", timeout=30).json()["models"] if m["engine"] == "chat"]
    assert isinstance(entry, dict)
    return entry


def test_session_pins_child_and_slot(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(
        'parallel = 2\n[models."tmp:latest"]\nctx_size = 2048\n'
    )  # tmp: an engine of its own
    h = {"x-blazar-session": "conv-1"}
    for _ in range(2):
        assert post(d, "/v1/chat/completions", CHAT, h).status_code == 200
    other = post(d, "/v1/chat/completions", CHAT, {"x-blazar-session": "conv-2"})
    assert other.status_code == 200
    sessions = {s["session"]: s for s in httpx.get(d.url + "/api/session").json()["sessions"]}
    assert sessions["conv-1"]["requests"] == 2 and sessions["conv-1"]["model"] == "smollm2:latest"
    assert {sessions["conv-1"]["slot"], sessions["conv-2"]["slot"]} == {0, 1}
    closed = post(d, "/api/session", {"action": "close"}, h)
    assert closed.status_code == 200
    assert [s["session"] for s in httpx.get(d.url + "/api/session").json()["sessions"]] == ["conv-2"]
    # a deleted model's sessions go with it
    assert post(d, "/api/copy", {"source": "smollm2", "destination": "tmp"}).status_code == 200
    assert (
        post(d, "/v1/chat/completions", {**CHAT, "model": "tmp"}, {"x-blazar-session": "on-tmp"}).status_code
        == 200
    )
    assert "on-tmp" in {s["session"] for s in httpx.get(d.url + "/api/session").json()["sessions"]}
    assert httpx.request("DELETE", d.url + "/api/delete", json={"model": "tmp"}).status_code == 200
    assert [s["session"] for s in httpx.get(d.url + "/api/session").json()["sessions"]] == ["conv-2"]
    assert post(d, "/api/generate", {"model": "smollm2", "keep_alive": 0}).json()["done_reason"] == "unload"
    wait_for(lambda: d.child_pids() == [], HANG, "the model unloaded")
    for bad in ("x" * 129, "two words"):
        r = post(d, "/v1/chat/completions", CHAT, {"x-blazar-session": bad})
        assert r.status_code == 400 and "x-blazar-session must be 1-128 printable ASCII" in r.text, r.text
    assert d.child_pids() == []  # refused before an engine started for it


def test_a_scoped_key_sees_and_closes_only_its_own_sessions(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    mine = "sk-mine-0123456789abcdef"
    d: Daemon = daemon_factory(KEYS + f'\n[[keys]]\nname = "mine"\nsecret = "{mine}"\nmodels = ["smollm2"]\n')
    for secret in (ADMIN, mine):  # one session name, two keys: two sessions
        r = post(d, "/v1/chat/completions", CHAT, {**bearer(secret), "x-blazar-session": "conv"})
        assert r.status_code == 200, r.text

    def listed(secret: str) -> list[tuple[str, str]]:
        r = httpx.get(d.url + "/api/session", headers=bearer(secret))
        return sorted((s["session"], s["key"]) for s in r.json()["sessions"])

    assert listed(mine) == [("conv", "mine")]
    assert listed(SCOPED) == []
    assert listed(ADMIN) == [("conv", "admin"), ("conv", "mine")]  # a full-access key sees every key's
    other = post(d, "/api/session", {"action": "close", "session": "conv"}, bearer(SCOPED))
    assert other.status_code == 404 and "no open session named 'conv'" in other.json()["error"]["message"]
    assert post(d, "/api/session", {"action": "close", "session": "conv"}, bearer(mine)).status_code == 200
    assert listed(ADMIN) == [("conv", "admin")]


def test_cors(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory('cors_origins = ["http://app.local"]\n' + KEYS)
    pre = httpx.options(
        d.url + "/v1/chat/completions",
        headers={"origin": "http://app.local", "access-control-request-method": "POST"},
    )
    assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == "http://app.local"
    r = httpx.get(d.url + "/healthz", headers={"origin": "http://evil.local"})
    assert "access-control-allow-origin" not in r.headers and r.headers["vary"] == "origin"
    denied = httpx.options(
        d.url + "/v1/chat/completions",
        headers={"origin": "http://evil.local", "access-control-request-method": "POST"},
    )
    assert "access-control-allow-origin" not in denied.headers


def test_by_default_cors_allows_this_machines_pages_only(daemon: Daemon) -> None:
    """As Ollama: a page from localhost (any port) or a desktop app's webview may call the API; others may not."""
    r = httpx.get(daemon.url + "/healthz", headers={"origin": "http://app.local"})
    assert "access-control-allow-origin" not in r.headers
    for origin in ("http://localhost:3000", "http://127.0.0.1:8080", "http://localhost", "app://open-webui"):
        pre = httpx.options(
            daemon.url + "/api/chat",
            headers={"origin": origin, "access-control-request-method": "POST"},
        )
        assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == origin, (origin, pre)
    for origin in ("http://localhost.evil.example", "https://127.0.0.1.nip.io", "null"):
        r = httpx.get(daemon.url + "/healthz", headers={"origin": origin})
        assert "access-control-allow-origin" not in r.headers, origin


def test_cors_can_be_turned_off(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("cors_origins = []\n", model=False)
    r = httpx.get(d.url + "/healthz", headers={"origin": "http://localhost:3000"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_key_management_over_http(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    authless: Daemon = daemon_factory(model=False)
    r = httpx.get(authless.url + "/api/keys")
    assert r.status_code == 403 and r.json()["error"]["message"] == (
        "no keys configured: add the first [[keys]] entry in config.toml (or BLAZAR_KEYS env) and restart"
    )
    d: Daemon = daemon_factory(KEYS)
    assert httpx.get(d.url + "/api/keys", headers=bearer(SCOPED)).status_code == 403
    listing = httpx.get(d.url + "/api/keys", headers=bearer(ADMIN)).json()["keys"]
    assert {k["name"] for k in listing} == {"admin", "scoped", "one", "rated"}
    assert ADMIN not in str(listing)
    added = post(d, "/api/keys", {"name": "ci", "models": ["smollm2"], "rpm": 7}, bearer(ADMIN)).json()
    assert (added["models"], added["rpm"], added["tpm"]) == (["smollm2:latest"], 7, 0), added
    secret = added["secret"]
    assert post(d, "/v1/chat/completions", CHAT, bearer(secret)).status_code == 200  # live without restart
    config_text = (d.root / "config.toml").read_text()
    assert "# team keys" in config_text and 'name = "ci"' in config_text
    assert list(d.root.glob("config.toml.*bak*"))
    rotated = post(d, "/api/keys/rotate", {"name": "ci"}, bearer(ADMIN)).json()["secret"]
    assert post(d, "/v1/chat/completions", CHAT, bearer(secret)).status_code == 401
    assert post(d, "/v1/chat/completions", CHAT, bearer(rotated)).status_code == 200
    gone = httpx.request("DELETE", d.url + "/api/keys", json={"name": "ci"}, headers=bearer(ADMIN))
    assert gone.status_code == 200
    assert post(d, "/v1/chat/completions", CHAT, bearer(rotated)).status_code == 401
    # bad input is refused before the config file is touched; a given secret is kept, not replaced
    before = (d.root / "config.toml").read_text()
    for body, needle in [
        ({"name": "n" * 65}, "must be 1-64 characters"),
        ({"name": "k3", "models": ["../x"]}, "'../x' is not a valid model name"),
        ({"name": "k4", "secret": 12345678901234567}, "'secret' must be a string"),
        ({"name": "k5", "secret": "short"}, "at least 16 printable ASCII characters"),
        ({"name": "k7", "model": ["smollm2"]}, "unknown field 'model' (did you mean 'models'?)"),
        ({"name": "k8", "foo": 1}, "unknown field 'foo'; the fields are: name, models, secret, weight"),
    ]:
        r = post(d, "/api/keys", body, bearer(ADMIN))
        assert r.status_code == 400 and needle in r.json()["error"]["message"], (body, r.text)
    taken = post(d, "/api/keys", {"name": "one"}, bearer(ADMIN))
    assert taken.status_code >= 400 and "already exists (in config.toml)" in taken.text, taken.text
    assert str(d.root) not in taken.text  # the file is named, never where it is
    assert (d.root / "config.toml").read_text() == before
    mine = "sk-mine-0123456789abcdef"
    kept = post(d, "/api/keys", {"name": "k6", "secret": mine, "models": ["smollm2"]}, bearer(ADMIN))
    assert kept.status_code == 200 and kept.json()["secret"] == mine
    assert post(d, "/v1/chat/completions", CHAT, bearer(mine)).status_code == 200
