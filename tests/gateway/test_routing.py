"""gateway.routing alone, over a real Supervisor, catalog and SQLite file: the slot count admission gives a model's
engines, and the thinking note's field in each dialect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from blazar.config import load_config_text
from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import forced_tools
from blazar.gateway.routing import route_target
from blazar.paths import DataDir
from blazar.store import Store
from blazar.supervisor import Supervisor


@pytest.fixture
def sup(tmp_path: Path, model_file: Path) -> Iterator[Supervisor]:
    text = f'data_dir = "{tmp_path / "data"}"\nparallel = 3\n'
    cfg = load_config_text(text, tmp_path / "config.toml", {})
    data = DataDir(cfg.data_dir).ensure()
    store = Store.open(data.db)
    s = Supervisor(cfg, data, store)
    s.catalog.import_file(model_file, "smollm2")
    try:
        yield s
    finally:
        store.close()


def test_an_embedding_engine_is_admitted_its_own_slot_count(sup: Supervisor) -> None:
    # parallel = 3: the chat engine has 3 slots, the embedding engines 2 (profile.embed_slots), and admission
    # lets that many requests reach each, so the rest wait in Blazar's queue (bounded by queue_wait_secs)
    chat = route_target(sup, CanonicalRequest(model="smollm2", kind="chat"))
    embed = route_target(sup, CanonicalRequest(model="smollm2", kind="embedding"))
    late = route_target(sup, CanonicalRequest(model="smollm2", kind="embedding", late_chunking=True))
    assert (chat.slots, embed.slots, late.slots) == (3, 2, 2)
    assert chat.key != embed.key != late.key  # three engines


def test_the_thinking_note_names_the_field_that_was_sent() -> None:
    effort = CanonicalRequest(model="m", kind="chat", params={"reasoning_effort": "high"})
    kwargs = CanonicalRequest(
        model="m", kind="chat", params={"chat_template_kwargs": {"enable_thinking": True}}
    )
    assert forced_tools.think_field("openai", effort) == "reasoning_effort"
    assert forced_tools.think_field("openai", kwargs) == "chat_template_kwargs.enable_thinking"
    assert forced_tools.think_field("anthropic", kwargs) == "thinking"
    assert forced_tools.think_field("ollama_chat", kwargs) == "think"
    for effort, asks in (("xhigh", True), ("low", True), ("minimal", False), ("none", False)):
        canon = CanonicalRequest(model="m", kind="chat", params={"reasoning_effort": effort})
        assert forced_tools.asks_to_think(canon) is asks, effort
