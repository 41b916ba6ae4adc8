"""Blazar's configuration: the public face of ``config.model`` (the values) and ``config.load`` (reading them).

It owns only the re-exported names. It must not do I/O at import time, hold a global loaded config, or
import ``blazar._native``; callers load a ``Config`` once with ``load_config`` and pass it down.
"""

from __future__ import annotations

from blazar.config.load import (
    CONFIG_ENV,
    KEYS_ENV,
    default_config_path,
    load_config,
    load_config_text,
    render_default_config,
)
from blazar.config.model import (
    DEFAULT_KEY_WEIGHT,
    DEFAULT_PORT,
    ENGINE_MODES,
    GENERATED_SECRET_PREFIX,
    KEY_NAME_MAX,
    KEY_NAME_PATTERN,
    LOG_LEVELS,
    MIN_SECRET_LEN,
    Config,
    KeyConfig,
    KeyLimits,
    ModelOverride,
    default_data_dir,
    normalize_model_name,
    redact_secret,
    secret_is_well_formed,
)

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_KEY_WEIGHT",
    "DEFAULT_PORT",
    "ENGINE_MODES",
    "GENERATED_SECRET_PREFIX",
    "KEYS_ENV",
    "KEY_NAME_MAX",
    "KEY_NAME_PATTERN",
    "LOG_LEVELS",
    "MIN_SECRET_LEN",
    "Config",
    "KeyConfig",
    "KeyLimits",
    "ModelOverride",
    "default_config_path",
    "default_data_dir",
    "load_config",
    "load_config_text",
    "normalize_model_name",
    "redact_secret",
    "render_default_config",
    "secret_is_well_formed",
]
