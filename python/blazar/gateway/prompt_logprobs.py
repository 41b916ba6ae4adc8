"""A completion's ``echo``: the prompt repeated before the answer and, with ``logprobs``, the log-probability of
each of its tokens (what lm-eval's loglikelihood tasks, every multiple-choice benchmark, score with).

llama-server cannot return a prompt's logprobs (its ``/v1/completions`` refuses ``echo``), but its native
``/completion`` reports, with ``n_probs``, the log-probability the model's raw logits give the token it picked,
and ``logit_bias`` can make that token any one we choose. So the logprob of prompt token ``i`` is one step of
``/completion`` on the prompt's first ``i`` tokens with token ``i`` forced: one token generated, its logprob and the
top ``k`` read from the logits before any bias or sampler, and the prefix kept in the slot's cache
(``cache_prompt``), so each step evaluates one token. The first token has none (null, as OpenAI answers). The
continuation, when ``max_tokens`` is not 0, is the plan's own engine request, translated by the native
translator, its text offsets moved past the prompt.

It owns the steps, their checks, the vocabulary token ids are checked against (``check_tokens``, also the
tokenizer routes') and the OpenAI body; ``core._dispatch`` runs it on the request's ready engine.
"""

from __future__ import annotations

import time
import uuid
import weakref
from typing import Any

import orjson

from blazar._native import translate_whole
from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import proxy
from blazar.gateway.http import HttpError, Request
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
    return orjson.loads(data)


async def _step(
    sup: Supervisor, req: Request, child: Child, base: dict[str, Any], prefix: list[int], token: int, k: int
) -> tuple[str, float, dict[str, float]]:
    """Token ``token`` after ``prefix``: its text, its logprob and the ``k`` likeliest tokens' logprobs."""
    body = {
        **base,
        "prompt": prefix,
        "n_predict": 1,
        "n_probs": max(k, 1),
        "temperature": 0,
        "logit_bias": [[token, FORCE_BIAS]],
        "cache_prompt": True,
    }
    answer = await _engine(sup, req, child, "/completion", body)
    probs = answer.get("completion_probabilities") if isinstance(answer, dict) else None
    first = probs[0] if isinstance(probs, list) and probs and isinstance(probs[0], dict) else None
    if first is None or first.get("id") != token:
        raise HttpError(
            502,
            f"engine did not score prompt token {token} (its /completion gave no such probability)",
            "engine_error",
        )
    tops = first.get("top_logprobs")
    top = {
        str(t.get("token")): _logprob(t.get("logprob"))
        for t in (tops if isinstance(tops, list) else [])[:k]
        if isinstance(t, dict)
    }
    return str(first.get("token", "")), _logprob(first.get("logprob")), top


def _logprob(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise HttpError(502, f"engine gave a logprob of {value!r}, not a number", "engine_error")
    return float(value)


async def _scored(
    sup: Supervisor, req: Request, child: Child, base: dict[str, Any], tokens: list[int], k: int | None
) -> dict[str, Any] | None:
    """The legacy logprobs object of ``tokens`` (None when no ``logprobs`` was asked for)."""
    if k is None:
        return None
    first = await _engine(sup, req, child, "/detokenize", {"tokens": tokens[:1]})
    texts = [str(first.get("content", ""))]
    logprobs: list[float | None] = [None]
    tops: list[dict[str, float] | None] = [None]
    for i in range(1, len(tokens)):
        text, logprob, top = await _step(sup, req, child, base, tokens[:i], tokens[i], k)
        texts.append(text)
        logprobs.append(logprob)
        tops.append(top)
    offsets, at = [], 0
    for text in texts:
        offsets.append(at)
        at += len(text)
    return {"tokens": texts, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}


def _joined(scored: dict[str, Any] | None, more: dict[str, Any] | None, shift: int) -> dict[str, Any] | None:
    """The prompt's logprobs followed by the continuation's, its offsets moved ``shift`` characters on."""
    if scored is None or not isinstance(more, dict):
        return scored
    for key in ("tokens", "token_logprobs", "top_logprobs"):
        scored[key] = scored[key] + list(more.get(key) or [])
    scored["text_offset"] = scored["text_offset"] + [shift + int(o) for o in more.get("text_offset") or []]
    return scored


async def echo(
    sup: Supervisor, req: Request, canon: CanonicalRequest, child: Child, path: str, body: dict[str, Any]
) -> tuple[bytes, dict[str, Any]]:
    """The OpenAI completion body for ``canon`` (``echo`` true) on ``child`` and its usage summary; ``path`` and
    ``body`` are the plan's engine request for the continuation."""
    k = canon.params.get("logprobs")
    k = k if isinstance(k, int) else None
    base = {key: body[key] for key in PASSED_ON if key in body}
    generate = canon.params.get("max_tokens") != 0
    choices, prompt_tokens, completion_tokens = [], 0, 0
    req.dispatch()
    for index, prompt in enumerate(prompts(canon.prompt)):
        if isinstance(prompt, str):
            tokenized = await _engine(sup, req, child, "/tokenize", {"content": prompt, "add_special": True})
            tokens, text = tokenized.get("tokens"), prompt
        else:
            tokens = prompt
            await check_tokens(sup, child, tokens, f"prompt {index}")
            text = str((await _engine(sup, req, child, "/detokenize", {"tokens": prompt})).get("content", ""))
        if not isinstance(tokens, list) or not tokens:
            raise HttpError(
                400, f"prompt {index} has no tokens; send a prompt with some text", "invalid_request_error"
            )
        prompt_tokens += len(tokens)
        scored = await _scored(sup, req, child, base, tokens, k)
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": scored, "finish_reason": "length"}
        if generate:
            _s, data = await req.waiting(
                proxy.forward_whole(sup, child, path, orjson.dumps({**body, "prompt": prompt}), req.client)
            )
            out, summary = translate_whole("openai", canon.model, data)
            if summary["engine_error"] is not None:
                raise proxy.engine_error(502, data)
            answer = orjson.loads(out)["choices"][0]
            choice["text"] = text + str(answer.get("text") or "")
            choice["logprobs"] = _joined(scored, answer.get("logprobs"), len(text))
            choice["finish_reason"] = answer.get("finish_reason")
            usage = summary.get("usage")
            completion_tokens += int(usage.get("completion_tokens") or 0) if isinstance(usage, dict) else 0
        choices.append(choice)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    out = orjson.dumps(
        {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": canon.model,
            "choices": choices,
            "usage": usage,
        }
    )
    return out, {"usage": usage, "choices": len(choices)}
