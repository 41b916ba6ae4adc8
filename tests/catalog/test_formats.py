"""What a weights file or model directory holds (``catalog/formats.py``): GGUF by suffix or magic, whisper.cpp's
ggml, plain and quantized safetensors, and MLX (checked first)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blazar.catalog.formats import detect_format
from blazar.errors import CatalogError


def hf_dir(root: Path, config: dict[str, object] | None, weights: str = "model.safetensors") -> Path:
    root.mkdir(parents=True)
    (root / weights).write_bytes(b"{}")
    if config is not None:
        (root / "config.json").write_text(json.dumps(config))
    return root


def test_detect_format(tmp_path: Path) -> None:
    gguf = tmp_path / "m.bin"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    assert detect_format(gguf) == "gguf"
    assert detect_format(hf_dir(tmp_path / "g", None, "m-00001-of-00002.gguf")) == "gguf"
    plain = hf_dir(tmp_path / "plain", {"architectures": ["LlamaForCausalLM"]})
    assert detect_format(plain) == "safetensors"
    assert detect_format(plain / "model.safetensors") == "safetensors"
    for method in ("awq", "gptq", "fp8"):
        d = hf_dir(tmp_path / method, {"quantization_config": {"quant_method": method, "bits": 4}})
        assert detect_format(d) == "safetensors-quantized"
    mlx = hf_dir(
        tmp_path / "mlx", {"quantization": {"group_size": 64, "bits": 4}, "quantization_config": {"bits": 4}}
    )
    assert detect_format(mlx) == "mlx", "the MLX axis is checked first so SGLang never shadows it"
    (tmp_path / "empty").mkdir()
    with pytest.raises(CatalogError, match=r"holds no \.gguf or \.safetensors files"):
        detect_format(tmp_path / "empty")
    (tmp_path / "x.onnx").write_bytes(b"onnx")
    with pytest.raises(CatalogError, match=r"neither GGUF nor \.safetensors"):
        detect_format(tmp_path / "x.onnx")
