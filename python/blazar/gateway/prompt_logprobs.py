"""A completion's ``echo``: the prompt repeated before the answer and, with ``logprobs``, the log-probability of
each of its tokens (what lm-eval's loglikelihood tasks, every multiple-choice benchmark, score with).

llama-server cannot return a prompt's logprobs (its ``/v1/completions`` refuses ``echo``), but its native
``/completion`` reports, with ``n_probs``, the log-probability the model's raw logits give the token it picked,
and ``logit_bias`` can make that token any one we choose. So the logprob of prompt token ``i`` is one step of
``/completion`` on the prompt's first ``i`` tokens with token ``i`` forced: one token generated, its logprob and the
top ``k`` read from the logits before any bias or sampler, and the prefix kept in the slot's cache
(``cache_prompt``), so each step evaluates one token. The first token has none (null, as OpenAI answers). The
continuation, when ``max_tokens`` is not 0, is the plan's own engine request; the prompt's entries and the
continuation's go through the plan's native translator together, which writes the legacy logprobs shape.

It owns the steps, their checks, the vocabulary token ids are checked against (``check_tokens``, also the
tokenizer routes') and the OpenAI body; ``core._dispatch`` runs it on the request's ready engine.
"""

from __future__ import annotations

import time
import uuid
import weakref
from typing import Any

import orjson

from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import proxy
from blazar.gateway.http import HttpError, Request
from blazar.gateway.plan import Plan
from blazar.supervisor import Child, Supervisor

FORCE_BIAS = 1e4
"""Added to the forced token's logit: past any logit a model gives, so greedy sampling picks it. The logprob
llama-server reports is the unbiased one (``n_probs`` reads the logits before the samplers)."""

PASSED_ON = ("lora", "id_slot")
"""Members of the plan's engine body every step keeps: the adapters asked for, the pinned slot."""


def prompts(prompt: Any) -> list[str | list[int]]:
    """The prompts of a completion's ``prompt`` (a string, token ids, or a list of either), each scored alone."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(t, int) for t in prompt):
        return [list(prompt)]
    return list(prompt)


_VOCABULARIES: weakref.WeakKeyDictionary[Child, int] = weakref.WeakKeyDictionary()
"""Each running llama-server's vocabulary size, as its ``/v1/models`` said; a restarted engine is a new child."""


async def vocabulary(sup: Supervisor, child: Child) -> int:
    """How many tokens ``child``'s model has (llama-server's ``/v1/models`` ``meta.n_vocab``), asked once."""
    known = _VOCABULARIES.get(child)
    if known is None:
        with sup.lease(child):
            _s, data, _c = await proxy.get_whole(sup, child, "/v1/models")
        try:
            known = int(orjson.loads(data)["data"][0]["meta"]["n_vocab"])
        except (KeyError, IndexError, TypeError, ValueError):
            raise HttpError(
                502, "engine's /v1/models did not say its vocabulary size", "engine_error"
            ) from None
        _VOCABULARIES[child] = known
    return known


async def check_tokens(sup: Supervisor, child: Child, tokens: list[Any], where: str) -> None:
    """400 unless every one of ``tokens`` is an id in ``child``'s vocabulary (llama-server fails with a 500 on
    one that is not)."""
    size = await vocabulary(sup, child)
    bad = next(
        (t for t in tokens if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < size), None
    )
    if bad is not None:
        raise HttpError(
            400,
            f"{where} holds {bad!r}, which is not a token id of model '{child.model}' (its ids run from 0 to"
            f" {size - 1}); send ids its tokenizer gave (POST /tokenize)",
        )


async def _engine(sup: Supervisor, req: Request, child: Child, path: str, body: dict[str, Any]) -> Any:
    _s, data = await req.waiting(proxy.forward_whole(sup, child, path, orjson.dumps(body), req.client))
    answer = orjson.loads(data)
    if not isinstance(answer, dict) or answer.get("error") is not None:  # a 200 carrying an error object
        raise proxy.engine_error(502, data)
    return answer


async def _tokens(sup: Supervisor, req: Request, child: Child, text: str) -> list[int]:
    """``text`` as the engine tokenizes a prompt (its special tokens included)."""
    body = {"content": text, "add_special": True}
    tokens: list[int] = await req.waiting(proxy.ask(sup, req, child, "/tokenize", body, "tokens", list))
    return tokens


async def _text(sup: Supervisor, req: Request, child: Child, tokens: list[int]) -> str:
    text: str = await req.waiting(
        proxy.ask(sup, req, child, "/detokenize", {"tokens": tokens}, "content", str)
    )
    return text


async def _step(
    sup: Supervisor, req: Request, child: Child, base: dict[str, Any], prefix: list[int], token: int, k: int
) -> dict[str, Any]:
    """Token ``token`` after ``prefix`` scored: llama-server's logprobs entry for it (its text, its logprob and
    the ``k`` likeliest tokens'), in the shape its completions carry."""
    body = {
        **base,
        "prompt": prefix,
        "n_predict": 1,
        "n_probs": max(k, 1),
        "temperature": 0,
        "logit_bias": [[token, FORCE_BIAS]],
        "cache_prompt": True,
    }
    probs = (await _engine(sup, req, child, "/completion", body)).get("completion_probabilities")
    entry = probs[0] if isinstance(probs, list) and probs and isinstance(probs[0], dict) else None
    if entry is None or entry.get("id") != token:
        raise HttpError(
            502,
            f"engine did not score prompt token {token} (its /completion gave no such probability)",
            "engine_error",
        )
    tops = entry.get("top_logprobs")
    entry["top_logprobs"] = tops[:k] if isinstance(tops, list) else []
    return entry


async def _scored(
    sup: Supervisor, req: Request, child: Child, base: dict[str, Any], tokens: list[int], k: int
) -> list[dict[str, Any]]:
    """The logprobs entries of ``tokens``: the first with none (null, as OpenAI gives it), then one step each."""
    first = await _text(sup, req, child, tokens[:1])
    entries = [{"id": tokens[0], "token": first, "logprob": None, "top_logprobs": None}]
    for i in range(1, len(tokens)):
        entries.append(await _step(sup, req, child, base, tokens[:i], tokens[i], k))
    return entries


async def echo(
    sup: Supervisor, req: Request, canon: CanonicalRequest, child: Child, p: Plan
) -> tuple[bytes, dict[str, Any]]:
    """The client's completion body for ``canon`` (``echo`` true) on ``child`` and its summary. ``p`` is the
    plan: its engine request continues each prompt, and its translator writes the answer (the legacy logprobs
    shape, the text offsets running from the prompt into the continuation)."""
    k = canon.params.get("logprobs")
    base = {key: p.body[key] for key in PASSED_ON if key in p.body}
    generate = canon.params.get("max_tokens") != 0
    choices: list[dict[str, Any]] = []
    prompt_tokens = completion_tokens = 0
    answer_id = None
    req.dispatch()
    for index, prompt in enumerate(prompts(canon.prompt)):
        if isinstance(prompt, str):
            tokens, text = await _tokens(sup, req, child, prompt), prompt
        else:
            await check_tokens(sup, child, prompt, f"prompt {index}")
            tokens, text = prompt, await _text(sup, req, child, prompt)
        if not tokens:
            raise HttpError(
                400, f"prompt {index} has no tokens; send a prompt with some text", "invalid_request_error"
            )
        prompt_tokens += len(tokens)
        entries = await _scored(sup, req, child, base, tokens, k) if isinstance(k, int) else None
        choice: dict[str, Any] = {"index": index, "text": text, "finish_reason": "length"}
        if generate:
            answer = await _engine(sup, req, child, p.path, {**p.body, "prompt": prompt})
            more = answer["choices"][0]
            choice["text"] = text + str(more.get("text") or "")
            choice["finish_reason"] = more.get("finish_reason")
            if entries is not None:
                entries += (more.get("logprobs") or {}).get("content") or []
            usage = answer.get("usage")
            completion_tokens += int(usage.get("completion_tokens") or 0) if isinstance(usage, dict) else 0
            answer_id = answer_id or answer.get("id")
        choice["logprobs"] = {"content": entries} if entries is not None else None  # OpenAI's null without
        choices.append(choice)
    body = {
        "id": answer_id or f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": canon.model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return p.whole(orjson.dumps(body))
