"""Reading Blazar's config: locating the TOML file, parsing it with tomlkit, validating it, applying env overrides.

It owns the config-file search order, the top-level and per-model (``[models."name"]``) settings and how the
env overrides apply. The typed checks and the wording of a found value are ``config.checks``'; ``[[keys]]`` and
``BLAZAR_KEYS`` are ``config.api_keys``'; the document ``blazar config init`` writes is ``config.default_doc``'s.
It must not create or write files, start anything, touch the data dir, or import ``blazar._native``; every
failure is a one-line ``ConfigError``, never a raw traceback, and no message ever shows an API-key secret.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit

import tomlkit
import tomlkit.exceptions

from blazar.config.api_keys import KEYS_ENV, env_keys, file_keys, merge_keys, secret_problem
from blazar.config.checks import (
    Check,
    Ctx,
    boolean,
    choice,
    env_value,
    host_value,
    integer,
    is_host_text,
    number,
    path_value,
    quote_key,
    string,
    strings,
)
from blazar.config.default_doc import render_default_config
from blazar.config.model import (
    CACHE_TYPES,
    ENGINE_MODES,
    FLASH_ATTN_MODES,
    LOG_LEVELS,
    PARALLEL_AUTO,
    Config,
    ModelOverride,
    Parallel,
    default_data_dir,
    expand_user,
    normalize_model_name,
    xdg_config_home,
)
from blazar.config.remotes import file_pools, file_remotes, rpc_workers
from blazar.errors import ConfigError
from blazar.paths import MAX_REPLICAS

__all__ = [
    "CONFIG_ENV",
    "KEYS_ENV",
    "default_config_path",
    "load_config",
    "load_config_text",
    "render_default_config",
]

CONFIG_ENV = "BLAZAR_CONFIG"

INT_MAX = 2**31 - 1
"""The largest value llama-server takes for its int flags."""


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the config file is looked for: ``$BLAZAR_CONFIG``, else ``$XDG_CONFIG_HOME/blazar/config.toml``,
    else ``~/.config/blazar/config.toml``."""
    env = os.environ if env is None else env
    explicit = env_value(env, CONFIG_ENV)
    if explicit:
        return expand_user(explicit, env)
    return xdg_config_home(env) / "blazar" / "config.toml"


def _fraction(ctx: Ctx, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ctx.bad(key, "a number above 0 and at most 1", value)
    return float(value)


def _token_or_empty(ctx: Ctx, key: str, value: object) -> str:
    """A secret (``metrics_token``), refused without showing it."""
    if value == "":
        return ""
    problem = secret_problem(value)
    if problem is not None:
        raise ConfigError(f"{ctx.source}: key '{key}' {problem}")
    assert isinstance(value, str)
    return value


def _http_url_or_empty(ctx: Ctx, key: str, value: object) -> str:
    if value == "":
        return ""
    raw = string(ctx, key, value).strip()
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018  (read for its validation)
    except ValueError:
        parts = urlsplit("")
    if (
        not parts.hostname
        or parts.scheme not in ("http", "https")
        or parts.username
        or parts.password
        or parts.query
    ):
        # not repeated: a user, password or query in it may be a credential
        raise ConfigError(
            f"{ctx.source}: key '{key}' must be an http:// or https:// URL with no user, password or query, such"
            ' as "http://localhost:4318/v1/traces", or ""'
        )
    return raw


def _model_or_empty(ctx: Ctx, key: str, value: object) -> str:
    if value == "":
        return ""
    raw = string(ctx, key, value)
    try:
        return normalize_model_name(raw)
    except ValueError as exc:
        raise ConfigError(f"{ctx.source}: key '{key}' is not a valid model name: {exc}") from None


def _parallel(ctx: Ctx, key: str, value: object) -> Parallel:
    """``parallel``: ``"auto"`` (llama-server's own slot count over a shared context) or a number of slots."""
    if value == PARALLEL_AUTO:
        return PARALLEL_AUTO
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT_MAX:
        raise ctx.bad(key, f'"auto" or an integer between 1 and {INT_MAX}', value)
    return value


_TOP_LEVEL: dict[str, Check] = {
    "host": host_value,
    "port": lambda c, k, v: integer(c, k, v, 1, 65535),
    "data_dir": path_value,
    "idle_timeout_secs": lambda c, k, v: integer(c, k, v, 0),
    "idle_sleep_secs": lambda c, k, v: integer(c, k, v, 0, INT_MAX),  # llama-server reads an int
    "engine_metrics_secs": lambda c, k, v: integer(c, k, v, 0),
    "whisper_idle_secs": lambda c, k, v: integer(c, k, v, 0),
    # 1 cannot hold a warm-up's special tokens: llama-server aborts at start
    "late_chunking_max_tokens": lambda c, k, v: integer(c, k, v, 2, 1 << 20),
    "child_start_timeout_secs": lambda c, k, v: integer(c, k, v, 1),
    "child_header_timeout_secs": lambda c, k, v: integer(c, k, v, 1),
    "stop_grace_secs": lambda c, k, v: number(c, k, v, 0.0),
    "engine_mode": lambda c, k, v: choice(c, k, v, ENGINE_MODES),
    "cors_origins": strings,
    "log_level": lambda c, k, v: choice(c, k, v, LOG_LEVELS),
    # llama-server reads these as C ints: a larger value stops it at start ("stoi")
    "ctx_size": lambda c, k, v: integer(c, k, v, 0, INT_MAX),
    "parallel": _parallel,
    "threads": lambda c, k, v: integer(c, k, v, 0, INT_MAX),
    "gpu_layers": lambda c, k, v: integer(c, k, v, -1, INT_MAX),
    "queue_wait_secs": lambda c, k, v: integer(c, k, v, 0),
    "request_body_timeout_secs": lambda c, k, v: integer(c, k, v, 1),
    "semantic_cache": boolean,
    "semantic_cache_threshold": lambda c, k, v: _fraction(c, k, v),
    "semantic_cache_ttl_secs": lambda c, k, v: integer(c, k, v, 1),
    "semantic_cache_model": lambda c, k, v: _model_or_empty(c, k, v),
    "otlp_endpoint": lambda c, k, v: _http_url_or_empty(c, k, v),
    "metrics_token": lambda c, k, v: _token_or_empty(c, k, v),
    "session_keep_secs": lambda c, k, v: integer(c, k, v, 0),
    "engine_check_secs": lambda c, k, v: integer(c, k, v, 0),
    "audit": boolean,
    "sentinel": boolean,
    "sentinel_stall_secs": lambda c, k, v: number(c, k, v, 0.0),
    "sentinel_enforce": boolean,
    "cache_type_k": lambda c, k, v: choice(c, k, v, CACHE_TYPES),
    "cache_type_v": lambda c, k, v: choice(c, k, v, CACHE_TYPES),
    "flash_attn": lambda c, k, v: choice(c, k, v, FLASH_ATTN_MODES),
    "swa_full": boolean,
    "lookup_cache": boolean,
    "memory_headroom_mib": lambda c, k, v: integer(c, k, v, 0),
    "config_backups": lambda c, k, v: integer(c, k, v, 0),
}

_MODEL_LEVEL: dict[str, Check] = {
    "ctx_size": _TOP_LEVEL["ctx_size"],
    "parallel": _TOP_LEVEL["parallel"],
    "threads": _TOP_LEVEL["threads"],
    "gpu_layers": _TOP_LEVEL["gpu_layers"],
    "idle_timeout_secs": _TOP_LEVEL["idle_timeout_secs"],
    "idle_sleep_secs": _TOP_LEVEL["idle_sleep_secs"],
    "extra_args": strings,
    "engine": string,
    "cache_type_k": _TOP_LEVEL["cache_type_k"],
    "cache_type_v": _TOP_LEVEL["cache_type_v"],
    "flash_attn": _TOP_LEVEL["flash_attn"],
    "swa_full": boolean,
    "lookup_cache": boolean,
    "chat_template": string,
    "chat_template_file": path_value,
    "mmproj": path_value,
    "replicas": lambda ctx, key, value: integer(ctx, key, value, 1, MAX_REPLICAS),
    "rpc_workers": rpc_workers,
}

_TOP_KEYS: tuple[str, ...] = (*_TOP_LEVEL, "models", "keys", "remotes", "pools")
_MODEL_KEYS: tuple[str, ...] = tuple(_MODEL_LEVEL)


def _model_overrides(ctx: Ctx, value: object) -> Mapping[str, ModelOverride]:
    if not isinstance(value, dict):
        raise ctx.bad("models", 'a table of [models."name:tag"] tables', value)
    out: dict[str, ModelOverride] = {}
    written: dict[str, str] = {}
    for raw_name, table in value.items():
        name_path = f"models.{quote_key(raw_name)}"
        try:
            name = normalize_model_name(raw_name)
        except ValueError as exc:
            raise ConfigError(f"{ctx.source}: key '{name_path}' is not a valid model name: {exc}") from None
        if not isinstance(table, dict):
            raise ctx.bad(name_path, "a table of per-model settings", table)
        if name in written:
            raise ConfigError(
                f"{ctx.source}: models '{written[name]}' and '{raw_name}' both mean '{name}'; keep one table"
            )
        written[name] = raw_name
        fields: dict[str, object] = {}
        for key, item in table.items():
            check = _MODEL_LEVEL.get(key)
            if check is None:
                raise ctx.unknown(key, f"{name_path}.{quote_key(key)}", _MODEL_KEYS)
            fields[key] = check(ctx, f"{name_path}.{key}", item)
        out[name] = ModelOverride(**fields)  # type: ignore[arg-type]
    return MappingProxyType(out)


def _from_table(ctx: Ctx, doc: Mapping[str, object]) -> dict[str, object]:
    """Validated ``Config`` keyword arguments for every key present in the parsed document."""
    fields: dict[str, object] = {}
    for key, value in doc.items():
        if key == "models":
            fields["models"] = _model_overrides(ctx, value)
            continue
        if key == "keys":
            fields["keys"] = file_keys(ctx, value)
            continue
        if key == "remotes":
            fields["remotes"] = file_remotes(ctx, value)
            continue
        if key == "pools":  # after the loop: it names [[remotes]], which may come later in the file
            continue
        check = _TOP_LEVEL.get(key)
        if check is None:
            raise ctx.unknown(key, quote_key(key), _TOP_KEYS)
        fields[key] = check(ctx, key, value)
    if "pools" in doc:
        remotes = fields.get("remotes", ())
        assert isinstance(remotes, tuple)
        fields["pools"] = file_pools(ctx, doc["pools"], remotes)
    return fields


def _apply_env(fields: dict[str, object], env: Mapping[str, str]) -> None:
    host = env_value(env, "BLAZAR_HOST")
    if host is not None:
        if not is_host_text(host.strip()):
            raise ConfigError(f"BLAZAR_HOST must be a host name or address, got {host!r}")
        fields["host"] = host.strip()
    port = env_value(env, "BLAZAR_PORT")
    if port is not None:
        try:
            number = int(port.strip(), 10)
        except ValueError:
            number = 0
        if not 1 <= number <= 65535:
            raise ConfigError(f"BLAZAR_PORT must be an integer port 1-65535, got {port!r}")
        fields["port"] = number
    data_dir = env_value(env, "BLAZAR_DATA_DIR")
    if data_dir is not None:
        fields["data_dir"] = expand_user(data_dir, env).absolute()


# ---------------------------------------------------------------------------------------------------------
# Loading


def _read(path: Path, origin: str | None) -> str | None:
    """The file's text, or ``None`` when a default-path file is absent."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except (FileNotFoundError, NotADirectoryError):
        if origin is None:
            return None
        hint = (
            "; unset BLAZAR_CONFIG to use the built-in defaults" if origin == "set by BLAZAR_CONFIG" else ""
        )
        raise ConfigError(f"config file {path} does not exist ({origin}){hint}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory, not a TOML file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not valid UTF-8 (byte {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None


def _parse(path: Path, text: str) -> dict[str, object]:
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.TOMLKitError as exc:
        message = " ".join(str(exc).split())
        raise ConfigError(f"{path} is not valid TOML: {message}") from None
    plain = doc.unwrap()
    return dict(plain)


def _build(cfg_path: Path, text: str | None, env: Mapping[str, str]) -> Config:
    fields: dict[str, object] = {}
    if text is not None:
        ctx = Ctx(source=str(cfg_path), base_dir=cfg_path.absolute().parent, env=env)
        fields = _from_table(ctx, _parse(cfg_path, text))
    if "data_dir" not in fields:
        fields["data_dir"] = default_data_dir(env)
    _apply_env(fields, env)
    from_file = fields.get("keys", ())
    assert isinstance(from_file, tuple)
    from_env = env_keys(env)
    merge_keys(str(cfg_path), from_file, from_env)
    fields["keys"] = from_file + from_env
    if fields.get("semantic_cache") and not fields.get("semantic_cache_model"):
        raise ConfigError(
            f"{cfg_path}: semantic_cache is on but semantic_cache_model is not set; name an embedding model in the"
            ' catalog (such as a nomic-embed-text GGUF: semantic_cache_model = "nomic-embed-text"). A chat'
            ' model\'s own embeddings cannot tell questions apart: SmolLM2 puts "What is 2+2?" and "Tell me a'
            ' joke." 0.90 alike'
        )
    return Config(**fields)  # type: ignore[arg-type]


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load, validate and return the config; env overrides (BLAZAR_HOST/PORT/DATA_DIR) win over the file, and
    ``BLAZAR_KEYS`` adds full-access keys after the file's ``[[keys]]``.

    ``path`` (or ``$BLAZAR_CONFIG``) names a file that must exist; the default path may be absent, in which
    case the embedded defaults are used. Every problem raises a one-line ``ConfigError``.
    """
    env = os.environ if env is None else env
    origin: str | None
    if path is not None:
        cfg_path, origin = expand_user(str(path), env), "given explicitly"
    elif env_value(env, CONFIG_ENV):
        cfg_path, origin = default_config_path(env), f"set by {CONFIG_ENV}"
    else:
        cfg_path, origin = default_config_path(env), None
    return _build(cfg_path, _read(cfg_path, origin), env)


def load_config_text(text: str | None, path: Path, env: Mapping[str, str] | None = None) -> Config:
    """Validate ``text`` as if it were the contents of ``path`` (``None``: an absent file) and return the
    ``Config``, env overrides applied. Used to check a document before it is written."""
    env = os.environ if env is None else env
    return _build(expand_user(str(path), env), text, env)
