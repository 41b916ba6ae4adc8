"""What a model can do, from its files: the rules each engine applies, on metadata and on the real SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.catalog import capabilities
from blazar.catalog.capabilities import of_gguf, of_model
from blazar.catalog.models import ModelRow

CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
TOOLS = CHATML + "{% if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}"
QWEN3 = TOOLS + "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>{% endif %}"


@pytest.mark.parametrize(
    ("metadata", "template", "projector", "expected"),
    [
        ({"general.architecture": "llama"}, CHATML, False, ["completion"]),
        ({"general.architecture": "qwen3"}, TOOLS, False, ["completion", "tools"]),
        ({"general.architecture": "qwen3"}, QWEN3, False, ["completion", "tools", "thinking"]),
        # an embedding model declares its pooling; a reranker's is llama.cpp's RANK (4)
        ({"general.architecture": "bert", "bert.pooling_type": 2}, "", False, ["embedding"]),
        ({"general.architecture": "qwen3", "qwen3.pooling_type": 3}, TOOLS, False, ["embedding"]),
        ({"general.architecture": "bert", "bert.pooling_type": 4}, "", False, ["rerank"]),
        # fill-in-the-middle: the three token ids, under the current or the older keys
        (
            {"general.architecture": "qwen2", "tokenizer.ggml.fim_pre_token_id": 1,
             "tokenizer.ggml.fim_suf_token_id": 2, "tokenizer.ggml.fim_mid_token_id": 3},
            "", False, ["completion", "insert"],
        ),
        (
            {"general.architecture": "llama", "tokenizer.ggml.prefix_token_id": 1,
             "tokenizer.ggml.suffix_token_id": 2, "tokenizer.ggml.middle_token_id": 3},
            "", False, ["completion", "insert"],
        ),
        # or found in the vocabulary by llama.cpp's texts, all three needed
        (
            {"general.architecture": "qwen2",
             "tokenizer.ggml.tokens": ["a", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"]},
            "", False, ["completion", "insert"],
        ),
        (
            {"general.architecture": "deepseek2",
             "tokenizer.ggml.tokens": ["<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>",
                                       "<\uff5cfim\u2581end\uff5c>"]},
            "", False, ["completion", "insert"],
        ),
        (
            {"general.architecture": "qwen2", "tokenizer.ggml.tokens": ["<|fim_prefix|>", "<|fim_suffix|>"]},
            "", False, ["completion"],
        ),
        # vision: a projector loaded with it, or a vision tower in the GGUF itself
        ({"general.architecture": "gemma3"}, CHATML, True, ["completion", "vision"]),
        ({"general.architecture": "mllama", "mllama.vision.block_count": 8}, "", False, ["completion", "vision"]),
    ],
)  # fmt: skip
def test_the_rules(metadata: dict[str, object], template: str, projector: bool, expected: list[str]) -> None:
    assert of_gguf(metadata, template, projector=projector) == expected


def _row(path: Path, fmt: str = "gguf") -> ModelRow:
    return ModelRow(
        name="smollm2:latest", path=path, format=fmt, size_bytes=0, architecture="llama",
        parameter_count=None, context_length=None, quantization=None, has_chat_template=True,
        created_at="2026-01-01T00:00:00",
    )  # fmt: skip


def test_smollm2_completes_and_has_no_fim_tokens_nor_tools_in_its_template(model_file: Path) -> None:
    """SmolLM2's vocabulary has no FIM tokens (llama-server's /infill refuses it: tests/e2e/test_openai.py) and
    its template shows no tools; a template that does, given by config.toml, adds them."""
    assert of_model(_row(model_file), template=None, projector=False) == ["completion"]
    assert of_model(_row(model_file), template=TOOLS, projector=True) == ["completion", "tools", "vision"]


def test_a_file_is_read_once_per_version_and_again_when_it_changes(tmp_path: Path, model_file: Path) -> None:
    copy = tmp_path / "m.gguf"
    copy.write_bytes(model_file.read_bytes())
    before = capabilities._metadata.cache_info().misses
    of_model(_row(copy), template=None, projector=False)
    of_model(_row(copy), template=CHATML, projector=False)
    assert capabilities._metadata.cache_info().misses == before + 1
    kept = capabilities._metadata(copy, *capabilities._stamp(copy))
    assert kept["tokenizer.ggml.tokens"] == [] and not any(isinstance(v, list) and v for v in kept.values())
    copy.write_bytes(model_file.read_bytes() + b"\0" * 64)  # another version: size and mtime differ
    of_model(_row(copy), template=None, projector=False)
    assert capabilities._metadata.cache_info().misses == before + 2


def test_an_unreadable_file_and_other_formats(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    assert of_model(_row(bad), template=None, projector=False) == ["completion"]
    assert of_model(_row(bad, "whisper"), template=None, projector=False) == ["audio"]
    directory = tmp_path / "dir"
    directory.mkdir()
    (directory / "chat_template.jinja").write_text(TOOLS)
    # a safetensors directory: a generative model, its template read from the directory
    assert of_model(_row(directory, "safetensors"), template=None, projector=False) == ["completion", "tools"]
