"""Late chunking: an OpenAI embeddings request with ``"late_chunking": true`` embeds its chunks as one text, so
each chunk's vector is read in the context of the others (as Jina's API does).

The model's ``@tokens`` engine (llama-server with ``--pooling none``, its physical batch sized by
``late_chunking_max_tokens``) embeds the concatenation of the chunks' tokens, framed by the model's own special
tokens (BOS, a BERT's CLS/SEP), and answers with one vector per token. Each chunk's vector is the mean of its own
tokens' vectors, L2-normalised, pooled natively (``_native.pool_token_spans``, the GIL released). Input over the
bound is a 413 before anything is embedded.

It owns tokenizing the chunks, the bound, the spans and the OpenAI body; ``core.embed`` admits the request and
finds its engine. It must not parse the engine's vectors in Python.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from blazar._native import pool_token_spans
from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import proxy, vectors
from blazar.gateway.http import HttpError, Request
from blazar.supervisor import Child, Supervisor

BYTES_PER_TOKEN_BOUND = 256
"""No tokenizer piece is this long: input of more than ``limit * 256`` UTF-8 bytes cannot fit ``limit`` tokens,
and is refused without tokenizing it."""


def _too_long(what: str, limit: int, cfg_limit: int) -> HttpError:
    if limit >= cfg_limit:
        why, fix = f"late_chunking_max_tokens is {cfg_limit}", "raise late_chunking_max_tokens in config.toml"
    else:
        why = f"the model's context per slot is {limit}; late_chunking_max_tokens is {cfg_limit}"
        fix = "give the model more context per slot (ctx_size, or fewer parallel slots, in config.toml)"
    return HttpError(
        413,
        f"late_chunking input is {what}, more than the {limit} tokens one request may embed ({why}); send fewer or"
        f" shorter chunks, or {fix}",
        "request_too_large",
    )


async def _tokenize(sup: Supervisor, req: Request, child: Child, text: str, special: bool) -> list[int]:
    tokens: list[int] = await proxy.ask(
        sup, req, child, "/tokenize", {"content": text, "add_special": special}, "tokens", list
    )
    return tokens


async def _frame(
    sup: Supervisor, req: Request, child: Child, text: str, bare: list[int]
) -> tuple[list[int], list[int]]:
    """The special tokens the model puts before and after a text (BOS; a BERT's CLS and SEP): ``text``
    tokenized with them, around ``bare``, its tokens without."""
    full = await _tokenize(sup, req, child, text, True)
    for at in range(len(full) - len(bare) + 1):
        if full[at : at + len(bare)] == bare:
            return full[:at], full[at + len(bare) :]
    raise HttpError(502, "engine tokenized a text differently with its special tokens", "engine_error")


async def embed(sup: Supervisor, req: Request, child: Child, canon: CanonicalRequest) -> dict[str, Any]:
    """The OpenAI embeddings body for ``canon``'s chunks (``canon.input``, non-empty strings) on ``child``, the
    model's ``@tokens`` engine."""
    chunks: list[str] = canon.input  # type: ignore[assignment]  # the parser made it a list of strings
    cfg_limit = sup.cfg.late_chunking_max_tokens
    limit = child.spec.input_tokens
    size = sum(len(c.encode()) for c in chunks)
    if size > limit * BYTES_PER_TOKEN_BOUND:
        raise _too_long(f"{size} bytes", limit, cfg_limit)
    pieces: list[list[int]] = []
    total = 0
    for i, text in enumerate(chunks):
        tokens = await _tokenize(sup, req, child, text, False)
        if not tokens:
            raise HttpError(400, f"late_chunking chunk input[{i}] has no tokens")
        pieces.append(tokens)
        total += len(tokens)
        if total > limit:
            raise _too_long(f"at least {total} tokens", limit, cfg_limit)
    if child.token_frame is None:  # the model's, so once per engine
        child.token_frame = await _frame(sup, req, child, chunks[0], pieces[0])
    before, after = child.token_frame
    total += len(before) + len(after)
    if total > limit:
        raise _too_long(f"{total} tokens with the model's special tokens", limit, cfg_limit)
    content = [*before]
    spans = []
    for tokens in pieces:
        spans.append((len(content), len(content) + len(tokens)))
        content.extend(tokens)
    content.extend(after)
    _status, data = await proxy.forward_whole(
        sup, child, "/embeddings", orjson.dumps({"content": content}), req.client
    )
    try:
        pooled = await asyncio.to_thread(pool_token_spans, data, spans)
    except ValueError as e:
        raise HttpError(502, str(e), "engine_error") from None
    b64 = canon.params.get("encoding_format") == "base64"
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": vectors.encoded(raw, b64)}
            for i, raw in enumerate(pooled)
        ],
        "model": canon.model,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }
