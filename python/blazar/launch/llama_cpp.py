"""The llama-cpp lane's compiler: llama-server's argv for one (model, engine), fitted to the machine.

It reads the model's settings and GGUF metadata and a ``Hardware`` snapshot; a llama-server that can listens on
``run/<key>.sock`` instead of a port. Chat, embedding (``--embeddings --pooling mean``, ``rank`` for a reranking
model) and late-chunking (``--pooling none``) engines of one model differ only here. Every flag was checked
against ``llama-server --help`` of the build the tests run; the base argv comes from ``engines/argv.py``, which
the install gate shares.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from blazar.catalog.models import ModelRow
from blazar.config import Config
from blazar.engines import argv as lane_argv
from blazar.engines.registry import EngineRow
from blazar.launch.hardware import Hardware
from blazar.launch.settings import (
    fit_model,
    flag_int,
    late_chunk_batch,
    mmproj_for,
    model_capabilities,
    model_settings,
)
from blazar.launch.spec import LLAMA_SERVER, LaunchSpec
from blazar.paths import DataDir, child_key, safe_component

log = logging.getLogger("blazar.profile")


def compile(
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
    reranks = embeddings and not tokens and "rerank" in model_capabilities(cfg, model)
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
    if st.rpc_workers:  # their devices come after the local GPUs; layers are split by free memory
        argv += ["--rpc", ",".join(w.address for w in st.rpc_workers)]
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
        # a reranking model's own pooling (rank: /v1/rerank), else mean
        argv += ["--embeddings", "--pooling", "rank" if reranks else "mean", "--batch-size", batch]
        argv += ["--ubatch-size", batch]
    sleep_secs = flag_int(ov.extra_args, "--sleep-idle-seconds")  # the user's own wins
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
        can=replace(LLAMA_SERVER, reranking=True) if reranks else LLAMA_SERVER,
    )
