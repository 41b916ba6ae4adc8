"""whisper.cpp's model files (the ggml format before GGUF): whether a file is one, and what its header says.

A whisper model starts with the magic ``ggml`` (0x67676d6c, little-endian) and eleven int32 hyper-parameters;
the catalog records such a file with format ``whisper`` (served by the whisper lane, ``whisper-server``). Pure
reads of the first 48 bytes; it never loads the weights.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0x67676D6C
_HEADER = struct.Struct("<12i")

_SIZES = {4: "tiny", 6: "base", 12: "small", 24: "medium", 32: "large"}
"""Whisper's sizes by encoder layer count."""

_FTYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K",
           12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}  # fmt: skip
"""ggml's file types (``ggml_ftype``); whisper.cpp adds 1000 x its quantization version."""


@dataclass(frozen=True, slots=True)
class WhisperInfo:
    n_vocab: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int
    n_mels: int
    ftype: int

    @property
    def quantization(self) -> str:
        return _FTYPES.get(self.ftype % 1000, f"ftype {self.ftype}")

    @property
    def size(self) -> str:
        """``tiny``, ``base``, ... (``tiny.en`` for an English-only model: its smaller vocabulary)."""
        name = _SIZES.get(self.n_audio_layer, f"{self.n_audio_layer}-layer")
        return name if self.multilingual else f"{name}.en"

    @property
    def multilingual(self) -> bool:
        return self.n_vocab >= 51865

    def metadata(self) -> dict[str, object]:
        """What the catalog keeps of it (``models.metadata_json``)."""
        return {f"whisper.{k}": getattr(self, k) for k in self.__dataclass_fields__} | {
            "whisper.size": self.size
        }


def read(path: Path) -> WhisperInfo | None:
    """The header of a whisper.cpp model file, or None when ``path`` is not one."""
    try:
        with path.open("rb") as f:
            raw = f.read(_HEADER.size)
    except OSError:
        return None
    if len(raw) < _HEADER.size:
        return None
    magic, *params = _HEADER.unpack(raw)
    if magic != MAGIC or not all(0 < p < 1 << 24 for p in params[:10]):
        return None
    return WhisperInfo(*params)
