"""API keys: who a request is (auth), what it may touch (scopes, key management), and changing the key set.

It owns the seed's 401 body and 403 messages, the constant-time secret check, the hot-swappable
``KeyRegistry``, and ``add_key`` / ``remove_key`` / ``rotate_key`` / ``list_keys`` as full config-file round
trips (parse, edit, validate, swap the registry, atomic write with a ``.bak``, roll the registry back if the
write fails). It must not speak HTTP (the gateway turns results and errors into responses), enforce quotas
(``quotas.py``), or put a secret into any message, ``repr`` or log line: listings show ``sk-bl…abcd``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import math
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tomlkit.toml_document import TOMLDocument

from blazar.catalog import names
from blazar.config import (
    DEFAULT_KEY_WEIGHT,
    GENERATED_SECRET_PREFIX,
    KEY_NAME_MAX,
    KEY_NAME_PATTERN,
    KEYS_ENV,
    MIN_SECRET_LEN,
    Config,
    KeyConfig,
    KeyLimits,
    load_config_text,
    normalize_model_name,
    redact_secret,
    secret_is_well_formed,
)
from blazar.config.edit import (
    append_key_table,
    dropped_lines,
    parse_document,
    remove_key_table,
    set_key_value,
)
from blazar.config.write import ConfigWriteError, config_lock, read_config_bytes, write_config
from blazar.errors import BlazarError, CatalogError, ConfigError

__all__ = [
    "NO_KEYS_MESSAGE",
    "UNAUTHORIZED_BODY",
    "UNAUTHORIZED_MESSAGE",
    "KeyConflict",
    "KeyCtx",
    "KeyForbidden",
    "KeyInfo",
    "KeyLimits",
    "KeyRegistry",
    "KeysError",
    "Unauthorized",
    "UnknownKey",
    "add_key",
    "allows_model",
    "generate_secret",
    "list_keys",
    "management_authorized",
    "remove_key",
    "resolve_secret",
    "rotate_key",
    "scope_denied_message",
]

UNAUTHORIZED_MESSAGE = "missing or invalid API key (Authorization: Bearer or x-api-key)"
UNAUTHORIZED_BODY = (
    '{"error":{"message":"missing or invalid API key (Authorization: Bearer or x-api-key)",'
    '"type":"blazar_error","code":401}}'
)
"""The seed's exact 401 body (OpenAI dialect), byte for byte."""

NO_KEYS_MESSAGE = (
    "no keys configured: add the first [[keys]] entry in config.toml (or BLAZAR_KEYS env) and restart"
)
"""The seed's 403 message when key management is asked of a gateway without keys."""


# ---------------------------------------------------------------------------------------------------------
# Errors


class KeysError(BlazarError):
    """A key operation was refused because of its arguments (bad name, bad limit)."""

    status = 400


class Unauthorized(KeysError):
    """No key, or a wrong one, on a gateway with auth active. ``str()`` is ``UNAUTHORIZED_MESSAGE``."""

    status = 401

    def __init__(self) -> None:
        super().__init__(UNAUTHORIZED_MESSAGE)


class KeyForbidden(KeysError):
    """The key is valid but may not do this: a model outside its scope, or key management."""

    status = 403


class UnknownKey(KeysError):
    """No key has this name."""

    status = 404


class KeyConflict(KeysError):
    """The change would break the key set: a duplicate name, the last admin key, a key owned by BLAZAR_KEYS."""

    status = 409


# ---------------------------------------------------------------------------------------------------------
# Request identity and scopes


@dataclass(frozen=True, slots=True)
class KeyCtx:
    """The authenticated key a request carries: no secret, only what admission and quotas need."""

    name: str
    weight: float
    models: frozenset[str]
    limits: KeyLimits

    @property
    def full_access(self) -> bool:
        """An unscoped key: every model, and it may manage keys."""
        return not self.models


def _ctx_of(key: KeyConfig) -> KeyCtx:
    return KeyCtx(name=key.name, weight=key.weight, models=frozenset(key.models), limits=key.limits)


def resolve_secret(authorization: str | None, x_api_key: str | None) -> str | None:
    """The presented secret: ``Authorization: Bearer <secret>`` first, then ``x-api-key``; ``None`` if neither.

    An ``Authorization`` header with another scheme (``Basic ...``) does not count; a Bearer secret wins over
    ``x-api-key`` even when it is wrong.
    """
    if authorization:
        scheme, _, rest = authorization.strip().partition(" ")
        token = rest.strip()
        if scheme.lower() == "bearer" and token:
            return token
    if x_api_key:
        token = x_api_key.strip()
        if token:
            return token
    return None


def allows_model(ctx: KeyCtx, model_name: str) -> bool:
    """Whether ``ctx`` may use ``model_name`` (compared as normalised ``name:tag``)."""
    if ctx.full_access:
        return True
    try:
        return normalize_model_name(model_name) in ctx.models
    except ValueError:
        return False


def scope_denied_message(ctx: KeyCtx, model_name: str) -> str:
    """The 403 teaching line for a model outside the key's scope."""
    try:
        shown = normalize_model_name(model_name)
    except ValueError:
        shown = model_name
    return (
        f"key '{ctx.name}' may not use model '{shown}'; it is limited to {', '.join(sorted(ctx.models))}. "
        "Use one of those, or add the model to this key's models in config.toml"
    )


def management_authorized(ctx: KeyCtx | None) -> bool:
    """Only an authenticated full-access key may manage keys (an authless gateway has no ``ctx``: refused)."""
    return ctx is not None and ctx.full_access


def _scoped_management_message(ctx: KeyCtx) -> str:
    return (
        f"key '{ctx.name}' is limited to models ({', '.join(sorted(ctx.models))}) and cannot manage keys; "
        "use a key with full access (one without a models list)"
    )


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """One key as listings show it: the secret redacted to ``sk-bl…abcd``."""

    name: str
    secret: str
    models: tuple[str, ...]
    weight: float
    limits: KeyLimits
    source: str  # "config" or "env"

    @property
    def full_access(self) -> bool:
        return not self.models

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready mapping, for the admin API."""
        return {
            "name": self.name,
            "secret": self.secret,
            "models": list(self.models),
            "full_access": self.full_access,
            "weight": self.weight,
            "max_concurrent": self.limits.max_concurrent,
            "rpm": self.limits.rpm,
            "tpm": self.limits.tpm,
            "daily_tokens": self.limits.daily_tokens,
            "source": self.source,
        }


def _info(key: KeyConfig) -> KeyInfo:
    return KeyInfo(
        name=key.name,
        secret=redact_secret(key.secret),
        models=key.models,
        weight=key.weight,
        limits=key.limits,
        source="env" if key.from_env else "config",
    )


# ---------------------------------------------------------------------------------------------------------
# The registry


_NO_MATCH = bytes(hashlib.sha256().digest_size)


@dataclass(frozen=True, slots=True)
class _State:
    """One immutable view of the key set; the registry swaps whole states, so readers never see a mix."""

    config: Config
    by_digest: Mapping[bytes, KeyCtx]
    by_name: Mapping[str, KeyCtx]

    @classmethod
    def build(cls, config: Config) -> _State:
        by_digest = {_digest(k.secret): _ctx_of(k) for k in config.keys}
        by_name = {ctx.name: ctx for ctx in by_digest.values()}
        return cls(config=config, by_digest=by_digest, by_name=by_name)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "replace")).digest()


class KeyRegistry:
    """The live key set, built from a ``Config``; ``apply`` swaps in a new one atomically (hot reload)."""

    __slots__ = ("_state",)

    def __init__(self, config: Config) -> None:
        self._state = _State.build(config)

    def __repr__(self) -> str:
        return f"KeyRegistry({len(self._state.by_name)} keys: {', '.join(self._state.by_name)})"

    @property
    def config(self) -> Config:
        return self._state.config

    @property
    def auth_active(self) -> bool:
        """Auth is on iff any key exists (file or ``BLAZAR_KEYS``)."""
        return bool(self._state.by_name)

    def __len__(self) -> int:
        return len(self._state.by_name)

    def get(self, name: str) -> KeyCtx | None:
        return self._state.by_name.get(name)

    def authenticate(self, authorization: str | None, x_api_key: str | None) -> KeyCtx | None:
        """The key whose secret the headers carry (see ``resolve_secret``), else ``None``.

        Constant time in the secret: the lookup is keyed on the SHA-256 of the presented secret, so its
        timing depends on that digest, not on how much of a real secret an attacker has guessed, and the
        final check is ``hmac.compare_digest`` on fixed-length digests whether or not anything matched.
        """
        secret = resolve_secret(authorization, x_api_key)
        if secret is None:
            return None
        digest = _digest(secret)
        by_digest = self._state.by_digest
        found = by_digest.get(digest)
        expected = digest if found is not None else _NO_MATCH
        if hmac.compare_digest(digest, expected) and found is not None:
            return found
        return None

    def check_management(self, ctx: KeyCtx | None) -> None:
        """Raise unless ``ctx`` may manage keys: 403 ``NO_KEYS_MESSAGE`` on an authless gateway, 401 without a
        key when auth is on, 403 for a scoped key."""
        if not self.auth_active:
            raise KeyForbidden(NO_KEYS_MESSAGE)
        if ctx is None:
            raise Unauthorized()
        if not ctx.full_access:
            raise KeyForbidden(_scoped_management_message(ctx))

    def listing(self) -> tuple[KeyInfo, ...]:
        """Every key, redacted, file keys first."""
        return tuple(_info(k) for k in self._state.config.keys)

    def apply(self, config: Config) -> Config:
        """Swap in ``config``'s keys; returns the previous config, so ``apply(previous)`` rolls back."""
        previous = self._state.config
        self._state = _State.build(config)
        return previous


# ---------------------------------------------------------------------------------------------------------
# Changing the key set through config.toml


def generate_secret() -> str:
    """A new secret: ``sk-blazar-`` and 43 URL-safe random characters (256 bits)."""
    return GENERATED_SECRET_PREFIX + secrets.token_urlsafe(32)


def _check_name(name: str) -> None:
    if KEY_NAME_PATTERN.fullmatch(name) is None:
        shown = repr(name) if len(name) <= KEY_NAME_MAX else f"'{name[:20]}...' ({len(name)} characters)"
        raise KeysError(
            f"key name {shown} must be 1-{KEY_NAME_MAX} characters, only letters, digits, '.', '_' and '-'"
        )


def _check_secret(secret: str) -> None:
    if not secret_is_well_formed(secret):
        raise KeysError(
            f"a key secret must be at least {MIN_SECRET_LEN} printable ASCII characters without spaces "
            f"(the one given has {len(secret)} characters); omit it to have one generated"
        )


def _normalised_models(models: Iterable[str]) -> tuple[str, ...]:
    """The scope as ``name:tag`` names. A blank entry is refused, never dropped: dropping it would turn
    ``models = [""]`` into an empty list, which means full access and key management."""
    out: list[str] = []
    for raw in models:
        try:
            name = names.normalize(normalize_model_name(raw))  # a name the catalog could hold, or refused
        except (ValueError, CatalogError) as exc:
            raise KeysError(f"{raw!r} is not a valid model name: {exc}") from None
        if name not in out:
            out.append(name)
    return tuple(out)


def _check_limits(weight: float, limits: KeyLimits) -> None:
    if (
        isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not math.isfinite(weight)
        or weight <= 0
    ):
        raise KeysError(f"weight must be a number > 0, got {weight!r}")
    for field in dataclasses.fields(limits):
        value = getattr(limits, field.name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise KeysError(f"{field.name} must be an integer >= 0 (0 = unlimited), got {value!r}")


def _find(config: Config, name: str, path: Path) -> KeyConfig:
    for key in config.keys:
        if key.name == name:
            if key.from_env:
                raise KeyConflict(
                    f"key '{name}' comes from the {KEYS_ENV} environment variable, not {path}; "
                    f"change {KEYS_ENV} and restart instead"
                )
            return key
    raise UnknownKey(f"no key named '{name}' in {path}; list them with: blazar keys ls")


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not valid UTF-8 (byte {exc.start}); save it as UTF-8"
        ) from None


def _as_before(text: str, old: bytes | None) -> str:
    """``text`` in the old file's conventions, so an edit changes only the lines it must: CRLF line ends for a
    file written with them (tomlkit keeps the old lines' and writes new ones with LF), and its UTF-8 BOM."""
    if old is None:
        return text
    if b"\r\n" in old:
        text = re.sub(r"(?<!\r)\n", "\r\n", text)
    if old.startswith(b"\xef\xbb\xbf"):
        text = "\ufeff" + text
    return text


_Edit = Callable[[TOMLDocument, Config], tuple[list[str], tuple[KeyConfig, ...]]]


def _round_trip(
    path: Path, env: Mapping[str, str] | None, registry: KeyRegistry | None, edit: _Edit
) -> Config:
    """Parse, edit, validate, swap, write; see the module docstring. Returns the new ``Config``.

    ``edit`` changes the document and returns the existing lines it may rewrite and the key set the result
    must hold. Refusals raise before anything changes; if the write fails the old file is byte-identical and
    ``registry`` holds its old keys again.
    """
    env = os.environ if env is None else env
    with config_lock(path):
        old = read_config_bytes(path)
        old_text = None if old is None else _decode(path, old)
        current = load_config_text(old_text, path, env)
        doc = parse_document(old_text)
        may_vanish, expected = edit(doc, current)
        new_text = doc.as_string()
        try:
            new_config = load_config_text(new_text, path, env)
        except ConfigError as exc:
            raise KeysError(
                f"the change would make the config invalid, so nothing was written: {exc}"
            ) from None
        lost = 0 if old_text is None else dropped_lines(old_text, new_text, may_vanish)
        if (
            lost
            or set(new_config.keys) != set(expected)
            or dataclasses.replace(new_config, keys=()) != dataclasses.replace(current, keys=())
        ):
            raise ConfigWriteError(
                f"refusing to write {path}: the edit would change more than the one key ({lost} other line(s)); "
                "keep all [[keys]] tables together and retry, or edit the file by hand"
            )
        previous = registry.apply(new_config) if registry is not None else None
        try:
            write_config(path, _as_before(new_text, old), old, keep_backups=new_config.config_backups)
        except BaseException:
            if registry is not None and previous is not None:
                registry.apply(previous)
            raise
    return new_config


def add_key(
    config_path: Path,
    name: str,
    models: Iterable[str] = (),
    *,
    weight: float = DEFAULT_KEY_WEIGHT,
    max_concurrent: int = 0,
    rpm: int = 0,
    tpm: int = 0,
    daily_tokens: int = 0,
    secret: str | None = None,
    registry: KeyRegistry | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[KeyConfig, str]:
    """Add a key to the config file (created if absent); returns it and its secret (generated unless given).

    Empty ``models`` is a full-access key. The first key must have full access, so that someone can still
    manage keys once auth is on.
    """
    _check_name(name)
    scope = _normalised_models(models)
    limits = KeyLimits(max_concurrent=max_concurrent, rpm=rpm, tpm=tpm, daily_tokens=daily_tokens)
    _check_limits(weight, limits)
    weight = float(weight)
    if secret is None:
        secret = generate_secret()
    _check_secret(secret)
    key = KeyConfig(name=name, secret=secret, models=scope, weight=weight, **dataclasses.asdict(limits))

    def edit(doc: TOMLDocument, current: Config) -> tuple[list[str], tuple[KeyConfig, ...]]:
        for existing in current.keys:
            if existing.name == name:
                origin = f"the {KEYS_ENV} environment variable" if existing.from_env else str(config_path)
                raise KeyConflict(
                    f"a key named '{name}' already exists (in {origin}); choose another name"
                    + (
                        ""
                        if existing.from_env
                        else f", or give it a new secret with: blazar keys rotate {name}"
                    )
                )
        if scope and not any(k.full_access for k in current.keys):
            raise KeyConflict(
                "the first key must have full access so that keys can still be managed once auth is on; "
                "add one without --models first (for example: blazar keys add admin)"
            )
        fields: dict[str, object] = {"name": name, "secret": secret, "models": list(scope)}
        if weight != DEFAULT_KEY_WEIGHT:
            fields["weight"] = weight
        for field, value in dataclasses.asdict(limits).items():
            if value:
                fields[field] = value
        may_vanish = append_key_table(doc, fields)
        file_keys = tuple(k for k in current.keys if not k.from_env)
        env_keys = tuple(k for k in current.keys if k.from_env)
        return may_vanish, (*file_keys, key, *env_keys)

    _round_trip(config_path, env, registry, edit)
    return key, secret


def remove_key(
    config_path: Path,
    name: str,
    *,
    allow_auth_off: bool = False,
    registry: KeyRegistry | None = None,
    env: Mapping[str, str] | None = None,
) -> KeyConfig:
    """Remove the named key from the config file; returns it.

    Refused for a ``BLAZAR_KEYS`` key, for the last full-access key while other keys remain, and for the very
    last key (which would turn auth off) unless ``allow_auth_off``.
    """
    removed: list[KeyConfig] = []

    def edit(doc: TOMLDocument, current: Config) -> tuple[list[str], tuple[KeyConfig, ...]]:
        key = _find(current, name, config_path)
        remaining = tuple(k for k in current.keys if k.name != name)
        if not remaining and not allow_auth_off:
            raise KeyConflict(
                f"'{name}' is the last key: removing it turns authentication off and opens the gateway to "
                "anyone who can reach it; add another key first, or confirm with --disable-auth"
            )
        if key.full_access and remaining and not any(k.full_access for k in remaining):
            raise KeyConflict(
                f"'{name}' is the last key with full access and other keys remain, so nobody could manage keys "
                "any more; add another full-access key first (blazar keys add NAME, without --models)"
            )
        removed.append(key)
        return remove_key_table(doc, name), remaining

    _round_trip(config_path, env, registry, edit)
    return removed[0]


def rotate_key(
    config_path: Path,
    name: str,
    *,
    secret: str | None = None,
    registry: KeyRegistry | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[KeyConfig, str]:
    """Give the named key a new secret (generated unless given); the old one stops working. Returns both."""
    if secret is None:
        secret = generate_secret()
    _check_secret(secret)
    rotated: list[KeyConfig] = []

    def edit(doc: TOMLDocument, current: Config) -> tuple[list[str], tuple[KeyConfig, ...]]:
        key = dataclasses.replace(_find(current, name, config_path), secret=secret)
        rotated.append(key)
        may_vanish = set_key_value(doc, name, "secret", secret)
        return may_vanish, tuple(key if k.name == name else k for k in current.keys)

    _round_trip(config_path, env, registry, edit)
    return rotated[0], secret


def list_keys(config_path: Path, env: Mapping[str, str] | None = None) -> tuple[KeyInfo, ...]:
    """Every key in the config file and ``BLAZAR_KEYS``, redacted; an absent file has none."""
    env = os.environ if env is None else env
    old = read_config_bytes(config_path)
    text = None if old is None else _decode(config_path, old)
    return tuple(_info(k) for k in load_config_text(text, config_path, env).keys)
