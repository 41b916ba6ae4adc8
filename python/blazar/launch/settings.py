"""A model's effective launch settings, read once for every lane: ``model_settings`` (the config's defaults, then
the model's ``[models."name:tag"]`` override; ``parallel = "auto"`` resolved: 4 slots sharing the context), the
memory fit (``fit_model``, with the memory of the model's RPC workers), the model's shards and its vision
projector. No I/O beyond reading model headers and asking the model's RPC workers for their memory.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from blazar._native import GgufError, read_gguf_metadata
from blazar.catalog import capabilities
from blazar.catalog.models import ModelRow, read_header
from blazar.config import Config
from blazar.config.model import AUTO_SLOTS, PARALLEL_AUTO, RpcWorker
from blazar.errors import CatalogError, LaneError
from blazar.launch.fit import MIB, N_UBATCH, Fit, FitRequest, KvSettings, fit, kv_shape
from blazar.launch.hardware import Hardware, probe
from blazar.launch.workers import lend

log = logging.getLogger("blazar.profile")

_SHARD = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")


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
    replicas: int = 1
    """Engines of the model on this host at most (``replicas``): its chat engine's instances, each with these
    settings."""
    rpc_workers: tuple[RpcWorker, ...] = ()
    """llama.cpp RPC workers its llama-server engines offload layers to (``--rpc``)."""
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


def flag_int(args: tuple[str, ...], flag: str) -> int | None:
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
        replicas=ov.replicas or 1,
        rpc_workers=ov.rpc_workers,
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
    sized to all free memory (``num_ctx: 1e308`` asked for a million cells and a minute of loading).

    The model's ``rpc_workers`` lend their devices to ``hardware`` (``launch.workers.lend``: a worker that cannot
    be used is a ``WorkerUnreachable`` naming the fix)."""
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
    hw = hardware or probe()
    if st.rpc_workers:
        hw = lend(hw, st.rpc_workers)
    return fit(req, hw, headroom=cfg.memory_headroom_mib * MIB)


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


def model_capabilities(cfg: Config, model: ModelRow) -> list[str]:
    """What ``model`` does as its engine is started here: its files, with the template and projector config.toml
    gives it (``catalog.capabilities``)."""
    try:
        projector = mmproj_for(cfg, model) is not None
    except LaneError:  # a configured mmproj that is missing: the engine cannot start with it either
        projector = False
    return capabilities.of_model(
        model, template=cfg.model_override(model.name).template_text(), projector=projector
    )


def embed_slots(parallel: int) -> int:
    """An embedding engine's slot count: ``parallel`` rounded down to a power of two, as llama-server aborts at
    start with any other (``GGML_ASSERT(ggml_can_mul_mat)`` in its warm-up; build b11434: 3, 5, 6 and 7 abort,
    1, 2, 4 and 8 serve)."""
    return 1 << (max(1, parallel).bit_length() - 1)


def late_chunk_batch(cfg: Config, ctx_per_slot: int) -> int:
    """The physical batch of an embedding engine: an input's tokens (a late-chunking request's: all its chunks')
    are embedded in one batch, so it is ``late_chunking_max_tokens``, within one slot's context."""
    limit = cfg.late_chunking_max_tokens
    return min(limit, ctx_per_slot) if ctx_per_slot > 0 else limit
