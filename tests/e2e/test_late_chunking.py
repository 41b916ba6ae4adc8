"""End to end: late chunking (``"late_chunking": true`` on /v1/embeddings) on a real llama-server + SmolLM2.

SmolLM2 is a causal model: a token's vector depends only on the tokens before it. So a chunk's late-chunked
vector must equal that chunk's vector embedded alone when it comes first, and must differ when another chunk
comes before it: the chunks are embedded as one text, not one by one. A single chunk is the mean of its tokens,
which is what llama-server's own mean pooling gives for the same text."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Daemon, closing

pytestmark = pytest.mark.e2e

A = "The harbour town was quiet in winter, its boats pulled up on the shingle."
B = "It had been the busiest port on the coast a century before."
C = "Now only the ferry called, twice a week."
CONFIG = 'late_chunking_max_tokens = 64\n[models."smollm2:latest"]\nextra_args = ["--no-cache-prompt"]\n'


def late(d: Daemon, chunks: list[str] | str, **extra: Any) -> httpx.Response:
    body = {"model": "smollm2", "input": chunks, "late_chunking": True, **extra}
    return httpx.post(d.url + "/v1/embeddings", json=body, timeout=120)


def vectors(r: httpx.Response) -> list[list[float]]:
    assert r.status_code == 200, r.text
    return [item["embedding"] for item in r.json()["data"]]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_chunks_are_embedded_in_each_others_context(daemon_factory: Any) -> None:
    d = daemon_factory(CONFIG)
    abc = late(d, [A, B, C])
    body = abc.json()
    assert body["object"] == "list" and body["model"] == "smollm2"
    assert [(i["object"], i["index"]) for i in body["data"]] == [
        ("embedding", 0),
        ("embedding", 1),
        ("embedding", 2),
    ]
    va, vb, vc = vectors(abc)
    assert len(va) == 576  # SmolLM2-135M's embedding length
    for v in (va, vb, vc):
        assert abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-4
    # first in the text, a chunk sees nothing else: it is what it is alone
    (a_alone,) = vectors(late(d, A))
    assert cosine(va, a_alone) > 0.9999
    # later chunks see the ones before them: not what they are alone
    (b_alone,) = vectors(late(d, [B]))
    (c_alone,) = vectors(late(d, [C]))
    assert cosine(vb, b_alone) < 0.999 and cosine(vc, c_alone) < 0.999
    # one chunk is llama-server's own mean pooling of that text (its pooled engine, not the late one)
    pooled = client(d).embeddings.create(model="smollm2", input=[A]).data[0].embedding
    assert cosine(a_alone, pooled) > 0.999
    # usage: every chunk's tokens and the model's special tokens, counted once
    u = {
        k: late(d, v).json()["usage"]["prompt_tokens"]
        for k, v in {"abc": [A, B, C], "a": [A], "bc": [B, C]}.items()
    }
    assert body["usage"] == {"prompt_tokens": u["abc"], "total_tokens": u["abc"]}
    specials = u["a"] + u["bc"] - u["abc"]
    assert 0 <= specials <= 2 and u["a"] > specials
    # base64 is the same float32 vectors
    b64 = late(d, [A, B, C], encoding_format="base64").json()["data"]
    for item, floats in zip(b64, (va, vb, vc), strict=True):
        raw = base64.b64decode(item["embedding"])
        assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(floats, abs=1e-6)
    # the late-chunking engine is the model's third, beside its chat (none ran) and pooled ones
    ps = httpx.get(d.url + "/api/ps", timeout=10).json()["models"]
    assert sorted(m["engine"] for m in ps) == ["embeddings", "late_chunking"]


def client(d: Daemon) -> openai.OpenAI:
    return closing(openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=120))


def test_the_bound_and_bad_input(daemon_factory: Any) -> None:
    d = daemon_factory(CONFIG)
    over = late(d, [A, B, C, A, B, C])  # about 80 tokens: over late_chunking_max_tokens = 64
    assert over.status_code == 413, over.text
    err = over.json()["error"]
    assert err["type"] == "request_too_large"
    assert "more than the 64 tokens one request may embed (late_chunking_max_tokens is 64)" in err["message"]
    assert "raise late_chunking_max_tokens in config.toml" in err["message"]
    huge = late(d, ["word " * 4000])  # 20,000 bytes: refused before it is tokenized
    assert huge.status_code == 413 and "input is 20000 bytes" in huge.json()["error"]["message"]
    # the engine that refused stays and serves
    assert late(d, [A]).status_code == 200
    for chunks, needle in [
        ([A, ""], 'got string "" at input[1]'),
        ([[1, 2, 3]], "array of non-empty strings"),
    ]:
        r = late(d, chunks)
        assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
    r = httpx.post(
        d.url + "/v1/embeddings", json={"model": "smollm2", "input": A, "late_chunking": 1}, timeout=30
    )
    assert r.status_code == 400 and "'late_chunking' must be a boolean" in r.json()["error"]["message"]
    missing = late(d, [A], model="nosuch")
    assert missing.status_code == 404, missing.text
    noted = late(d, [A], dimensions=8)
    assert noted.status_code == 200 and len(vectors(noted)[0]) == 576
    assert "late_chunking vectors have the model's own size" in noted.headers["x-blazar-ignored"]
