"""The routing matrix (pure over config, model and engine rows) and unknown-architecture re-routing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from blazar.catalog.models import ModelRow
from blazar.config import Config, ModelOverride
from blazar.engines.lanes import (
    UnservedArchitecture,
    classify_unknown_arch,
    reroute_once,
    serving_lane,
)
from blazar.engines.manifest import parse_manifest
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


# --- the routing matrix ----------------------------------------------------------------------------------------


def row(kind: str, tag: str = "t", *, fork: bool = False, at: str | None = None, arches: tuple[str, ...] | None = None,
        created: str = "2026-01-01", active: bool = True) -> EngineRow:  # fmt: skip
    return EngineRow(kind, tag, None, Path(f"/{kind}/{tag}"), "install", "cpu", None, active,
                     "fork" if fork else "mainstream", arches, at, created)  # fmt: skip


def model(fmt: str, quant: str | None = None) -> ModelRow:
    return dataclasses.replace(MODEL, format=fmt, quantization=quant)


@pytest.mark.parametrize(
    ("fmt", "engines", "platform", "expected"),
    [
        ("gguf", [row("mistralrs"), row("llama-cpp")], None, "llama-cpp"),
        ("gguf", [row("mistralrs")], None, "mistralrs"),
        ("gguf", [row("llama-cpp", fork=True), row("mistralrs")], None, "mistralrs"),
        ("gguf", [row("llama-cpp", fork=True)], None, "llama-cpp"),
        ("safetensors-quantized", [row("mistralrs"), row("sglang")], None, "sglang"),
        ("mlx", [row("sglang"), row("mlx")], None, "mlx"),
        ("safetensors", [row("mistralrs"), row("sglang")], "linux-x86_64", "sglang"),
        ("safetensors", [row("mistralrs"), row("mlx")], "linux-x86_64", "mistralrs"),
        ("safetensors", [row("mistralrs"), row("mlx")], "darwin-arm64", "mlx"),
    ],
)  # fmt: skip
def test_auto_matrix(fmt: str, engines: list[EngineRow], platform: str | None, expected: str) -> None:
    assert serving_lane(Config(), model(fmt), engines, platform=platform).kind == expected


@pytest.mark.parametrize(
    ("fmt", "engines", "message"),
    [
        ("gguf", [row("sglang"), row("mlx")], "no llama-cpp engine is installed to serve model 'm:latest' (gguf)"),
        (
            "safetensors-quantized",
            [row("mistralrs"), row("llama-cpp")],
            "model 'm:latest' is quantized safetensors (awq), which only the sglang lane serves (Blazar never falls"
            " back to mistral.rs, whose AWQ/GPTQ/FP8 dequantization is broken); install it with: blazar engine"
            " install --kind sglang; installed engines: mistralrs t*, llama-cpp t*",
        ),
        (
            "mlx",
            [row("sglang"), row("mistralrs")],
            "model 'm:latest' is an MLX model directory, which only the mlx lane serves (mlx-lm, Apple silicon);"
            " install it with: blazar engine install --kind mlx; installed engines: sglang t*, mistralrs t*",
        ),
        ("safetensors", [row("mlx"), row("llama-cpp")], "no sglang engine is installed to serve model 'm:latest'"),
    ],
)  # fmt: skip
def test_matrix_refusals_teach(fmt: str, engines: list[EngineRow], message: str) -> None:
    for mode in ("auto", "manual"):
        cfg = dataclasses.replace(Config(), engine_mode=mode)
        with pytest.raises(LaneError) as e:
            serving_lane(cfg, model(fmt, "awq"), engines, platform="linux-x86_64")
        assert message in str(e.value)
        assert e.value.status == 503


def test_manual_mode_serves_the_engine_activated_last() -> None:
    engines = [row("llama-cpp", at="2026-01-01T00:00:00"), row("mistralrs", at="2026-02-01T00:00:00")]
    assert (
        serving_lane(dataclasses.replace(Config(), engine_mode="manual"), MODEL, engines).kind == "mistralrs"
    )
    assert serving_lane(Config(), MODEL, engines).kind == "llama-cpp"


def test_pins_by_kind_tag_and_kind_tag() -> None:
    engines = [row("llama-cpp", "b1", active=False), row("llama-cpp", "b2"), row("mistralrs", "b1")]

    def pinned(pin: str) -> EngineRow:
        cfg = dataclasses.replace(Config(), models={"m:latest": ModelOverride(engine=pin)})
        return serving_lane(cfg, model("safetensors-quantized"), engines)

    assert (pinned("llama-cpp").kind, pinned("llama-cpp").tag) == ("llama-cpp", "b2"), (
        "a pin beats the matrix"
    )
    assert (pinned("b2").kind, pinned("b2").tag) == ("llama-cpp", "b2")
    assert (pinned("llama-cpp:b1").tag, pinned("llama-cpp:b1").active) == ("b1", False)
    with pytest.raises(
        LaneError, match="pinned to engine tag 'b1', which several kinds use; pin it as KIND:TAG"
    ):
        pinned("b1")
    with pytest.raises(LaneError, match=r"pinned to engine 'b9' .* which is not installed"):
        pinned("b9")


# --- formats ---------------------------------------------------------------------------------------------------


# --- unknown architectures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stderr", "arch"),
    [
        ("llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'qwen3next'\n", "qwen3next"),
        (b"noise \xff\xfe\nunknown model architecture: 'gemma9'\n", "gemma9"),
        ("unknown model architecture: 'mod\u00e8le-\u00f1'", "mod\u00e8le-\u00f1"),
        ("unknown model architecture: 'e\u0301t\u00e9'", "\u00e9t\u00e9"),
        ("unknown model architecture: 'bad\ud800x'", "bad?x"),
        ("unknown model architecture: 'a\x07b'", "ab"),
        ("unknown model architecture: '" + "z" * 500 + "'", "z" * 64),
        ("unknown model architecture: 'old'\nunknown model architecture: 'new'\n", "new"),
        ("Error: Unknown GGUF architecture `deepseek4`", "deepseek4"),
        ("ValueError: Model architectures ['FooForCausalLM'] are not supported for now.", "FooForCausalLM"),
        ("The checkpoint you are trying to load has model type `bar` but Transformers does not recognize this architecture.", "bar"),
        ("ValueError: Model type baz not supported.", "baz"),
        ("ggml_cuda_init: failed to initialize CUDA: out of memory\n", None),
        ("", None),
    ],
)  # fmt: skip
def test_classify_unknown_arch(stderr: str | bytes, arch: str | None) -> None:
    assert classify_unknown_arch(stderr) == arch


def test_reroute_once_picks_an_advertising_lane() -> None:
    failed = row("llama-cpp", "b1")
    fork_old = row(
        "llama-cpp", "ik-old", fork=True, arches=("qwen3next",), created="2026-01-01", active=False
    )
    fork_new = row(
        "llama-cpp", "ik-new", fork=True, arches=("Qwen3Next",), created="2026-03-01", active=False
    )
    mistral = row("mistralrs", "m1", arches=("qwen3next",))
    assert reroute_once(MODEL, failed, [failed, fork_old, fork_new, mistral], "qwen3next") == mistral
    assert reroute_once(MODEL, failed, [failed, fork_old, fork_new], "qwen3next") == fork_new
    assert isinstance(
        reroute_once(MODEL, failed, [failed, row("sglang", arches=("qwen3next",))], "qwen3next"), LaneError
    )


def test_reroute_once_teaches_when_nothing_advertises(tmp_path: Path) -> None:
    failed = row("llama-cpp", "b1")
    m = parse_manifest(
        {"schema": 1, "lanes": {
            "llama-cpp": {"source": "official", "binary": "llama-server"},
            "mistralrs": {"source": "official", "binary": "mistralrs-server", "architectures": ["qwen3next"]},
        }},
        "test",
    )  # fmt: skip
    err = reroute_once(MODEL, failed, [failed], "qwen3next", manifest=m)
    assert isinstance(err, UnservedArchitecture) and err.status == 502
    assert str(err) == (
        "engine llama-cpp b1 does not know the 'qwen3next' architecture of model 'm:latest', and no installed lane"
        " advertises it; build a capability fork that supports it with: blazar engine build --kind llama-cpp"
        " --source DIR|TARBALL --fork --arch qwen3next; or install a curated lane that advertises it:"
        " blazar engine install --kind mistralrs"
    )
    mistral = row("mistralrs", "m1")  # installed, and the manifest says its lane advertises the architecture
    assert reroute_once(MODEL, failed, [failed, mistral], "qwen3next", manifest=m) == mistral
    again = reroute_once(MODEL, mistral, [failed, mistral], "qwen3next", manifest=m, already_rerouted=True)
    assert isinstance(again, UnservedArchitecture) and "even after one re-route" in str(again)
    huge = reroute_once(MODEL, failed, [failed], "x" * 10_000 + "'; rm -rf /")
    assert isinstance(huge, LaneError) and len(str(huge)) < 600 and "no curated lane" in str(huge)
