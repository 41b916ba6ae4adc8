"""Model directories in the catalog, on real files: a safetensors folder (plain, AWQ-quantized, MLX, sharded with an
index) imported whole, with the format and lane the routing matrix gives it, the directory digest, cp and rm as
hard links, the refusals that teach, and an interrupted import that leaves nothing behind."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from blazar.catalog import files as catalog_files
from blazar.catalog import models as catalog_mod
from blazar.catalog.formats import detect_format
from blazar.catalog.model_dir import dir_digest, pick
from blazar.catalog.models import Catalog, model_digest
from blazar.config import Config
from blazar.engines.lanes import serving_lane
from blazar.engines.registry import EngineRow
from blazar.errors import CatalogError
from blazar.launch.compilers import compile_profile
from blazar.paths import DataDir
from blazar.store import Store
from tests.fakehub import safetensors_bytes, write_model_dir


def eng(kind: str) -> EngineRow:
    return EngineRow(kind, "t", None, Path(f"/engines/{kind}"), "local", "cpu", None, True)


ENGINES = [eng("llama-cpp"), eng("sglang"), eng("mlx"), eng("mistralrs")]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(catalog: Catalog) -> list[str]:
    return sorted(
        str(p.relative_to(catalog.data.models)) for p in catalog.data.models.rglob("*") if p.is_file()
    )


@pytest.mark.parametrize(
    ("kind", "fmt", "lane", "quant"),
    [
        ("plain", "safetensors", "sglang", "BF16"),
        ("awq", "safetensors-quantized", "sglang", "AWQ"),
        ("mlx", "mlx", "mlx", "4bit"),
    ],
)
def test_import_routes_and_compiles(
    catalog: Catalog, tmp_path: Path, kind: str, fmt: str, lane: str, quant: str
) -> None:
    src = write_model_dir(tmp_path / "Qwen2.5-0.5B-Instruct", kind)
    row = catalog.import_dir(src)
    assert row.name == "qwen2.5-0.5b-instruct:latest"
    assert row.path == catalog.data.models / "qwen2.5-0.5b-instruct" / "latest" and row.path.is_dir()
    assert (row.format, row.quantization, row.architecture, row.context_length) == (
        fmt,
        quant,
        "qwen2",
        32768,
    )
    assert row.has_chat_template and row.parameter_count == (64 * 32 if kind == "plain" else None)
    taken = sorted(p.name for p in row.path.iterdir())
    assert "README.md" not in taken and "model.safetensors" in taken and "tokenizer.json" in taken
    assert all((row.path / n).stat().st_ino == (src / n).stat().st_ino for n in taken)  # hard links
    assert row.size_bytes == sum((src / n).stat().st_size for n in taken)
    assert row.sha256 == dir_digest({n: _sha(src / n) for n in taken}) == model_digest(row.path)

    assert detect_format(row.path) == row.format
    chosen = serving_lane(Config(), row, ENGINES, platform="linux")
    assert chosen.kind == lane
    spec = compile_profile(Config(), row, chosen)
    flag = "--model-path" if lane == "sglang" else "--model"
    assert spec.argv_template[spec.argv_template.index(flag) + 1] == str(row.path)


def test_the_digest_is_sha256sum_lines(catalog: Catalog, tmp_path: Path) -> None:
    row = catalog.import_dir(write_model_dir(tmp_path / "m"), "m")
    lines = "".join(f"{_sha(p)}  {p.name}\n" for p in sorted(row.path.iterdir(), key=lambda p: p.name))
    assert row.sha256 == hashlib.sha256(lines.encode()).hexdigest()


def test_sharded_weights_follow_the_index(catalog: Catalog, tmp_path: Path) -> None:
    src = write_model_dir(tmp_path / "big", shards=3)
    (src / "consolidated.safetensors").write_bytes(safetensors_bytes({"w": ("F32", [4])}))
    row = catalog.import_dir(src, "big")
    names = sorted(p.name for p in row.path.iterdir())
    assert [n for n in names if n.endswith(".safetensors")] == [
        f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)
    ]
    assert "model.safetensors.index.json" in names and row.parameter_count == 3 * 64 * 32
    assert pick(["consolidated.safetensors", "config.json"]) == ["config.json", "consolidated.safetensors"]

    (src / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CatalogError, match=r"big is incomplete: model-00002-of-00003\.safetensors missing"):
        catalog.import_dir(src, "again")


def test_refusals_name_what_was_expected(catalog: Catalog, tmp_path: Path) -> None:
    empty = tmp_path / "notes"
    empty.mkdir()
    (empty / "README.md").write_text("hi")
    with pytest.raises(CatalogError) as e:
        catalog.import_dir(empty)
    msg = str(e.value)
    assert "expected a GGUF file, or a directory with config.json and *.safetensors weights" in msg
    assert msg.endswith("it has no config.json and *.safetensors weights")
    (empty / "config.json").write_text("{}")
    with pytest.raises(CatalogError, match=r"it has no \*\.safetensors weights$"):
        catalog.import_dir(empty)

    bad = write_model_dir(tmp_path / "bad")
    (bad / "model.safetensors").write_bytes(b"\0" * 8)
    with pytest.raises(CatalogError, match="is not a safetensors file: header length 0 is out of range"):
        catalog.import_dir(bad)
    cut = write_model_dir(tmp_path / "cut")
    whole = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(whole[:-10])
    with pytest.raises(CatalogError, match="is truncated: its header describes"):
        catalog.import_dir(cut)
    with pytest.raises(CatalogError, match="does not exist or is not a directory"):
        catalog.import_dir(tmp_path / "absent")
    assert catalog.list() == [] and _leftovers(catalog) == []


def test_cp_and_rm_keep_hard_link_semantics(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = write_model_dir(tmp_path / "m", "awq")
    first = catalog.import_dir(src, "m")

    def refuse(*_a: object, **_k: object) -> str:
        raise AssertionError("cp hashed the weights")

    monkeypatch.setattr(catalog_files, "sha256_file", refuse)
    second = catalog.copy("m", "n:awq")
    assert second.sha256 == first.sha256 and second.format == "safetensors-quantized"
    weights = second.path / "model.safetensors"
    assert weights.stat().st_ino == (first.path / "model.safetensors").stat().st_ino
    assert weights.stat().st_nlink == 3  # the source folder, m and n

    with pytest.raises(CatalogError, match="would share its files with 'm:latest'"):
        catalog.import_dir(src, "M")
    catalog.remove("m")
    assert not first.path.exists() and not first.path.parent.exists()
    assert weights.read_bytes() == (src / "model.safetensors").read_bytes()
    catalog.remove("n:awq")
    assert _leftovers(catalog) == [] and catalog.list() == []


def test_an_interrupted_copy_leaves_no_folder_and_no_row(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = write_model_dir(tmp_path / "m", shards=2)

    def cross_device(_src: object, _dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)  # copies, hashed as they are written
    seen: list[int] = []

    def interrupt(done: int, total: int) -> None:
        seen.append(done)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        catalog.import_dir(src, "m", progress=interrupt)
    assert catalog.find("m") is None and _leftovers(catalog) == []
    assert not (catalog.data.models / "m").exists()

    row = catalog.import_dir(src, "m", progress=lambda d, t: seen.append(d))
    assert seen[-1] == row.size_bytes  # progress runs over the whole folder
    assert all(p.stat().st_nlink == 1 for p in row.path.iterdir())  # copies
    assert row.sha256 == dir_digest({p.name: _sha(p) for p in row.path.iterdir()})  # hashed while copied


def test_a_killed_import_is_swept_and_an_orphan_folder_replaced(catalog: Catalog, tmp_path: Path) -> None:
    stale = catalog.data.models / ".importing" / "999999999-abc"  # no such process
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    orphan = catalog.data.models / "m" / "latest"  # renamed into place, then killed before the row
    orphan.mkdir(parents=True)
    (orphan / "config.json").write_text("{}")
    row = catalog.import_dir(write_model_dir(tmp_path / "src"), "m")
    assert not stale.exists() and (row.path / "config.json").read_bytes() != b"{}"
    assert sorted(p.name for p in (catalog.data.models / ".importing").iterdir()) == []


def test_digest_filled_lazily_for_a_folder(catalog: Catalog, tmp_path: Path) -> None:
    row = catalog.import_dir(write_model_dir(tmp_path / "m", "mlx"), "m")
    catalog.store.conn.execute("UPDATE models SET sha256 = NULL")
    bare = catalog.get("m")
    assert bare.sha256 is None and catalog.fill_digest(bare).sha256 == row.sha256


def test_two_imports_of_one_name_at_once_leave_the_first_intact(tmp_path: Path) -> None:
    """Both pass the early name check and copy side by side; the claim lets only one take the name, and the
    other is refused without touching its files or row."""
    import threading

    data = DataDir(tmp_path / "data").ensure()
    src = write_model_dir(tmp_path / "src")
    stores = [Store.open(data.db) for _ in range(2)]
    catalogs = [Catalog(st, data) for st in stores]
    barrier = threading.Barrier(2)
    results: list[object] = [None, None]
    real_link = catalog_mod.link_or_copy

    def slow_link(*a: Any, **kw: Any) -> Any:
        barrier.wait(timeout=10)  # both imports are past the early check and copying
        return real_link(*a, **kw)

    def run(i: int) -> None:
        try:
            results[i] = catalogs[i].import_dir(src, "race:x")
        except CatalogError as e:
            results[i] = e

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(catalog_mod, "link_or_copy", slow_link)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    errors = [r for r in results if isinstance(r, CatalogError)]
    assert len(errors) == 1 and "already exists" in str(errors[0]), results
    row = catalogs[0].get("race:x")
    assert (row.path / "config.json").read_bytes() == (src / "config.json").read_bytes()
    assert row.sha256 == model_digest(row.path)
    assert not any((data.models / ".importing").iterdir())
    for st in stores:
        st.close()
