"""End to end: Anthropic's Message Batches API with the official ``anthropic`` client against ``blazar serve`` and
the real engine: a batch's requests run under the key that made it and come back as results (a failing request
is that request's ``errored`` result), another key and the OpenAI Batch API see none of it, a cancel keeps what
was answered, and an ended batch can be deleted."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import HANG, Daemon, closing, wait_for

pytestmark = pytest.mark.e2e

FULL = "sk-mbatch-full-0123456789abcdef0123456789a"
OTHER = "sk-mbatch-other-0123456789abcdef012345678"
KEYS = f"""
[[keys]]
name = "full"
secret = "{FULL}"

[[keys]]
name = "other"
secret = "{OTHER}"
"""
SEQ = "sk-mbatch-seq-0123456789abcdef0123456789ab"
ONE_AT_A_TIME = f'\n[[keys]]\nname = "seq"\nsecret = "{SEQ}"\nmax_concurrent = 2\n'
"""A key whose batches run one request at a time (the runner keeps one below its max_concurrent)."""


def client(d: Daemon, key: str = FULL) -> anthropic.Anthropic:
    return closing(anthropic.Anthropic(base_url=d.url, api_key=key, max_retries=0, timeout=60))


def request(custom_id: str, content: str, model: str = "smollm2", max_tokens: int = 4) -> dict[str, Any]:
    params = {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}]}
    return {"custom_id": custom_id, "params": params}


def ended(c: anthropic.Anthropic, batch_id: str, timeout: float = HANG) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        b = c.messages.batches.retrieve(batch_id)
        if b.processing_status == "ended":
            return b
        assert time.monotonic() < deadline, f"message batch {batch_id} still {b.processing_status}"
        time.sleep(0.2)


def test_a_message_batch_runs_and_its_results_come_back(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(KEYS)
    c = client(d)
    made = c.messages.batches.create(
        requests=[
            request("hello", "Say hello."),
            request("nope", "Hi", model="no-such-model"),
            request("short", "Count to three.", max_tokens=2),
        ]
    )
    assert made.type == "message_batch" and made.processing_status == "in_progress"
    assert made.request_counts.processing == 3 and made.results_url is None
    done = ended(c, made.id)
    counts = done.request_counts
    assert (counts.succeeded, counts.errored, counts.processing, counts.canceled) == (2, 1, 0, 0)
    assert done.ended_at is not None and done.results_url == f"/v1/messages/batches/{made.id}/results"

    results = {r.custom_id: r.result for r in c.messages.batches.results(made.id)}
    assert list(results) == ["hello", "nope", "short"]
    hello = results["hello"]
    assert hello.type == "succeeded" and hello.message.type == "message" and hello.message.content
    assert hello.message.model == "smollm2" and hello.message.usage.output_tokens >= 1
    assert results["short"].type == "succeeded" and results["short"].message.stop_reason == "max_tokens"
    nope = results["nope"]
    assert nope.type == "errored" and nope.error.error.type == "not_found_error"
    assert "no-such-model" in nope.error.error.message

    # the key's own listing; another key and OpenAI's Batch API see none of it
    assert [b.id for b in c.messages.batches.list()] == [made.id]
    other = client(d, OTHER)
    assert list(other.messages.batches.list()) == []
    with pytest.raises(anthropic.NotFoundError):
        other.messages.batches.retrieve(made.id)
    oa = closing(openai.OpenAI(base_url=d.url + "/v1", api_key=FULL, max_retries=0))
    assert list(oa.batches.list()) == []
    with pytest.raises(openai.NotFoundError):
        oa.batches.retrieve(made.id)

    # its files are the batch's while it exists: the Files API may not take them from under it
    [input_file] = [f for f in oa.files.list() if f.filename == f"{made.id}_input.jsonl"]
    with pytest.raises(openai.ConflictError, match="belongs to message batch"):
        oa.files.delete(input_file.id)
    assert len(list(c.messages.batches.results(made.id))) == 3

    deleted = c.messages.batches.delete(made.id)
    assert deleted.id == made.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        c.messages.batches.retrieve(made.id)
    assert [f for f in oa.files.list() if f.filename.startswith(made.id)] == []


def test_bad_creates_are_refused_in_anthropics_shape(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(KEYS, start=True)

    def post(body: object) -> httpx.Response:
        return httpx.post(d.url + "/v1/messages/batches", json=body, headers={"x-api-key": FULL}, timeout=30)

    for body, says in [
        ({}, "'requests' must be a non-empty array"),
        ({"requests": []}, "'requests' must be a non-empty array"),
        ({"requests": [{"custom_id": "a b", "params": {}}]}, "requests[0].custom_id must be 1 to 64"),
        ({"requests": [{"custom_id": "a\n", "params": {}}]}, "requests[0].custom_id must be 1 to 64"),
        (
            {"requests": [request("a", "x"), request("a", "y")]},
            "requests[1].custom_id 'a' is used by an earlier",
        ),
        ({"requests": [{"custom_id": "a", "params": 3}]}, "requests[0].params must be an object"),
        ({"requests": [{"custom_id": "a", "params": {"stream": True}}]}, "params.stream must not be true"),
    ]:
        r = post(body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["type"] == "error" and says in r.json()["error"]["message"]
    r = httpx.get(d.url + "/v1/messages/batches/msgbatch-nope/results", headers={"x-api-key": FULL})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    assert httpx.post(d.url + "/v1/messages/batches", json={"requests": []}).status_code == 401


def test_a_cancel_keeps_what_was_answered(daemon_factory: object) -> None:
    """The batch runs one request at a time (its key's max_concurrent) on an engine that ignores EOS, so every
    answer is as long as its max_tokens: once the first is answered, the second (400 tokens) runs while the batch
    is cancelled; it is answered, and none of the 22 after it is sent."""
    assert callable(daemon_factory)
    ignore_eos = '[models."smollm2:latest"]\nextra_args = ["--ignore-eos"]\n'
    d: Daemon = daemon_factory("audit = true\n" + KEYS + ONE_AT_A_TIME + ignore_eos)
    c = client(d, SEQ)
    requests = [request(f"r{i}", f"Say {i}.", max_tokens=400 if i == 1 else 2) for i in range(24)]
    made = c.messages.batches.create(requests=requests)

    def answered() -> int:
        """The runner's requests answered, from the audit lane (they go with priority low); a line still being
        written is not counted."""
        path = d.data_dir / "audit" / "audit.log"
        lines = path.read_bytes().split(b"\n")[:-1] if path.is_file() else []
        return sum(1 for a in map(json.loads, lines) if a["priority"] == "low" and a["status"] == 200)

    def busy_slots() -> int:
        r = httpx.get(d.url + "/api/ps", headers={"x-api-key": FULL}, timeout=30)
        return sum(m["busy_slots"] for m in r.json()["models"])

    wait_for(lambda: answered() >= 1 and busy_slots() == 1, HANG, "the first answer, and the second running")
    canceling = c.messages.batches.cancel(made.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at is not None
    done = ended(c, made.id)
    counts = done.request_counts
    assert (counts.succeeded, counts.canceled, counts.errored) == (2, 22, 0), counts
    results = list(c.messages.batches.results(made.id))
    kinds = {r.custom_id: r.result.type for r in results}
    assert len(results) == 24 and sorted(k for k, v in kinds.items() if v == "succeeded") == ["r0", "r1"], (
        kinds
    )
    assert list(kinds.values()).count("canceled") == counts.canceled
    r = httpx.delete(d.url + f"/v1/messages/batches/{made.id}", headers={"x-api-key": SEQ})
    assert r.status_code == 200
