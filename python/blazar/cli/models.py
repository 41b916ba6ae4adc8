"""Catalog commands: `blazar import`, `ls`, `rm`, `cp`, `show` (`--profile`: the launch profile and its memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from blazar.catalog import presets
from blazar.catalog.gguf_info import GgufSummary, human_params
from blazar.catalog.models import Catalog, ModelRow
from blazar.cli.common import config, console, err_console, fail, handles_errors, is_tty, opened
from blazar.config import Config
from blazar.engines import registry
from blazar.engines.lanes import serving_lane
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError
from blazar.launch import hardware
from blazar.launch.compilers import compile_profile
from blazar.launch.fit import ProfileUnfit
from blazar.launch.hardware import human_bytes
from blazar.launch.settings import fit_model, mmproj_for
from blazar.launch.shared import trained_context
from blazar.launch.spec import LaunchSpec, render_command


@handles_errors
def import_cmd(
    path: Annotated[
        Path,
        typer.Argument(
            help="A GGUF file, or a model directory (config.json + *.safetensors + tokenizer files; MLX too)."
        ),
    ],
    name: Annotated[
        str | None, typer.Option(help="Catalog name as name[:tag]; derived from the file or directory name.")
    ] = None,
) -> None:
    """Add a GGUF file or a safetensors/MLX model directory to the catalog (hard links on the same filesystem,
    else copies) and record its sha256."""
    with opened() as (_cfg, data, store):
        cat = Catalog(store, data)
        add = cat.import_dir if path.is_dir() else cat.import_file
        if is_tty():
            with Progress(BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console) as bar:
                task = bar.add_task("copy", total=None)
                row = add(path, name, lambda d, t: bar.update(task, completed=d, total=t))
        else:
            row = add(path, name)
    what = row.quantization or "-"
    if row.format != "gguf":
        what = f"{row.format}, {what}"
    console.print(f"imported {row.name} ({row.size_bytes / 1e6:.1f} MB, {what})", highlight=False)


@handles_errors
def ls_cmd() -> None:
    """List the models in the catalog, with the first 12 hex digits of each one's sha256 digest."""
    with opened() as (_cfg, data, store):
        cat = Catalog(store, data)
        rows = cat.list()
        missing = sum(r.sha256 is None for r in rows)
        if missing:  # rows from before digests were recorded: hashed once, then stored
            err_console.print(
                f"computing the sha256 of {missing} model(s) imported before digests were recorded"
            )
            rows = [cat.fill_digest(r) for r in rows]
    if not rows:
        console.print("no models; add one with: blazar import PATH")
        return
    console.print(
        f"{'NAME':<40} {'DIGEST':<12} {'SIZE':>9} {'PARAMS':>7} {'QUANT':<8} {'ARCH':<10}", highlight=False
    )
    for r in rows:
        console.print(
            f"{r.name:<40} {(r.sha256 or '-')[:12]:<12} {r.size_bytes / 1e6:>7.1f}MB"
            f" {human_params(r.parameter_count or 0):>7} {r.quantization or '-':<8} {r.architecture or '-':<10}",
            highlight=False,
        )


@handles_errors
def rm_cmd(name: Annotated[str, typer.Argument(help="Model name[:tag] to remove.")]) -> None:
    """Remove a model from the catalog (its file, when no other name links to the same data)."""
    with opened() as (_cfg, data, store):
        row = Catalog(store, data).remove(name)
    console.print(f"removed {row.name}", highlight=False)


@handles_errors
def cp_cmd(
    source: Annotated[str, typer.Argument(help="Existing model name[:tag].")],
    dest: Annotated[str, typer.Argument(help="New name[:tag] for the same weights.")],
) -> None:
    """Give a model a second name (a hard link: no copy on one filesystem)."""
    with opened() as (_cfg, data, store):
        row = Catalog(store, data).copy(source, dest)
    console.print(f"copied to {row.name}", highlight=False)


@handles_errors
def show_cmd(
    name: Annotated[str, typer.Argument(help="Model name[:tag], or a path to a GGUF file.")],
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="Also print the engine command line Blazar would run and, for a GGUF, its memory estimate, fitted"
            " to this machine's free VRAM or RAM.",
        ),
    ] = False,
) -> None:
    """Print a model's architecture, parameters, context length, quantization and serving lane."""
    from blazar.catalog.models import inspect

    as_path = Path(name)
    cfg = None
    row: ModelRow | None = None
    engine: EngineRow | None = None
    lane_error: str | None = None
    info: GgufSummary | None
    if as_path.suffix == ".gguf" and as_path.exists():
        info = inspect(as_path)
        lane = None
    else:
        with opened() as (cfg, data, store):
            row = Catalog(store, data).get(name)
            info = inspect(row.path) if row.format == "gguf" else None
            try:
                engine = serving_lane(cfg, row, registry.list_all(store))
                lane = f"{engine.kind} {engine.tag} ({engine.path})"
            except LaneError as err:
                lane_error = str(err)
                lane = f"unavailable: {err}"
    if info is not None:
        lines = [
            ("architecture", info.architecture or "-"),
            ("name", info.name or "-"),
            ("parameters", f"{human_params(info.parameter_count)} ({info.parameter_count})"),
            ("context length", str(info.context_length or "-")),
            ("embedding length", str(info.embedding_length or "-")),
            ("layers", str(info.block_count or "-")),
            ("quantization", info.quantization or "-"),
            ("chat template", "yes" if info.has_chat_template else "no"),
            ("gguf version", str(info.version)),
            ("tensors", str(info.tensor_count)),
        ]
    else:
        assert row is not None
        lines = [
            ("format", row.format),
            ("path", str(row.path)),
            ("architecture", row.architecture or "-"),
            ("parameters", human_params(row.parameter_count) if row.parameter_count else "-"),
            ("context length", str(row.context_length or trained_context(_weights_dir(row)) or "-")),
            ("quantization", row.quantization or "-"),
            ("chat template", "yes" if row.has_chat_template else "no"),
        ]
    if lane is not None:
        lines.append(("serving lane", lane))
    if row is not None and row.preset:  # made by /api/create with a Modelfile's SYSTEM, PARAMETER, MESSAGE
        lines += [("preset", line) for line in presets.modelfile_lines(row.preset)]
    for k, v in lines:  # values are data (a stop string may look like markup: "[/INST]")
        console.print(f"  {k:<17} {v}", highlight=False, soft_wrap=True, markup=False)
    if profile:
        if row is None:
            assert info is not None
            row = _path_row(as_path, info)
        _print_profile(cfg or config(), row, engine, lane_error)


def _weights_dir(row: ModelRow) -> Path:
    return row.path if row.path.is_dir() else row.path.parent


def _path_row(path: Path, info: GgufSummary) -> ModelRow:
    return ModelRow(
        name=path.stem,
        path=path.resolve(),
        format="gguf",
        size_bytes=path.stat().st_size,
        architecture=info.architecture,
        parameter_count=info.parameter_count,
        context_length=info.context_length,
        quantization=info.quantization,
        has_chat_template=info.has_chat_template,
        created_at="",
    )


_PLACEMENT = {"cpu": "RAM", "gpu": "GPU memory", "gpu+cpu": "GPU memory + RAM"}


def _print_profile(cfg: Config, row: ModelRow, engine: EngineRow | None, lane_error: str | None) -> None:
    """The compiled command line (with {port}/{api_key_file} placeholders) and, for a GGUF, the memory estimate."""
    hw = hardware.probe()
    spec: LaunchSpec | None = None
    refusal: str | None = None
    if engine is not None:
        try:
            spec = compile_profile(cfg, row, engine, hardware=hw)
        except ProfileUnfit as unfit:
            refusal = str(unfit)
    if spec is not None:
        command = render_command(spec)
    elif engine is not None:
        command = "-"
    else:
        command = (
            f"unavailable: {lane_error}" if lane_error else "import the model to compile its command line"
        )
    est = spec.estimate if spec is not None else None
    if spec is None and row.format == "gguf":
        # no engine to compile for, or the fit refused: llama.cpp's estimate, which names the levers
        result = fit_model(cfg, row, hardware=hw, mmproj=mmproj_for(cfg, row))
        est, refusal = result.estimate, refusal or result.refusal
    head = [("command", command)]
    if spec is not None and not spec.checks_api_key:
        head.append(("api key", "not checked by this engine; it listens on 127.0.0.1 only"))
    if est is None:
        _print_engine_sized(row, engine, spec, head)
        return
    s = est.settings
    where = _PLACEMENT[est.placement]
    if est.placement != "cpu" and hw.gpus:
        where += f" ({len(hw.gpus)} x {hw.gpus[0].name})"
    ctx_note = f"requested {est.requested_ctx}, trained {est.trained_ctx}"
    if refusal is None and est.reduced:
        ctx_note += ", reduced to fit"
    rows = [
        *head,
        ("placement", where),
        ("weights", human_bytes(est.weights)),
        (
            "kv cache",
            f"{human_bytes(est.kv)} ({est.parallel} slot{'s' if est.parallel > 1 else ''} "
            f"{'sharing' if s.unified else 'x'} {est.ctx_per_slot} tokens; K {s.cache_type_k}, V {s.cache_type_v}"
            f"{', swa full' if s.swa_full else ''})",
        ),
        ("compute", f"{human_bytes(est.compute)} (allowance; flash attention {s.flash_attn})"),
    ]
    if est.mmproj:
        rows.append(("mmproj", human_bytes(est.mmproj)))
    rows += [
        ("total", human_bytes(est.total)),
        (
            "available",
            f"{human_bytes(est.available)} ({where} free after {human_bytes(est.headroom)} headroom)",
        ),
        ("fitted ctx", f"{est.ctx_size if refusal is None else '-'} ({ctx_note})"),
    ]
    console.print("profile", highlight=False)
    for k, v in rows:
        console.print(f"  {k:<17} {v}", highlight=False, soft_wrap=True)
    if refusal is not None:
        raise fail(escape(refusal))


def _print_engine_sized(
    row: ModelRow, engine: EngineRow | None, spec: LaunchSpec | None, head: list[tuple[str, str]]
) -> None:
    """The profile of a model Blazar has no memory estimate for (safetensors, MLX): the engine sizes its own."""
    rows = list(head)
    if spec is not None:
        slots = f"{spec.parallel} slot{'s' if spec.parallel > 1 else ''}"
        per = f"{spec.ctx_per_slot} tokens" if spec.ctx_per_slot else "the engine's default"
        rows.append(("context", f"{slots} {'sharing' if spec.kv_unified else 'x'} {per}"))
    who = f"the {engine.kind} engine" if engine is not None else "its engine"
    rows.append(("memory", f"not estimated for {row.format} weights; {who} sizes its own"))
    console.print("profile", highlight=False)
    for k, v in rows:
        console.print(f"  {k:<17} {v}", highlight=False, soft_wrap=True)
