"""What the compilers of the lanes beside llama-cpp share: the context of an engine that sizes its own memory
(``lane_context``, from ``config.json``'s trained context when ``ctx_size = 0``), the chat template checks, and the
teaching errors naming the model's override table.
"""

from __future__ import annotations

import json
from pathlib import Path

from blazar.catalog.models import ModelRow
from blazar.config import Config, ModelOverride
from blazar.errors import LaneError
from blazar.launch.settings import model_settings

_JINJA_MARKS = ("{%", "{{")


def override_table(model: ModelRow) -> str:
    return f'[models."{model.name}"] in config.toml'


def model_dir(model: ModelRow) -> Path:
    return model.path if model.path.is_dir() else model.path.parent


def trained_context(directory: Path) -> int:
    """The context a safetensors/MLX model was trained for: ``max_position_embeddings`` in its ``config.json``
    (or its ``text_config``, for multimodal ones); 0 when it says none."""
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return 0
    for table in (data, data.get("text_config") if isinstance(data, dict) else None):
        if isinstance(table, dict):
            value = table.get("max_position_embeddings")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


def lane_context(cfg: Config, model: ModelRow, ctx_size: int | None) -> tuple[int, int, int]:
    """``(total, per_request, parallel)`` for an engine that sizes its own memory. ``per_request`` is 0 when the
    context is left to the engine (``ctx_size = 0``); ``total`` is then the trained context per slot, so the
    prompt preflight still knows it (0 when unknown)."""
    st = model_settings(cfg, model.name)
    parallel, streams = max(st.parallel, 1), st.streams  # parallel = "auto": the slots share one context
    requested = st.ctx_size if ctx_size is None else ctx_size
    trained = trained_context(model_dir(model)) or (model.context_length or 0)
    if ctx_size is not None and trained and requested > trained * streams:
        requested = trained * streams  # a request's num_ctx never asks for more than the model was trained on
    if requested > 0:
        return requested, requested // streams, parallel
    return trained * streams, 0, parallel


def checked_template_file(model: ModelRow, ov: ModelOverride) -> Path | None:
    path = ov.chat_template_file
    if path is not None and not path.is_file():
        raise LaneError(
            f"model '{model.name}': chat_template_file {path} does not exist; fix or remove it under"
            f" {override_table(model)}"
        )
    if path is not None and ov.chat_template is not None:
        raise LaneError(
            f"model '{model.name}' sets both chat_template and chat_template_file, and its engine takes one"
            f" template; keep one of them under {override_table(model)}"
        )
    return path


def is_jinja(text: str) -> bool:
    return any(mark in text for mark in _JINJA_MARKS)


def no_embeddings(kind: str, model: ModelRow) -> LaneError:
    return LaneError(
        f"the {kind} lane serves chat and completions only, not embeddings, in this Blazar; ask the llama-cpp"
        f" or sglang lane for embeddings of model '{model.name}' (engine = \"llama-cpp\" under"
        f" {override_table(model)} for a GGUF)"
    )


def no_tokens(kind: str, model: ModelRow) -> LaneError:
    return LaneError(
        f"late_chunking needs per-token embeddings, which only the llama-cpp lane gives, but model"
        f" '{model.name}' runs on the {kind} lane; serve it with llama-cpp (engine = \"llama-cpp\" under"
        f' [models."{model.name}"] in config.toml, for a GGUF) or embed without late_chunking'
    )
