"""The shape of Blazar's configuration: the frozen ``Config``/``ModelOverride``/``KeyConfig`` values and defaults.

It owns the field names, defaults, allowed ranges, the model-name normalisation used for
``[models."name:tag"]`` tables and the redacted rendering of API-key secrets (a secret never appears in a
``repr``). It must not read files or the process environment beyond computing the
default data dir, and must not import ``blazar._native``; parsing and validation live in ``load``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from blazar.catalog import names
from blazar.errors import CatalogError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11435
DEFAULT_IDLE_TIMEOUT_SECS = 1800
DEFAULT_IDLE_SLEEP_SECS = 300
DEFAULT_ENGINE_METRICS_SECS = 60
DEFAULT_WHISPER_IDLE_SECS = 900
DEFAULT_LATE_CHUNKING_MAX_TOKENS = 2048
DEFAULT_CHILD_START_TIMEOUT_SECS = 120
DEFAULT_CHILD_HEADER_TIMEOUT_SECS = 120
DEFAULT_QUEUE_WAIT_SECS = 30
DEFAULT_REQUEST_BODY_TIMEOUT_SECS = 60
DEFAULT_SEMANTIC_CACHE_THRESHOLD = 0.90
DEFAULT_SEMANTIC_CACHE_TTL_SECS = 600
DEFAULT_SESSION_KEEP_SECS = 900
DEFAULT_SENTINEL_STALL_SECS = 30.0
DEFAULT_ENGINE_CHECK_SECS = 86400
DEFAULT_STOP_GRACE_SECS = 10.0
DEFAULT_ENGINE_MODE = "auto"
DEFAULT_LOG_LEVEL = "info"
DEFAULT_CORS_ORIGINS = (
    *(f"{scheme}://{host}{port}" for host in ("localhost", "127.0.0.1", "0.0.0.0") for scheme in ("http", "https")
      for port in ("", ":*")),
    "app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*",
)  # fmt: skip
"""Origins a browser page may call the API from unless ``cors_origins`` says otherwise: this machine's own pages
(any port) and desktop-app webviews, as Ollama allows by default. A ``*`` matches the rest of an origin."""
DEFAULT_CTX_SIZE = 4096
Parallel = int | Literal["auto"]
"""A ``parallel`` setting: a number of engine slots, or ``"auto"``."""
PARALLEL_AUTO: Literal["auto"] = "auto"
AUTO_SLOTS = 4
"""The slots ``parallel = "auto"`` gives: llama-server's own automatic count (its ``--parallel -1``), 4 slots over
one unified KV cache, each of which may use the whole context; a number N instead splits the context into N."""
DEFAULT_PARALLEL: Parallel = PARALLEL_AUTO
DEFAULT_THREADS = 0
DEFAULT_GPU_LAYERS = -1
DEFAULT_CACHE_TYPE = "f16"
DEFAULT_FLASH_ATTN = "auto"
DEFAULT_MEMORY_HEADROOM_MIB = 1024
DEFAULT_CONFIG_BACKUPS = 10

ENGINE_MODES: tuple[str, ...] = ("auto", "manual")
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error")
CACHE_TYPES: tuple[str, ...] = ("f16", "bf16", "f32", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")
"""KV cache element types llama-server accepts for ``--cache-type-k/-v``; quantized V needs flash attention."""
FLASH_ATTN_MODES: tuple[str, ...] = ("auto", "on", "off")

DEFAULT_TAG = "latest"

KEY_NAME_MAX = 64
KEY_NAME_PATTERN = re.compile(rf"[A-Za-z0-9._-]{{1,{KEY_NAME_MAX}}}")
"""What a ``[[keys]]`` name may hold (full match): 1-64 letters, digits, ``.``, ``_`` and ``-``."""
MIN_SECRET_LEN = 16
DEFAULT_KEY_WEIGHT = 1.0
GENERATED_SECRET_PREFIX = "sk-blazar-"


def _env_path(env: Mapping[str, str], name: str) -> str | None:
    """An environment variable's value, treating an empty string as unset."""
    value = env.get(name, "")
    return value or None


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's home directory: ``$HOME`` from ``env`` when set, else what the OS reports."""
    env = os.environ if env is None else env
    home = _env_path(env, "HOME")
    return Path(home) if home else Path.home()


def expand_user(raw: str, env: Mapping[str, str] | None = None) -> Path:
    """``raw`` as a path with a leading ``~`` or ``~/`` replaced by the home directory from ``env``."""
    if raw == "~":
        return home_dir(env)
    if raw.startswith("~/"):
        return home_dir(env) / raw[2:]
    return Path(raw).expanduser()


def _xdg_dir(env: Mapping[str, str], name: str, fallback: str) -> Path:
    """An XDG base directory: the variable when it holds an absolute path (per the spec), else the fallback."""
    value = _env_path(env, name)
    if value and Path(value).is_absolute():
        return Path(value)
    return home_dir(env) / fallback


def default_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$BLAZAR_DATA_DIR``, else ``$XDG_DATA_HOME/blazar``, else ``~/.local/share/blazar``."""
    env = os.environ if env is None else env
    explicit = _env_path(env, "BLAZAR_DATA_DIR")
    if explicit:
        return expand_user(explicit, env).absolute()
    return _xdg_dir(env, "XDG_DATA_HOME", ".local/share") / "blazar"


def xdg_config_home(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME`` when it is an absolute path, else ``~/.config``."""
    env = os.environ if env is None else env
    return _xdg_dir(env, "XDG_CONFIG_HOME", ".config")


def normalize_model_name(name: str) -> str:
    """``"smollm2"`` -> ``"smollm2:latest"``; a name that already carries a tag is returned as it is.

    The tag is looked for after the last ``/`` so a registry host with a port (``host:5000/m``) is not
    mistaken for a tag. Raises ``ValueError`` for an empty name or an empty tag.
    """
    try:
        names.check(name)  # taken exactly, as on every route: " smollm2" names no model, and would be dropped
    except CatalogError as exc:
        raise ValueError(str(exc)) from None
    last = name.rsplit("/", 1)[-1]
    if not last:
        raise ValueError("model name is empty")
    if ":" not in last:
        return f"{name}:{DEFAULT_TAG}"
    base, tag = last.rsplit(":", 1)
    if not base:
        raise ValueError(f"model name {name!r} has a tag but no name")
    if not tag:
        raise ValueError(f"model name {name!r} ends with ':' but has no tag")
    return name


def secret_is_well_formed(secret: str) -> bool:
    """At least ``MIN_SECRET_LEN`` printable ASCII characters and no spaces: it must fit an HTTP header."""
    return len(secret) >= MIN_SECRET_LEN and all("!" <= c <= "~" for c in secret)


def redact_secret(secret: str) -> str:
    """``sk-blazar-...wxyz`` -> ``sk-bl…wxyz``: only the last four characters (and, for generated secrets, the
    fixed ``sk-bl`` prefix) are shown."""
    prefix = GENERATED_SECRET_PREFIX[:5] if secret.startswith(GENERATED_SECRET_PREFIX) else ""
    return f"{prefix}…{secret[-4:]}"


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """Per-key limits; 0 means unlimited for every field."""

    max_concurrent: int = 0
    rpm: int = 0
    tpm: int = 0
    daily_tokens: int = 0


DEFAULT_REMOTE_PARALLEL = 4


@dataclass(frozen=True, slots=True, repr=False)
class RemoteConfig:
    """One ``[[remotes]]`` table: another Blazar or any OpenAI-compatible server, reached as ``name:model``.

    ``url`` is its OpenAI base URL (``http://host:port/v1``, or ``https://`` checked against the system's CAs, or
    against ``ca_file``); ``api_key`` (or the environment variable ``api_key_env`` names) is sent to it as a Bearer
    token, never shown: the ``repr`` leaves it out. ``parallel`` is how many requests Blazar has in flight there
    at once; more wait in Blazar's queue.
    """

    name: str
    url: str
    api_key: str | None = None
    parallel: int = DEFAULT_REMOTE_PARALLEL
    ca_file: Path | None = None

    def __repr__(self) -> str:
        key = "set" if self.api_key else "none"
        return f"RemoteConfig(name={self.name!r}, url={self.url!r}, api_key={key}, parallel={self.parallel})"


DEFAULT_RPC_PORT = 50052
"""llama.cpp's ``rpc-server`` listens here unless told otherwise."""
MAX_RPC_WORKERS = 16
"""ggml's RPC backend serves at most this many endpoints (``GGML_RPC_MAX_SERVERS``)."""


@dataclass(frozen=True, slots=True)
class RpcWorker:
    """One llama.cpp RPC worker (``rpc-server``, run by ``blazar worker``) that a model's llama-server offloads
    layers to: ``rpc_workers = ["host:port", {address = "host:port", memory_mib = N}]``. ``memory_mib`` is the
    memory it lends, used when the worker's own report cannot be read."""

    host: str
    port: int
    memory_mib: int | None = None

    @property
    def address(self) -> str:
        """``host:port``, as llama-server's ``--rpc`` takes it."""
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str, memory_mib: int | None = None) -> RpcWorker:
        """A worker from ``"host:port"``; ``ValueError`` says what is wrong with it."""
        host, sep, port = text.strip().rpartition(":")
        if (
            not sep
            or not host
            or ":" in host
            or "[" in host
            or any(c.isspace() or not c.isprintable() for c in host)
        ):
            # llama-server's --rpc splits each endpoint at its first ':', so an IPv6 literal cannot be given
            raise ValueError(
                "a host name or IPv4 address, a ':', then the port (IPv6 literals are not accepted by llama-server's"
                " --rpc)"
            )
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("with a port from 1 to 65535")
        return cls(host, int(port), memory_mib)


DEFAULT_POOL_AFFINITY_BOUND = 4
POOL_POLICIES = ("prefix", "least")


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """One ``[[pools]]`` table: a model name served by any healthy one of several ``[[remotes]]``.

    A request for ``name`` goes to one of ``remotes`` (their names), asked for ``model`` (default: ``name``).
    ``policy`` ``"prefix"`` keeps a conversation on the host its first messages hash to while that host has at most
    ``affinity_bound`` requests more in flight than the least loaded one; ``"least"`` always takes the least
    loaded. A host that cannot be reached is skipped until its health check answers again.
    """

    name: str
    remotes: tuple[str, ...]
    model: str
    policy: str = POOL_POLICIES[0]
    affinity_bound: int = DEFAULT_POOL_AFFINITY_BOUND


@dataclass(frozen=True, slots=True, repr=False)
class KeyConfig:
    """One API key: a ``[[keys]]`` table or a ``BLAZAR_KEYS`` item (``from_env``).

    ``models`` holds normalised ``name:tag`` names; empty means full access, including key management.
    The ``repr`` shows the secret redacted; nothing in this class renders it in full.
    """

    name: str
    secret: str
    models: tuple[str, ...] = ()
    weight: float = DEFAULT_KEY_WEIGHT
    max_concurrent: int = 0
    rpm: int = 0
    tpm: int = 0
    daily_tokens: int = 0
    from_env: bool = False

    @property
    def full_access(self) -> bool:
        """An unscoped key: every model, and it may manage keys."""
        return not self.models

    @property
    def limits(self) -> KeyLimits:
        return KeyLimits(self.max_concurrent, self.rpm, self.tpm, self.daily_tokens)

    @property
    def redacted_secret(self) -> str:
        return redact_secret(self.secret)

    def __repr__(self) -> str:
        return (
            f"KeyConfig(name={self.name!r}, secret={self.redacted_secret!r}, models={self.models!r}, "
            f"weight={self.weight!r}, max_concurrent={self.max_concurrent}, rpm={self.rpm}, tpm={self.tpm}, "
            f"daily_tokens={self.daily_tokens}, from_env={self.from_env})"
        )

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class ModelOverride:
    """Per-model settings from a ``[models."name:tag"]`` table; ``None`` means use the top-level value.

    ``chat_template`` (a llama.cpp template name or inline Jinja), ``chat_template_file`` and ``mmproj`` exist
    only here; unset, the model's own template is used and a sibling ``mmproj*.gguf`` is found automatically.
    """

    ctx_size: int | None = None
    parallel: Parallel | None = None
    threads: int | None = None
    gpu_layers: int | None = None
    idle_timeout_secs: int | None = None
    idle_sleep_secs: int | None = None
    extra_args: tuple[str, ...] = ()
    engine: str | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    flash_attn: str | None = None
    swa_full: bool | None = None
    lookup_cache: bool | None = None
    chat_template: str | None = None
    chat_template_file: Path | None = None
    mmproj: Path | None = None
    replicas: int | None = None
    """Engines of the model on this host at most (each with its own slots), started as load needs them."""
    rpc_workers: tuple[RpcWorker, ...] = ()
    """llama.cpp RPC workers its llama-server offloads layers to (``--rpc``), counted in its memory fit."""

    def template_text(self) -> str | None:
        """The chat template this table starts the model's engine with: ``chat_template_file``'s text, else
        ``chat_template`` (inline Jinja, or the name of one of llama.cpp's built-in templates); None when neither
        is set or the file cannot be read (the engine then refuses to start and says why)."""
        if self.chat_template_file is not None:
            try:
                return self.chat_template_file.read_text()
            except (OSError, UnicodeDecodeError):
                return None
        return self.chat_template or None


def _no_models() -> Mapping[str, ModelOverride]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Config:
    """Validated server configuration. Build it with ``load_config``; the defaults here are the embedded ones.

    ``idle_timeout_secs == 0`` never evicts; ``idle_sleep_secs`` (0 = never) lets an idle llama-server drop its
    weights and KV cache while its process stays (it reloads them on the next request); ``engine_metrics_secs``
    (0 = off) is how often each llama-server's ``/metrics`` is read for the cache hints ``/api/ps`` shows;
    ``whisper_idle_secs`` (0 = until the daemon stops) is how long an idle whisper-server is kept, in place of
    ``idle_timeout_secs``; ``late_chunking_max_tokens`` bounds the tokens of one late-chunking embedding request
    (all its chunks together; more is a 413); ``ctx_size == 0`` uses the model's trained context;
    ``threads == 0`` and ``gpu_layers == -1`` leave the choice to the engine; ``engine_check_secs == 0`` turns
    the background engine update check off. ``cache_type_k``/``cache_type_v``/``flash_attn``/``swa_full`` go to
    the engine as they are; ``lookup_cache`` turns on llama-server's n-gram lookup decoding with a per-model
    cache file; ``memory_headroom_mib`` is the memory the context fitting leaves free on each device.
    ``sentinel`` turns the sentinel (warn-only answer checks) on; ``sentinel_stall_secs`` is the gap between
    streamed tokens it reports (0 = off);
    ``sentinel_enforce`` answers a non-streamed request the sentinel finds fault with by a 422.
    ``request_body_timeout_secs`` bounds how long a client may take to send a request's body (then 408).
    ``semantic_cache`` (opt-in) answers a whole request whose conversation embeds within
    ``semantic_cache_threshold`` (cosine) of one answered in the last ``semantic_cache_ttl_secs`` with that answer;
    ``semantic_cache_model`` (an embedding model; required with the cache) embeds them. ``otlp_endpoint``
    (opt-in) is an OTLP/HTTP traces URL that gets one span per request, batched every 10 s. ``metrics_token``
    (a secret, never shown) lets a scraper read ``/metrics`` with it as a Bearer token when keys are on.
    ``config_backups`` is how many timestamped ``.bak`` copies of the config file a write keeps (0 = none; each
    holds every secret the file held).
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    data_dir: Path = field(default_factory=default_data_dir)
    idle_timeout_secs: int = DEFAULT_IDLE_TIMEOUT_SECS
    idle_sleep_secs: int = DEFAULT_IDLE_SLEEP_SECS
    engine_metrics_secs: int = DEFAULT_ENGINE_METRICS_SECS
    whisper_idle_secs: int = DEFAULT_WHISPER_IDLE_SECS
    late_chunking_max_tokens: int = DEFAULT_LATE_CHUNKING_MAX_TOKENS
    child_start_timeout_secs: int = DEFAULT_CHILD_START_TIMEOUT_SECS
    child_header_timeout_secs: int = DEFAULT_CHILD_HEADER_TIMEOUT_SECS
    stop_grace_secs: float = DEFAULT_STOP_GRACE_SECS
    engine_mode: str = DEFAULT_ENGINE_MODE
    cors_origins: tuple[str, ...] = DEFAULT_CORS_ORIGINS
    log_level: str = DEFAULT_LOG_LEVEL
    ctx_size: int = DEFAULT_CTX_SIZE
    parallel: Parallel = DEFAULT_PARALLEL
    threads: int = DEFAULT_THREADS
    gpu_layers: int = DEFAULT_GPU_LAYERS
    queue_wait_secs: int = DEFAULT_QUEUE_WAIT_SECS
    request_body_timeout_secs: int = DEFAULT_REQUEST_BODY_TIMEOUT_SECS
    session_keep_secs: int = DEFAULT_SESSION_KEEP_SECS
    engine_check_secs: int = DEFAULT_ENGINE_CHECK_SECS
    audit: bool = False
    sentinel: bool = True
    sentinel_stall_secs: float = DEFAULT_SENTINEL_STALL_SECS
    sentinel_enforce: bool = False
    semantic_cache: bool = False
    semantic_cache_threshold: float = DEFAULT_SEMANTIC_CACHE_THRESHOLD
    semantic_cache_ttl_secs: int = DEFAULT_SEMANTIC_CACHE_TTL_SECS
    semantic_cache_model: str = ""
    otlp_endpoint: str = ""
    metrics_token: str = field(default="", repr=False)
    cache_type_k: str = DEFAULT_CACHE_TYPE
    cache_type_v: str = DEFAULT_CACHE_TYPE
    flash_attn: str = DEFAULT_FLASH_ATTN
    swa_full: bool = False
    lookup_cache: bool = False
    memory_headroom_mib: int = DEFAULT_MEMORY_HEADROOM_MIB
    config_backups: int = DEFAULT_CONFIG_BACKUPS
    models: Mapping[str, ModelOverride] = field(default_factory=_no_models, hash=False)
    keys: tuple[KeyConfig, ...] = ()
    remotes: tuple[RemoteConfig, ...] = ()
    pools: tuple[PoolConfig, ...] = ()

    def model_override(self, name: str) -> ModelOverride:
        """The override table for ``name`` (normalised), or an all-``None`` override when there is none."""
        try:
            key = normalize_model_name(name)
        except ValueError:
            return ModelOverride()
        return self.models.get(key, ModelOverride())
