"""The launch-profile compiler: the argv that starts an engine child for one (model, engine), fitted to the machine.

It reads the config (defaults, then the model's ``[models."name:tag"]`` override), the model's GGUF metadata and a
``Hardware`` snapshot, and returns a ``LaunchSpec``: an argv template with ``{port}`` and ``{api_key_file}``
placeholders (a llama-server that can listens on ``run/<key>.sock`` instead of a port), the fitted context and the
memory estimate behind it. Compiling has no side effects; ``prepare`` does the few the engine needs before it
starts (the slot save directory, an empty lookup cache file, a unix socket a dead child left removed). Spawning is
the supervisor's job. The llama-cpp compiler is here; mistralrs, sglang and mlx are compiled in
``profile_lanes.py``; each lane's flags come from its builder in ``engines/argv.py``, which the install gate
shares.

Every llama-server flag used here was checked against ``llama-server --help`` of the build the tests run.
"""

from __future__ import annotations

import logging
import re
import shlex
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from blazar._native import GgufError, read_gguf_metadata
from blazar.catalog import ModelRow, read_header
from blazar.config import Config
from blazar.config.model import AUTO_SLOTS, PARALLEL_AUTO
from blazar.engines import argv as lane_argv
from blazar.engines.registry import EngineRow
from blazar.errors import CatalogError, LaneError
from blazar.fit import MIB, N_UBATCH, Fit, FitRequest, KvSettings, MemoryEstimate, ProfileUnfit, fit, kv_shape
from blazar.hardware import Hardware, probe
from blazar.paths import DataDir, child_key, safe_component

log = logging.getLogger("blazar.profile")

PLACEHOLDERS = ("{port}", "{api_key_file}")
_SHARD = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")


_VISION_FLAGS = frozenset({"--mmproj", "-mm", "--mmproj-url", "-mmu", "-hf", "-hfr", "--hf-repo"})


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an engine does beyond an OpenAI-compatible ``/v1/chat/completions`` and ``/v1/embeddings``. Each
    lane's compiler says what its engine has; the gateway and the supervisor ask these, never a lane's name."""

    token_counting: bool = False
    """``/tokenize``, ``/detokenize`` and ``/apply-template``: counting a prompt, cutting an input to fit."""
    infill: bool = False
    """``/infill``: fill-in-the-middle with a suffix."""
    slot_pinning: bool = False
    """``id_slot`` pins a conversation to a slot, and slots can be saved and restored (``--slot-save-path``)."""
    choices_in_slots: bool = False
    """Each of ``n`` choices (and each prompt of a list) is generated in a slot of its own, as its own task."""
    progress_reports: bool = False
    """``return_progress``: a stream reports the prompt's size before its first token."""
    prefill_echo: bool = False
    """A trailing assistant message is continued, and the answer starts with what that message held."""
    lora_per_request: bool = False
    """Adapters loaded unapplied (``--lora-init-without-apply``) and chosen by a request's ``lora`` field."""
    raw_vectors: bool = False
    """``embd_normalize: -1``: a pooled embedding as the model made it, not L2-normalised."""
    template_props: bool = False
    """``/props`` says whether the chat template emits tool calls and has a thinking section."""
    transcription: bool = False
    """Speech to text (whisper.cpp's ``/inference``), and nothing else."""


LLAMA_SERVER = Capabilities(
    token_counting=True,
    infill=True,
    slot_pinning=True,
    choices_in_slots=True,
    progress_reports=True,
    prefill_echo=True,
    lora_per_request=True,
    raw_vectors=True,
    template_props=True,
)
OPENAI_COMPATIBLE = Capabilities()
"""mistral.rs, SGLang and mlx-lm: their OpenAI endpoints only, as far as the gateway relies on them."""
WHISPER_SERVER = Capabilities(transcription=True)


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything the supervisor needs to start one child, except the port and key, which it picks.
    ``socket_path``: the unix socket the engine listens on instead of a port (None: a port).

    ``ctx_size`` is the engine's total context (cells), ``ctx_per_slot`` what one request can use (0: unknown, no
    prompt preflight); the paths are the files ``prepare`` readies (None when unused); ``estimate`` is the memory
    estimate the context was fitted with (None for lanes without one). ``engine_model`` is the ``model`` every
    request to this child must carry (None: the client's name is fine, llama-server ignores it).
    ``checks_api_key`` is False for engines that cannot check a key (mlx-lm, mistral.rs): the supervisor still
    writes one, but such a child is protected only by listening on 127.0.0.1. ``sleep_secs``: the idle seconds
    after which the engine frees its model itself (llama-server's ``--sleep-idle-seconds``; 0: never).
    ``loras``: the LoRA adapter files it loads unapplied, in their engine ids' order (``supervisor.adapters``).
    ``can``: what the engine does beyond OpenAI's endpoints (``Capabilities``).
    """

    argv_template: tuple[str, ...]
    ctx_size: int = 0
    health_path: str = "/health"
    parallel: int = 1
    kv_unified: bool = False
    """The slots share one context of ``ctx_size`` (``ModelSettings.kv_unified``)."""
    slot_save_dir: Path | None = None
    lookup_cache: Path | None = None
    socket_path: Path | None = None
    mmproj: Path | None = None
    estimate: MemoryEstimate | None = None
    engine_model: str | None = None
    checks_api_key: bool = True
    sleep_secs: int = 0
    loras: tuple[Path, ...] = ()
    can: Capabilities = OPENAI_COMPATIBLE

    @property
    def ctx_per_slot(self) -> int:
        return self.ctx_size if self.kv_unified else self.ctx_size // max(self.parallel, 1)

    @property
    def reads_images(self) -> bool:
        """Whether the engine can take image parts. llama-server needs a vision projector: ``mmproj``, or one
        given in ``extra_args`` (``--mmproj``, or fetched with ``-hf``); the other lanes (``engine_model`` set)
        judge for themselves."""
        if self.mmproj is not None or self.engine_model is not None:
            return True
        return any(a in _VISION_FLAGS for a in self.argv_template)

    def on_tcp(self) -> LaunchSpec:
        """The same launch on a 127.0.0.1 port instead of its unix socket (``--host SOCK`` becomes
        ``--host 127.0.0.1 --port {port}``)."""
        if self.socket_path is None:
            return self
        argv = list(self.argv_template)
        at = argv.index("--host")
        argv[at : at + 2] = ["--host", lane_argv.HOST, "--port", "{port}"]
        return replace(self, argv_template=tuple(argv), socket_path=None)

    def argv(self, *, port: int, api_key_file: Path) -> list[str]:
        """The argv with the placeholders filled. It also runs ``prepare(self)`` (idempotent), so a spawn that
        does not call ``prepare`` itself still finds the slot save directory and lookup cache in place; without
        the directory, ``--slot-save-path`` is left out."""
        banked = prepare(self)
        out: list[str] = []
        skip = False
        for a in self.argv_template:
            if skip:
                skip = False
                continue
            if a == "--slot-save-path" and not banked:
                skip = (
                    True  # llama-server refuses a path that is not a directory: no bank, but the engine runs
                )
                continue
            if a == "{port}":
                out.append(str(port))
            elif a == "{api_key_file}":
                out.append(str(api_key_file))
            else:
                out.append(a)
        return out


def prepare(spec: LaunchSpec) -> bool:
    """Ready the files ``spec`` names, right before the child is spawned: the slot save directory (owner-only: the
    session bank's files hold prompts; one that cannot be made only leaves the bank off), an empty lookup cache
    file when there is none (llama-server aborts when ``--lookup-cache-dynamic`` names a missing file), and a unix
    socket left by a dead child removed (only a socket, never another kind of file)."""
    if spec.slot_save_dir is not None:
        try:
            for folder in (spec.slot_save_dir.parent, spec.slot_save_dir):
                folder.mkdir(mode=0o700, exist_ok=True)
                folder.chmod(0o700)
        except OSError as e:
            log.warning(
                "session bank off for this engine: cannot make %s (%s); its slots are not saved",
                spec.slot_save_dir,
                e.strerror or e,
            )
            banked = False
        else:
            banked = True
    else:
        banked = False
    if spec.lookup_cache is not None:
        spec.lookup_cache.parent.mkdir(parents=True, exist_ok=True)
        spec.lookup_cache.touch(exist_ok=True)
    if spec.socket_path is not None:
        remove_stale_socket(spec.socket_path)
    return banked


def remove_stale_socket(path: Path) -> None:
    """Remove the unix socket at ``path`` if nobody listens on it (what a dead engine leaves behind); a live one,
    or a file that is not a socket, stays."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode) and not socket_in_use(path):
            path.unlink()
    except FileNotFoundError:
        pass


def socket_in_use(path: Path) -> bool:
    """Whether a process listens on the unix socket ``path`` (a live engine, maybe another blazar's on the same
    data directory), as opposed to a socket file a dead one left behind."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.setblocking(False)  # never waits: a full backlog (EAGAIN) still means someone listens
        try:
            s.connect(str(path))
        except BlockingIOError:
            return True
        except OSError:  # refused (nobody listens), missing, not a socket
            return False
        return True


def shard_paths(path: Path) -> list[Path]:
    """All shards of a split GGUF (``name-00001-of-00003.gguf``) that exist next to ``path``, else ``[path]``."""
    m = _SHARD.match(path.name)
    if m is None:
        return [path]
    n = int(m.group("n"))
    found = [path.with_name(f"{m.group('stem')}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]
    return [p for p in found if p.is_file()] or [path]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _is_projector(path: Path) -> bool:
    try:
        md = read_gguf_metadata(str(path), 0).get("metadata")
    except (GgufError, OSError):
        return False
    return isinstance(md, Mapping) and md.get("general.architecture") == "clip"


def find_mmproj(model_path: Path) -> Path | None:
    """A vision projector next to the model: the sibling ``mmproj*.gguf`` that is a clip GGUF (the one sharing the
    model file's stem when there are several)."""
    try:
        candidates = sorted(model_path.parent.glob("mmproj*.gguf"))
    except OSError:
        return None
    candidates = [c for c in candidates if c != model_path]
    candidates.sort(key=lambda c: model_path.stem not in c.name)
    return next((c for c in candidates if _is_projector(c)), None)


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """A model's effective launch settings: its override's values where set, else the top-level ones."""

    ctx_size: int
    parallel: int
    """The engine's slots: ``parallel = "auto"`` resolved to ``AUTO_SLOTS``."""
    threads: int
    gpu_layers: int
    cache_type_k: str
    cache_type_v: str
    flash_attn: str
    swa_full: bool
    lookup_cache: bool
    idle_sleep_secs: int
    kv_unified: bool = False
    """The slots share one KV cache of ``ctx_size`` cells, each able to use all of it (``parallel = "auto"``, as
    llama-server's own ``--parallel -1``), rather than ``ctx_size / parallel`` each."""

    @property
    def streams(self) -> int:
        """KV streams: one shared by every slot, or one per slot."""
        return 1 if self.kv_unified else max(self.parallel, 1)

    def slots(self, *, embeddings: bool = False) -> int:
        """The slots of one of the model's llama-server engines: its chat engine's ``parallel``, its embedding
        (and late-chunking) engines' that rounded down to a power of two (``embed_slots``). Routing admits by
        it, the compiler launches with it."""
        return embed_slots(self.parallel) if embeddings else self.parallel

    def kv_streams(self, *, embeddings: bool = False) -> int:
        """The KV streams of that engine: one when its slots share the cache, else one per slot."""
        return 1 if self.kv_unified else self.slots(embeddings=embeddings)

    @property
    def ctx_per_slot(self) -> int:
        """The context one request may use (0: the model's trained context, left to the engine)."""
        return self.ctx_size // self.streams


def _flag_int(args: tuple[str, ...], flag: str) -> int | None:
    """The value of ``flag`` in ``args`` (``flag N`` or ``flag=N``) as a non-negative int (-1 and junk: 0), or
    None when ``flag`` is absent."""
    for i, a in enumerate(args):
        if a == flag:
            value = args[i + 1] if i + 1 < len(args) else ""
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1 :]
        else:
            continue
        try:
            return max(int(value), 0)
        except ValueError:
            return 0
    return None


def model_settings(cfg: Config, model_name: str) -> ModelSettings:
    ov = cfg.model_override(model_name)
    parallel = cfg.parallel if ov.parallel is None else ov.parallel
    return ModelSettings(
        ctx_size=cfg.ctx_size if ov.ctx_size is None else ov.ctx_size,
        parallel=AUTO_SLOTS if parallel == PARALLEL_AUTO else parallel,
        kv_unified=parallel == PARALLEL_AUTO,
        threads=cfg.threads if ov.threads is None else ov.threads,
        gpu_layers=cfg.gpu_layers if ov.gpu_layers is None else ov.gpu_layers,
        cache_type_k=ov.cache_type_k or cfg.cache_type_k,
        cache_type_v=ov.cache_type_v or cfg.cache_type_v,
        flash_attn=ov.flash_attn or cfg.flash_attn,
        swa_full=cfg.swa_full if ov.swa_full is None else ov.swa_full,
        lookup_cache=cfg.lookup_cache if ov.lookup_cache is None else ov.lookup_cache,
        idle_sleep_secs=cfg.idle_sleep_secs if ov.idle_sleep_secs is None else ov.idle_sleep_secs,
    )


def fit_model(
    cfg: Config,
    model: ModelRow,
    *,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
    mmproj: Path | None = None,
    settings: KvSettings | None = None,
    ubatch: int | None = None,
) -> Fit:
    """The memory fit for serving ``model`` with the config's settings (``ctx_size`` overrides the config's,
    ``settings`` the config's KV cache settings: for engines that do not take llama.cpp's cache flags).

    ``ctx_size`` is a request's (Ollama's ``num_ctx`` times the slots): it is capped at the context the model was
    trained on per slot, as Ollama caps it, so that one request cannot make the engine restart with a context
    sized to all free memory (``num_ctx: 1e308`` asked for a million cells and a minute of loading)."""
    st = model_settings(cfg, model.name)
    header = read_header(model.path)
    md = header.get("metadata")
    try:
        shape = kv_shape(md if isinstance(md, Mapping) else {})
    except ValueError as e:
        raise CatalogError(f"model '{model.name}' ({model.path}): {e}") from None
    if ctx_size is not None and ctx_size > shape.trained_ctx * st.streams:
        log.warning(
            "%s: a request asked for context %d; the model was trained on %d per slot, so using %d",
            model.name,
            ctx_size,
            shape.trained_ctx,
            shape.trained_ctx * st.streams,
        )
        ctx_size = shape.trained_ctx * st.streams
    req = FitRequest(
        model=model.name,
        shape=shape,
        weights=sum(_size(p) for p in shard_paths(model.path)),
        requested_ctx=st.ctx_size if ctx_size is None else ctx_size,
        settings=settings
        or KvSettings(
            cache_type_k=st.cache_type_k,
            cache_type_v=st.cache_type_v,
            flash_attn=st.flash_attn,
            swa_full=st.swa_full,
            parallel=st.parallel,
            unified=st.kv_unified,
            ubatch=ubatch or N_UBATCH,
        ),
        gpu_layers=st.gpu_layers,
        mmproj=_size(mmproj) if mmproj is not None else 0,
    )
    return fit(req, hardware or probe(), headroom=cfg.memory_headroom_mib * MIB)


def mmproj_for(cfg: Config, model: ModelRow) -> Path | None:
    """The projector to load with ``model``: the override's ``mmproj`` (which must exist), else a sibling."""
    ov = cfg.model_override(model.name)
    if ov.mmproj is not None:
        if not ov.mmproj.is_file():
            raise LaneError(
                f"model '{model.name}': mmproj {ov.mmproj} does not exist; fix or remove mmproj under "
                f'[models."{model.name}"] in config.toml'
            )
        return ov.mmproj
    return find_mmproj(model.path)


def embed_slots(parallel: int) -> int:
    """An embedding engine's slot count: ``parallel`` rounded down to a power of two, as llama-server aborts at
    start with any other (``GGML_ASSERT(ggml_can_mul_mat)`` in its warm-up; build b11434: 3, 5, 6 and 7 abort,
    1, 2, 4 and 8 serve)."""
    return 1 << (max(1, parallel).bit_length() - 1)


def compile_llama_cpp(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
    tokens: bool = False,
) -> LaunchSpec:
    ov = cfg.model_override(model.name)
    st = model_settings(cfg, model.name)
    mmproj = None if embeddings else mmproj_for(cfg, model)
    # an embedding engine's batch is what one input may hold (llama-server embeds an input in one batch), which
    # sizes its compute buffer
    ubatch = None
    if embeddings:
        ubatch = late_chunk_batch(cfg, (ctx_size or st.ctx_size) // st.kv_streams(embeddings=True))
    est = fit_model(cfg, model, hardware=hardware, ctx_size=ctx_size, mmproj=mmproj, ubatch=ubatch).require()
    if est.reduced:
        log.warning(
            "%s: context %d does not fit in free memory; using %d (%s)",
            model.name,
            est.requested_ctx,
            est.ctx_size,
            est.placement,
        )
    parallel = st.slots(embeddings=embeddings or tokens)
    unified = est.settings.unified
    slot_ctx = est.ctx_size // st.kv_streams(embeddings=embeddings or tokens)
    data = cfg.data_dir
    slot_dir = DataDir(data).bank(model.name)
    sock = DataDir(data).run_file(child_key(model.name, embeddings, tokens), "sock")
    unix = lane_argv.serves_unix_socket(
        engine.kind, engine.version, engine.lane_class
    ) and lane_argv.socket_fits(sock)
    argv = lane_argv.llama_cpp(
        engine.path,
        model.path,
        port="{port}",
        ctx_size=est.ctx_size,
        alias=model.name,
        api_key_file="{api_key_file}",
        socket=sock if unix else None,  # else a TCP port on 127.0.0.1
    )
    argv += [
        "--parallel", str(parallel),
        *(["--kv-unified"] if unified else []),
        "--cache-type-k", est.settings.cache_type_k,
        "--cache-type-v", est.settings.cache_type_v,
        "--flash-attn", est.settings.flash_attn,
        "--jinja",
        "--no-webui",
        "--metrics",
        "--slot-save-path", str(slot_dir),
    ]  # fmt: skip
    if st.threads > 0:
        argv += ["--threads", str(st.threads)]
    if st.gpu_layers >= 0:
        argv += ["--n-gpu-layers", str(st.gpu_layers)]
    if est.placement == "cpu":
        argv += ["--fit", "off"]  # nothing for llama.cpp's own device fitting to do; it costs startup time
    if est.settings.swa_full:
        argv.append("--swa-full")
    if ov.chat_template is not None:
        argv += ["--chat-template", ov.chat_template]
    if ov.chat_template_file is not None:
        argv += ["--chat-template-file", str(ov.chat_template_file)]
    if mmproj is not None:
        argv += ["--mmproj", str(mmproj)]
    lookup = None
    if st.lookup_cache and not embeddings:
        lookup = data / "speccache" / f"{safe_component(model.name)}.bin"
        argv += ["--spec-type", "ngram-cache", "--lookup-cache-dynamic", str(lookup)]
    if embeddings and not tokens:
        # one input up to late_chunking_max_tokens (within a slot), not llama-server's default batch of 512
        batch = str(late_chunk_batch(cfg, slot_ctx))
        argv += ["--embeddings", "--pooling", "mean", "--batch-size", batch, "--ubatch-size", batch]
    sleep_secs = _flag_int(ov.extra_args, "--sleep-idle-seconds")  # the user's own wins
    if sleep_secs is None:
        sleep_secs = 0
        if st.idle_sleep_secs > 0 and lane_argv.sleeps_when_idle(
            engine.kind, engine.version, engine.lane_class
        ):
            sleep_secs = st.idle_sleep_secs
            argv += ["--sleep-idle-seconds", str(sleep_secs)]
    argv += list(ov.extra_args)
    if tokens:
        # late chunking: one vector per token, pooled per chunk by the gateway, and a request's tokens embedded in
        # one batch; after extra_args, so a model's own --pooling or -ub (for its other engines) cannot undo it
        batch = str(late_chunk_batch(cfg, slot_ctx))
        argv += ["--embeddings", "--pooling", "none", "--batch-size", batch, "--ubatch-size", batch]
    return LaunchSpec(
        argv_template=tuple(argv),
        ctx_size=est.ctx_size,
        parallel=parallel,
        kv_unified=unified,
        slot_save_dir=slot_dir,
        lookup_cache=lookup,
        socket_path=sock if unix else None,
        mmproj=mmproj,
        estimate=est,
        sleep_secs=sleep_secs,
        can=LLAMA_SERVER,
    )


def late_chunk_batch(cfg: Config, ctx_per_slot: int) -> int:
    """The physical batch of an embedding engine: an input's tokens (a late-chunking request's: all its chunks')
    are embedded in one batch, so it is ``late_chunking_max_tokens``, within one slot's context."""
    limit = cfg.late_chunking_max_tokens
    return min(limit, ctx_per_slot) if ctx_per_slot > 0 else limit


def compile_profile(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
    tokens: bool = False,
) -> LaunchSpec:
    """The launch spec for ``model`` on ``engine``; ``hardware`` defaults to probing the machine now and
    ``ctx_size`` (e.g. Ollama's ``num_ctx``) replaces the configured context. Raises ``ProfileUnfit`` (503) when
    the model cannot fit, ``LaneError`` for a lane without a compiler (sd, whisper) or settings it cannot take.
    ``tokens``: the model's late-chunking engine (per-token embeddings), which only llama-server gives."""
    if engine.kind == "llama-cpp":
        return compile_llama_cpp(
            cfg, model, engine, embeddings=embeddings, hardware=hardware, ctx_size=ctx_size, tokens=tokens
        )
    if tokens:
        raise LaneError(
            f"late_chunking needs per-token embeddings, which only the llama-cpp lane gives, but model"
            f" '{model.name}' runs on the {engine.kind} lane; serve it with llama-cpp (engine = \"llama-cpp\" under"
            f' [models."{model.name}"] in config.toml, for a GGUF) or embed without late_chunking'
        )
    from blazar.profile_lanes import compile_lane  # it builds on this module

    return compile_lane(cfg, model, engine, embeddings=embeddings, hardware=hardware, ctx_size=ctx_size)


def render_command(spec: LaunchSpec) -> str:
    """The argv as one shell line (placeholders left bare so they read as placeholders)."""
    return " ".join(a if a in PLACEHOLDERS else shlex.quote(a) for a in spec.argv_template)


__all__ = [
    "LaunchSpec",
    "ModelSettings",
    "ProfileUnfit",
    "compile_llama_cpp",
    "compile_profile",
    "find_mmproj",
    "fit_model",
    "mmproj_for",
    "model_settings",
    "prepare",
    "render_command",
    "shard_paths",
]
