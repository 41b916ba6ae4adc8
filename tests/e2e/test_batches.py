"""End to end: OpenAI's Files and Batches APIs with the official ``openai`` client against ``blazar serve`` and the
real engine. A batch's requests run through the daemon's own front door under the key that made it; the answers
come back as files; another key sees none of it; a bad input fails the batch before anything runs; a cancel
keeps what was answered; a batch cut off by a restart runs again."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import HANG, Daemon, closing, wait_for

pytestmark = pytest.mark.e2e

FULL = "sk-batch-full-0123456789abcdef0123456789ab"
OTHER = "sk-batch-other-0123456789abcdef0123456789a"
KEYS = f"""
[[keys]]
name = "full"
secret = "{FULL}"

[[keys]]
name = "other"
secret = "{OTHER}"
"""
SEQ = "sk-batch-seq-0123456789abcdef0123456789abc"
ONE_AT_A_TIME = f'\n[[keys]]\nname = "seq"\nsecret = "{SEQ}"\nmax_concurrent = 2\n'
"""A key whose batches run one request at a time (the runner keeps one below its max_concurrent)."""
DONE = ("completed", "failed", "cancelled", "expired")


def client(d: Daemon, key: str = FULL) -> openai.OpenAI:
    return closing(openai.OpenAI(base_url=d.url + "/v1", api_key=key, max_retries=0, timeout=60))


def chat_line(custom_id: str, content: str, model: str = "smollm2", max_tokens: int = 4) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0}  # fmt: skip
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def finished(c: openai.OpenAI, batch_id: str, timeout: float = HANG) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        b = c.batches.retrieve(batch_id)
        if b.status in DONE:
            return b
        assert time.monotonic() < deadline, f"batch {batch_id} still {b.status}"
        time.sleep(0.2)


def records(c: openai.OpenAI, file_id: str) -> dict[str, dict[str, Any]]:
    return {r["custom_id"]: r for r in map(json.loads, c.files.content(file_id).text.splitlines())}


def batch_answers(d: Daemon) -> int:
    """How many of the runner's requests were answered so far, from the audit lane (its requests go through the
    front door with ``x-blazar-priority: low``); a line still being written is not counted."""
    path = d.data_dir / "audit" / "audit.log"
    lines = path.read_bytes().split(b"\n")[:-1] if path.is_file() else []
    return sum(1 for a in map(json.loads, lines) if a["priority"] == "low" and a["status"] == 200)


def busy_slots(d: Daemon) -> int:
    r = httpx.get(d.url + "/api/ps", headers={"authorization": f"Bearer {FULL}"}, timeout=30)
    return sum(m["busy_slots"] for m in r.json()["models"])


def wait_for_the_second_request(d: Daemon, answered_before: int) -> None:
    """A batch of one request at a time: its first request answered, and its second now holds the slot."""
    wait_for(
        lambda: batch_answers(d) > answered_before and busy_slots(d) == 1,
        HANG,
        "the batch's first request to be answered and its second to run",
    )


def test_a_batch_runs_under_its_key_and_its_answers_come_back_as_files(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(KEYS)
    c = client(d)
    data = jsonl([chat_line("sky", "The sky is"), chat_line("sea", "The sea is", max_tokens=3),
                  chat_line("nope", "Hi", model="no-such-model")])  # fmt: skip
    f = c.files.create(file=("requests.jsonl", data), purpose="batch")
    assert (f.purpose, f.bytes, f.filename, f.object) == ("batch", len(data), "requests.jsonl", "file")
    b = c.batches.create(
        input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"job": "t1"}
    )
    assert b.status == "validating" and b.metadata == {"job": "t1"}
    b = finished(c, b.id)
    assert b.status == "completed", b
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (3, 2, 1)
    assert b.in_progress_at and b.completed_at and b.output_file_id and b.error_file_id

    out = records(c, b.output_file_id)
    assert sorted(out) == ["sea", "sky"]
    direct = c.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "The sky is"}],
                                       max_tokens=4, temperature=0)  # fmt: skip
    sky = out["sky"]["response"]
    assert sky["status_code"] == 200 and sky["request_id"].startswith("plm-")
    assert sky["body"]["choices"][0]["message"]["content"] == direct.choices[0].message.content
    assert out["sea"]["response"]["body"]["usage"]["completion_tokens"] == 3
    [nope] = records(c, b.error_file_id).values()
    assert nope["custom_id"] == "nope" and nope["response"]["status_code"] == 404
    assert "no-such-model" in nope["response"]["body"]["error"]["message"]

    assert b.id in [x.id for x in c.batches.list()]
    assert b.output_file_id in [x.id for x in c.files.list(purpose="batch_output")]
    # another key sees none of it
    other = client(d, OTHER)
    for call in (lambda: other.batches.retrieve(b.id), lambda: other.files.content(f.id),
                 lambda: other.files.delete(f.id)):  # fmt: skip
        with pytest.raises(openai.NotFoundError):
            call()
    assert b.id not in [x.id for x in other.batches.list()]
    assert c.files.delete(f.id).deleted
    with pytest.raises(openai.NotFoundError):
        c.files.retrieve(f.id)
    with pytest.raises(openai.AuthenticationError):
        client(d, "sk-wrong-0123456789abcdef0123456789abcdef").files.list()


def test_a_key_with_max_concurrent_1_gets_its_whole_batch_answered(daemon_factory: object) -> None:
    """The runner keeps within the key's max_concurrent: its requests wait for each other, none fails for it."""
    assert callable(daemon_factory)
    one = "sk-batch-one-0123456789abcdef0123456789abc"
    d: Daemon = daemon_factory(KEYS + f'\n[[keys]]\nname = "one"\nsecret = "{one}"\nmax_concurrent = 1\n')
    c = client(d, one)
    f = c.files.create(file=("six.jsonl", jsonl([chat_line(f"q{i}", "Hi", max_tokens=6) for i in range(6)])),
                       purpose="batch")  # fmt: skip
    b = finished(
        c, c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h").id
    )
    assert b.status == "completed" and b.request_counts is not None, b
    assert (b.request_counts.completed, b.request_counts.failed) == (6, 0), b.request_counts


def test_a_responses_batch_answers_with_response_objects(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    c = client(d)
    body = {"model": "smollm2", "input": "The sky is", "max_output_tokens": 4, "temperature": 0}
    lines = [{"custom_id": cid, "method": "POST", "url": "/v1/responses", "body": body} for cid in ("a", "b")]
    f = c.files.create(file=("responses.jsonl", jsonl(lines)), purpose="batch")
    b = finished(
        c, c.batches.create(input_file_id=f.id, endpoint="/v1/responses", completion_window="24h").id
    )
    assert b.status == "completed" and b.request_counts is not None and b.request_counts.completed == 2, b
    assert b.output_file_id is not None
    out = records(c, b.output_file_id)
    texts = {cid: r["response"]["body"]["output"][0]["content"][0]["text"] for cid, r in out.items()}
    assert sorted(texts) == ["a", "b"] and texts["a"] == texts["b"]
    assert all(r["response"]["body"]["object"] == "response" for r in out.values())


def test_a_bad_input_fails_the_batch_before_anything_runs(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    c = client(d)
    good = chat_line("a", "Hi")
    lines = [good, {**good, "custom_id": "a"}, {**good, "custom_id": "b", "url": "/v1/embeddings"},
             {**chat_line("c", "Hi"), "body": {**good["body"], "stream": True}}]  # fmt: skip
    data = jsonl(lines) + b"{not json\n"
    f = c.files.create(file=("bad.jsonl", data), purpose="batch")
    b = finished(c, c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                     completion_window="24h").id)  # fmt: skip
    assert b.status == "failed" and b.failed_at and b.output_file_id is None
    assert b.errors is not None
    assert [(e.line, e.code) for e in b.errors.data] == [
        (2, "duplicate_custom_id"), (3, "mismatched_url"), (4, "invalid_request"), (5, "invalid_json_line"),
    ]  # fmt: skip
    assert b.request_counts is not None and b.request_counts.total == 0  # nothing was sent

    # wrong requests are refused at once, in OpenAI's words
    with pytest.raises(openai.BadRequestError, match="purpose"):
        c.batches.create(
            input_file_id=c.files.create(file=("x.jsonl", data), purpose="user_data").id,
            endpoint="/v1/chat/completions", completion_window="24h",
        )  # fmt: skip
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        c.batches.create(input_file_id=f.id, endpoint="/v1/moderations", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        c.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="multipart"):
        c.post("/files", body={"purpose": "batch"}, cast_to=object)
    with pytest.raises(openai.ConflictError):
        c.batches.cancel(b.id)
    with pytest.raises(openai.BadRequestError, match="metadata"):
        c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                         metadata={f"k{i}": "v" for i in range(17)})  # fmt: skip
    with pytest.raises(openai.BadRequestError, match="empty"):
        c.files.create(file=("e.jsonl", b""), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        c.files.create(file=("o.jsonl", data), purpose="batch_output")  # type: ignore[arg-type]
    # HEAD on the collections is their GET without a body (it ran the POST branch: a 400)
    for path in ("/v1/files", "/v1/batches", "/v1/messages/batches"):
        head = httpx.head(d.url + path, timeout=30)
        assert head.status_code == 200 and head.content == b"", (path, head.status_code)


def test_a_cancel_keeps_what_was_answered_and_a_restart_runs_a_batch_again(daemon_factory: object) -> None:
    """The batches run under a key that gets one request at a time, so the test sees where a batch is: once its
    first request is answered its second runs, and that one is long (ignore_eos), so the batch is surely still
    running when it is cancelled or the daemon stops."""
    assert callable(daemon_factory)
    d: Daemon = daemon_factory("audit = true\nstop_grace_secs = 2\nparallel = 1\n" + KEYS + ONE_AT_A_TIME)
    c = client(d, SEQ)
    lines = [chat_line(f"r{i}", f"Count to {i + 3}.", max_tokens=24) for i in range(12)]
    held = [*lines]
    held[1] = {**lines[1], "body": {**lines[1]["body"], "max_tokens": 400, "ignore_eos": True}}
    f_held = c.files.create(file=("held.jsonl", jsonl(held)), purpose="batch")
    b = c.batches.create(input_file_id=f_held.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_for_the_second_request(d, 0)
    queued = c.batches.create(
        input_file_id=f_held.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert c.batches.cancel(queued.id).status == "cancelled"  # it waited its turn: nothing of it ran
    assert c.batches.cancel(b.id).status == "cancelling"
    b = finished(c, b.id)
    assert b.status == "cancelled" and b.cancelled_at and b.cancelling_at
    assert c.batches.retrieve(queued.id).request_counts.total == 0  # type: ignore[union-attr]
    answered = records(c, b.output_file_id) if b.output_file_id else {}
    # the one in flight when it was cancelled is answered; none of the other ten was sent
    assert sorted(answered) == ["r0", "r1"] and b.request_counts.completed == 2, b.request_counts

    # a batch still running when the daemon stops runs again, from its start, when it comes back; a stream holds
    # the only slot meanwhile (interactive work goes before the batch's), so the batch cannot end before the stop
    f = c.files.create(file=("many.jsonl", jsonl(lines)), purpose="batch")
    hold = {"model": "smollm2", "messages": [{"role": "user", "content": "Write a story."}], "max_tokens": 4000,
            "ignore_eos": True, "stream": True}  # fmt: skip
    with httpx.stream(
        "POST",
        d.url + "/v1/chat/completions",
        json=hold,
        headers={"authorization": f"Bearer {FULL}"},
        timeout=120,
    ) as s:
        chunks = s.iter_bytes()  # keep a reference: a dropped generator closes the stream
        assert next(chunks).startswith(b"data: ")
        b2 = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        wait_for(lambda: c.batches.retrieve(b2.id).status == "in_progress", HANG, "the batch to start")
        assert d.stop() == 0  # the stream is cut off after stop_grace_secs
    d.start()
    c = client(d, SEQ)
    b2 = finished(c, b2.id)
    assert b2.status == "completed" and b2.request_counts.completed == 12, b2
    assert sorted(records(c, b2.output_file_id)) == sorted(line["custom_id"] for line in lines)

    # a batch being cancelled when the daemon stops ends cancelled with what it had answered, not with nothing
    before = batch_answers(d)
    b3 = c.batches.create(input_file_id=f_held.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_for_the_second_request(d, before)
    assert c.batches.cancel(b3.id).status == "cancelling"
    assert d.stop() == 0  # the runner stops first: the second request is cut off, not answered
    d.start()
    c = client(d, SEQ)
    b3 = finished(c, b3.id)
    assert b3.status == "cancelled" and b3.output_file_id is not None, b3
    kept = records(c, b3.output_file_id)
    assert sorted(kept) == ["r0"] and b3.request_counts is not None and b3.request_counts.completed == 1, kept
