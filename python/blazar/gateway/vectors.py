"""Embedding vectors after the engine answered: shortened to the request's ``dimensions`` (OpenAI's
``/v1/embeddings`` and Ollama's ``/api/embed`` both take it; llama-server does not), as both services do it: the
first ``dimensions`` values, L2-normalised again. A vector as long as that or shorter is left as it is, and the
request is told so in ``x-blazar-ignored``. Floats and base64 (little-endian float32) bodies alike.

It owns that rewrite of an OpenAI embeddings body; ``core.embed`` calls it once per request. No I/O.
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any


def shorten(body: dict[str, Any], dims: int) -> int | None:
    """Cut every vector of OpenAI embeddings ``body`` to ``dims`` values, normalised, in place; the model's size
    when its vectors are not longer than ``dims`` (nothing changed), else None."""
    for item in body.get("data") or []:
        raw = item.get("embedding")
        b64 = isinstance(raw, str)
        values = _floats(base64.b64decode(raw)) if isinstance(raw, str) else raw
        if not isinstance(values, list):
            continue
        if len(values) <= dims:
            return len(values)
        cut = values[:dims]
        norm = math.sqrt(sum(v * v for v in cut))
        if norm > 0:
            cut = [v / norm for v in cut]
        item["embedding"] = encoded(struct.pack(f"<{dims}f", *cut), b64)
    return None


def encoded(raw: bytes, b64: bool) -> Any:
    """A vector of little-endian float32 bytes as OpenAI sends it: base64 of those bytes, or the floats."""
    return base64.b64encode(raw).decode() if b64 else _floats(raw)


def _floats(raw: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))
