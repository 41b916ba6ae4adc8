"""The default config document that ``blazar config init`` writes (every top-level default, commented) and the
reference page ``docs/config.md`` generated from the same defaults (``scripts/config_reference.py``).

It owns the documents' wording; the values come from ``config.model``. It must not do I/O.
"""

from __future__ import annotations

import dataclasses

import tomlkit

from blazar.config.api_keys import SECRET_RULE
from blazar.config.model import (
    DEFAULT_CACHE_TYPE,
    DEFAULT_CHILD_HEADER_TIMEOUT_SECS,
    DEFAULT_CHILD_START_TIMEOUT_SECS,
    DEFAULT_CONFIG_BACKUPS,
    DEFAULT_CORS_ORIGINS,
    DEFAULT_CTX_SIZE,
    DEFAULT_ENGINE_CHECK_SECS,
    DEFAULT_ENGINE_METRICS_SECS,
    DEFAULT_ENGINE_MODE,
    DEFAULT_FLASH_ATTN,
    DEFAULT_GPU_LAYERS,
    DEFAULT_HOST,
    DEFAULT_IDLE_SLEEP_SECS,
    DEFAULT_IDLE_TIMEOUT_SECS,
    DEFAULT_KEY_WEIGHT,
    DEFAULT_LATE_CHUNKING_MAX_TOKENS,
    DEFAULT_LOG_LEVEL,
    DEFAULT_MEMORY_HEADROOM_MIB,
    DEFAULT_PARALLEL,
    DEFAULT_POOL_AFFINITY_BOUND,
    DEFAULT_PORT,
    DEFAULT_QUEUE_WAIT_SECS,
    DEFAULT_REMOTE_PARALLEL,
    DEFAULT_REQUEST_BODY_TIMEOUT_SECS,
    DEFAULT_SEMANTIC_CACHE_THRESHOLD,
    DEFAULT_SEMANTIC_CACHE_TTL_SECS,
    DEFAULT_SENTINEL_STALL_SECS,
    DEFAULT_SESSION_KEEP_SECS,
    DEFAULT_STOP_GRACE_SECS,
    DEFAULT_THREADS,
    DEFAULT_WHISPER_IDLE_SECS,
    POOL_POLICIES,
    KeyConfig,
    ModelOverride,
    PoolConfig,
    RemoteConfig,
)
from blazar.engines import KINDS

_DOCUMENTED: tuple[tuple[str, object, str], ...] = (
    ("host", DEFAULT_HOST, "Address the server listens on (env BLAZAR_HOST). Use 0.0.0.0 to serve the LAN."),
    ("port", DEFAULT_PORT, "TCP port, 1-65535 (env BLAZAR_PORT)."),
    (
        "idle_timeout_secs",
        DEFAULT_IDLE_TIMEOUT_SECS,
        "Stop a model's engine after this many idle seconds; 0 = never.",
    ),
    (
        "idle_sleep_secs",
        DEFAULT_IDLE_SLEEP_SECS,
        "After this many idle seconds llama-server frees its weights and KV cache but keeps running; the next"
        " request reloads them. 0 = never.",
    ),
    (
        "engine_metrics_secs",
        DEFAULT_ENGINE_METRICS_SECS,
        "How often each llama-server's /metrics is read for the prompt cache hit rate `blazar ps` shows; 0 = off.",
    ),
    (
        "whisper_idle_secs",
        DEFAULT_WHISPER_IDLE_SECS,
        "Stop an idle whisper-server (audio transcriptions) after this many seconds; 0 = keep it until blazar stops.",
    ),
    (
        "late_chunking_max_tokens",
        DEFAULT_LATE_CHUNKING_MAX_TOKENS,
        "Most tokens one embedding input may have (a late_chunking request: all its chunks, more is a 413); the"
        " embedding engines' batch.",
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
    (
        "cors_origins",
        list(DEFAULT_CORS_ORIGINS),
        'Origins a browser page may call from ("*" matches the rest of one, "*" alone any); [] = none.',
    ),
    ("log_level", DEFAULT_LOG_LEVEL, 'One of "debug", "info", "warning", "error".'),
    ("ctx_size", DEFAULT_CTX_SIZE, "Context size in tokens; 0 = the model's trained context."),
    (
        "parallel",
        DEFAULT_PARALLEL,
        'Engine slots (concurrent requests) per model: "auto" = 4 sharing the context, or N >= 1 splitting it.',
    ),
    ("threads", DEFAULT_THREADS, "CPU threads per engine; 0 = the engine's default."),
    ("gpu_layers", DEFAULT_GPU_LAYERS, "Layers to offload to the GPU; -1 = all that fit (engine default)."),
    (
        "queue_wait_secs",
        DEFAULT_QUEUE_WAIT_SECS,
        "Seconds a queued request waits with no engine slot freeing before 503 all_slots_busy.",
    ),
    (
        "request_body_timeout_secs",
        DEFAULT_REQUEST_BODY_TIMEOUT_SECS,
        "Longest a client may take to send a request's body before 408 (a stalled upload holds its key's slot).",
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
        "sentinel",
        True,
        "Check every answer against its request (cut off, empty, invalid tool call or JSON) and log what is"
        " wrong; answers are never changed unless sentinel_enforce is on.",
    ),
    (
        "sentinel_stall_secs",
        DEFAULT_SENTINEL_STALL_SECS,
        "The sentinel reports a stream that pauses longer than this between tokens; 0 = off.",
    ),
    (
        "sentinel_enforce",
        False,
        "Answer a non-streamed request the sentinel finds fault with (truncated, invalid tool call or JSON,"
        " empty) with 422 instead of the answer.",
    ),
    (
        "semantic_cache",
        False,
        "Answer a whole request whose conversation means nearly the same as one answered recently (same model,"
        " key and engine; not streams, tools, structured output) with that answer, without the engine.",
    ),
    (
        "semantic_cache_threshold",
        DEFAULT_SEMANTIC_CACHE_THRESHOLD,
        "How alike two conversations must be (cosine of their embeddings, up to 1) for the cache to answer.",
    ),
    ("semantic_cache_ttl_secs", DEFAULT_SEMANTIC_CACHE_TTL_SECS, "How long a cached answer is given again."),
    (
        "otlp_endpoint",
        "",
        'OTLP/HTTP traces URL (e.g. "http://localhost:4318/v1/traces") that gets a span per request; "" = off.',
    ),
    (
        "metrics_token",
        "",
        "A secret a Prometheus scraper sends as its Bearer token to read /metrics when keys are on (16+"
        ' printable characters); "" = only full-access keys may.',
    ),
    (
        "semantic_cache_model",
        "",
        "The embedding model (in the catalog) that embeds conversations for the cache; required with it.",
    ),
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
    (
        "config_backups",
        DEFAULT_CONFIG_BACKUPS,
        "Timestamped .bak copies of this file that blazar keys and config init keep, oldest removed first; each"
        " holds every secret in it. 0 = none.",
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
    doc.add(tomlkit.comment("idle_sleep_secs = 0"))
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
    doc.add(tomlkit.comment(f'secret = "..."         # {SECRET_RULE}'))
    doc.add(tomlkit.comment("models = []             # empty = every model, and may manage keys"))
    doc.add(tomlkit.comment("weight = 1.0            # share of contended capacity"))
    doc.add(tomlkit.comment("max_concurrent = 0      # 0 = unlimited; so are rpm, tpm and daily_tokens"))
    doc.add(tomlkit.comment("rpm = 0"))
    doc.add(tomlkit.comment("tpm = 0"))
    doc.add(tomlkit.comment("daily_tokens = 0"))
    doc.add(tomlkit.nl())
    doc.add(
        tomlkit.comment('Remotes: another Blazar or OpenAI-compatible server; ask for "gpu-box:llama3" to be')
    )
    doc.add(
        tomlkit.comment(
            "answered by gpu-box's llama3. Your keys still gate the client; api_key goes upstream."
        )
    )
    doc.add(tomlkit.comment("[[remotes]]"))
    doc.add(tomlkit.comment('name = "gpu-box"'))
    doc.add(tomlkit.comment('url = "http://10.0.0.5:11435/v1"  # its OpenAI base URL; or https://'))
    doc.add(tomlkit.comment('api_key = "..."                   # or api_key_env = "GPU_BOX_KEY"; optional'))
    doc.add(tomlkit.comment("parallel = 4                      # requests in flight there at once"))
    doc.add(
        tomlkit.comment('ca_file = "ca.pem"                # https: trust this CA instead of the system\'s')
    )
    doc.add(tomlkit.nl())
    for line in (
        'Pools: "llama3" served by any healthy one of several remotes, conversations kept on one.',
        "[[pools]]",
        'name = "llama3"                    # the model name clients ask for',
        'remotes = ["gpu-box", "gpu-box-2"] # [[remotes]] names',
        'model = "llama3"                   # what each remote is asked for; default: name',
        'policy = "prefix"                  # or "least": always the least loaded',
        "affinity_bound = 4                 # in flight beyond the least loaded, then move",
    ):
        doc.add(tomlkit.comment(line))
    return tomlkit.dumps(doc)


_MODEL_ONLY = {
    "extra_args": "Arguments added to the engine's command line, after Blazar's own.",
    "engine": "The engine kind that serves the model, one of "
    + ", ".join(f'"{k}"' for k in KINDS)
    + "; unset: chosen from the model's format and the engines installed.",
    "chat_template": "A llama.cpp built-in template name or inline Jinja, instead of the model's own.",
    "chat_template_file": "A Jinja template file, instead of the model's own.",
    "mmproj": "The vision projector GGUF; unset: an mmproj*.gguf next to the model, if any.",
    "replicas": "At most this many engines of the model on this host (1 unset), each with its own slots: another"
    " starts when every slot of the running ones is busy; an extra one stops once idle 60 s (or at its keep-alive,"
    " if sooner).",
    "rpc_workers": "llama.cpp RPC workers (`blazar worker` on each host) the model's llama-server offloads layers"
    ' to, as "host:port" strings or {address = "host:port", memory_mib = N} tables (memory_mib: what the worker'
    " lends when its own report cannot be read); their memory counts in the fit. The RPC protocol has no"
    " authentication: use a private network or a tunnel.",
}
"""The per-model keys that have no top-level twin; every other ``ModelOverride`` field overrides its top-level
value."""

_KEY_FIELDS = {
    "name": ("(required)", "Who the key is, in logs, usage and `blazar keys ls`."),
    "secret": ("(required)", SECRET_RULE),
    "models": ("[]", "The models it may use; empty = every model, and it may manage keys."),
    "weight": (DEFAULT_KEY_WEIGHT, "Its share of contended capacity, against other keys' weights."),
    "max_concurrent": (0, "Requests in flight at once; 0 = unlimited."),
    "rpm": (0, "Requests per minute; 0 = unlimited."),
    "tpm": (0, "Tokens per minute (prompt and completion); 0 = unlimited."),
    "daily_tokens": (0, "Tokens per UTC day; 0 = unlimited."),
}
_REMOTE_FIELDS = {
    "name": ("(required)", 'Ask for "name:model" to be answered by that server\'s model.'),
    "url": (
        "(required)",
        "Its OpenAI base URL: http://host:port/v1, or https:// (checked against the system's CAs).",
    ),
    "api_key": (
        "(none)",
        "Sent upstream as a Bearer token, never shown; or api_key_env names a variable holding it.",
    ),
    "parallel": (DEFAULT_REMOTE_PARALLEL, "Requests in flight there at once; more wait in Blazar's queue."),
    "ca_file": ("(none)", "An https remote is checked against this CA instead of the system's."),
}
_POOL_FIELDS = {
    "name": (
        "(required)",
        "The model name clients ask for (a catalog model of that name is served instead).",
    ),
    "remotes": ("(required)", "The [[remotes]] names that serve it."),
    "model": ("(the pool's name)", "What each remote is asked for."),
    "policy": (
        POOL_POLICIES[0],
        '"prefix": a conversation stays on the remote its first messages hash to; "least": the least loaded.',
    ),
    "affinity_bound": (
        DEFAULT_POOL_AFFINITY_BOUND,
        "How many more requests in flight than the least loaded remote a conversation's own may have before"
        " the conversation goes to the least loaded.",
    ),
}
_GENERATED = "python scripts/config_reference.py"


def _toml(value: object) -> str:
    if isinstance(value, str) and value.startswith("("):
        return value
    if isinstance(value, list) and not value:
        return "`[]`"
    item = tomlkit.item(value)
    return f"`{item.as_string()}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_reference() -> str:
    """``docs/config.md``: every config key with its built-in default and what it does, as Markdown."""
    top = {key: (value, text) for key, value, text in _DOCUMENTED}
    lines = [
        "# Configuration reference",
        "",
        f"Generated from the built-in defaults by `{_GENERATED}`; a test fails when it is stale.",
        "",
        "Blazar reads `config.toml` from `$BLAZAR_CONFIG`, else `$XDG_CONFIG_HOME/blazar/config.toml` (by default",
        "`~/.config/blazar/config.toml`); with no file every default below applies. `blazar config init` writes",
        "this page's defaults, commented, and `blazar config path` says which file is read. `BLAZAR_HOST`, `BLAZAR_PORT` and",
        "`BLAZAR_DATA_DIR` override the file, and `BLAZAR_KEYS=name=secret,...` adds full-access keys.",
        "",
        "## Top level",
        "",
        "| key | default | what it does |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{key}` | {_toml(value)} | {_cell(text)} |" for key, (value, text) in top.items()]
    lines.insert(lines.index("| `port` | " + _toml(DEFAULT_PORT) + " | " + _cell(top["port"][1]) + " |") + 1,
                 "| `data_dir` | `~/.local/share/blazar` | Where models, engines, logs and blazar.db live:"
                 " `$BLAZAR_DATA_DIR`, else `$XDG_DATA_HOME/blazar`; relative paths are read from the config"
                 " file's directory. |")  # fmt: skip
    lines += [
        "",
        '## Per model: `[models."name:tag"]`',
        "",
        'Every key is optional; `"name"` means `"name:latest"`. Unset, a key takes the top-level value.',
        "",
        "| key | what it does |",
        "| --- | --- |",
    ]
    for f in dataclasses.fields(ModelOverride):
        text = _MODEL_ONLY.get(f.name) or f"The top-level `{f.name}`, for this model."
        lines.append(f"| `{f.name}` | {_cell(text)} |")
    for title, fields, cls in (
        ("## API keys: `[[keys]]`", _KEY_FIELDS, KeyConfig),
        ("## Remotes: `[[remotes]]`", _REMOTE_FIELDS, RemoteConfig),
        ("## Pools of remotes: `[[pools]]`", _POOL_FIELDS, PoolConfig),
    ):
        lines += ["", title, "", "| key | default | what it does |", "| --- | --- | --- |"]
        for name in (f.name for f in dataclasses.fields(cls) if f.name in fields):
            default, text = fields[name]
            lines.append(f"| `{name}` | {_toml(default)} | {_cell(text)} |")
    lines += [
        "",
        "With no key configured the gateway is open to anyone who can reach it; with any, every request needs one",
        "(`Authorization: Bearer` or `x-api-key`). Manage keys with `blazar keys add|rm|rotate|ls`.",
        "",
    ]
    return "\n".join(lines)
