"""The golden files (tests/golden/<dialect>/<case>/) replayed without an engine: one test, one case each.

Each case was recorded from a real `blazar serve` in front of the real llama-server + SmolLM2 (see
tests/golden/README.md; re-record with ``python tests/golden/record.py``). Replaying parses the recorded client
request with the dialect's parser, checks the gateway's ``plan`` against the engine request Blazar sent, feeds the
engine's recorded bytes to the native translator (in uneven pieces when streamed) or renders the recorded error,
and compares the result with the client bytes Blazar answered, byte for byte after volatile fields (clock stamps,
durations, generated message ids) are normalised: see ``tests/golden/replay.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import replay

CASES = replay.case_dirs()


def test_every_dialect_has_cases() -> None:
    for dialect in replay.DIALECTS:
        assert any(p.parent.name == dialect for p in CASES), f"no golden cases for {dialect}"


@pytest.mark.parametrize("case_dir", CASES, ids=[f"{p.parent.name}/{p.name}" for p in CASES])
def test_golden(case_dir: Path) -> None:
    replay.check(replay.load(case_dir))


def test_normalise_replaces_only_volatile_values() -> None:
    data = b'{"id":"msg_abc","x":{"id":"toolu_1"},"created_at":"2026-01-01T00:00:00Z","total_duration":12}\n'
    out = replay.normalise(data, ["id=msg_*", "created_at", "total_duration"])
    assert out == (
        b'{"id":"<id>","x":{"id":"toolu_1"},"created_at":"<created_at>","total_duration":"<total_duration>"}\n'
    )


def test_the_replays_engine_is_the_recording_daemons() -> None:
    from tests.golden import record

    assert replay.ENGINE.ctx_size == record.CTX_SIZE
