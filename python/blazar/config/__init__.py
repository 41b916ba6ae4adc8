"""Blazar's configuration: the public face of ``config.model`` (the values) and ``config.load`` (reading them).

It owns only the re-exported names. It must not do I/O at import time, hold a global loaded config, or
import ``blazar._native``; callers load a ``Config`` once with ``load_config`` and pass it down.
"""

from __future__ import annotations

from blazar.config.load import default_config_path, load_config, render_default_config
from blazar.config.model import (
    DEFAULT_PORT,
    ENGINE_MODES,
    LOG_LEVELS,
    Config,
    ModelOverride,
    default_data_dir,
    normalize_model_name,
)

__all__ = [
    "DEFAULT_PORT",
    "ENGINE_MODES",
    "LOG_LEVELS",
    "Config",
    "ModelOverride",
    "default_config_path",
    "default_data_dir",
    "load_config",
    "normalize_model_name",
    "render_default_config",
]
