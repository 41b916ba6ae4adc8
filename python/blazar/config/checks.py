"""The config loader's checks: how a found value is described in a message, and the typed validators that
raise a teaching ``ConfigError`` naming the file and the key.

It owns ``Ctx`` (where values come from), the scalar and list validators, and the renderings used in messages.
It is internal to ``blazar.config``; it must not show a value that may be a secret (callers describe those
with ``a_type``), do I/O, or import ``blazar._native``.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from blazar.config.model import expand_user
from blazar.errors import ConfigError

MAX_SHOWN = 60


def env_value(env: Mapping[str, str], name: str) -> str | None:
    """An environment variable's value; an empty string counts as unset."""
    value = env.get(name, "")
    return value or None


def type_name(value: object) -> str:
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


def shown(value: object) -> str:
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
    if len(text) > MAX_SHOWN:
        text = text[: MAX_SHOWN - 3] + "..."
    return text


def quote_key(key: str) -> str:
    """A table key as it would be written in TOML (bare when possible, quoted otherwise)."""
    if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
        return key
    return json.dumps(key, ensure_ascii=False)


def a_type(value: object) -> str:
    """``"a string"``, ``"an integer"``: a value's type with its article, for messages that must not show it."""
    name = type_name(value)
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


@dataclass(frozen=True, slots=True)
class Ctx:
    """Where values come from, for messages: the file's display name and the dir relative paths resolve in."""

    source: str
    base_dir: Path
    env: Mapping[str, str]

    def bad(self, key: str, expected: str, value: object) -> ConfigError:
        return ConfigError(
            f"{self.source}: key '{key}' must be {expected}, got {shown(value)} ({type_name(value)})"
        )

    def unknown(self, key: str, shown_key: str, allowed: tuple[str, ...]) -> ConfigError:
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        if close:
            return ConfigError(f"{self.source}: unknown key '{shown_key}' (did you mean '{close[0]}'?)")
        return ConfigError(
            f"{self.source}: unknown key '{shown_key}'; allowed keys here are: {', '.join(allowed)}"
        )


INT64_MAX = 2**63 - 1
"""TOML's integers are 64-bit: a larger one makes the file unreadable to other TOML tools."""


def integer(ctx: Ctx, key: str, value: object, lo: int, hi: int | None = None) -> int:
    expected = f"an integer between {lo} and {hi}" if hi is not None else f"an integer >= {lo}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.bad(key, expected, value)
    if value < lo or (hi is not None and value > hi):
        raise ctx.bad(key, expected, value)
    if value > INT64_MAX:
        raise ctx.bad(key, f"{expected} and at most {INT64_MAX} (TOML's 64-bit integers)", value)
    return value


def number(ctx: Ctx, key: str, value: object, lo: float) -> float:
    expected = f"a number >= {lo:g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.bad(key, expected, value)
    number = float(value)
    if not math.isfinite(number) or number < lo:
        raise ctx.bad(key, expected, value)
    return number


def boolean(ctx: Ctx, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ctx.bad(key, "true or false", value)
    return value


def string(ctx: Ctx, key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ctx.bad(key, "a non-empty string", value)
    return value


def host_value(ctx: Ctx, key: str, value: object) -> str:
    """A host name or address to listen on: non-empty, no spaces or control characters."""
    text = string(ctx, key, value)
    if not is_host_text(text):
        raise ctx.bad(key, "a host name or address (such as 127.0.0.1, 0.0.0.0 or ::1)", value)
    return text


def is_host_text(text: str) -> bool:
    return bool(text) and not any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in text)


def choice(ctx: Ctx, key: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ctx.bad(key, "one of " + ", ".join(f'"{a}"' for a in allowed), value)
    return value


def strings(ctx: Ctx, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ctx.bad(key, "an array of strings", value)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ctx.bad(f"{key}[{i}]", "a string", item)
        out.append(item)
    return tuple(out)


def path_value(ctx: Ctx, key: str, value: object) -> Path:
    raw = string(ctx, key, value)
    path = expand_user(raw, ctx.env)
    if not path.is_absolute():
        path = ctx.base_dir / path
    return path


Check = Callable[[Ctx, str, object], object]
