"""`blazar.catalog.quantize` with the real `llama-quantize` built beside the test llama-server, over a real catalog
(SQLite file, data dir) and the real SmolLM2 GGUF: the checks before a run, a run's progress and result, a
failed run and a cancelled one leaving nothing behind."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

import psutil
import pytest

from blazar.catalog import quantize
from blazar.catalog.models import Catalog
from blazar.engines import registry
from blazar.errors import CatalogError, ModelNotFound
from tests.conftest import Assets, children_named


def _engine(catalog: Catalog, binary: Path) -> None:
    registry.add(
        catalog.store, kind="llama-cpp", tag="b11434-cpu", path=binary, source="local", version="11434"
    )


@pytest.fixture
def smol(catalog: Catalog, assets: Assets) -> Catalog:
    """The catalog with SmolLM2 (Q4_1) as smollm2:q4_1 and the test engine, llama-quantize beside it."""
    _engine(catalog, assets.llama_server)
    catalog.import_file(assets.model, "smollm2:q4_1")
    return catalog


def _staged(catalog: Catalog) -> list[Path]:
    root = catalog.data.models / ".importing"
    return [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []


def _quantizers() -> list[psutil.Process]:
    """This test process's own llama-quantize children (another run's are not ours to count)."""
    return children_named(os.getpid(), "llama-quantize")


def test_types_and_names(smol: Catalog) -> None:
    assert quantize.parse_type(" q4_k_m ") == "Q4_K_M"
    with pytest.raises(quantize.QuantizeError, match="unknown quantization type 'q9_9': use one of Q4_0, "):
        quantize.parse_type("q9_9")
    src = smol.get("smollm2:q4_1")
    assert quantize.default_name(src, "Q8_0") == "smollm2:q8_0"  # a tag that named the old type
    smol.copy("smollm2:q4_1", "smollm2")
    assert quantize.default_name(smol.get("smollm2"), "Q8_0") == "smollm2:latest-q8_0"


def test_checks_before_anything_runs(smol: Catalog, assets: Assets, tmp_path: Path) -> None:
    with pytest.raises(quantize.QuantizeError, match=r"already quantized \(Q4_1\).*--allow-requantize"):
        quantize.plan(smol, smol.store, "smollm2:q4_1", "q8_0")
    with pytest.raises(quantize.QuantizeError, match="'smollm2:q4_1' is Q4_1 already"):
        quantize.plan(smol, smol.store, "smollm2:q4_1", "Q4_1", allow_requantize=True)
    with pytest.raises(ModelNotFound):
        quantize.plan(smol, smol.store, "nope", "q8_0", allow_requantize=True)
    smol.copy("smollm2:q4_1", "taken")
    with pytest.raises(CatalogError, match="model 'taken:latest' already exists; remove it first"):
        quantize.plan(smol, smol.store, "smollm2:q4_1", "q8_0", "taken", allow_requantize=True)
    # an engine with no llama-quantize beside it
    lone = tmp_path / "lone" / "llama-server"
    lone.parent.mkdir()
    shutil.copy2(assets.llama_server, lone)
    registry.delete(smol.store, "llama-cpp", "b11434-cpu")
    registry.add(smol.store, kind="llama-cpp", tag="lone", path=lone, source="local")
    with pytest.raises(
        quantize.QuantizeError, match=r"no llama-quantize beside the installed llama-cpp engines"
    ):
        quantize.plan(smol, smol.store, "smollm2:q4_1", "q8_0", allow_requantize=True)
    registry.delete(smol.store, "llama-cpp", "lone")
    with pytest.raises(quantize.QuantizeError, match="blazar engine install --kind llama-cpp"):
        quantize.plan(smol, smol.store, "smollm2:q4_1", "q8_0", allow_requantize=True)
    assert _staged(smol) == []


def test_quantizes_into_a_new_catalog_model(smol: Catalog) -> None:
    job = quantize.plan(smol, smol.store, "smollm2:q4_1", "q8_0", allow_requantize=True)
    assert job.status == "quantizing Q4_1 model to Q8_0"
    steps: list[tuple[int, int]] = []
    row = quantize.run(smol, job, lambda done, total: steps.append((done, total)))
    assert row.name == "smollm2:q8_0" and row.quantization == "Q8_0"
    assert row.architecture == "llama" and row.sha256 is not None and len(row.sha256) == 64
    assert row.size_bytes > smol.get("smollm2:q4_1").size_bytes  # 8 bits a weight against about 5
    total = steps[-1][1]
    assert (
        total > 100 and steps[-1] == (total, total) and [d for d, _ in steps] == sorted(d for d, _ in steps)
    )
    assert row.path.is_relative_to(smol.data.models) and _staged(smol) == []
    log = job.log.read_text(errors="replace")
    assert re.search(rf"^\[\s*{total}/\s*{total}\]", log, re.MULTILINE), log[
        -2000:
    ]  # the tool's own progress


def test_the_async_run_adds_the_model_and_a_closed_one_leaves_nothing(smol: Catalog) -> None:
    async def whole() -> list[tuple[int, int]]:
        job = quantize.plan(smol, smol.store, "smollm2:q4_1", "q5_0", allow_requantize=True)
        return [step async for step in quantize.run_async(smol, job)]

    steps = asyncio.run(whole())
    assert steps and steps[-1][0] == steps[-1][1]
    assert smol.get("smollm2:q5_0").quantization == "Q5_0"

    async def cut() -> None:
        job = quantize.plan(smol, smol.store, "smollm2:q4_1", "q6_k", allow_requantize=True)
        steps = quantize.run_async(smol, job)
        first = await anext(steps)
        assert first[0] < first[1]
        assert _quantizers(), "the tool should be running"
        with pytest.raises(CatalogError, match="is being made by another quantization now"):
            quantize.plan(smol, smol.store, "smollm2:q4_1", "q6_k", allow_requantize=True)
        await steps.aclose()  # the client left

    asyncio.run(cut())
    assert smol.find("smollm2:q6_k") is None
    assert _staged(smol) == []
    assert _quantizers() == []


def test_a_failing_tool_is_a_teaching_error_and_leaves_nothing(smol: Catalog, tmp_path: Path) -> None:
    # the weights cut short after they were imported (the catalog's file is a hard link to this copy)
    broken = tmp_path / "broken.gguf"
    shutil.copyfile(smol.get("smollm2:q4_1").path, broken)
    smol.import_file(broken, "broken:q4_1")
    with broken.open("r+b") as f:
        f.truncate(8 << 20)
    assert smol.get("broken:q4_1").path.stat().st_size == 8 << 20
    job = quantize.plan(smol, smol.store, "broken:q4_1", "q8_0", allow_requantize=True)
    with pytest.raises(
        quantize.QuantizeFailed, match=r"llama-quantize failed \(exit \d+\) quantizing 'broken:q4_1'"
    ) as failed:
        quantize.run(smol, job)
    assert failed.value.status == 500
    assert smol.find("broken:q8_0") is None and _staged(smol) == []
    message = str(failed.value)
    assert "full log: logs/quantize-broken--q8_0.log in blazar's data directory" in message
    assert str(smol.data.root) not in message  # the tool prints its files' paths: an HTTP error must not
