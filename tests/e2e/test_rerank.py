"""End to end: ``/v1/rerank`` (and ``/rerank``) on a real llama-server started for a reranking model.

No reranker GGUF ships in a PyPI package, so the test converts one from SmolLM2 (``tests.oracle.reranker``: a
qwen3-architecture copy with a yes/no classifier head and rank pooling, F32), and every score must equal, within
1e-3, what ``tests.oracle.llama`` computes from that file's weights in float64 numpy. The engine runs it with an
F32 KV cache and no flash attention, as the echo test's does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import HANG, Assets, Daemon, cleanup, make_daemon, provision
from tests.oracle.llama import TOLERANCE, Llama, exact_engine, f32_copy
from tests.oracle.reranker import RERANK_PROMPT, make_reranker

pytestmark = pytest.mark.e2e

MODEL = "reranker"
CONFIG = exact_engine(MODEL)
QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "The Eiffel Tower is in Paris.", "Hi."]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Path:
    where = tmp_path_factory.mktemp("reranker")
    f32 = f32_copy(assets.llama_server.parent / "llama-quantize", assets.model, where / "smollm2-f32.gguf")
    out = make_reranker(f32, where / "reranker.gguf")
    f32.unlink()
    return out


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory, assets: Assets, reranker: Path) -> Iterator[Daemon]:
    daemon = provision(make_daemon(tmp_path_factory.mktemp("rerank"), CONFIG), assets)  # and smollm2
    daemon.cli("import", str(reranker), "--name", MODEL)
    daemon.start()
    yield daemon
    cleanup(daemon)


def rerank(d: Daemon, path: str = "/v1/rerank", **body: Any) -> httpx.Response:
    return httpx.post(d.url + path, json={"model": MODEL, **body}, timeout=HANG)


def test_documents_are_ranked_by_the_scores_the_reference_computes(d: Daemon, reranker: Path) -> None:
    r = rerank(d, query=QUERY, documents=DOCS)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model"] == MODEL and answer["object"] == "list"
    results = answer["results"]
    assert sorted(x["index"] for x in results) == list(range(len(DOCS)))
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True), results  # best first
    assert answer["usage"]["prompt_tokens"] > 0 and "document" not in results[0]
    # the reference: each document's prompt, as llama-server fills the model's rerank template (the reranker's
    # tokenizer is SmolLM2's, so smollm2's /tokenize gives its tokens)
    oracle = Llama(reranker)
    for x in results:
        prompt = RERANK_PROMPT.replace("{query}", QUERY).replace("{document}", DOCS[x["index"]])
        t = httpx.post(
            d.url + "/tokenize", json={"model": "smollm2", "prompt": prompt, "add_special_tokens": False}
        )
        assert t.status_code == 200, t.text
        want = oracle.rank(t.json()["tokens"])
        assert abs(x["relevance_score"] - want) <= TOLERANCE, (x, want)


def test_top_n_documents_as_objects_and_the_alias(d: Daemon) -> None:
    whole = rerank(d, query=QUERY, documents=DOCS).json()["results"]
    objects = [{"text": t} for t in DOCS]
    top = rerank(d, "/rerank", query=QUERY, documents=objects, top_n=2, return_documents=True)
    assert top.status_code == 200, top.text
    got = top.json()["results"]
    assert [x["index"] for x in got] == [x["index"] for x in whole[:2]]
    assert [x["document"]["text"] for x in got] == [DOCS[x["index"]] for x in whole[:2]]
    listed = {m["id"]: m["capabilities"] for m in httpx.get(d.url + "/v1/models").json()["data"]}
    assert "rerank" in listed[f"{MODEL}:latest"] and "rerank" not in listed["smollm2:latest"], listed


def test_a_reranker_makes_no_embeddings(d: Daemon) -> None:
    """Its engine pools each input into a score, which no embedding client should take for a vector."""
    r = httpx.post(d.url + "/v1/embeddings", json={"model": MODEL, "input": "hi"}, timeout=HANG)
    assert r.status_code == 400 and "is a reranking model" in r.json()["error"]["message"], r.text
    assert "POST /v1/rerank" in r.json()["error"]["message"]
    o = httpx.post(d.url + "/api/embed", json={"model": MODEL, "input": "hi"}, timeout=HANG)
    assert o.status_code == 400 and "is a reranking model" in o.json()["error"], o.text


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"documents": DOCS}, "'query' is required"),
        ({"query": QUERY, "documents": []}, "'documents' is required and must be a non-empty array"),
        ({"query": QUERY, "documents": ["a", 3]}, 'documents[1] must be a string or an object with a "text"'),
        ({"query": QUERY, "documents": DOCS, "top_n": 0}, "'top_n' must be a positive integer"),
        (
            {"query": QUERY, "documents": DOCS, "model": "smollm2"},
            "'smollm2:latest' is not a reranking model",
        ),
    ],
)
def test_bad_rerank_requests_are_a_400_that_says_why(d: Daemon, body: dict[str, Any], needle: str) -> None:
    r = rerank(d, **body)
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
