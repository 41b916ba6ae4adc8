"""The proxy core shared by every dialect: a canonical request in, the client's bytes out.

It owns what a chat, completion, embedding or token count does on its ready engine: the checks, the engine
request rendered from the canonical one, the native translator for the client's dialect and the summary charged.
The request's life around that (claim, admission, the engine readied, the one retry, the end) is ``exchange``'s.
Dialect handlers parse the client request into a ``CanonicalRequest`` and call ``serve``; they never talk to an
engine themselves.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import orjson

from blazar._native import StreamError, translate_whole
from blazar.dialects.canonical import CanonicalRequest, forced_tool_names, forced_tool_schema, render_engine
from blazar.engines import registry
from blazar.engines.lanes import serving_lane
from blazar.errors import BlazarError, LaneError
from blazar.gateway import (
    forced_tools,
    late_chunking,
    plan,
    prompt_logprobs,
    proxy,
    remote,
    semcache,
    tenancy,
    vectors,
    watch,
)
from blazar.gateway.exchange import Exchange
from blazar.gateway.http import HttpError, Request
from blazar.gateway.routing import claim_remote, note_ignored
from blazar.launch.preflight import check_images_readable
from blazar.supervisor import Child, Supervisor, adapters

Response = tuple[int, list[tuple[str, str]], bytes]
T = TypeVar("T")


def llama_only(child: Child, has: bool, feature: str, endpoint: str) -> None:
    """Refuse, with the fix, a feature that exists only as a llama-server endpoint when ``child``'s engine lacks
    it (``has``: the capability, from ``child.spec.can``)."""
    if not has:
        raise LaneError(
            f"{feature} needs llama-server's {endpoint}, but model '{child.model}' runs on the {child.lane} lane;"
            f' serve it with llama-cpp (engine = "llama-cpp" under [models."{child.model}"] in config.toml, for a'
            " GGUF) to use it"
        )


_SPECIAL_MARGIN = 8
"""Tokens left for the specials the engine adds (BOS/EOS, a BERT's CLS/SEP) and for a re-tokenisation of the
cut text that merges differently."""


async def _fit_input(sup: Supervisor, req: Request, child: Child, text: Any) -> Any:
    """``text`` cut to what ``child`` embeds in one batch (Ollama's ``truncate``). A text of fewer UTF-8 bytes
    than the limit cannot hold more tokens and is sent as it is, untokenized."""
    limit = max(1, child.spec.input_tokens - _SPECIAL_MARGIN)
    if not isinstance(text, str) or len(text.encode()) <= limit:
        return text
    tokens = await proxy.ask(
        sup, req, child, "/tokenize", {"content": text, "add_special": False}, "tokens", list
    )
    if len(tokens) <= limit:
        return text
    return await proxy.ask(sup, req, child, "/detokenize", {"tokens": tokens[:limit]}, "content", str)


async def serve(
    sup: Supervisor, req: Request, proto: Any, canon: CanonicalRequest, shape: plan.Shape
) -> Response | None:
    """Chat and completion requests of any dialect: quotas, admission, the child, the translated response."""
    hit = claim_remote(sup, req, canon)
    if hit is not None:
        if canon.echo_prompt:
            raise remote.not_here(canon.model, "echo (the prompt scored on the engine, token by token)")
        return await remote.serve(sup, req, proto, canon, shape, *hit)
    ex = Exchange.claim(sup, req, canon, remote_checked=True)
    cache = req.gate.semcache
    probe = (
        await _cache_probe(sup, req, canon, ex.name) if cache is not None and not canon.echo_prompt else None
    )
    if probe is not None:
        assert cache is not None
        out = cache.answer(probe, canon, shape.translator, req)
        req.gate.metrics.looked_up(out is not None)
        if out is not None:
            return 200, [("content-type", "application/json")], out
    return await ex.run(lambda child, load_ns: _dispatch(ex, proto, shape, probe, child, load_ns))


async def _cache_probe(
    sup: Supervisor, req: Request, canon: CanonicalRequest, name: str
) -> semcache.Probe | None:
    """Where this request belongs in the semantic cache (its conversation embedded), or None when it is not
    cached or the embedding failed (logged; the request is served as if the cache were off)."""
    cache = req.gate.semcache
    text = semcache.text_of(canon)
    if cache is None or text is None or req.headers.get("x-blazar-session"):  # a pinned slot has state
        return None
    try:
        ecanon = CanonicalRequest(model=cache.embed_model, kind="embedding", input=[text])
        ex = Exchange.internal(sup, req, ecanon)
        parsed = await ex.run(lambda child, _load_ns: _embed(ex, child))
        vector = semcache.checked_vector(parsed["data"][0]["embedding"])
        who = req.key.name if req.key is not None else ""
        return semcache.Probe(semcache.partition(canon, name, who, _lane(sup, name)), vector)
    except HttpError as e:
        if (
            e.status == 400 and "too large" in e.message
        ):  # longer than the embedding engine takes in one batch
            return None
        semcache.failed("embedding the conversation", e)
    except (BlazarError, StreamError, KeyError, IndexError, TypeError, ValueError) as e:
        semcache.failed("embedding the conversation", e)
    return None


def _lane(sup: Supervisor, name: str) -> str:
    """The engine kind that serves ``name``: the running child's, else the one routing would pick."""
    placed = sup.placements.place(name)
    child = sup.children.get(placed.key)
    if child is not None:
        return child.lane
    return serving_lane(sup.cfg, sup.catalog.get(name), registry.list_all(sup.store)).kind


async def _dispatch(
    ex: Exchange, proto: Any, shape: plan.Shape, probe: semcache.Probe | None, child: Child, load_ns: int
) -> Response | None:
    """A chat or completion on its ready engine: checked, rendered for the engine, sent, translated back."""
    sup, req, canon, slots = ex.sup, ex.req, ex.canon, ex.slots
    spec = child.spec
    # pinned on the instance that ran it: a model's replicas each hold their own sessions' KV cache
    slot = req.gate.session_slot(req, child.key, slots) if spec.can.slot_pinning else None
    p = plan.plan(
        canon,
        spec,
        shape,
        slots=slots,
        owner=child.model,
        body_bytes=len(req.body),
        slot=slot,
        lora=adapters.choice(child, canon.model),
    )
    ex.keep(child)
    if canon.echo_prompt:
        llama_only(child, spec.can.prompt_scoring, "echo", "/completion (its n_probs and logit_bias)")
        out, req.summary = await prompt_logprobs.echo(sup, req, canon, child, p)
        return 200, [("content-type", "application/json")], out
    if forced_tools.asks_to_think(canon) and not await forced_tools.template_thinks(sup, child):
        field = forced_tools.think_field(shape.translator, canon)
        note_ignored(req, f"{field} is ignored: the chat template of '{child.model}' has no thinking section")
    schema = forced_tool_schema(canon)  # None unless the request forces a call
    if schema is None and canon.has_tools() and not await forced_tools.template_emits_tool_calls(sup, child):
        raise HttpError(400, forced_tools.no_tools_here(child.model, shape.translator))  # README: "Tools"
    forced = (
        schema
        if schema is not None and not await forced_tools.template_emits_tool_calls(sup, child)
        else None
    )
    if forced is not None:
        if p.n > 1:
            raise HttpError(
                400,
                f"'n' is {p.n}, but model '{child.model}' cannot emit tool calls from its template, so"
                " Blazar forces the call by constraining one answer; send n=1 with this tool_choice",
                "invalid_request_error",
            )
        if not canon.stream:
            return await _forced_tool_call(sup, req, canon, shape, child, p.body, forced, load_ns)
        engine_body = orjson.dumps(forced_tools.constrained_body(p.body, forced, stream=True))
    else:
        engine_body = orjson.dumps(p.body)
    if canon.stream:
        translator = p.stream(load_ns, forced_tool_names(canon) if forced is not None else None)
        req.mark_overhead()
        req.dispatch()
        try:
            req.client_left = await proxy.forward_stream(
                sup,
                child,
                p.path,
                engine_body,
                proto,
                req.extra_headers,
                translator,
                shape.stream_type,
                watch.on_stall(sup, req, canon),
                req.scrub if req.renames else None,
            )
        finally:  # a stream cut off (client gone, engine dead) is charged what it sent (Gate.finish)
            req.summary = translator.summary()
        watch.observe(sup, req, canon)
        return None
    req.dispatch()
    _status, data = await req.waiting(proxy.forward_whole(sup, child, p.path, engine_body, req.client))
    out, summary = p.whole(data, load_ns, int((time.perf_counter() - req.t0) * 1e9))
    if summary["engine_error"] is not None:  # a 200 carrying an error object, not an answer
        raise proxy.engine_error(502, data)
    several = summary["choices"] != 1 and spec.can.choices_in_slots  # n > 1, or a prompt list
    req.summary = tenancy.each_task_charged(summary, p.n) if several else summary
    watch.judge_whole(sup, req, canon)
    if probe is not None and req.gate.semcache is not None:
        req.gate.semcache.keep(probe, req, summary, data)
    return 200, [("content-type", "application/json")], out


async def _forced_tool_call(
    sup: Supervisor,
    req: Request,
    canon: CanonicalRequest,
    shape: plan.Shape,
    child: Child,
    body: dict[str, Any],
    schema: dict[str, Any],
    load_ns: int,
) -> Response:
    """A whole forced tool call on a model whose template cannot emit one: constrained JSON, rendered as a
    call (a streamed one is relayed as it comes, in ``_dispatch``)."""
    req.dispatch()
    constrained = orjson.dumps(forced_tools.constrained_body(body, schema))
    _s, data = await req.waiting(
        proxy.forward_whole(sup, child, "/v1/chat/completions", constrained, req.client)
    )
    completion = forced_tools.synthetic_completion(data)
    out, req.summary = translate_whole(
        shape.translator,
        canon.model,
        orjson.dumps(completion),
        load_duration_ns=load_ns,
        total_duration_ns=int((time.perf_counter() - req.t0) * 1e9),
        echo=canon.echo,
    )
    watch.judge_whole(sup, req, canon)
    return 200, [("content-type", "application/json")], out


async def count_input_tokens(sup: Supervisor, req: Request, canon: CanonicalRequest) -> int:
    """The tokens ``canon``'s prompt takes on its model (Anthropic's count_tokens, the Responses API's
    input_tokens): the engine's own chat template (llama-server's /apply-template), then its tokenizer."""
    ex = Exchange.claim(sup, req, canon, remote_checked=False)  # the key's scope covers counting too

    async def count(child: Child, _load_ns: int) -> int:
        llama_only(child, child.spec.can.token_counting, "counting tokens", "/apply-template and /tokenize")
        check_images_readable(canon, child.spec.reads_images)  # as the request itself would refuse them
        _path, chat = render_engine(canon)
        template_req: dict[str, Any] = {k: chat[k] for k in ("messages", "tools", "tool_choice") if k in chat}
        prompt = await proxy.ask(sup, req, child, "/apply-template", template_req, "prompt", str)
        body = {"content": prompt, "add_special": True}
        return len(await proxy.ask(sup, req, child, "/tokenize", body, "tokens", list))

    # not admitted (it takes no slot); a wedged engine is stopped and the count asked once more of a fresh one
    return await ex.unadmitted(count)


async def embed(sup: Supervisor, req: Request, canon: CanonicalRequest) -> tuple[dict[str, Any], int]:
    """An embedding request: the engine's OpenAI embeddings body (parsed) and the load time in ns."""
    if canon.late_chunking and sup.remote_for(canon.model) is not None:
        raise remote.not_here(canon.model, "late_chunking (it pools one engine's per-token embeddings)")
    hit = claim_remote(sup, req, canon)
    if hit is not None:
        body, load_ns = await remote.embed(sup, req, canon, *hit), 0
        if canon.raw_vectors:
            note_ignored(req, "raw vectors: a remote's vectors are sent as it returns them")
    else:
        ex = Exchange.claim(sup, req, canon, remote_checked=True)
        body, load_ns = await ex.run(lambda child, load_ns: _timed(_embed(ex, child), load_ns))
    charge_prompt_tokens(req, body)
    dims = canon.params.get("dimensions")
    if isinstance(dims, int) and not canon.late_chunking:
        size = vectors.shorten(body, dims)
        if (
            size is not None and size < dims
        ):  # as long as asked (a remote that shortened them): nothing to say
            note_ignored(req, f"dimensions {dims}: the model's vectors have {size}, so they are sent whole")
    return body, load_ns


def charge_prompt_tokens(req: Request, body: dict[str, Any]) -> None:
    """An answer that only reads its input (embeddings, a rerank) is charged the prompt tokens its ``usage``
    reports, to the key's tpm and daily_tokens."""
    usage = body.get("usage")
    used = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if isinstance(used, int) and not isinstance(used, bool):
        req.summary = {"usage": {"prompt_tokens": used, "completion_tokens": 0}}


async def _timed(answer: Awaitable[T], load_ns: int) -> tuple[T, int]:
    return await answer, load_ns


async def _embed(ex: Exchange, child: Child) -> dict[str, Any]:
    """An embedding on its ready engine: the engine's OpenAI embeddings body, parsed."""
    sup, req, canon = ex.sup, ex.req, ex.canon
    ex.keep(child)
    if canon.late_chunking:
        return await req.waiting(late_chunking.embed(sup, req, child, canon))
    can = child.spec.can
    if can.reranking:  # its engine pools each input into a relevance score, not a vector
        raise HttpError(
            400,
            f"'{child.model}' is a reranking model: it scores documents against a query and makes no embeddings;"
            " send POST /v1/rerank with a query and documents, or embed with an embedding model",
        )
    if canon.truncate and can.token_counting and isinstance(canon.input, list):
        canon.input = [await _fit_input(sup, req, child, text) for text in canon.input]
    path, body = render_engine(canon)
    if child.spec.engine_model is not None:
        body["model"] = child.spec.engine_model
    if canon.raw_vectors:
        if can.raw_vectors:
            body["embd_normalize"] = -1  # llama-server's switch for the pooled vector as it is
        else:
            note_ignored(req, f"raw vectors: the {child.lane} lane returns them L2-normalised")
    _status, data = await req.waiting(proxy.forward_whole(sup, child, path, orjson.dumps(body), req.client))
    parsed: dict[str, Any] = orjson.loads(data)
    return parsed
