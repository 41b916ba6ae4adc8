"""The semantic cache (opt-in: ``semantic_cache = true``): a whole request whose conversation means nearly the same
as one answered in the last ``semantic_cache_ttl_secs`` gets that answer again, without the engine.

A request is looked up only when its answer can be given twice: whole (not streamed), one choice, no tools, no
structured output (``response_format``, ``json_schema``, ``grammar``), no images, no session pin. Its text (each
message as ``role: content``, or the completion prompt) is embedded by ``semantic_cache_model`` (an embedding
model's ``@embed`` engine; a chat model's own embeddings cannot tell questions apart) and searched in the native ``SemanticIndex`` (top-1 cosine, GIL released) within one
partition per (model, API key, engine lane, request kind, sampling settings): a cached answer never crosses keys,
and is never given for other settings. A hit is the engine's stored body
translated for the asking dialect (so an OpenAI answer serves an Ollama client of the same key too) and says
``x-blazar-cache: hit``; it charges no tokens. A miss says ``x-blazar-cache: miss`` and stores the engine's body
once the answer finished cleanly (``finish_reason`` stop, no sentinel findings). A conversation too long to embed
in one batch is not cached. Any failure of the cache itself is logged and the request served as if it were off.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from blazar._native import SemanticIndex, StreamError, translate_whole
from blazar.dialects.canonical import CanonicalRequest
from blazar.errors import BlazarError
from blazar.gateway.http import HttpError, Request
from blazar.gateway.watch import HEADER as SENTINEL_HEADER

if TYPE_CHECKING:
    from blazar.config import Config

log = logging.getLogger("blazar.cache")

HEADER = "x-blazar-cache"
CAPACITY = 10_000
"""Entries kept, all partitions together; the oldest go first."""
MAX_TEXT_CHARS = 2_000
"""Longer conversations are not looked up (about 512 tokens, what an embedding engine takes in one batch by
default): a cut embedding could match another conversation. One the engine still finds too long is skipped too."""
_STRUCTURED = ("json_schema", "grammar", "response_format")


@dataclass(slots=True)
class Probe:
    """One request's place in the cache: where to look and what to store under."""

    partition: str
    vector: list[float]


class SemanticCache:
    def __init__(self, cfg: Config) -> None:
        self.threshold = float(cfg.semantic_cache_threshold)
        self.ttl = float(cfg.semantic_cache_ttl_secs)
        self.embed_model = cfg.semantic_cache_model
        self._by_dim: dict[int, SemanticIndex] = {}

    def index(self, dim: int) -> SemanticIndex:
        idx = self._by_dim.get(dim)
        if idx is None:
            idx = self._by_dim[dim] = SemanticIndex(dim, CAPACITY, self.ttl, self.threshold)
        return idx

    def answer(self, probe: Probe, canon: CanonicalRequest, translator: str, req: Request) -> bytes | None:
        """The stored answer for ``probe`` as the asking dialect's whole body (and ``x-blazar-cache: hit``; no
        usage is charged, the engine did no work), or None."""
        try:
            hit = self.index(len(probe.vector)).lookup(probe.partition, probe.vector)
            if hit is None:
                return None
            total_ns = int((time.perf_counter() - req.t0) * 1e9)
            out, _summary = translate_whole(
                translator, canon.model, hit[1], total_duration_ns=total_ns, echo=canon.echo
            )
        except (StreamError, TypeError, ValueError) as e:
            failed("looking the conversation up", e)
            return None
        req.set_header(HEADER, "hit")
        return out

    def keep(self, probe: Probe, req: Request, summary: dict[str, Any], engine_body: bytes) -> None:
        """After the engine answered a cached request: ``x-blazar-cache: miss``, and the engine's body kept when
        the answer finished cleanly."""
        req.set_header(HEADER, "miss")
        if not worth_keeping(summary, 0 if req.response_header(SENTINEL_HEADER) is None else 1):
            return
        try:
            self.index(len(probe.vector)).insert(probe.partition, probe.vector, engine_body)
        except (TypeError, ValueError) as e:
            failed("storing the answer", e)


def partition(canon: CanonicalRequest, model: str, key: str, lane: str) -> str:
    """Where a request's answers may be found: its model, API key, engine lane, kind (chat or completion) and
    every sampling setting (an answer made at another temperature, length or stop is not this one's)."""
    settings = orjson.dumps(canon.params, option=orjson.OPT_SORT_KEYS, default=str)
    digest = hashlib.sha256(settings).hexdigest()[:16]
    return "\0".join((model, key, lane, canon.kind, "raw" if canon.raw else "", digest))


def checked_vector(value: Any) -> list[float]:
    """An embedding the index takes: a non-empty list of finite numbers, not all zero (else ValueError)."""
    if not isinstance(value, list) or not value or not all(isinstance(x, int | float) for x in value):
        raise ValueError("the embedding engine answered something that is not a vector")
    if not all(math.isfinite(x) for x in value) or not any(value):
        raise ValueError("the embedding engine answered a zero or non-finite vector")
    return value


def text_of(canon: CanonicalRequest) -> str | None:
    """The text a request is cached under, or None when its answer should not be given twice."""
    if canon.stream or canon.kind not in ("chat", "completion") or canon.choices() > 1:
        return None
    if canon.tools or canon.response_format is not None or canon.suffix is not None or canon.has_images():
        return None
    if canon.prefill() is not None:  # the engine's body repeats the prefill, which only this request had
        return None
    if any(k in canon.params for k in _STRUCTURED):
        return None
    if canon.kind == "completion":
        text = canon.prompt if isinstance(canon.prompt, str) else None
    else:
        parts = []
        for m in canon.messages:
            content = m.get("content")
            if not isinstance(content, str) or m.get("tool_calls"):
                return None
            parts.append(f"{m.get('role')}: {content}")
        text = "\n".join(parts)
    if not text or len(text) > MAX_TEXT_CHARS:
        return None
    return text


def worth_keeping(summary: dict[str, Any], findings: int) -> bool:
    """Only an answer that finished on its own, with nothing the sentinel found, is given again."""
    return summary.get("finish_reason") == "stop" and not summary.get("errors") and findings == 0


_QUIET_SECS = 60.0
_said: dict[str, float] = {}


def failed(what: str, e: Exception) -> None:
    """Log a failure of the cache (the request is served without it), each distinct one at most once a minute:
    a missing embedding model must not flood the log with one line per request."""
    text = f"semantic cache: {what} failed ({e or type(e).__name__}); requests are served without it"
    now = time.monotonic()
    if now - _said.get(text, -_QUIET_SECS) < _QUIET_SECS:
        return
    if len(_said) > 256:
        _said.clear()
    _said[text] = now
    if isinstance(e, HttpError | StreamError | ValueError | BlazarError):
        log.warning("%s", text)
    else:
        log.exception("%s", text)
