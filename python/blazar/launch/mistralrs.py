"""The mistralrs lane's compiler (mistral.rs: GGUF, or safetensors when SGLang is absent): a GGUF's context fitted
to free memory from its metadata with an f16 KV cache (it takes none of llama.cpp's cache flags); one request's
share to ``--max-seq-len``, the whole to ``--pa-context-len``; ``gpu_layers = 0`` is ``--cpu``. The chat template is
a file. No thread flag, no API key check, no embeddings.
"""

from __future__ import annotations

import logging
from pathlib import Path

from blazar.catalog.models import ModelRow
from blazar.config import Config
from blazar.engines import argv
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError
from blazar.launch.fit import KvSettings
from blazar.launch.hardware import Hardware
from blazar.launch.settings import find_mmproj, fit_model, model_settings, shard_paths
from blazar.launch.shared import (
    checked_template_file,
    lane_context,
    no_embeddings,
    override_table,
)
from blazar.launch.spec import LaunchSpec

log = logging.getLogger("blazar.profile")


def compile(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
) -> LaunchSpec:
    if embeddings:
        raise no_embeddings("mistralrs", model)
    ov = cfg.model_override(model.name)
    st = model_settings(cfg, model.name)
    if ov.chat_template is not None and ov.chat_template_file is None:
        raise LaneError(
            f"model '{model.name}': mistral.rs takes a chat template as a file (.jinja, or a tokenizer_config"
            f" .json), not a name or inline text; save it to a file and set chat_template_file under"
            f" {override_table(model)}"
        )
    template = checked_template_file(model, ov)
    estimate = None
    gguf_files: list[Path] = []
    if model.format == "gguf":
        # mistral.rs keeps an f16 (or the model's bf16) cache with sliding-window layers rotating, which is what the
        # llama.cpp estimate computes without swa_full; it loads a sibling projector on its own.
        kv = KvSettings(cache_type_k="f16", cache_type_v="f16", flash_attn="auto", parallel=st.parallel,
                      unified=st.kv_unified)  # fmt: skip
        estimate = fit_model(
            cfg, model, hardware=hardware, ctx_size=ctx_size, mmproj=find_mmproj(model.path), settings=kv
        ).require()
        if estimate.reduced:
            log.warning("%s: context %d does not fit in free memory; using %d (%s)",
                        model.name, estimate.requested_ctx, estimate.ctx_size, estimate.placement)  # fmt: skip
        total, per_request, parallel = estimate.ctx_size, estimate.ctx_per_slot, estimate.parallel
        gguf_files = shard_paths(model.path)
    else:
        total, per_request, parallel = lane_context(cfg, model, ctx_size)
    args = argv.mistralrs(
        engine.path,
        model.path,
        port="{port}",
        gguf_files=gguf_files,
        max_seqs=parallel,
        max_seq_len=per_request,
        kv_tokens=total if per_request > 0 else 0,
        cpu=st.gpu_layers == 0,
        chat_template_file=template,
    )
    return LaunchSpec(
        argv_template=(*args, *ov.extra_args),
        ctx_size=total,
        parallel=parallel,
        kv_unified=st.kv_unified,
        estimate=estimate,
        engine_model=argv.ENGINE_MODEL["mistralrs"],
        checks_api_key=False,
    )
