"""`blazar.catalog.loras` over a real catalog (SQLite file, data dir, the real SmolLM2 GGUF as the base): what an adapter
file must be, where it goes, the one namespace with the catalog's models, and the order an engine loads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.catalog.loras import Loras
from blazar.catalog.models import Catalog
from blazar.errors import CatalogError, ModelNotFound
from tests.fakehub import lora_gguf, tiny_gguf

SMOL = {"attn_q": 576, "attn_v": 192}


def adapter(tmp: Path, name: str = "pirate.gguf", arch: str = "llama", seed: int = 0) -> Path:
    path = tmp / name
    path.write_bytes(lora_gguf(arch, 2, 576, SMOL, seed=seed))
    return path


@pytest.fixture
def loras(catalog: Catalog, model_file: Path) -> Loras:
    catalog.import_file(model_file, "smollm2")
    return Loras(catalog)


def test_add_list_and_remove(loras: Loras, tmp_path: Path) -> None:
    row = loras.add(adapter(tmp_path), "smollm2", "pirate", scale=0.5)
    assert (row.name, row.base, row.scale) == ("pirate:latest", "smollm2:latest", 0.5)
    assert row.path.parent == loras.catalog.data.models / ".loras" and row.path.name.startswith(
        "pirate--latest-"
    )
    assert row.path.stat().st_size == row.size_bytes and len(row.sha256) == 64
    assert row.path.name == f"pirate--latest-{row.sha256[:12]}.gguf"
    second = loras.add(adapter(tmp_path, "b.gguf", seed=1), "smollm2")  # named after the file
    assert second.name == "b:latest"
    assert [r.name for r in loras.for_base("smollm2:latest")] == ["pirate:latest", "b:latest"]  # load order
    assert [r.name for r in loras.list()] == ["b:latest", "pirate:latest"]
    gone = loras.remove("pirate")
    assert not gone.path.exists() and loras.find("pirate") is None
    with pytest.raises(ModelNotFound, match="LoRA adapter 'pirate' not found"):
        loras.remove("pirate")


def test_replace_swaps_an_adapter_and_a_failure_keeps_it(loras: Loras, tmp_path: Path) -> None:
    old = loras.add(adapter(tmp_path), "smollm2", "pirate")
    with pytest.raises(CatalogError, match="already exists"):
        loras.add(adapter(tmp_path, "b.gguf", seed=1), "smollm2", "pirate")  # without replace, as before
    with pytest.raises(CatalogError, match="not a LoRA adapter GGUF"):  # refused before anything changes
        junk = tmp_path / "junk.gguf"
        junk.write_bytes(tiny_gguf())
        loras.add(junk, "smollm2", "pirate", replace=True)
    assert loras.get("pirate") == old and old.path.is_file()
    with pytest.raises(ModelNotFound):  # a base that is not there: refused, the adapter kept
        loras.add(adapter(tmp_path, "b.gguf", seed=1), "ghost", "pirate", replace=True)
    assert loras.get("pirate") == old and old.path.is_file()
    new = loras.add(adapter(tmp_path, "b.gguf", seed=1), "smollm2", "pirate", replace=True)
    assert new.sha256 != old.sha256 and new.path.is_file() and not old.path.exists()
    assert [r.name for r in loras.list()] == ["pirate:latest"]
    same = loras.add(adapter(tmp_path, "b.gguf", seed=1), "smollm2", "pirate", replace=True)
    assert same.path == new.path and same.path.is_file()  # the same bytes again keep their file
    with pytest.raises(CatalogError, match="names a catalog model"):
        loras.add(adapter(tmp_path), "smollm2", "smollm2", replace=True)


def test_a_base_removed_while_its_adapter_is_added_gets_no_adapter(
    loras: Loras, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = loras._check_new

    def meanwhile(full: str) -> None:  # another process removes the base after the adapter's checks
        check(full)
        if loras.catalog.find("smollm2") is not None:
            loras.catalog.remove("smollm2")

    monkeypatch.setattr(loras, "_check_new", meanwhile)
    with pytest.raises(
        CatalogError, match="model 'smollm2:latest' was removed while adapter 'pirate:latest'"
    ):
        loras.add(adapter(tmp_path), "smollm2", "pirate")
    assert loras.list() == [] and not list((loras.catalog.data.models / ".loras").glob("*.gguf"))


def test_what_an_adapter_must_be(loras: Loras, tmp_path: Path, model_file: Path) -> None:
    with pytest.raises(CatalogError, match=r"is not a LoRA adapter GGUF .*convert_lora_to_gguf.py"):
        loras.add(model_file, "smollm2", "x")
    plain = tmp_path / "plain.gguf"
    plain.write_bytes(tiny_gguf())
    with pytest.raises(CatalogError, match="is not a LoRA adapter GGUF"):
        loras.add(plain, "smollm2", "x")
    with pytest.raises(
        CatalogError, match="an adapter for the 'qwen2' architecture, but 'smollm2:latest' is 'llama'"
    ):
        loras.add(adapter(tmp_path, "q.gguf", arch="qwen2"), "smollm2", "x")
    with pytest.raises(ModelNotFound):
        loras.add(adapter(tmp_path), "nope", "x")
    with pytest.raises(CatalogError, match="does not exist"):
        loras.add(tmp_path / "missing.gguf", "smollm2", "x")
    with pytest.raises(CatalogError, match="scale must be above 0 and at most 10"):
        loras.add(adapter(tmp_path), "smollm2", "x", scale=0)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(adapter(tmp_path).read_bytes()[:5000])
    with pytest.raises(CatalogError, match=r"truncated|not a usable GGUF"):
        loras.add(truncated, "smollm2", "x")
    assert loras.list() == [] and not list((loras.catalog.data.models / ".importing").glob("*/*"))


def test_one_namespace_with_the_catalog(loras: Loras, tmp_path: Path, model_file: Path) -> None:
    with pytest.raises(CatalogError, match="'smollm2:latest' names a catalog model"):
        loras.add(adapter(tmp_path), "smollm2", "smollm2")
    loras.add(adapter(tmp_path), "smollm2", "pirate")
    with pytest.raises(CatalogError, match="LoRA adapter 'pirate:latest' already exists"):
        loras.add(adapter(tmp_path, "p2.gguf", seed=3), "smollm2", "pirate")
    with pytest.raises(CatalogError, match="'PIRATE:latest' would share its files with 'pirate:latest'"):
        loras.add(adapter(tmp_path, "p3.gguf", seed=4), "smollm2", "PIRATE")  # case may not count on disk
    with pytest.raises(CatalogError, match="'Pirate:latest' would share its files with 'pirate:latest'"):
        loras.catalog.copy("smollm2", "Pirate")
    with pytest.raises(CatalogError, match="'pirate' is a LoRA adapter; the base must be the catalog model"):
        loras.add(adapter(tmp_path, "p4.gguf", seed=5), "pirate", "other")
    with pytest.raises(CatalogError, match="'pirate:latest' names a LoRA adapter; remove it first"):
        loras.catalog.import_file(model_file, "pirate")
    with pytest.raises(CatalogError, match="'pirate:latest' names a LoRA adapter"):
        loras.catalog.copy("smollm2", "pirate")
    with pytest.raises(CatalogError, match=r"model 'smollm2:latest' has LoRA adapters \(pirate:latest\)"):
        loras.catalog.remove("smollm2")
    loras.remove("pirate")
    loras.catalog.remove("smollm2")


def test_an_adapter_file_is_not_imported_as_a_model(catalog: Catalog, tmp_path: Path) -> None:
    """A LoRA adapter GGUF has no model of its own (no block count, no vocabulary): importing it as one is refused
    with the way to serve it, not accepted to fail at its first request."""
    with pytest.raises(
        CatalogError, match=r"pirate.gguf is a LoRA adapter \(general.type adapter\), not a model"
    ):
        catalog.import_file(adapter(tmp_path), "frompirate")
    assert catalog.list() == []


def test_an_adapter_name_given_where_a_model_is_expected_says_what_it_is(
    loras: Loras, tmp_path: Path
) -> None:
    loras.add(adapter(tmp_path), "smollm2", "pirate")
    for call in (lambda: loras.catalog.get("pirate"), lambda: loras.catalog.remove("pirate")):
        with pytest.raises(
            CatalogError, match=r"'pirate:latest' is a LoRA adapter over smollm2:latest, not a"
        ):
            call()
