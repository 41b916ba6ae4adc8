"""Prompt preflight: refuse, before dispatch, a request whose prompt cannot fit a slot's context.

The token count is estimated without a tokenizer, as a lower bound: UTF-8 bytes / 16, with long runs of one repeated
character (which tokenizers pack tightly) counted at 1/128. A request is refused only when even that lower bound
leaves no room in the slot, so a prompt that actually fits is never refused; the engine still enforces the exact
limit for prompts in between. ``max_tokens`` never causes a refusal (clients routinely ask for more than a small
context holds and the engine stops at the context's end); it only shapes the message.

Pure: no I/O; each request's text is measured once with C-level string operations.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson

from blazar.dialects.canonical import CanonicalRequest
from blazar.errors import BlazarError

BYTES_PER_TOKEN_MAX = 16
"""No mainstream tokenizer averages more than this many bytes per token. Ordinary prose averages 4 to 5, but a text
of one long word repeated is a whole-word token each time: ``" information" * 600`` is 630 SmolLM2 tokens, 11.4
bytes each (and larger vocabularies hold longer words), so 8 refused prompts that fit."""
RUN_BYTES_PER_TOKEN_MAX = 128
"""Runs of one repeated character (indentation, rules of '=') pack densely: SmolLM2 holds 60 spaces in one token."""
_RUN = re.compile(r"(.)\1{15,}", re.DOTALL)


class PromptTooLong(BlazarError):
    """The prompt cannot fit the model's per-slot context; the message names the levers."""

    status = 400


def _text_parts(req: CanonicalRequest) -> Iterable[str]:
    for m in req.messages:
        content = m.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]
        for call in m.get("tool_calls") or ():
            if isinstance(call, dict):
                fn = call.get("function")
                if isinstance(fn, dict):
                    yield str(fn.get("name") or "")
                    yield str(fn.get("arguments") or "")
        reasoning = m.get("reasoning_content")
        if isinstance(reasoning, str):
            yield reasoning
    if isinstance(req.prompt, str):
        yield req.prompt
    if req.suffix:
        yield req.suffix


def _lower_bound(texts: Iterable[str]) -> int:
    total_bytes = 0
    run_bytes = 0
    for t in texts:
        if not t:
            continue
        total_bytes += len(t.encode("utf-8", "surrogatepass"))
        if len(t) >= 16:
            run_bytes += sum(len(m.group(0)) for m in _RUN.finditer(t))
    plain = max(0, total_bytes - run_bytes)
    return plain // BYTES_PER_TOKEN_MAX + run_bytes // RUN_BYTES_PER_TOKEN_MAX


def _token_ids(value: Any) -> int | None:
    """An exact count when a completion prompt is given as token ids."""
    if isinstance(value, list) and value and all(isinstance(x, int) for x in value):
        return len(value)
    return None


def estimate_tokens(req: CanonicalRequest) -> int:
    """A cheap lower bound on the prompt tokens ``req`` puts into one slot (tool definitions included, images
    and chat-template tokens not). For embeddings, the largest single input (each is its own sequence)."""
    if req.kind == "embedding":
        inputs = req.input if isinstance(req.input, list) else [req.input]
        best = 0
        for item in inputs:
            exact = _token_ids(item)
            best = max(best, exact if exact is not None else _lower_bound([str(item or "")]))
        return best
    exact = _token_ids(req.prompt)
    if exact is not None:
        return exact
    texts = list(_text_parts(req))
    if req.tools:
        texts.append(orjson.dumps(req.tools).decode())
    return _lower_bound(texts)


def check_prompt_fits(
    prompt_tokens_estimate: int, max_tokens: int | None, ctx_per_slot: int, *, model: str | None = None
) -> None:
    """Raise ``PromptTooLong`` (400) when a prompt of at least ``prompt_tokens_estimate`` tokens leaves no room
    for one generated token in a slot of ``ctx_per_slot`` tokens. ``ctx_per_slot <= 0`` (unknown) passes."""
    if ctx_per_slot <= 0 or prompt_tokens_estimate < ctx_per_slot:
        return
    subject = f"model '{model}'" if model else "the model"
    wanted = f" plus max_tokens {max_tokens}" if max_tokens else ""
    where = f'[models."{model}"]' if model else '[models."NAME"]'
    raise PromptTooLong(
        f"prompt too long for {subject}: at least {prompt_tokens_estimate} tokens{wanted}, but a slot holds "
        f"{ctx_per_slot} tokens; levers: a larger ctx_size or fewer parallel slots (each slot gets ctx_size / "
        f'parallel), a quantized KV cache (cache_type_k/cache_type_v = "q8_0" or "q4_0") to fit a larger context '
        f"in the same memory, fewer gpu_layers to trade speed for memory, or a shorter prompt; set them under "
        f"{where} in config.toml"
    )


TOOL_WRAP_BYTES = 64
"""Bytes a dialect may add around one tool when it is rendered in the canonical (OpenAI) shape."""


class ImagesUnreadable(BlazarError):
    """Images sent to a model whose engine cannot see them; the message says what to send instead."""

    status = 400


def check_images_readable(req: CanonicalRequest, reads_images: bool) -> None:
    """Refuse, before dispatch, a request with images for an engine that cannot read them: llama.cpp without a
    vision projector answers such a request with HTTP 500, which reads as Blazar's fault, not the request's."""
    if not reads_images and req.has_images():
        raise ImagesUnreadable(
            f"model '{req.model}' cannot read images: it runs without a vision projector (mmproj). Send the "
            "request without image parts, or use a vision model (a GGUF with its mmproj*.gguf beside it, or "
            'mmproj set for it under [models."name:tag"] in config.toml)'
        )


def check_request_fits(req: CanonicalRequest, ctx_per_slot: int, body_len: int | None = None) -> None:
    """``check_prompt_fits`` for a canonical request (its ``max_tokens`` param, its model name).

    With ``body_len`` (the client's JSON body size) a body too small to hold a refusable prompt is passed without
    measuring its text: every counted character came from that body, and JSON never encodes text in fewer bytes
    than its UTF-8, so the estimate is at most ``body_len / BYTES_PER_TOKEN_MAX`` (``/ 2`` when token ids may be given)."""
    if ctx_per_slot <= 0:
        return
    if body_len is not None:
        ids_possible = isinstance(req.prompt, list) or isinstance(req.input, list)
        per_token = 2 if ids_possible else BYTES_PER_TOKEN_MAX
        if body_len + TOOL_WRAP_BYTES * len(req.tools or ()) < per_token * ctx_per_slot:
            return
    max_tokens = req.params.get("max_tokens")
    check_prompt_fits(
        estimate_tokens(req),
        max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None,
        ctx_per_slot,
        model=req.model,
    )
