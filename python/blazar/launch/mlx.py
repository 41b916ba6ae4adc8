"""The mlx lane's compiler (MLX directories, mlx-lm): no context flag, so ``ctx_size`` only bounds Blazar's prompt
preflight; ``parallel`` caps its decode and prompt batches; ``chat_template`` is the Jinja text itself. It checks no
API key and serves no embeddings.
"""

from __future__ import annotations

from blazar.catalog.models import ModelRow
from blazar.config import Config
from blazar.engines import argv
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError
from blazar.launch.hardware import Hardware
from blazar.launch.settings import model_settings
from blazar.launch.shared import (
    checked_template_file,
    is_jinja,
    lane_context,
    model_dir,
    no_embeddings,
    override_table,
)
from blazar.launch.spec import LaunchSpec


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
        raise no_embeddings("mlx", model)
    ov = cfg.model_override(model.name)
    template_file = checked_template_file(model, ov)
    template = ov.chat_template
    if template is not None and not is_jinja(template):
        raise LaneError(
            f"model '{model.name}': mlx-lm takes the chat template's Jinja text, not a template name like"
            f" '{template[:40]}'; set chat_template to the template itself or chat_template_file to a file"
            f" holding it, under {override_table(model)}"
        )
    if template_file is not None:
        try:
            template = template_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise LaneError(
                f"model '{model.name}': cannot read chat_template_file {template_file}: {e}"
            ) from None
    total, _per_request, parallel = lane_context(cfg, model, ctx_size)
    args = argv.mlx(
        engine.path, model_dir(model), port="{port}", concurrency=parallel, chat_template=template
    )
    return LaunchSpec(
        argv_template=(*args, *ov.extra_args),
        ctx_size=total,
        parallel=parallel,
        kv_unified=model_settings(cfg, model.name).kv_unified,
        engine_model=argv.ENGINE_MODEL["mlx"],
        checks_api_key=False,
    )
