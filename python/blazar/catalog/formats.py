"""What a weights file or model directory holds: ``gguf``, ``whisper``, ``safetensors``,
``safetensors-quantized`` or ``mlx`` (``detect_format``).
The catalog records the format on each row; the routing matrix (``engines.lanes``) picks lanes by it.
"""

from __future__ import annotations

import json
from pathlib import Path

from blazar.errors import CatalogError


def _config_json(directory: Path) -> dict[str, object]:
    path = directory / "config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _safetensors_kind(config: dict[str, object]) -> str:
    mlx_quant = config.get("quantization")
    if isinstance(mlx_quant, dict) and "bits" in mlx_quant and "group_size" in mlx_quant:
        return "mlx"
    if isinstance(config.get("quantization_config"), dict):
        return "safetensors-quantized"
    return "safetensors"


def detect_format(path: Path) -> str:
    """``gguf``, ``whisper``, ``safetensors``, ``safetensors-quantized`` or ``mlx`` for a weights file or model
    directory.

    MLX is recognised by mlx-lm's ``quantization`` table (``bits``, ``group_size``) and checked first, so SGLang
    never shadows an MLX directory; any ``quantization_config`` (AWQ, GPTQ, FP8...) makes safetensors quantized.
    """
    path = Path(path)
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return "gguf"
        with path.open("rb") as f:
            magic = f.read(4)
        if magic == b"GGUF":
            return "gguf"
        if magic == b"lmgg":  # whisper.cpp's ggml magic, little-endian
            return "whisper"
        if path.suffix.lower() == ".safetensors":
            return _safetensors_kind(_config_json(path.parent))
        raise CatalogError(f"cannot tell the weight format of {path}: it is neither GGUF nor .safetensors")
    if path.is_dir():
        if any(path.glob("*.safetensors")):
            return _safetensors_kind(_config_json(path))
        if any(path.glob("*.gguf")):
            return "gguf"
        raise CatalogError(
            f"cannot tell the weight format of {path}: it holds no .gguf or .safetensors files"
        )
    raise CatalogError(f"{path} does not exist")
