"""``POST /v1/rerank`` (and ``/rerank``, the path llama-server and Jina's clients also use): documents ordered by
their relevance to a query, by a reranking model (a GGUF whose pooling type is rank, as ``/v1/models`` lists it:
``rerank``) on its embedding engine, which a reranking model's engine runs with rank pooling. The body is Jina's
and Cohere's (``model``, ``query``, ``documents`` as strings or ``{"text"}``, ``top_n``, ``return_documents``);
the answer is llama-server's (``results`` of ``index`` and ``relevance_score``, best first, ``usage``), each
result with its ``document`` when asked. Admitted like an embedding, and charged its prompt tokens. It owns these
bodies."""

from __future__ import annotations

from typing import Any

import orjson

from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import proxy, remote
from blazar.gateway.core import charge_prompt_tokens, llama_only
from blazar.gateway.exchange import Exchange
from blazar.gateway.http import JSON_HEADERS, HttpError, Request
from blazar.launch.settings import model_capabilities
from blazar.supervisor import Child, Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]


def _texts(documents: Any) -> list[str]:
    if not isinstance(documents, list) or not documents:
        raise HttpError(
            400, f"'documents' is required and must be a non-empty array of strings, got {documents!r}"
        )
    texts = []
    for i, doc in enumerate(documents):
        text = doc.get("text") if isinstance(doc, dict) else doc
        if not isinstance(text, str):
            raise HttpError(
                400, f'documents[{i}] must be a string or an object with a "text" string, got {doc!r}'
            )
        texts.append(text)
    return texts


def _parse(body: dict[str, Any]) -> tuple[str, str, list[str], int | None, bool]:
    model, query = body.get("model"), body.get("query")
    if not isinstance(model, str) or not model:
        raise HttpError(
            400, f"'model' is required and must name a reranking model (GET /v1/models), got {model!r}"
        )
    if not isinstance(query, str) or not query:
        raise HttpError(400, f"'query' is required and must be a non-empty string, got {query!r}")
    texts = _texts(body.get("documents"))
    top_n = body.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise HttpError(400, f"'top_n' must be a positive integer, got {top_n!r}")
    docs = body.get("return_documents", False)
    if not isinstance(docs, bool):
        raise HttpError(400, f"'return_documents' must be a boolean, got {docs!r}")
    return model, query, texts, top_n, docs


async def rerank(sup: Supervisor, req: Request, proto: Any) -> Response:
    model, query, texts, top_n, with_docs = _parse(req.json_object())
    if sup.remote_for(model) is not None:
        raise remote.not_here(model, "reranking")
    canon = CanonicalRequest(model=model, kind="embedding", input=[query, *texts])
    ex = Exchange.claim(sup, req, canon, remote_checked=True)
    row = sup.catalog.find(ex.name)
    caps = model_capabilities(sup.cfg, row) if row is not None else ["completion"]
    if "rerank" not in caps:
        raise HttpError(
            400,
            f"'{ex.name}' is not a reranking model (it does {', '.join(caps)}): rerank with a model whose GGUF"
            " has rank pooling, one GET /v1/models lists with the capability 'rerank'",
        )
    engine_body = orjson.dumps(
        {"model": ex.name, "query": query, "documents": texts, "top_n": top_n or len(texts)}
    )

    async def work(child: Child, _load_ns: int) -> dict[str, Any]:
        ex.keep(child)
        llama_only(child, child.spec.can.reranking, "reranking", "/v1/rerank")
        _s, data = await req.waiting(proxy.forward_whole(sup, child, "/v1/rerank", engine_body, req.client))
        parsed: dict[str, Any] = orjson.loads(data)
        return parsed

    answer = await ex.run(work)
    results = answer.get("results")
    if not isinstance(results, list):
        raise proxy.engine_error(502, orjson.dumps(answer))
    if with_docs:
        for r in results:
            r["document"] = {"text": texts[r["index"]]}
    charge_prompt_tokens(req, answer)
    out = {"model": model, "object": "list", "usage": answer.get("usage"), "results": results}
    return 200, JSON_HEADERS, orjson.dumps(out)
