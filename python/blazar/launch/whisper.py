"""The whisper lane's compiler: ``whisper-server`` for a whisper.cpp model, one transcription at a time, with
``threads``; it checks no API key.
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
    override_table,
)
from blazar.launch.spec import WHISPER_SERVER, LaunchSpec


def compile(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
) -> LaunchSpec:
    """whisper-server for a whisper.cpp model: one transcription at a time, ``threads`` as configured."""
    if model.format != "whisper":
        raise LaneError(
            f"the whisper lane serves whisper.cpp models (ggml .bin), and '{model.name}' is {model.format}; remove"
            f" the engine pin under {override_table(model)}"
        )
    if embeddings:
        raise LaneError(
            f"model '{model.name}' is a whisper.cpp speech model: it transcribes audio (POST"
            " /v1/audio/transcriptions) and has no embeddings"
        )
    ov = cfg.model_override(model.name)
    args = argv.whisper(
        engine.path, model.path, port="{port}", threads=model_settings(cfg, model.name).threads
    )
    return LaunchSpec(
        argv_template=(*args, *ov.extra_args), parallel=1, checks_api_key=False, can=WHISPER_SERVER
    )
