"""Launch profiles for the lanes beside llama-cpp: mistralrs, sglang and mlx (``compile_lane``).

Each compiler reads the config the llama-cpp one reads (the defaults, then the model's ``[models."name:tag"]``
override: ``ctx_size``, ``parallel``, ``gpu_layers``, ``chat_template`` / ``chat_template_file``, ``extra_args``,
appended last) and returns the same ``LaunchSpec``; the flags come from the lane's builder in ``engines/argv.py``
(where the engines' own argument definitions are cited). ``ctx_size`` is the engine's total context and each of
``parallel`` requests gets its share, as on llama-cpp. What each lane takes, and what it does not:

- mistralrs (GGUF, or safetensors when SGLang is absent): a GGUF's context is fitted to free memory from its
  metadata as on llama-cpp, with an f16 KV cache (mistral.rs takes none of llama.cpp's cache flags); one request's
  share goes to ``--max-seq-len``, the whole to ``--pa-context-len``. ``gpu_layers = 0`` is ``--cpu``, any other
  value is left to its automatic device mapping. The chat template is a file (``chat_template_file``). It has no
  thread flag and checks no API key. Embeddings are not wired.
- sglang (safetensors, quantized or not): one request's share goes to ``--context-length``, ``parallel`` to
  ``--max-running-requests``; SGLang sizes its weights and KV pool itself (``mem_fraction_static``), so there is
  no memory estimate. ``chat_template`` is one of its built-in names, ``chat_template_file`` a file. The key
  reaches ``--api-key`` through the venv launcher (``engines/venv.py``), never on a command line.
- mlx (MLX directories): no context flag, so ``ctx_size`` only bounds Blazar's prompt preflight; ``parallel`` caps
  its decode and prompt batches. ``chat_template`` is the Jinja text itself; a ``chat_template_file``'s text is
  read here. It checks no API key. Embeddings are not served.

``threads`` applies to none of them (SGLang and mlx-lm run on the GPU; mistral.rs has no flag for it). A
safetensors or MLX model with ``ctx_size = 0`` gets its ``config.json`` context (``max_position_embeddings``) per
request, and the context flag is left out. A child that checks no key is protected only by listening on 127.0.0.1.
- whisper (whisper.cpp models): ``whisper-server`` with ``threads``; one transcription at a time; it checks no
  API key. sd serves images, for which the gateway has no routes: a teaching ``LaneError``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from blazar.catalog import ModelRow
from blazar.config import Config, ModelOverride
from blazar.engines import argv
from blazar.engines.registry import EngineRow
from blazar.engines.venv import reads_key_file
from blazar.errors import LaneError
from blazar.fit import KvSettings
from blazar.hardware import Hardware
from blazar.paths import safe_component
from blazar.profile import WHISPER_SERVER, LaunchSpec, find_mmproj, fit_model, model_settings, shard_paths

log = logging.getLogger("blazar.profile")

MEDIA_LANES: dict[str, str] = {
    "sd": "images (stable-diffusion.cpp)",
}
_JINJA_MARKS = ("{%", "{{")


def _override_table(model: ModelRow) -> str:
    return f'[models."{model.name}"] in config.toml'


def _model_dir(model: ModelRow) -> Path:
    return model.path if model.path.is_dir() else model.path.parent


def trained_context(directory: Path) -> int:
    """The context a safetensors/MLX model was trained for: ``max_position_embeddings`` in its ``config.json``
    (or its ``text_config``, for multimodal ones); 0 when it says none."""
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return 0
    for table in (data, data.get("text_config") if isinstance(data, dict) else None):
        if isinstance(table, dict):
            value = table.get("max_position_embeddings")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


def _context(cfg: Config, model: ModelRow, ctx_size: int | None) -> tuple[int, int, int]:
    """``(total, per_request, parallel)`` for an engine that sizes its own memory. ``per_request`` is 0 when the
    context is left to the engine (``ctx_size = 0``); ``total`` is then the trained context per slot, so the
    prompt preflight still knows it (0 when unknown)."""
    st = model_settings(cfg, model.name)
    parallel, streams = max(st.parallel, 1), st.streams  # parallel = "auto": the slots share one context
    requested = st.ctx_size if ctx_size is None else ctx_size
    trained = trained_context(_model_dir(model)) or (model.context_length or 0)
    if ctx_size is not None and trained and requested > trained * streams:
        requested = trained * streams  # a request's num_ctx never asks for more than the model was trained on
    if requested > 0:
        return requested, requested // streams, parallel
    return trained * streams, 0, parallel


def _template_file(model: ModelRow, ov: ModelOverride) -> Path | None:
    path = ov.chat_template_file
    if path is not None and not path.is_file():
        raise LaneError(
            f"model '{model.name}': chat_template_file {path} does not exist; fix or remove it under"
            f" {_override_table(model)}"
        )
    if path is not None and ov.chat_template is not None:
        raise LaneError(
            f"model '{model.name}' sets both chat_template and chat_template_file, and its engine takes one"
            f" template; keep one of them under {_override_table(model)}"
        )
    return path


def _is_jinja(text: str) -> bool:
    return any(mark in text for mark in _JINJA_MARKS)


def _no_embeddings(kind: str, model: ModelRow) -> LaneError:
    return LaneError(
        f"the {kind} lane serves chat and completions only, not embeddings, in this Blazar; ask the llama-cpp"
        f" or sglang lane for embeddings of model '{model.name}' (engine = \"llama-cpp\" under"
        f" {_override_table(model)} for a GGUF)"
    )


def compile_mistralrs(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
) -> LaunchSpec:
    if embeddings:
        raise _no_embeddings("mistralrs", model)
    ov = cfg.model_override(model.name)
    st = model_settings(cfg, model.name)
    if ov.chat_template is not None and ov.chat_template_file is None:
        raise LaneError(
            f"model '{model.name}': mistral.rs takes a chat template as a file (.jinja, or a tokenizer_config"
            f" .json), not a name or inline text; save it to a file and set chat_template_file under"
            f" {_override_table(model)}"
        )
    template = _template_file(model, ov)
    estimate = None
    gguf_files: list[Path] = []
    if model.format == "gguf":
        # mistral.rs keeps an f16 (or the model's bf16) cache with sliding-window layers rotating, which is what the
        # llama.cpp estimate computes without swa_full; it loads a sibling projector on its own.
        kv = KvSettings(cache_type_k="f16", cache_type_v="f16", flash_attn="auto", parallel=st.parallel,
                      unified=st.kv_unified)  # fmt: skip
        estimate = fit_model(
            cfg, model, hardware=hardware, ctx_size=ctx_size, mmproj=find_mmproj(model.path), settings=kv
        ).require()
        if estimate.reduced:
            log.warning("%s: context %d does not fit in free memory; using %d (%s)",
                        model.name, estimate.requested_ctx, estimate.ctx_size, estimate.placement)  # fmt: skip
        total, per_request, parallel = estimate.ctx_size, estimate.ctx_per_slot, estimate.parallel
        gguf_files = shard_paths(model.path)
    else:
        total, per_request, parallel = _context(cfg, model, ctx_size)
    args = argv.mistralrs(
        engine.path,
        model.path,
        port="{port}",
        gguf_files=gguf_files,
        max_seqs=parallel,
        max_seq_len=per_request,
        kv_tokens=total if per_request > 0 else 0,
        cpu=st.gpu_layers == 0,
        chat_template_file=template,
    )
    return LaunchSpec(
        argv_template=(*args, *ov.extra_args),
        ctx_size=total,
        parallel=parallel,
        kv_unified=st.kv_unified,
        estimate=estimate,
        engine_model=argv.ENGINE_MODEL["mistralrs"],
        checks_api_key=False,
    )


def compile_sglang(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
) -> LaunchSpec:
    ov = cfg.model_override(model.name)
    template_file = _template_file(model, ov)
    if ov.chat_template is not None and _is_jinja(ov.chat_template):
        raise LaneError(
            f"model '{model.name}': SGLang takes a built-in template name or a template file as chat_template,"
            f" not inline Jinja; save the template to a file and set chat_template_file under"
            f" {_override_table(model)}"
        )
    total, per_request, parallel = _context(cfg, model, ctx_size)
    keyed = reads_key_file(engine.path)
    if not keyed:
        log.warning(
            "sglang engine %s (%s) is not a Blazar launcher that reads a key file; the child for %s will check"
            " no API key (it listens on 127.0.0.1 only); reinstall it with: blazar engine install --kind sglang",
            engine.tag,
            engine.path,
            model.name,
        )
    served = safe_component(model.name)
    args = argv.sglang(
        engine.path,
        _model_dir(model),
        port="{port}",
        api_key_file="{api_key_file}" if keyed else None,
        served_name=served,
        context_length=per_request,
        max_running_requests=parallel,
        chat_template=str(template_file) if template_file is not None else ov.chat_template,
        embeddings=embeddings,
    )
    return LaunchSpec(
        argv_template=(*args, *ov.extra_args),
        ctx_size=total,
        parallel=parallel,
        kv_unified=model_settings(cfg, model.name).kv_unified,
        engine_model=served,
        checks_api_key=keyed,
    )


def compile_mlx(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
) -> LaunchSpec:
    if embeddings:
        raise _no_embeddings("mlx", model)
    ov = cfg.model_override(model.name)
    template_file = _template_file(model, ov)
    template = ov.chat_template
    if template is not None and not _is_jinja(template):
        raise LaneError(
            f"model '{model.name}': mlx-lm takes the chat template's Jinja text, not a template name like"
            f" '{template[:40]}'; set chat_template to the template itself or chat_template_file to a file"
            f" holding it, under {_override_table(model)}"
        )
    if template_file is not None:
        try:
            template = template_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise LaneError(
                f"model '{model.name}': cannot read chat_template_file {template_file}: {e}"
            ) from None
    total, _per_request, parallel = _context(cfg, model, ctx_size)
    args = argv.mlx(
        engine.path, _model_dir(model), port="{port}", concurrency=parallel, chat_template=template
    )
    return LaunchSpec(
        argv_template=(*args, *ov.extra_args),
        ctx_size=total,
        parallel=parallel,
        kv_unified=model_settings(cfg, model.name).kv_unified,
        engine_model=argv.ENGINE_MODEL["mlx"],
        checks_api_key=False,
    )


def compile_whisper(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
) -> LaunchSpec:
    """whisper-server for a whisper.cpp model: one transcription at a time, ``threads`` as configured."""
    if model.format != "whisper":
        raise LaneError(
            f"the whisper lane serves whisper.cpp models (ggml .bin), and '{model.name}' is {model.format}; remove"
            f" the engine pin under {_override_table(model)}"
        )
    if embeddings:
        raise LaneError(
            f"model '{model.name}' is a whisper.cpp speech model: it transcribes audio (POST"
            " /v1/audio/transcriptions) and has no embeddings"
        )
    ov = cfg.model_override(model.name)
    args = argv.whisper(
        engine.path, model.path, port="{port}", threads=model_settings(cfg, model.name).threads
    )
    return LaunchSpec(
        argv_template=(*args, *ov.extra_args), parallel=1, checks_api_key=False, can=WHISPER_SERVER
    )


COMPILERS = {
    "mistralrs": compile_mistralrs,
    "sglang": compile_sglang,
    "mlx": compile_mlx,
    "whisper": compile_whisper,
}


def compile_lane(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
) -> LaunchSpec:
    """``profile.compile_profile`` for every lane but llama-cpp."""
    compiler = COMPILERS.get(engine.kind)
    if compiler is not None:
        return compiler(cfg, model, engine, embeddings=embeddings, hardware=hardware, ctx_size=ctx_size)
    serves = MEDIA_LANES.get(engine.kind)
    if serves is not None:
        raise LaneError(
            f"the {engine.kind} lane serves {serves}, and the gateway has no image routes, so it cannot"
            f" serve model '{model.name}'; pin a language-model lane (llama-cpp, mistralrs, sglang or mlx) with"
            f' engine = "KIND" under {_override_table(model)}'
        )
    raise LaneError(
        f"the {engine.kind} lane has no launch profile in this Blazar; serve '{model.name}' with another"
    )
