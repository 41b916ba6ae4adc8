"""Golden client bytes: every recorded engine stream and body, translated into every dialect
with a fixed clock and message id, must give exactly the bytes committed under
tests/fixtures/streams/expected/. Regenerate them only on purpose:

    BLAZAR_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/native/test_golden.py

and review the diff: these files are what clients receive."""

from __future__ import annotations

import os

import pytest

from blazar import _native
from tests.native.streams import CASE_NAMES, CASES, DIALECTS, FIXTURES, MESSAGE_ID, MODEL, START_NS, Case

EXPECTED = FIXTURES / "expected"
REGEN = os.environ.get("BLAZAR_REGEN_GOLDEN") == "1"
STEP_NS = 25_000_000


def stream_bytes(case: Case, dialect: str) -> bytes:
    tr = _native.StreamTranslator(
        dialect, MODEL, start_ns=START_NS, message_id=MESSAGE_ID, prompt_tokens_hint=9, load_duration_ns=1_000
    )
    events = [e + b"\n\n" for e in case.stream.split(b"\n\n") if e]
    out = b"".join(tr.feed(e, now_ns=START_NS + (i + 1) * STEP_NS) for i, e in enumerate(events))
    return out + tr.finish(now_ns=START_NS + (len(events) + 1) * STEP_NS)


def whole_bytes(case: Case, dialect: str) -> bytes:
    out, _ = _native.translate_whole(
        dialect,
        MODEL,
        case.whole,
        load_duration_ns=1_000,
        message_id=MESSAGE_ID,
        total_duration_ns=123_456_789,
        now_ns=START_NS,
    )
    return out


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("kind", ["stream", "whole"])
def test_golden(case: Case, dialect: str, kind: str) -> None:
    got = stream_bytes(case, dialect) if kind == "stream" else whole_bytes(case, dialect)
    suffix = {"openai": "sse", "anthropic": "sse"}.get(dialect, "ndjson") if kind == "stream" else "json"
    path = EXPECTED / f"{case.name}.{dialect}.{kind}.{suffix}"
    if REGEN:
        EXPECTED.mkdir(exist_ok=True)
        path.write_bytes(got)
    assert path.is_file(), f"{path.name} missing: run with BLAZAR_REGEN_GOLDEN=1"
    assert got == path.read_bytes()
