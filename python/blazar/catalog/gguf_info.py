"""Summaries of GGUF metadata for people and the catalog: architecture, size, context, quantization.

It interprets the dict returned by ``blazar._native.read_gguf_metadata``; it never reads files itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# llama.cpp's LLAMA_FTYPE numbering for general.file_type.
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M",
    30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class GgufSummary:
    architecture: str | None
    name: str | None
    parameter_count: int
    context_length: int | None
    embedding_length: int | None
    block_count: int | None
    quantization: str | None
    has_chat_template: bool
    version: int
    tensor_count: int


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def summarize(header: Mapping[str, object]) -> GgufSummary:
    meta = header.get("metadata")
    md: Mapping[str, object] = meta if isinstance(meta, Mapping) else {}
    arch = md.get("general.architecture")
    arch_s = arch if isinstance(arch, str) else None
    ft = _int(md.get("general.file_type"))
    quant = FILE_TYPES.get(ft) if ft is not None else None
    if quant is None:
        types = header.get("tensor_types")
        if isinstance(types, Mapping) and types:
            # The dominant non-F32 tensor type names the quantization when file_type is absent.
            ranked = sorted(((int(n), str(t)) for t, n in types.items() if t != "F32"), reverse=True)
            quant = ranked[0][1] if ranked else "F32"
    name = md.get("general.name")
    return GgufSummary(
        architecture=arch_s,
        name=name if isinstance(name, str) else None,
        parameter_count=_int(header.get("parameter_count")) or 0,
        context_length=_int(md.get(f"{arch_s}.context_length")) if arch_s else None,
        embedding_length=_int(md.get(f"{arch_s}.embedding_length")) if arch_s else None,
        block_count=_int(md.get(f"{arch_s}.block_count")) if arch_s else None,
        quantization=quant,
        has_chat_template="tokenizer.chat_template" in md,
        version=_int(header.get("version")) or 0,
        tensor_count=_int(header.get("tensor_count")) or 0,
    )


def human_params(n: int) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}".rstrip("0").rstrip(".") + unit
    return str(n)
