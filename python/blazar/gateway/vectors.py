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
        values = (
            list(struct.unpack(f"<{len(base64.b64decode(raw)) // 4}f", base64.b64decode(raw))) if b64 else raw
        )
        if not isinstance(values, list):
            continue
        if len(values) <= dims:
            return len(values)
        cut = values[:dims]
        norm = math.sqrt(sum(v * v for v in cut))
        if norm > 0:
            cut = [v / norm for v in cut]
        item["embedding"] = base64.b64encode(struct.pack(f"<{dims}f", *cut)).decode() if b64 else cut
    return None
