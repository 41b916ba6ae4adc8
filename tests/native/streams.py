"""Recorded real-engine fixtures (``tests/fixtures/streams``, made by its ``record.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "streams"
DIALECTS = ("openai", "ollama_chat", "ollama_generate", "anthropic")
MODEL = "smollm2:135m"
START_NS = 1_795_000_000_123_456_789
MESSAGE_ID = "msg_0123456789abcdef01234567"


@dataclass(frozen=True)
class Case:
    name: str
    stream: bytes
    whole: bytes
    request: dict[str, Any]


def cases() -> list[Case]:
    out = []
    for sse in sorted(FIXTURES.glob("*.sse")):
        name = sse.stem
        request = json.loads((FIXTURES / f"{name}.request.json").read_text())
        out.append(Case(name, sse.read_bytes(), (FIXTURES / f"{name}.json").read_bytes(), request))
    return out


CASES = cases()
CASE_NAMES = [c.name for c in CASES]
BY_NAME = {c.name: c for c in CASES}


def long_stream(n_chunks: int = 10_000) -> bytes:
    """A ``n_chunks``-event stream built from the recorded ``text`` case: its first event, its
    content events repeated, and its real ending (finish, usage, ``[DONE]``)."""
    events = [e + b"\n\n" for e in BY_NAME["text"].stream.split(b"\n\n") if e]
    content = [e for e in events if b'"content":"' in e]
    head, tail = events[:1], events[-3:]
    body = [content[i % len(content)] for i in range(n_chunks - len(head) - len(tail))]
    return b"".join(head + body + tail)
