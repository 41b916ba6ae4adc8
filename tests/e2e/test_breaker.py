"""End to end: an engine that crashes on every start is not restarted in a loop.

The real llama-server refuses a flag it does not know and exits at once: the model's ``extra_args`` make every
start of its engine fail, as a broken build or model would.
"""

from __future__ import annotations

import httpx
import pytest

from blazar.supervisor.child import START_MARK
from tests.cli.test_ps_cli import blazar
from tests.conftest import Daemon

pytestmark = pytest.mark.e2e

CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
BROKEN = '[models."smollm2:latest"]\nextra_args = ["--no-such-flag"]\n'


def test_an_engine_that_keeps_crashing_is_held_back_until_reset(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(BROKEN)
    for _ in range(3):
        r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
        assert r.status_code == 502, r.text
        assert "exited with code" in r.json()["error"]["message"]
    engine_log = d.data_dir / "logs" / "smollm2--latest.log"
    assert engine_log.read_text().count(START_MARK) == 3
    # the daemon's log says so too: each failed start, and the hold once it begins
    said = d.log.read_text()
    assert said.count("engine for smollm2:latest failed to start: engine for 'smollm2:latest' exited") == 3, (
        said
    )
    assert "engine for smollm2:latest crashed 3 times in 120s: its restarts are held back for 60s" in said, (
        said
    )
    r = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "60"
    message = r.json()["error"]["message"]
    assert message.startswith(
        "engine for 'smollm2:latest' crashed 3 times in 120s, so Blazar holds its restart back for 60s more"
        " instead of crashing it again (last: its start failed: engine for 'smollm2:latest' exited with code"
    ), message
    assert message.endswith(
        "fix the cause (see logs/smollm2--latest.log in blazar's data directory), then run `blazar ps --reset`"
        " or wait"
    ), message
    # the Ollama and Anthropic doors say the same, in their shapes
    o = httpx.post(d.url + "/api/chat", json={**CHAT, "stream": False}, timeout=60)
    assert o.status_code == 503 and o.json()["error"] == message
    assert d.child_pids() == []

    held = httpx.get(d.url + "/api/breakers", timeout=10).json()["held"]
    assert [(h["model"], h["engine"], h["crashes"]) for h in held] == [
        ("smollm2:latest", "smollm2:latest", 3)
    ]
    ps = blazar(d.env, "ps")
    assert ps.returncode == 0, ps.stderr
    assert "--no-such-flag" in message  # the engine's own last words, from its log
    assert ps.stdout.splitlines()[:3] == [
        "no models are running",
        "held back after repeated crashes (`blazar ps --reset` lets them start again now):",
        ps.stdout.splitlines()[2],
    ]
    assert ps.stdout.splitlines()[2].startswith("  smollm2:latest: 3 crashes, next start allowed in ")

    reset = blazar(d.env, "ps", "--reset")
    assert (reset.returncode, reset.stdout) == (0, "reset: smollm2:latest\n"), reset.stderr
    assert httpx.get(d.url + "/api/breakers", timeout=10).json()["held"] == []
    again = httpx.post(d.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert again.status_code == 502, again.text  # tried again (and still broken)
    assert engine_log.read_text().count(START_MARK) == 4  # the held-back requests started nothing
    assert blazar(d.env, "ps", "--reset").stdout == "no engine was held back\n"
