"""What a model can do, read from its own files: the capability names of Ollama's ``/api/show`` (``completion``,
``embedding``, ``tools``, ``insert``, ``vision``, ``thinking``) and ``rerank``, which ``/api/show`` and
``/v1/models`` report (the latter as llama-server's own model listing does, in ``capabilities``).

Owns the rules, each the one its engine applies: an embedding or reranking model declares a pooling type in its
GGUF (llama.cpp's ``<arch>.pooling_type``; 4 is ``LLAMA_POOLING_TYPE_RANK``), fill-in-the-middle needs the three
FIM tokens llama-server's ``/infill`` checks for (named in the metadata, or found in the vocabulary by the texts
llama.cpp's ``llama-vocab.cpp`` looks for), vision needs a projector (or a vision tower in the GGUF), tools and
thinking are what the chat template shows. Must not: start or ask an engine, or read a file twice for a model
that has not changed (the vocabulary is read once per file and kept by path, size and mtime).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from blazar.catalog.model_dir import chat_template
from blazar.catalog.models import ModelRow, read_header
from blazar.errors import CatalogError

POOLING_RANK = 4
"""llama.cpp's ``LLAMA_POOLING_TYPE_RANK``: the model scores (query, document) pairs, served by ``--reranking``."""

FIM_KEYS = (
    ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"),
    ("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"),
    ("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"),
)
"""The prefix, suffix and middle token ids, each under its current and its older GGUF key."""

FIM_TEXTS = (
    frozenset({"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim▁begin\uff5c>", "<PRE>", "▁<PRE>",
               "<|code_prefix|>", "<|prefix|>"}),
    frozenset({"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim▁hole\uff5c>", "<SUF>", "▁<SUF>",
               "<|code_suffix|>", "<|suffix|>"}),
    frozenset({"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim▁end\uff5c>", "<MID>", "▁<MID>",
               "<|code_middle|>", "<|middle|>"}),
)  # fmt: skip
"""The token texts llama.cpp (b11434) takes for the FIM tokens when the metadata names none (DeepSeek's with
full-width bars, U+FF5C)."""
_ALL_FIM = frozenset().union(*FIM_TEXTS)

_TOOLS = re.compile(r"\btools\b")
_THINKING = re.compile(r"enable_thinking|reasoning_content|<think>")

ORDER = ("completion", "embedding", "rerank", "tools", "insert", "vision", "thinking", "audio")


def of_gguf(metadata: Mapping[str, object], template: str, *, projector: bool) -> list[str]:
    """A GGUF model's capabilities from its metadata (its vocabulary included, for ``insert``), the chat template
    its engine applies and whether a projector is loaded with it."""
    arch = metadata.get("general.architecture")
    pooling = metadata.get(f"{arch}.pooling_type")
    caps = {"rerank" if pooling == POOLING_RANK else "embedding" if pooling is not None else "completion"}
    if "completion" in caps:
        caps |= _template_caps(template)
        if _fim(metadata):
            caps.add("insert")
    if projector or f"{arch}.vision.block_count" in metadata:
        caps.add("vision")
    return [c for c in ORDER if c in caps]


def of_model(m: ModelRow, *, template: str | None, projector: bool) -> list[str]:
    """``m``'s capabilities; ``template`` is the one config.toml starts its engine with (None: the model's own).
    A file that cannot be read says what its format alone says."""
    if m.format == "whisper":
        return ["audio"]
    if m.path.is_dir():  # safetensors / MLX: a generative model; its template says the rest
        caps = {"completion"} | _template_caps(template if template is not None else chat_template(m.path))
        if projector:
            caps.add("vision")
        return [c for c in ORDER if c in caps]
    try:
        metadata = _metadata(m.path, *_stamp(m.path))
    except (CatalogError, OSError):
        return ["completion"]
    own = metadata.get("tokenizer.chat_template")
    return of_gguf(metadata, template if template is not None else own if isinstance(own, str) else "",
                   projector=projector)  # fmt: skip


def _template_caps(template: str) -> set[str]:
    caps = set()
    if _TOOLS.search(template):
        caps.add("tools")
    if _THINKING.search(template):
        caps.add("thinking")
    return caps


def _fim(metadata: Mapping[str, object]) -> bool:
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = frozenset(t for t in tokens if isinstance(t, str)) if isinstance(tokens, list) else frozenset()
    return all(
        any(k in metadata for k in keys) or bool(texts & vocab)
        for keys, texts in zip(FIM_KEYS, FIM_TEXTS, strict=True)
    )


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@lru_cache(maxsize=256)
def _metadata(path: Path, size: int, mtime_ns: int) -> dict[str, object]:
    """The GGUF's metadata, read with its whole vocabulary (some 70 ms for a 50,000-token one) and kept per file
    version with only the vocabulary's FIM tokens and no other long array, so a listing reads each model once."""
    header = read_header(path, max_array_len=1 << 24)
    meta = header.get("metadata")
    if not isinstance(meta, dict):
        return {}
    tokens = meta.get("tokenizer.ggml.tokens")
    kept = {k: v for k, v in meta.items() if not isinstance(v, list)}
    if isinstance(tokens, list):
        kept["tokenizer.ggml.tokens"] = [t for t in tokens if t in _ALL_FIM]
    return kept
