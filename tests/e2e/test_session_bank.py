"""End to end: the session bank on a real llama-server. An engine stopped on purpose (unloaded, or the daemon
shutting down) saves the slots holding a prompt; the model's next engine restores them, so the same conversation
comes back with its prompt cached. A bank the engine refuses is removed and the request is served cold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import HANG, Daemon, wait_for

pytestmark = pytest.mark.e2e

SYSTEM = "You answer in one word. " + "The quick brown fox jumps over the lazy dog. " * 30
ASK = {
    "model": "smollm2",
    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hi"}],
    "max_tokens": 2,
    "temperature": 0,
}


def cached(d: Daemon) -> tuple[int, int]:
    """(prompt tokens, of which cached) for the long conversation."""
    r = httpx.post(d.url + "/v1/chat/completions", json=ASK, timeout=60)
    assert r.status_code == 200, r.text
    usage: dict[str, Any] = r.json()["usage"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def unload(d: Daemon) -> None:
    r = httpx.post(d.url + "/api/generate", json={"model": "smollm2", "keep_alive": 0}, timeout=60)
    assert r.status_code == 200, r.text
    wait_for(lambda: not d.child_pids(), HANG, "the engine to stop")


def banks(d: Daemon) -> list[Path]:
    return sorted((d.data_dir / "sessions").glob("*/_auto-*.bin"))


def test_a_conversation_finds_its_prompt_cached_after_its_engine_restarts(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    daemon: Daemon = daemon_factory()  # prompt caching on, as by default (the shared daemon turns it off)
    prompt, hit = cached(daemon)
    assert prompt > 250 and hit == 0
    [first] = daemon.child_pids()
    unload(daemon)
    [bank] = banks(daemon)  # one slot held the prompt; the other held nothing and left no file
    assert bank.stat().st_size > 100_000
    for folder in (bank.parent, bank.parent.parent):  # banks hold prompts: owner-only
        assert folder.stat().st_mode & 0o777 == 0o700, oct(folder.stat().st_mode)
    assert "session bank: saved 1 slot(s) of smollm2:latest" in daemon.log.read_text()

    prompt_again, hit = cached(daemon)
    [second] = daemon.child_pids()
    assert second != first
    assert prompt_again == prompt and hit >= prompt - 8, (prompt, hit)  # all but the tail llama.cpp re-reads
    assert "session bank: restored 1 slot(s) of smollm2:latest" in daemon.log.read_text()

    # a daemon that shuts down saves its engines' slots too: the conversation survives the restart
    assert daemon.stop() == 0
    assert daemon.log.read_text().count("session bank: saved 1 slot(s) of smollm2:latest") == 2
    daemon.start()
    assert cached(daemon) == (prompt, hit)

    # a bank the engine refuses (here: cut short) is removed, and the conversation is served cold
    unload(daemon)
    [bank] = banks(daemon)
    bank.write_bytes(bank.read_bytes()[:4096])
    assert cached(daemon) == (prompt, 0)
    assert f"refused {bank.name}" in daemon.log.read_text()
    assert not bank.exists() or bank.stat().st_size > 4096  # gone, unless this engine saved it again


def test_a_sessions_folder_that_cannot_be_made_leaves_the_bank_off_not_the_model(
    daemon_factory: object,
) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    (d.data_dir / "sessions").mkdir(parents=True, exist_ok=True)
    (d.data_dir / "sessions" / "smollm2--latest").write_text("a file where the model's folder goes")
    assert cached(d)[0] > 250  # served
    assert "session bank off for this engine: cannot make" in d.log.read_text()
    unload(d)  # the save fails quietly too
    assert cached(d)[1] == 0
