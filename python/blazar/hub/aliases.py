"""Data: Ollama-style short names for ``blazar pull``, each a real Hub repo and a GGUF file as published there.

Only data lives here (``pull`` reads it). Keep the table small and honest: every entry names a public,
ungated repo and a file name copied from its file list; prefer the Q4_K_M quantization. The weights behind a
name are the Hub's, not Ollama's blobs, so the quantization can differ from what Ollama serves under the same
name.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple


class Alias(NamedTuple):
    repo_id: str
    file: str


ALIASES: MappingProxyType[str, Alias] = MappingProxyType(
    {
        "smollm2:135m": Alias("bartowski/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q4_K_M.gguf"),
        "qwen2.5:0.5b": Alias("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf"),
        "llama3.2:1b": Alias("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf"),
        "llama3.2:3b": Alias("bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q4_K_M.gguf"),
        "gemma3:1b": Alias("ggml-org/gemma-3-1b-it-GGUF", "gemma-3-1b-it-Q4_K_M.gguf"),
        "phi4-mini:latest": Alias(
            "bartowski/microsoft_Phi-4-mini-instruct-GGUF", "microsoft_Phi-4-mini-instruct-Q4_K_M.gguf"
        ),
    }
)
"""Catalog name (``name:tag``, normalised) -> where its weights come from."""
