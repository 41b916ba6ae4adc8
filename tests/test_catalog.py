"""The catalog over a real SQLite file and the real SmolLM2 GGUF."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from blazar.catalog import Catalog
from blazar.errors import CatalogError, ModelNotFound
from blazar.paths import DataDir
from blazar.store import Store


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    data = DataDir(tmp_path / "data").ensure()
    return Catalog(Store.open(data.db), data)


def test_import_ls_cp_rm(catalog: Catalog, model_file: Path) -> None:
    row = catalog.import_file(model_file)
    assert row.name == "smollm2-135m-instruct:q4_1"
    assert row.architecture == "llama" and row.quantization == "Q4_1" and row.has_chat_template
    assert row.context_length == 8192
    assert 130e6 < (row.parameter_count or 0) < 140e6
    assert os.stat(row.path).st_ino == os.stat(model_file).st_ino  # hard link, same filesystem

    alias = catalog.copy(row.name, "smol")
    assert alias.name == "smol:latest" and os.stat(alias.path).st_ino == os.stat(row.path).st_ino
    assert [m.name for m in catalog.list()] == ["smol:latest", "smollm2-135m-instruct:q4_1"]

    catalog.remove("smol")
    assert not alias.path.exists() and row.path.exists()
    with pytest.raises(ModelNotFound, match="model 'smol:latest' not found"):
        catalog.get("smol")


def test_duplicate_name_refused(catalog: Catalog, model_file: Path) -> None:
    catalog.import_file(model_file, "m")
    with pytest.raises(CatalogError, match="already exists"):
        catalog.import_file(model_file, "m:latest")


def test_corrupt_and_truncated_files_are_refused(catalog: Catalog, model_file: Path, tmp_path: Path) -> None:
    head = model_file.read_bytes()[:4096]
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(head[:1000])
    with pytest.raises(CatalogError, match="not a usable GGUF file"):
        catalog.import_file(cut)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04" + head[4:])
    with pytest.raises(CatalogError, match="not a usable GGUF file"):
        catalog.import_file(junk)
    assert catalog.list() == []
    with pytest.raises(CatalogError, match="does not exist"):
        catalog.import_file(tmp_path / "absent.gguf")
