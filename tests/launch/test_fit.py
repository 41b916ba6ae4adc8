"""KV-cache estimation and context fitting: the formula on synthetic architectures, the fitting rules on fake
machines, and the estimate checked against what the real llama-server allocates for SmolLM2."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from blazar._native import read_gguf_metadata
from blazar.launch.fit import (
    FIT_MIN_CTX,
    MIB,
    FitRequest,
    KvSettings,
    KvShape,
    ProfileUnfit,
    compute_bytes,
    effective_ctx,
    fit,
    kv_bytes,
    kv_shape,
    row_bytes,
)
from blazar.launch.hardware import Gpu, Hardware
from tests.conftest import Assets, free_port

GIB = 1 << 30


def hw(ram_available: int, gpus: tuple[int, ...] = ()) -> Hardware:
    return Hardware(
        gpus=tuple(Gpu(i, "Test GPU", free, free) for i, free in enumerate(gpus)),
        driver="1.0" if gpus else None,
        gpu_note="" if gpus else "no GPU in this test",
        cpu_model="test CPU",
        cpu_cores=2,
        cpu_threads=2,
        ram_total=ram_available,
        ram_available=ram_available,
    )


def llama_md(**extra: object) -> dict[str, object]:
    """A small llama-like model: 4 layers, 8 heads, 2 KV heads, head dim 64, trained ctx 8192."""
    md: dict[str, object] = {
        "general.architecture": "llama",
        "llama.block_count": 4,
        "llama.context_length": 8192,
        "llama.embedding_length": 512,
        "llama.feed_forward_length": 1024,
        "llama.attention.head_count": 8,
        "llama.attention.head_count_kv": 2,
        "llama.vocab_size": 1000,
    }
    md.update(extra)
    return md


@pytest.fixture(scope="module")
def smollm2(model_file: Path) -> KvShape:
    md = read_gguf_metadata(str(model_file))["metadata"]
    assert isinstance(md, dict)
    return kv_shape(md)


# --- the formula -------------------------------------------------------------------------------------------


def test_smollm2_shape(smollm2: KvShape) -> None:
    assert (smollm2.architecture, smollm2.n_layer, smollm2.trained_ctx) == ("llama", 30, 8192)
    assert {(layer.k, layer.v, layer.swa) for layer in smollm2.layers} == {(192, 192, False)}
    assert len(smollm2.layers) == 30 and smollm2.n_vocab == 49152


def test_row_bytes_and_padding() -> None:
    assert row_bytes("f16", 192) == 384
    assert row_bytes("q8_0", 192) == 6 * 34
    assert row_bytes("q4_0", 192) == 6 * 18
    assert row_bytes("f32", 3) == 12
    assert effective_ctx(4096, 1) == 4096
    assert effective_ctx(4097, 1) == 4352
    assert effective_ctx(1000, 3) == 1536  # pad256(1024 / 3) = 512 cells per stream
    assert effective_ctx(8192, 4) == 8192


def test_dense_kv_bytes() -> None:
    shape = kv_shape(llama_md())
    per_cell = 4 * 2 * (2 * 64) * 2  # layers * (K+V) * kv width * f16
    assert kv_bytes(shape, 4096, KvSettings()) == 4096 * per_cell
    assert kv_bytes(shape, 4096, KvSettings(parallel=4)) == 4096 * per_cell
    q8 = kv_bytes(shape, 4096, KvSettings(cache_type_k="q8_0", cache_type_v="q8_0"))
    assert q8 == 4096 * 4 * 2 * (128 // 32 * 34)


def test_explicit_head_dims_and_per_layer_kv_heads() -> None:
    shape = kv_shape(
        llama_md(**{"llama.attention.key_length": 128, "llama.attention.value_length": 96})
        | {"llama.attention.head_count_kv": [2, 0, 4, 2]}
    )
    assert [(layer.k, layer.v) for layer in shape.layers] == [(256, 192), (512, 384), (256, 192)]


def test_mla_keeps_no_v() -> None:
    shape = kv_shape(
        {
            "general.architecture": "deepseek2",
            "deepseek2.block_count": 2,
            "deepseek2.embedding_length": 1024,
            "deepseek2.attention.head_count": 16,
            "deepseek2.attention.head_count_kv": 1,
            "deepseek2.attention.key_length": 576,
            "deepseek2.attention.value_length": 512,
            "deepseek2.attention.key_length_mla": 192,
        }
    )
    assert [(layer.k, layer.v) for layer in shape.layers] == [(576, 0), (576, 0)]
    assert kv_bytes(shape, 1024, KvSettings()) == 1024 * 2 * 576 * 2


def gemma3_md(n_layer: int = 12, window: int = 512) -> dict[str, object]:
    return {
        "general.architecture": "gemma3",
        "gemma3.block_count": n_layer,
        "gemma3.context_length": 32768,
        "gemma3.embedding_length": 640,
        "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 256,
        "gemma3.attention.sliding_window": window,
    }


def test_sliding_window_layers_hold_only_the_window() -> None:
    shape = kv_shape(gemma3_md())
    # gemma3: 5 sliding-window layers, then one global layer
    assert [layer.swa for layer in shape.layers] == [True] * 5 + [False] + [True] * 5 + [False]
    row = 2 * 256 * 2  # K+V, f16
    swa_cells = 1024  # pad256(min(8192, 512 + 512 ubatch))
    assert kv_bytes(shape, 8192, KvSettings()) == (2 * 8192 + 10 * swa_cells) * row
    assert kv_bytes(shape, 8192, KvSettings(swa_full=True)) == 12 * 8192 * row
    # a small context caps the window cache too
    assert kv_bytes(shape, 512, KvSettings()) == 12 * 512 * row
    # each stream keeps its own window
    assert kv_bytes(shape, 8192, KvSettings(parallel=2)) == 2 * (2 * 4096 + 10 * swa_cells) * row


def test_window_pattern_from_metadata_wins_and_unknown_archs_ignore_the_window() -> None:
    md = gemma3_md(n_layer=4) | {"gemma3.attention.sliding_window_pattern": [True, False, False, True]}
    assert [layer.swa for layer in kv_shape(md).layers] == [True, False, False, True]
    md = gemma3_md(n_layer=4) | {"gemma3.attention.sliding_window_pattern": 2}
    assert [layer.swa for layer in kv_shape(md).layers] == [True, False, True, False]
    # llama.cpp ignores sliding_window for architectures without sliding-window layers
    assert not kv_shape(llama_md(**{"llama.attention.sliding_window": 4096})).has_swa
    assert not kv_shape(gemma3_md(window=0)).has_swa


def test_shared_kv_layers_own_no_cache() -> None:
    md = gemma3_md(n_layer=6) | {"gemma3.attention.shared_kv_layers": 2}
    assert len(kv_shape(md).layers) == 4


def test_bad_metadata_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="architecture"):
        kv_shape({})
    with pytest.raises(ValueError, match="block_count"):
        kv_shape({"general.architecture": "llama"})


# --- fitting -----------------------------------------------------------------------------------------------


def request(
    shape: KvShape, *, weights: int = 100 * MIB, ctx: int = 0, gpu_layers: int = -1, **s: object
) -> FitRequest:
    return FitRequest(
        model="m:latest",
        shape=shape,
        weights=weights,
        requested_ctx=ctx,
        settings=KvSettings(**s),  # type: ignore[arg-type]
        gpu_layers=gpu_layers,
    )


def test_requested_context_when_it_fits(smollm2: KvShape) -> None:
    f = fit(request(smollm2, ctx=4096), hw(8 * GIB), headroom=GIB)
    assert f.refusal is None
    est = f.require()
    assert (est.ctx_size, est.placement, est.reduced) == (4096, "cpu", False)
    assert est.kv == 90 * MIB and est.total == est.weights + est.kv + est.compute


def test_zero_means_the_trained_context(smollm2: KvShape) -> None:
    assert fit(request(smollm2), hw(8 * GIB), headroom=0).require().ctx_size == 8192


def test_largest_context_that_fits(smollm2: KvShape) -> None:
    # room for weights + compute + about 1000 cells of 22.5 KiB each
    base = fit(request(smollm2, ctx=256), hw(8 * GIB), headroom=0).require()
    room = base.weights + base.compute + 1000 * 23040
    est = fit(request(smollm2, ctx=8192), hw(room), headroom=0).require()
    assert (est.ctx_size, est.reduced) == (768, True)
    est = fit(request(smollm2, ctx=8192, parallel=2), hw(room), headroom=0).require()
    assert est.ctx_size == 512 and est.ctx_per_slot == 256  # a multiple of 256 per slot
    assert est.weights + est.kv + est.compute <= room


def test_refusal_names_the_levers(smollm2: KvShape) -> None:
    f = fit(request(smollm2, ctx=4096), hw(110 * MIB), headroom=0)
    assert f.refusal is not None
    for lever in ("ctx_size", "cache_type_k/cache_type_v", '"q8_0"', "gpu_layers", "parallel", "m:latest"):
        assert lever in f.refusal, f.refusal
    with pytest.raises(ProfileUnfit) as exc:
        f.require()
    assert exc.value.status == 503 and str(exc.value) == f.refusal
    # weights alone too big: the lever is the model's quantization
    f = fit(request(smollm2, weights=4 * GIB), hw(2 * GIB), headroom=0)
    assert f.refusal is not None and "smaller quantization" in f.refusal


def test_headroom_is_left_free(smollm2: KvShape) -> None:
    need = fit(request(smollm2, ctx=4096), hw(8 * GIB), headroom=0).require().total
    assert fit(request(smollm2, ctx=4096), hw(need), headroom=0).refusal is None
    assert fit(request(smollm2, ctx=4096), hw(need), headroom=64 * MIB).require().ctx_size < 4096


def test_quantized_kv_fits_a_larger_context(smollm2: KvShape) -> None:
    room = 100 * MIB + 17 * MIB + 1500 * 23040
    f16 = fit(request(smollm2, ctx=8192), hw(room), headroom=0).require().ctx_size
    q4 = fit(request(smollm2, ctx=8192, cache_type_k="q4_0", cache_type_v="q4_0"), hw(room), headroom=0)
    assert q4.require().ctx_size > 3 * f16


def test_settings_llama_cpp_refuses() -> None:
    shape = kv_shape(llama_md())
    with pytest.raises(ProfileUnfit, match="flash attention"):
        fit(request(shape, cache_type_v="q8_0", flash_attn="off"), hw(8 * GIB), headroom=0)
    odd = kv_shape(llama_md(**{"llama.attention.key_length": 40, "llama.attention.value_length": 40}))
    with pytest.raises(ProfileUnfit, match="multiple of 32"):
        fit(request(odd, cache_type_k="q8_0"), hw(8 * GIB), headroom=0)


def test_gpu_placements(smollm2: KvShape) -> None:
    big = 4 * GIB
    est = fit(request(smollm2, ctx=8192), hw(big, gpus=(big,)), headroom=0).require()
    assert (est.placement, est.ctx_size, est.available) == ("gpu", 8192, big)
    gpu_compute = compute_bytes(smollm2, 8192, KvSettings(), on_gpu=True)
    # the GPU holds the weights but not 8192 cells: shrink, but not below the soft floor
    vram = 100 * MIB + gpu_compute + 5000 * 23040
    est = fit(request(smollm2, ctx=8192), hw(big, gpus=(vram,)), headroom=0).require()
    assert est.placement == "gpu" and FIT_MIN_CTX <= est.ctx_size < 8192
    # below the floor on the GPU: layers spill to RAM (llama.cpp's own fitting) at the floor
    vram = 100 * MIB + gpu_compute + 2000 * 23040
    est = fit(request(smollm2), hw(big, gpus=(vram,)), headroom=0).require()
    assert (est.placement, est.ctx_size) == ("gpu+cpu", FIT_MIN_CTX)
    # gpu_layers 0: RAM only, even with a GPU
    est = fit(request(smollm2, gpu_layers=0), hw(big, gpus=(big,)), headroom=0).require()
    assert est.placement == "cpu"
    # an explicit split: both sides must hold their share
    est = fit(request(smollm2, ctx=4096, gpu_layers=15), hw(big, gpus=(big,)), headroom=0).require()
    assert est.placement == "gpu+cpu" and est.ctx_size == 4096
    # half the weights (50 MiB) and half the KV stay in RAM: 40 MiB of RAM holds no context at all
    f = fit(request(smollm2, ctx=4096, gpu_layers=15), hw(40 * MIB, gpus=(big,)), headroom=0)
    assert f.refusal is not None and "GPU memory and RAM" in f.refusal
    est = fit(request(smollm2, ctx=4096, gpu_layers=15), hw(60 * MIB, gpus=(big,)), headroom=0).require()
    assert est.ctx_size == 768 and est.reduced  # (60 - 50) MiB of RAM holds half of 768 cells' KV


# --- against the real engine -------------------------------------------------------------------------------

_KV_LINE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB")
_COMPUTE_LINE = re.compile(r"CPU compute buffer size = +([\d.]+) MiB")


def measure(assets: Assets, *args: str) -> tuple[float, float]:
    """Start llama-server until it logs its KV cache and compute buffer sizes (MiB), then stop it."""
    argv = [str(assets.llama_server), "-m", str(assets.model), "--port", str(free_port()), "-lv", "4", *args]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    kv = None
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if m := _KV_LINE.search(line):
                kv = float(m.group(1))
            elif (m := _COMPUTE_LINE.search(line)) and kv is not None:
                return kv, float(m.group(1))
        raise AssertionError(f"llama-server exited {p.wait()} without logging its KV cache and compute sizes")
    finally:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


@pytest.mark.parametrize(
    ("ctx", "parallel", "ctk", "ctv", "fa"),
    [
        (4096, 1, "f16", "f16", "auto"),
        (8192, 4, "q8_0", "q8_0", "on"),
        (1000, 3, "q4_0", "q4_0", "on"),
        (8192, 1, "f16", "f16", "off"),
    ],
)
def test_estimate_matches_the_real_engine(
    assets: Assets, smollm2: KvShape, ctx: int, parallel: int, ctk: str, ctv: str, fa: str
) -> None:
    """Measured on SmolLM2: the KV estimate is exact; the compute allowance is 1-2 MiB over."""
    s = KvSettings(cache_type_k=ctk, cache_type_v=ctv, flash_attn=fa, parallel=parallel)
    kv, compute = measure(
        assets, "-c", str(ctx), "-np", str(parallel), "-ctk", ctk, "-ctv", ctv, "-fa", fa, "--fit", "off"
    )
    estimate = kv_bytes(smollm2, ctx, s) / MIB
    assert abs(estimate - kv) <= 0.1 * kv, (estimate, kv)
    allowance = compute_bytes(smollm2, ctx, s, on_gpu=False) / MIB
    assert compute <= allowance <= 1.5 * compute, (allowance, compute)
