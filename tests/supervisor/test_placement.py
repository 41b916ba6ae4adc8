"""`supervisor.placement` over a real catalog (SQLite file, the real SmolLM2 GGUF): where a name is served, and
its one memo (kept per catalog generation and for ``PLACE_MEMO_SECS``; adapters and unknown names never kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.catalog.loras import Loras
from blazar.catalog.models import Catalog
from blazar.config import Config
from blazar.config.model import ModelOverride
from blazar.supervisor import placement
from blazar.supervisor.placement import Placements
from blazar.supervisor.sharing import Sharing
from tests.fakehub import lora_gguf


def placements(cfg: Config, catalog: Catalog) -> Placements:
    return Placements(cfg, catalog, Loras(catalog), Sharing(cfg, catalog))


def test_a_copy_is_placed_on_its_owners_engine_with_its_own_preset(
    catalog: Catalog, model_file: Path
) -> None:
    catalog.import_file(model_file, "base")
    catalog.copy("base", "persona")
    catalog.set_preset("persona", {"system": "Be brief."})
    p = placements(Config(), catalog).place("persona")
    assert p.name == "persona:latest" and p.row is not None and p.row.name == "persona:latest"
    assert p.engine_row is not None and p.engine_row.name == "base:latest"
    assert p.key == "base:latest" and p.slots == 4 and p.ctx_per_slot == 4096  # "auto": 4 sharing 4096
    assert p.preset is not None and p.preset.system == "Be brief."
    embed = placements(Config(), catalog).place("persona", embedding=True)
    assert embed.key == "base:latest@embed" and embed.slots == 4


def test_context_0_places_the_models_trained_context_over_its_kv_streams(
    catalog: Catalog, model_file: Path
) -> None:
    row = catalog.import_file(model_file, "m")
    assert row.context_length
    shared = placements(Config(ctx_size=0), catalog).place("m")  # "auto": 4 slots sharing one context
    assert shared.ctx_per_slot == row.context_length
    split = placements(Config(ctx_size=0, models={"m:latest": ModelOverride(parallel=2)}), catalog).place("m")
    assert split.ctx_per_slot == row.context_length // 2
    assert placements(Config(ctx_size=0), catalog).place("ghost").ctx_per_slot == 0


def test_the_memo_holds_until_the_catalog_changes_or_its_time_is_up(
    catalog: Catalog, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.import_file(model_file, "m")
    places = placements(Config(), catalog)
    first = places.place("m")
    assert places.place("m") is first  # memoised
    assert places.place("m", fresh=True) is not first
    catalog.copy("m", "n")  # this process changed a row: the generation moved
    kept = places.place("m")
    assert kept is not first and kept == first  # read again, and the same answer
    assert places.place("m") is kept
    clock = [placement.time.monotonic() + placement.PLACE_MEMO_SECS + 1]
    monkeypatch.setattr(placement.time, "monotonic", lambda: clock[0])
    assert places.place("m") is not kept  # read again once its time is up


def test_adapters_and_unknown_names_are_read_each_time(
    catalog: Catalog, model_file: Path, tmp_path: Path
) -> None:
    catalog.import_file(model_file, "base")
    lora = tmp_path / "a.gguf"
    lora.write_bytes(lora_gguf("llama", 2, 576, {"attn_q": 576, "attn_v": 192}))
    Loras(catalog).add(lora, "base", "pirate")
    places = placements(Config(), catalog)
    p = places.place("pirate")
    assert p.adapter is not None and p.row is None and p.key == "base:latest"
    assert places.place("pirate") is not p
    ghost = places.place("ghost")
    assert ghost.row is None and ghost.engine_row is None and places.place("ghost") is not ghost
