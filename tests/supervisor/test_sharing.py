"""`supervisor.sharing` over a real catalog (SQLite file, the real SmolLM2 GGUF): which names share an engine."""

from __future__ import annotations

import shutil
from pathlib import Path

from blazar.catalog.loras import Loras
from blazar.catalog.models import Catalog
from blazar.config import Config
from blazar.config.model import ModelOverride
from blazar.store import Store
from blazar.supervisor.sharing import Sharing
from tests.fakehub import lora_gguf


def dated(catalog: Catalog, *names: str) -> None:
    """Give the models ``names`` creation times a day apart, in that order, instead of sleeping between their
    imports until the clock moves on."""
    with catalog.store.transaction():
        for day, name in enumerate(names, 1):
            catalog.store.conn.execute(
                "UPDATE models SET created_at = ? WHERE name = ?",
                (f"2025-01-{day:02d}T00:00:00+00:00", f"{name}:latest"),
            )
    assert [catalog.get(name).created_at[:10] for name in names] == [
        f"2025-01-{d:02d}" for d in range(1, len(names) + 1)
    ]


def test_copies_share_the_oldest_ones_engine_unless_their_settings_differ(
    catalog: Catalog, model_file: Path, tmp_path: Path
) -> None:
    catalog.import_file(model_file, "base")
    catalog.copy("base", "persona")
    dated(catalog, "base", "persona")  # created_at orders them
    catalog.set_preset("persona", {"system": "Be brief."})
    other = tmp_path / "other.gguf"
    shutil.copyfile(model_file, other)  # the same bytes in a file of its own: not the same file
    catalog.import_file(other, "separate")
    sharing = Sharing(Config(), catalog)
    assert sharing.owner("persona:latest") == "base:latest"
    assert sharing.owner("base:latest") == "base:latest"
    assert sharing.owner("separate:latest") == "separate:latest"
    assert sharing.owner("ghost:latest") == "ghost:latest"
    # its own [models."persona"] settings: an engine of its own
    tuned = Config(models={"persona:latest": ModelOverride(ctx_size=1024)})
    assert Sharing(tuned, catalog).owner("persona:latest") == "persona:latest"
    # the owner removed: the copy runs its own engine
    catalog.remove("base")
    assert sharing.owner("persona:latest") == "persona:latest"


def test_a_model_with_adapters_keeps_its_own_engine(
    catalog: Catalog, model_file: Path, tmp_path: Path
) -> None:
    catalog.import_file(model_file, "base")
    catalog.copy("base", "tuned")
    dated(catalog, "base", "tuned")
    sharing = Sharing(Config(), catalog)
    assert sharing.owner("tuned:latest") == "base:latest"
    lora = tmp_path / "a.gguf"
    lora.write_bytes(lora_gguf("llama", 2, 576, {"attn_q": 576, "attn_v": 192}))
    loras = Loras(catalog)
    loras.add(lora, "tuned", "pirate")  # the adapters of 'tuned' load on its own engine
    assert sharing.owner("tuned:latest") == "tuned:latest"
    loras.remove("pirate")
    assert sharing.owner("tuned:latest") == "base:latest"


def test_a_change_from_another_process_is_seen(catalog: Catalog, model_file: Path) -> None:
    catalog.import_file(model_file, "base")
    catalog.copy("base", "persona")
    dated(catalog, "base", "persona")
    sharing = Sharing(Config(), catalog)
    assert sharing.owner("persona:latest") == "base:latest"
    with Store.open(catalog.data.db) as store:  # `blazar rm base` from the CLI
        Catalog(store, catalog.data).remove("base")
    assert sharing.owner("persona:latest") == "persona:latest"
