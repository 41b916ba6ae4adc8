"""API keys in the config: ``[[keys]]`` tables and ``BLAZAR_KEYS``, validated and merged.

It owns every message about a key's name, secret, scope and limits; no message ever shows a secret (a mistyped
item may be part of one, so neither is its name). It is internal to ``blazar.config`` and must not do I/O or
import ``blazar._native``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from blazar.catalog import names
from blazar.config.checks import Ctx, a_type, env_value, integer, quote_key, strings
from blazar.config.model import (
    DEFAULT_KEY_WEIGHT,
    KEY_NAME_MAX,
    KEY_NAME_PATTERN,
    MIN_SECRET_LEN,
    KeyConfig,
    normalize_model_name,
    secret_is_well_formed,
)
from blazar.errors import CatalogError, ConfigError

KEYS_ENV = "BLAZAR_KEYS"
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
_KEY_NAME_CHARS = "letters, digits, '.', '_' and '-'"
_KEY_NAME_RULE = f"at most {KEY_NAME_MAX} {_KEY_NAME_CHARS}"
SECRET_RULE = f"at least {MIN_SECRET_LEN} printable ASCII characters without spaces"


def _key_weight(ctx: Ctx, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.bad(key, "a number > 0", value)
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ctx.bad(key, "a number > 0", value)
    return number


def _key_models(ctx: Ctx, key: str, value: object) -> tuple[str, ...]:
    out: list[str] = []
    for i, raw in enumerate(strings(ctx, key, value)):
        try:
            name = names.normalize(normalize_model_name(raw))  # a name the catalog could hold
        except (ValueError, CatalogError) as exc:
            raise ConfigError(f"{ctx.source}: key '{key}[{i}]' is not a valid model name: {exc}") from None
        if name not in out:
            out.append(name)
    return tuple(out)


def secret_problem(value: object) -> str | None:
    """Why ``value`` is not a usable secret (without showing it), or ``None`` when it is."""
    if not isinstance(value, str):
        return f"must be a string of {SECRET_RULE}, got {a_type(value)}"
    if not secret_is_well_formed(value):
        return f"must be {SECRET_RULE}, got {len(value)} characters" + (
            "" if all("!" <= c <= "~" for c in value) else " including spaces or other characters"
        )
    return None


_KEY_INT_FIELDS = ("max_concurrent", "rpm", "tpm", "daily_tokens")


def _key_table(ctx: Ctx, index: int, table: object) -> KeyConfig:
    where = f"keys[{index}]"
    if not isinstance(table, dict):
        raise ConfigError(
            f"{ctx.source}: key '{where}' must be a table with name and secret "
            f"(write it as [[keys]]), got {a_type(table)}"
        )
    for key in table:
        if key not in _KEY_FIELDS:
            raise ctx.unknown(key, f"{where}.{quote_key(key)}", _KEY_FIELDS)
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
            f"{ctx.source}: {where} ('{name}') has no 'secret'; add one of {SECRET_RULE}, "
            f"or remove the entry and run: blazar keys add {name}"
        )
    problem = secret_problem(table["secret"])
    if problem is not None:
        raise ConfigError(f"{ctx.source}: key '{where}.secret' ('{name}') {problem}")
    fields: dict[str, object] = {"name": name, "secret": table["secret"]}
    if "models" in table:
        fields["models"] = _key_models(ctx, f"{where}.models", table["models"])
    if "weight" in table:
        fields["weight"] = _key_weight(ctx, f"{where}.weight", table["weight"])
    for key in _KEY_INT_FIELDS:
        if key in table:
            fields[key] = integer(ctx, f"{where}.{key}", table[key], 0)
    return KeyConfig(**fields)  # type: ignore[arg-type]


def file_keys(ctx: Ctx, value: object) -> tuple[KeyConfig, ...]:
    if not isinstance(value, list):
        # Never render the value: a mistyped [keys] table holds secrets.
        raise ConfigError(
            f"{ctx.source}: key 'keys' must be an array of [[keys]] tables, got {a_type(value)} "
            "(write each key as a [[keys]] table with name and secret)"
        )
    return tuple(_key_table(ctx, i, table) for i, table in enumerate(value))


def env_keys(env: Mapping[str, str]) -> tuple[KeyConfig, ...]:
    """``BLAZAR_KEYS=name=secret,other=secret2,bare-secret``: full-access keys; a bare secret (which then must
    not hold ``=``) is named ``env-N`` after its 1-based position in the list."""
    raw = env_value(env, KEYS_ENV)
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
                    f"{form}; item {position} has a name that is empty, longer than {KEY_NAME_MAX} characters "
                    f"or holds characters other than {_KEY_NAME_CHARS}"
                )
        else:
            name, secret = f"env-{position}", item
        problem = secret_problem(secret)
        if problem is not None:
            # No name here either: with a mistyped item it may be part of the secret.
            raise ConfigError(f"{KEYS_ENV} item {position}: the secret {problem}")
        out.append(KeyConfig(name=name, secret=secret, weight=DEFAULT_KEY_WEIGHT, from_env=True))
    return tuple(out)


def _where(key: KeyConfig, index: int) -> str:
    """Where a key came from, for a message."""
    return f"{KEYS_ENV} key '{key.name}'" if key.from_env else f"keys[{index}]"


def merge_keys(source: str, file_keys: tuple[KeyConfig, ...], env_keys: tuple[KeyConfig, ...]) -> None:
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
