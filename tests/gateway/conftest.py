"""The gateway tests' stand-in engine fixture: a real ``blazar serve`` whose llama-server is ``stand_in_engine.py``
(no built engine, no test assets)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Daemon, cleanup, make_daemon
from tests.fakehub import gguf_bytes

HERE = Path(__file__).resolve().parent
ANSWER = "Hello from the stand-in."

FULL = "sk-full-access-key-0001"
SCOPED = "sk-scoped-to-other-0002"
TWO_KEYS = f"""
[[keys]]
name = "ops"
secret = "{FULL}"
daily_tokens = 1000
rpm = 50

[[keys]]
name = "other"
secret = "{SCOPED}"
models = ["elsewhere"]
"""
"""Two keys for the pages that need full access: ``ops`` (``FULL``, every model) and ``other`` (``SCOPED``, limited
to a model that is not there)."""


def tiny_model(path: Path) -> Path:
    """A GGUF with the metadata the launch profile's fit reads, and one small tensor: weights for no one."""
    meta: dict[str, object] = {
        "general.architecture": "llama",
        "general.name": "tiny",
        "general.file_type": 15,
        "llama.context_length": 512,
        "llama.block_count": 1,
        "llama.embedding_length": 64,
        "llama.attention.head_count": 1,
        "llama.attention.head_count_kv": 1,
    }
    path.write_bytes(gguf_bytes(meta, [("token_embd.weight", 1 << 14)]))
    return path


class Served:
    """A daemon serving model ``m`` on the stand-in, and the stand-in's state directory."""

    def __init__(self, d: Daemon, state: Path) -> None:
        self.d = d
        self.state = state

    def chat(self, text: str, *, key: str | None = None, **extra: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        body = {"model": "m", "messages": [{"role": "user", "content": text}], **extra}
        return httpx.post(self.d.url + "/v1/chat/completions", json=body, headers=headers, timeout=120)

    def requests(self) -> list[dict[str, Any]]:
        """What the engine was sent, with the pid of the stand-in that got it."""
        log = self.state / "requests.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    made: list[Daemon] = []

    def start(config: str = "") -> Served:
        state = tmp_path / "state"
        state.mkdir()
        engine = tmp_path / "llama-server"
        engine.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "stand_in_engine.py"}" "{state}" "$@"\n'
        )
        engine.chmod(0o755)
        d = make_daemon(tmp_path / "d", config)
        made.append(d)
        d.cli("engine", "add", "--kind", "llama-cpp", "--path", str(engine))
        d.cli("import", str(tiny_model(tmp_path / "tiny.gguf")), "--name", "m")
        d.start()
        return Served(d, state)

    yield start
    for d in made:
        cleanup(d)
