"""The routing matrix, pure over config, model and engine rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from blazar.catalog import ModelRow
from blazar.config import Config, ModelOverride
from blazar.engines.lanes import serving_lane
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError

MODEL = ModelRow(
    "m:latest", Path("/m.gguf"), "gguf", 1, "llama", 1, 2048, "Q4_1", True, "2026-01-01T00:00:00"
)


def eng(kind: str, tag: str = "t", active: bool = True) -> EngineRow:
    return EngineRow(kind, tag, None, Path(f"/{kind}"), "local", "cpu", None, active)


def test_gguf_prefers_llama_cpp() -> None:
    assert serving_lane(Config(), MODEL, [eng("mistralrs"), eng("llama-cpp")]).kind == "llama-cpp"


def test_inactive_engine_does_not_serve() -> None:
    with pytest.raises(LaneError, match="no llama-cpp engine is installed"):
        serving_lane(Config(), MODEL, [eng("llama-cpp", active=False)])


def test_missing_engine_teaches_install_and_roster() -> None:
    with pytest.raises(LaneError) as e:
        serving_lane(Config(), MODEL, [])
    msg = str(e.value)
    assert "model 'm:latest'" in msg and "blazar engine build --kind llama-cpp" in msg
    assert msg.endswith("installed engines: none")


def test_override_pin_wins() -> None:
    cfg = dataclasses.replace(Config(), models={"m:latest": ModelOverride(engine="mistralrs")})
    assert serving_lane(cfg, MODEL, [eng("llama-cpp"), eng("mistralrs")]).kind == "mistralrs"
    with pytest.raises(LaneError, match="blazar engine install --kind mistralrs"):
        serving_lane(cfg, MODEL, [eng("llama-cpp")])


def test_unknown_format() -> None:
    with pytest.raises(LaneError, match="format 'onnx'"):
        serving_lane(Config(), dataclasses.replace(MODEL, format="onnx"), [eng("llama-cpp")])
