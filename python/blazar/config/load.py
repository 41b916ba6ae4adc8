"""Reading Blazar's config: locating the TOML file, parsing it with tomlkit, validating it, applying env overrides.

It owns the config-file search order, every teaching ``ConfigError`` message (``[[keys]]`` and ``BLAZAR_KEYS``
included) and the rendered default document for ``blazar config init``. It must not create or write files,
start anything, touch the data dir, or import ``blazar._native``; every failure is a one-line ``ConfigError``,
never a raw traceback, and no message ever shows an API-key secret.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import tomlkit
import tomlkit.exceptions

from blazar.config.model import (
    CACHE_TYPES,
    DEFAULT_CACHE_TYPE,
    DEFAULT_CHILD_HEADER_TIMEOUT_SECS,
    DEFAULT_CHILD_START_TIMEOUT_SECS,
    DEFAULT_CTX_SIZE,
    DEFAULT_ENGINE_CHECK_SECS,
    DEFAULT_ENGINE_MODE,
    DEFAULT_FLASH_ATTN,
    DEFAULT_GPU_LAYERS,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT_SECS,
    DEFAULT_KEY_WEIGHT,
    DEFAULT_LOG_LEVEL,
    DEFAULT_MEMORY_HEADROOM_MIB,
    DEFAULT_PARALLEL,
    DEFAULT_PORT,
    DEFAULT_QUEUE_WAIT_SECS,
    DEFAULT_SESSION_KEEP_SECS,
    DEFAULT_STOP_GRACE_SECS,
    DEFAULT_THREADS,
    ENGINE_MODES,
    FLASH_ATTN_MODES,
    KEY_NAME_PATTERN,
    LOG_LEVELS,
    MIN_SECRET_LEN,
    Config,
    KeyConfig,
    ModelOverride,
    default_data_dir,
    expand_user,
    normalize_model_name,
    secret_is_well_formed,
    xdg_config_home,
)
from blazar.errors import ConfigError

__all__ = [
    "CONFIG_ENV",
    "KEYS_ENV",
    "default_config_path",
    "load_config",
    "load_config_text",
    "render_default_config",
]

CONFIG_ENV = "BLAZAR_CONFIG"
KEYS_ENV = "BLAZAR_KEYS"
_MAX_SHOWN = 60


def _env_value(env: Mapping[str, str], name: str) -> str | None:
    """An environment variable's value; an empty string counts as unset."""
    value = env.get(name, "")
    return value or None


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the config file is looked for: ``$BLAZAR_CONFIG``, else ``$XDG_CONFIG_HOME/blazar/config.toml``,
    else ``~/.config/blazar/config.toml``."""
    env = os.environ if env is None else env
    explicit = _env_value(env, CONFIG_ENV)
    if explicit:
        return expand_user(explicit, env)
    return xdg_config_home(env) / "blazar" / "config.toml"


# ---------------------------------------------------------------------------------------------------------
# Describing values in messages


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, _dt.datetime):
        return "datetime"
    if isinstance(value, _dt.date):
        return "date"
    if isinstance(value, _dt.time):
        return "time"
    return type(value).__name__


def _shown(value: object) -> str:
    """A short TOML-like rendering of a found value for an error message."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, _dt.date | _dt.time):
        text = value.isoformat()
    elif isinstance(value, list | dict):
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    else:
        text = repr(value)
    text = " ".join(text.split())
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return text


def _quote_key(key: str) -> str:
    """A table key as it would be written in TOML (bare when possible, quoted otherwise)."""
    if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
        return key
    return json.dumps(key, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------------------
# Validation


@dataclass(frozen=True, slots=True)
class _Ctx:
    """Where values come from, for messages: the file's display name and the dir relative paths resolve in."""

    source: str
    base_dir: Path
    env: Mapping[str, str]

    def bad(self, key: str, expected: str, value: object) -> ConfigError:
        return ConfigError(
            f"{self.source}: key '{key}' must be {expected}, got {_shown(value)} ({_type_name(value)})"
        )

    def unknown(self, key: str, shown_key: str, allowed: tuple[str, ...]) -> ConfigError:
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        if close:
            return ConfigError(f"{self.source}: unknown key '{shown_key}' (did you mean '{close[0]}'?)")
        return ConfigError(
            f"{self.source}: unknown key '{shown_key}'; allowed keys here are: {', '.join(allowed)}"
        )


def _int(ctx: _Ctx, key: str, value: object, lo: int, hi: int | None = None) -> int:
    expected = f"an integer between {lo} and {hi}" if hi is not None else f"an integer >= {lo}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.bad(key, expected, value)
    if value < lo or (hi is not None and value > hi):
        raise ctx.bad(key, expected, value)
    return value


def _number(ctx: _Ctx, key: str, value: object, lo: float) -> float:
    expected = f"a number >= {lo:g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.bad(key, expected, value)
    number = float(value)
    if not math.isfinite(number) or number < lo:
        raise ctx.bad(key, expected, value)
    return number


def _bool(ctx: _Ctx, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ctx.bad(key, "true or false", value)
    return value


def _string(ctx: _Ctx, key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ctx.bad(key, "a non-empty string", value)
    return value


def _choice(ctx: _Ctx, key: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ctx.bad(key, "one of " + ", ".join(f'"{a}"' for a in allowed), value)
    return value


def _strings(ctx: _Ctx, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ctx.bad(key, "an array of strings", value)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ctx.bad(f"{key}[{i}]", "a string", item)
        out.append(item)
    return tuple(out)


def _path(ctx: _Ctx, key: str, value: object) -> Path:
    raw = _string(ctx, key, value)
    path = expand_user(raw, ctx.env)
    if not path.is_absolute():
        path = ctx.base_dir / path
    return path


_Check = Callable[[_Ctx, str, object], object]

_TOP_LEVEL: dict[str, _Check] = {
    "host": _string,
    "port": lambda c, k, v: _int(c, k, v, 1, 65535),
    "data_dir": _path,
    "idle_timeout_secs": lambda c, k, v: _int(c, k, v, 0),
    "child_start_timeout_secs": lambda c, k, v: _int(c, k, v, 1),
    "child_header_timeout_secs": lambda c, k, v: _int(c, k, v, 1),
    "stop_grace_secs": lambda c, k, v: _number(c, k, v, 0.0),
    "engine_mode": lambda c, k, v: _choice(c, k, v, ENGINE_MODES),
    "cors_origins": _strings,
    "log_level": lambda c, k, v: _choice(c, k, v, LOG_LEVELS),
    "ctx_size": lambda c, k, v: _int(c, k, v, 0),
    "parallel": lambda c, k, v: _int(c, k, v, 1),
    "threads": lambda c, k, v: _int(c, k, v, 0),
    "gpu_layers": lambda c, k, v: _int(c, k, v, -1),
    "queue_wait_secs": lambda c, k, v: _int(c, k, v, 0),
    "session_keep_secs": lambda c, k, v: _int(c, k, v, 0),
    "engine_check_secs": lambda c, k, v: _int(c, k, v, 0),
    "audit": _bool,
    "cache_type_k": lambda c, k, v: _choice(c, k, v, CACHE_TYPES),
    "cache_type_v": lambda c, k, v: _choice(c, k, v, CACHE_TYPES),
    "flash_attn": lambda c, k, v: _choice(c, k, v, FLASH_ATTN_MODES),
    "swa_full": _bool,
    "lookup_cache": _bool,
    "memory_headroom_mib": lambda c, k, v: _int(c, k, v, 0),
}

_MODEL_LEVEL: dict[str, _Check] = {
    "ctx_size": _TOP_LEVEL["ctx_size"],
    "parallel": _TOP_LEVEL["parallel"],
    "threads": _TOP_LEVEL["threads"],
    "gpu_layers": _TOP_LEVEL["gpu_layers"],
    "idle_timeout_secs": _TOP_LEVEL["idle_timeout_secs"],
    "extra_args": _strings,
    "engine": _string,
    "cache_type_k": _TOP_LEVEL["cache_type_k"],
    "cache_type_v": _TOP_LEVEL["cache_type_v"],
    "flash_attn": _TOP_LEVEL["flash_attn"],
    "swa_full": _bool,
    "lookup_cache": _bool,
    "chat_template": _string,
    "chat_template_file": _path,
    "mmproj": _path,
}

_TOP_KEYS: tuple[str, ...] = (*_TOP_LEVEL, "models", "keys")
_MODEL_KEYS: tuple[str, ...] = tuple(_MODEL_LEVEL)
_KEY_FIELDS: tuple[str, ...] = (
    "name",
    "secret",
    "models",
    "weight",
    "max_concurrent",
    "rpm",
    "tpm",
    "daily_tokens",
)
_KEY_NAME_RULE = "letters, digits, '.', '_' and '-'"
_SECRET_RULE = f"at least {MIN_SECRET_LEN} printable ASCII characters without spaces"


def _model_overrides(ctx: _Ctx, value: object) -> Mapping[str, ModelOverride]:
    if not isinstance(value, dict):
        raise ctx.bad("models", 'a table of [models."name:tag"] tables', value)
    out: dict[str, ModelOverride] = {}
    written: dict[str, str] = {}
    for raw_name, table in value.items():
        name_path = f"models.{_quote_key(raw_name)}"
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
                raise ctx.unknown(key, f"{name_path}.{_quote_key(key)}", _MODEL_KEYS)
            fields[key] = check(ctx, f"{name_path}.{key}", item)
        out[name] = ModelOverride(**fields)  # type: ignore[arg-type]
    return MappingProxyType(out)


# ---------------------------------------------------------------------------------------------------------
# API keys: [[keys]] tables and BLAZAR_KEYS. Messages describe a bad secret, never show it.


def _key_weight(ctx: _Ctx, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.bad(key, "a number > 0", value)
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ctx.bad(key, "a number > 0", value)
    return number


def _key_models(ctx: _Ctx, key: str, value: object) -> tuple[str, ...]:
    out: list[str] = []
    for i, raw in enumerate(_strings(ctx, key, value)):
        try:
            name = normalize_model_name(raw)
        except ValueError as exc:
            raise ConfigError(f"{ctx.source}: key '{key}[{i}]' is not a valid model name: {exc}") from None
        if name not in out:
            out.append(name)
    return tuple(out)


def _a_type(value: object) -> str:
    """``"a string"``, ``"an integer"``: a value's type with its article, for messages that must not show it."""
    name = _type_name(value)
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _secret_problem(value: object) -> str | None:
    """Why ``value`` is not a usable secret (without showing it), or ``None`` when it is."""
    if not isinstance(value, str):
        return f"must be a string of {_SECRET_RULE}, got {_a_type(value)}"
    if not secret_is_well_formed(value):
        return f"must be {_SECRET_RULE}, got {len(value)} characters" + (
            "" if all("!" <= c <= "~" for c in value) else " including spaces or other characters"
        )
    return None


_KEY_INT_FIELDS = ("max_concurrent", "rpm", "tpm", "daily_tokens")


def _key_table(ctx: _Ctx, index: int, table: object) -> KeyConfig:
    where = f"keys[{index}]"
    if not isinstance(table, dict):
        raise ConfigError(
            f"{ctx.source}: key '{where}' must be a table with name and secret "
            f"(write it as [[keys]]), got {_a_type(table)}"
        )
    for key in table:
        if key not in _KEY_FIELDS:
            raise ctx.unknown(key, f"{where}.{_quote_key(key)}", _KEY_FIELDS)
    name = table.get("name")
    if name is None:
        raise ConfigError(
            f"{ctx.source}: {where} has no 'name'; every [[keys]] entry needs a unique name and a secret "
            "(blazar keys add NAME writes both)"
        )
    if not isinstance(name, str) or KEY_NAME_PATTERN.fullmatch(name) is None:
        raise ctx.bad(f"{where}.name", f"a non-empty string of {_KEY_NAME_RULE}", name)
    if "secret" not in table:
        raise ConfigError(
            f"{ctx.source}: {where} ('{name}') has no 'secret'; add one of {_SECRET_RULE}, "
            f"or remove the entry and run: blazar keys add {name}"
        )
    problem = _secret_problem(table["secret"])
    if problem is not None:
        raise ConfigError(f"{ctx.source}: key '{where}.secret' ('{name}') {problem}")
    fields: dict[str, object] = {"name": name, "secret": table["secret"]}
    if "models" in table:
        fields["models"] = _key_models(ctx, f"{where}.models", table["models"])
    if "weight" in table:
        fields["weight"] = _key_weight(ctx, f"{where}.weight", table["weight"])
    for key in _KEY_INT_FIELDS:
        if key in table:
            fields[key] = _int(ctx, f"{where}.{key}", table[key], 0)
    return KeyConfig(**fields)  # type: ignore[arg-type]


def _file_keys(ctx: _Ctx, value: object) -> tuple[KeyConfig, ...]:
    if not isinstance(value, list):
        # Never render the value: a mistyped [keys] table holds secrets.
        raise ConfigError(
            f"{ctx.source}: key 'keys' must be an array of [[keys]] tables, got {_a_type(value)} "
            "(write each key as a [[keys]] table with name and secret)"
        )
    return tuple(_key_table(ctx, i, table) for i, table in enumerate(value))


def _env_keys(env: Mapping[str, str]) -> tuple[KeyConfig, ...]:
    """``BLAZAR_KEYS=name=secret,other=secret2,bare-secret``: full-access keys; a bare secret (which then must
    not hold ``=``) is named ``env-N`` after its 1-based position in the list."""
    raw = _env_value(env, KEYS_ENV)
    if raw is None:
        return ()
    out: list[KeyConfig] = []
    form = f"{KEYS_ENV} must be comma-separated name=secret items (or bare secrets)"
    for position, item in enumerate(raw.split(","), start=1):
        item = item.strip()
        if not item:
            raise ConfigError(f"{form}; item {position} is empty (drop the extra comma)")
        if "=" in item:
            name, secret = (part.strip() for part in item.split("=", 1))
            if KEY_NAME_PATTERN.fullmatch(name) is None:
                # The part before '=' may be a piece of a secret: do not show it.
                raise ConfigError(
                    f"{form}; item {position} has a name that is empty or holds characters other than "
                    f"{_KEY_NAME_RULE}"
                )
        else:
            name, secret = f"env-{position}", item
        problem = _secret_problem(secret)
        if problem is not None:
            # No name here either: with a mistyped item it may be part of the secret.
            raise ConfigError(f"{KEYS_ENV} item {position}: the secret {problem}")
        out.append(KeyConfig(name=name, secret=secret, weight=DEFAULT_KEY_WEIGHT, from_env=True))
    return tuple(out)


def _where(key: KeyConfig, index: int) -> str:
    """Where a key came from, for a message."""
    return f"{KEYS_ENV} key '{key.name}'" if key.from_env else f"keys[{index}]"


def _merge_keys(source: str, file_keys: tuple[KeyConfig, ...], env_keys: tuple[KeyConfig, ...]) -> None:
    """Names and secrets must be unique across the file and the environment."""
    keys = file_keys + env_keys
    names: dict[str, int] = {}
    secrets: dict[str, int] = {}
    for i, key in enumerate(keys):
        for seen, value, what, fix in (
            (names, key.name, "key name", "key names must be unique"),
            (secrets, key.secret, "secret", "give every key its own secret"),
        ):
            first = seen.setdefault(value, i)
            if first == i:
                continue
            prefix = "" if key.from_env and keys[first].from_env else f"{source}: "
            shown = f"the key name '{key.name}'" if what == "key name" else "the secret"
            raise ConfigError(
                f"{prefix}{_where(key, i)} reuses {shown} of {_where(keys[first], first)}; {fix}"
            )


def _from_table(ctx: _Ctx, doc: Mapping[str, object]) -> dict[str, object]:
    """Validated ``Config`` keyword arguments for every key present in the parsed document."""
    fields: dict[str, object] = {}
    for key, value in doc.items():
        if key == "models":
            fields["models"] = _model_overrides(ctx, value)
            continue
        if key == "keys":
            fields["keys"] = _file_keys(ctx, value)
            continue
        check = _TOP_LEVEL.get(key)
        if check is None:
            raise ctx.unknown(key, _quote_key(key), _TOP_KEYS)
        fields[key] = check(ctx, key, value)
    return fields


def _apply_env(fields: dict[str, object], env: Mapping[str, str]) -> None:
    host = _env_value(env, "BLAZAR_HOST")
    if host is not None:
        if not host.strip():
            raise ConfigError(f"BLAZAR_HOST must be a host name or address, got {host!r}")
        fields["host"] = host.strip()
    port = _env_value(env, "BLAZAR_PORT")
    if port is not None:
        try:
            number = int(port.strip(), 10)
        except ValueError:
            number = 0
        if not 1 <= number <= 65535:
            raise ConfigError(f"BLAZAR_PORT must be an integer port 1-65535, got {port!r}")
        fields["port"] = number
    data_dir = _env_value(env, "BLAZAR_DATA_DIR")
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
        ctx = _Ctx(source=str(cfg_path), base_dir=cfg_path.absolute().parent, env=env)
        fields = _from_table(ctx, _parse(cfg_path, text))
    if "data_dir" not in fields:
        fields["data_dir"] = default_data_dir(env)
    _apply_env(fields, env)
    file_keys = fields.get("keys", ())
    assert isinstance(file_keys, tuple)
    env_keys = _env_keys(env)
    _merge_keys(str(cfg_path), file_keys, env_keys)
    fields["keys"] = file_keys + env_keys
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
    elif _env_value(env, CONFIG_ENV):
        cfg_path, origin = default_config_path(env), f"set by {CONFIG_ENV}"
    else:
        cfg_path, origin = default_config_path(env), None
    return _build(cfg_path, _read(cfg_path, origin), env)


def load_config_text(text: str | None, path: Path, env: Mapping[str, str] | None = None) -> Config:
    """Validate ``text`` as if it were the contents of ``path`` (``None``: an absent file) and return the
    ``Config``, env overrides applied. Used to check a document before it is written."""
    env = os.environ if env is None else env
    return _build(expand_user(str(path), env), text, env)


# ---------------------------------------------------------------------------------------------------------
# The default document


_DOCUMENTED: tuple[tuple[str, object, str], ...] = (
    ("host", DEFAULT_HOST, "Address the server listens on (env BLAZAR_HOST). Use 0.0.0.0 to serve the LAN."),
    ("port", DEFAULT_PORT, "TCP port, 1-65535 (env BLAZAR_PORT)."),
    (
        "idle_timeout_secs",
        DEFAULT_IDLE_TIMEOUT_SECS,
        "Stop a model's engine after this many idle seconds; 0 = never.",
    ),
    (
        "child_start_timeout_secs",
        DEFAULT_CHILD_START_TIMEOUT_SECS,
        "Seconds to wait for a spawned engine to answer /health.",
    ),
    (
        "child_header_timeout_secs",
        DEFAULT_CHILD_HEADER_TIMEOUT_SECS,
        "Seconds to wait for an engine's response headers.",
    ),
    (
        "stop_grace_secs",
        DEFAULT_STOP_GRACE_SECS,
        "Seconds between SIGTERM and SIGKILL when stopping an engine.",
    ),
    ("engine_mode", DEFAULT_ENGINE_MODE, 'How engines are chosen: "auto" or "manual".'),
    ("cors_origins", [], 'Origins allowed by CORS, e.g. ["http://localhost:3000"]; empty = none.'),
    ("log_level", DEFAULT_LOG_LEVEL, 'One of "debug", "info", "warning", "error".'),
    ("ctx_size", DEFAULT_CTX_SIZE, "Context size in tokens; 0 = the model's trained context."),
    ("parallel", DEFAULT_PARALLEL, "Engine slots (concurrent requests) per model, >= 1."),
    ("threads", DEFAULT_THREADS, "CPU threads per engine; 0 = the engine's default."),
    ("gpu_layers", DEFAULT_GPU_LAYERS, "Layers to offload to the GPU; -1 = all that fit (engine default)."),
    (
        "queue_wait_secs",
        DEFAULT_QUEUE_WAIT_SECS,
        "Longest wait for a free engine slot before 503 all_slots_busy.",
    ),
    (
        "session_keep_secs",
        DEFAULT_SESSION_KEEP_SECS,
        "Seconds an idle x-blazar-session pin is kept; 0 = no sessions.",
    ),
    (
        "engine_check_secs",
        DEFAULT_ENGINE_CHECK_SECS,
        "Seconds between background checks for newer engine releases (never installs); 0 = off.",
    ),
    ("audit", False, "Write one audit line per request to <data_dir>/audit/audit.log."),
    (
        "cache_type_k",
        DEFAULT_CACHE_TYPE,
        'KV cache type for K: "f16", "bf16", "f32", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl".',
    ),
    (
        "cache_type_v",
        DEFAULT_CACHE_TYPE,
        'KV cache type for V (as cache_type_k); a quantized V cache needs flash_attn "auto" or "on".',
    ),
    ("flash_attn", DEFAULT_FLASH_ATTN, 'Flash attention: "auto", "on" or "off".'),
    ("swa_full", False, "Keep a full-size KV cache for sliding-window layers (more memory)."),
    (
        "lookup_cache",
        False,
        "n-gram lookup decoding with a per-model cache file under <data_dir>/speccache/.",
    ),
    (
        "memory_headroom_mib",
        DEFAULT_MEMORY_HEADROOM_MIB,
        "MiB left free on each device when the context size is fitted to free memory.",
    ),
)


def render_default_config() -> str:
    """A commented TOML document holding every top-level default, for ``blazar config init``."""
    doc = tomlkit.document()
    doc.add(tomlkit.comment("Blazar configuration. Every value shown is the built-in default."))
    doc.add(
        tomlkit.comment("Environment variables BLAZAR_HOST, BLAZAR_PORT and BLAZAR_DATA_DIR override it.")
    )
    doc.add(tomlkit.nl())
    for key, value, comment in _DOCUMENTED:
        doc.add(tomlkit.comment(comment))
        doc.add(key, tomlkit.array() if value == [] else value)
        doc.add(tomlkit.nl())
        if key == "port":
            doc.add(
                tomlkit.comment("Where models, engines, logs and blazar.db live; relative paths are read")
            )
            doc.add(tomlkit.comment("from this file's directory. Default: $BLAZAR_DATA_DIR, else"))
            doc.add(tomlkit.comment("$XDG_DATA_HOME/blazar, else ~/.local/share/blazar."))
            doc.add(tomlkit.comment('data_dir = "~/.local/share/blazar"'))
            doc.add(tomlkit.nl())
    doc.add(tomlkit.comment('Per-model overrides; "name" means "name:latest". Every key is optional.'))
    doc.add(tomlkit.comment('[models."smollm2:latest"]'))
    doc.add(tomlkit.comment("ctx_size = 8192"))
    doc.add(tomlkit.comment("parallel = 2"))
    doc.add(tomlkit.comment("threads = 8"))
    doc.add(tomlkit.comment("gpu_layers = 20"))
    doc.add(tomlkit.comment("idle_timeout_secs = 600"))
    doc.add(tomlkit.comment('extra_args = ["--flash-attn"]'))
    doc.add(tomlkit.comment('engine = "llama-cpp"'))
    doc.add(tomlkit.comment('cache_type_k = "q8_0"'))
    doc.add(tomlkit.comment('cache_type_v = "q8_0"'))
    doc.add(tomlkit.comment('chat_template = "chatml"  # or chat_template_file = "template.jinja"'))
    doc.add(tomlkit.comment('mmproj = "mmproj-model-f16.gguf"  # default: a mmproj*.gguf next to the model'))
    doc.add(tomlkit.nl())
    doc.add(
        tomlkit.comment("API keys. With none the gateway is open to anyone who can reach it; with any, every")
    )
    doc.add(
        tomlkit.comment("request needs one (Authorization: Bearer or x-api-key). BLAZAR_KEYS=name=secret,...")
    )
    doc.add(tomlkit.comment("adds full-access keys. Manage them with: blazar keys add|rm|rotate|ls"))
    doc.add(tomlkit.comment("[[keys]]"))
    doc.add(tomlkit.comment('name = "admin"'))
    doc.add(tomlkit.comment(f'secret = "..."         # {_SECRET_RULE}'))
    doc.add(tomlkit.comment("models = []             # empty = every model, and may manage keys"))
    doc.add(tomlkit.comment("weight = 1.0            # share of contended capacity"))
    doc.add(tomlkit.comment("max_concurrent = 0      # 0 = unlimited; so are rpm, tpm and daily_tokens"))
    doc.add(tomlkit.comment("rpm = 0"))
    doc.add(tomlkit.comment("tpm = 0"))
    doc.add(tomlkit.comment("daily_tokens = 0"))
    return tomlkit.dumps(doc)
