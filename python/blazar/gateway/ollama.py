"""The Ollama dialect's generation handlers: /api/chat, /api/generate, /api/embed and the legacy /api/embeddings.

Parsing is ``dialects.ollama``; responses come from the native translators (NDJSON streams, the final ``done``
object with durations). Catalog and status endpoints live in ``ollama_admin``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import orjson

from blazar.dialects import ollama as dialect
from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import core, exchange, plan, proxy, routing, watch
from blazar.gateway.exchange import Exchange
from blazar.gateway.http import JSON_HEADERS, HttpError, Request
from blazar.supervisor import Child, Supervisor, adapters

Response = tuple[int, list[tuple[str, str]], bytes]


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


async def _load_only(sup: Supervisor, req: Request, canon: CanonicalRequest) -> str:
    """Ollama loads (or, with keep_alive 0, unloads) a model when a request carries nothing to generate; the
    key must be allowed that model, as for any other request. Returns the done_reason, "load" or "unload"."""
    if routing.claim_remote(sup, req, canon) is not None:  # nothing runs here to load or unload
        return "unload" if canon.keep_alive == 0 else "load"
    name = routing.claim_local(sup, req, canon).name
    if canon.keep_alive == 0:
        sup.catalog.get(name)  # 404 for a model that is not there
        engine = sup.sharing.owner(name)  # a model that shares another's engine unloads it, as in Ollama
        for child in [c for c in sup.children.values() if c.model == engine]:
            exchange.keep(child, canon, req)  # requests in flight finish first, as in Ollama
            exchange.after(sup, child, req)
        return "unload"
    child, _ = await exchange.ready_child(sup, req, canon)
    with sup.lease(child):  # a load is a use: its keep_alive counts from now, not from the last answer
        exchange.keep(child, canon, req)
    return "load"


async def _load_reply(sup: Supervisor, req: Request, canon: CanonicalRequest, field: str) -> Response:
    reason = await _load_only(sup, req, canon)
    done: dict[str, Any] = {"model": canon.model, "created_at": _now()}
    if field == "message":
        done["message"] = {"role": "assistant", "content": ""}
    else:
        done["response"] = ""
    done.update(done_reason=reason, done=True)
    return 200, JSON_HEADERS, orjson.dumps(done)


async def chat(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    canon = dialect.parse_chat(req.json())
    if canon.load_only:
        return await _load_reply(sup, req, canon, "message")
    return await core.serve(sup, req, proto, canon, plan.OLLAMA_CHAT)


async def generate(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    canon = dialect.parse_generate(req.json())
    if canon.load_only:
        return await _load_reply(sup, req, canon, "response")
    if canon.suffix is not None:
        return await _infill(sup, req, canon)
    return await core.serve(sup, req, proto, canon, plan.OLLAMA_GENERATE)


async def _infill(sup: Supervisor, req: Request, canon: CanonicalRequest) -> Response:
    """Fill-in-the-middle (``suffix``) runs on llama-server's native /infill, whole, and is shaped here once;
    it is claimed and admitted like any generation, and its engine request is ``plan``'s like theirs."""
    ex = Exchange.claim(sup, req, canon, remote_checked=False)
    return await ex.run(lambda child, load_ns: _infill_on(ex, child, load_ns))


async def _infill_on(ex: Exchange, child: Child, load_ns: int) -> Response:
    sup, req, canon = ex.sup, ex.req, ex.canon
    core.llama_only(child, child.spec.can.infill, "fill-in-the-middle (suffix)", "/infill")
    p = plan.plan(
        canon,
        child.spec,
        plan.OLLAMA_GENERATE,
        slots=ex.slots,
        owner=child.model,
        body_bytes=len(req.body),
        lora=adapters.choice(child, canon.model),
    )
    ex.keep(child)
    _s, data = await proxy.forward_whole(sup, child, p.path, orjson.dumps(p.body), req.client)
    out = orjson.loads(data)
    if not isinstance(out, dict):
        raise HttpError(502, "engine sent a malformed /infill body", "engine_error")
    timings = out.get("timings") or {}
    text = out.get("content", "")
    reason = "length" if out.get("stop_type") == "limit" else "stop"
    usage = {
        "prompt_tokens": int(timings.get("prompt_n", 0)),
        "completion_tokens": int(timings.get("predicted_n", 0)),
    }
    # the summary the native translators give other answers: quotas charge its usage, the sentinel reads it
    req.summary = {"text": text, "finish_reason": reason, "usage": usage}
    watch.judge_whole(sup, req, canon)
    final = {
        "model": canon.model,
        "created_at": _now(),
        "response": "" if canon.stream else text,
        "done": True,
        "done_reason": reason,
        "total_duration": int((time.perf_counter() - req.t0) * 1e9),
        "load_duration": load_ns,
        "prompt_eval_count": usage["prompt_tokens"],
        "prompt_eval_duration": int(float(timings.get("prompt_ms", 0)) * 1e6),
        "eval_count": usage["completion_tokens"],
        "eval_duration": int(float(timings.get("predicted_ms", 0)) * 1e6),
    }
    if not canon.stream:
        return 200, JSON_HEADERS, orjson.dumps(final)
    first = {"model": canon.model, "created_at": final["created_at"], "response": text, "done": False}
    lines = orjson.dumps(first) + b"\n" + orjson.dumps(final) + b"\n"
    return 200, [("content-type", "application/x-ndjson")], lines


async def embed(sup: Supervisor, req: Request, proto: Any) -> Response:
    canon = dialect.parse_embed(req.json())
    if canon.load_only:  # Ollama answers an empty input with no embeddings, once the model is loaded
        await _load_only(sup, req, canon)
        return 200, JSON_HEADERS, orjson.dumps({"model": canon.model, "embeddings": []})
    body, load_ns = await core.embed(sup, req, canon)
    vectors = [d["embedding"] for d in sorted(body.get("data", []), key=lambda d: d.get("index", 0))]
    usage = body.get("usage") or {}
    out = {
        "model": canon.model,
        "embeddings": vectors,
        "total_duration": int((time.perf_counter() - req.t0) * 1e9),
        "load_duration": load_ns,
        "prompt_eval_count": int(usage.get("prompt_tokens", 0)),
    }
    return 200, JSON_HEADERS, orjson.dumps(out)


async def embeddings_legacy(sup: Supervisor, req: Request, proto: Any) -> Response:
    canon = dialect.parse_embeddings_legacy(req.json())
    if canon.load_only:
        await _load_only(sup, req, canon)
        return 200, JSON_HEADERS, b'{"embedding":[]}'
    body, _ = await core.embed(sup, req, canon)
    data = body.get("data") or [{}]
    return 200, JSON_HEADERS, orjson.dumps({"embedding": data[0].get("embedding", [])})
