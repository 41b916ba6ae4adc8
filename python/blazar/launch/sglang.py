"""The sglang lane's compiler (safetensors, quantized or not): one request's share of the context to
``--context-length``, ``parallel`` to ``--max-running-requests``; SGLang sizes its weights and KV pool itself, so there
is no memory estimate. The key reaches ``--api-key`` through the venv launcher (``engines/venv.py``), never on a
command line.
"""

from __future__ import annotations

import logging

from blazar.catalog.models import ModelRow
from blazar.config import Config
from blazar.engines import argv
from blazar.engines.registry import EngineRow
from blazar.engines.venv import reads_key_file
from blazar.errors import LaneError
from blazar.launch.hardware import Hardware
from blazar.launch.settings import model_settings
from blazar.launch.shared import (
    checked_template_file,
    is_jinja,
    lane_context,
    model_dir,
    override_table,
)
from blazar.launch.spec import LaunchSpec
from blazar.paths import safe_component

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
    ov = cfg.model_override(model.name)
    template_file = checked_template_file(model, ov)
    if ov.chat_template is not None and is_jinja(ov.chat_template):
        raise LaneError(
            f"model '{model.name}': SGLang takes a built-in template name or a template file as chat_template,"
            f" not inline Jinja; save the template to a file and set chat_template_file under"
            f" {override_table(model)}"
        )
    total, per_request, parallel = lane_context(cfg, model, ctx_size)
    keyed = reads_key_file(engine.path)
    if not keyed:
        log.warning(
            "sglang engine %s (%s) is not a Blazar launcher that reads a key file; the child for %s will check"
            " no API key (it listens on 127.0.0.1 only); reinstall it with: blazar engine install --kind sglang",
            engine.tag,
            engine.path,
            model.name,
        )
    served = safe_component(model.name)
    args = argv.sglang(
        engine.path,
        model_dir(model),
        port="{port}",
        api_key_file="{api_key_file}" if keyed else None,
        served_name=served,
        context_length=per_request,
        max_running_requests=parallel,
        chat_template=str(template_file) if template_file is not None else ov.chat_template,
        embeddings=embeddings,
    )
    return LaunchSpec(
        argv_template=(*args, *ov.extra_args),
        ctx_size=total,
        parallel=parallel,
        kv_unified=model_settings(cfg, model.name).kv_unified,
        engine_model=served,
        checks_api_key=keyed,
    )
