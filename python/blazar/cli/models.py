"""Catalog commands: `blazar import`, `ls`, `rm`, `cp`, `show`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from blazar.catalog import Catalog
from blazar.cli.common import console, handles_errors, is_tty, opened
from blazar.engines import registry
from blazar.engines.lanes import serving_lane
from blazar.errors import LaneError
from blazar.gguf_info import human_params


@handles_errors
def import_cmd(
    path: Annotated[Path, typer.Argument(help="A GGUF file to add to the catalog.")],
    name: Annotated[
        str | None, typer.Option(help="Catalog name as name[:tag]; derived from the file name.")
    ] = None,
) -> None:
    """Add a GGUF file to the catalog (a hard link on the same filesystem, else a copy)."""
    with opened() as (_cfg, data, store):
        cat = Catalog(store, data)
        if is_tty():
            with Progress(BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console) as bar:
                task = bar.add_task("copy", total=None)
                row = cat.import_file(path, name, lambda d, t: bar.update(task, completed=d, total=t))
        else:
            row = cat.import_file(path, name)
    console.print(f"imported {row.name} ({row.size_bytes / 1e6:.1f} MB, {row.quantization})", highlight=False)


@handles_errors
def ls_cmd() -> None:
    """List the models in the catalog."""
    with opened() as (_cfg, data, store):
        rows = Catalog(store, data).list()
    if not rows:
        console.print("no models; add one with: blazar import PATH")
        return
    console.print(f"{'NAME':<40} {'SIZE':>9} {'PARAMS':>7} {'QUANT':<8} {'ARCH':<10}", highlight=False)
    for r in rows:
        console.print(
            f"{r.name:<40} {r.size_bytes / 1e6:>7.1f}MB {human_params(r.parameter_count or 0):>7}"
            f" {r.quantization or '-':<8} {r.architecture or '-':<10}",
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
) -> None:
    """Print a model's architecture, parameters, context length, quantization and serving lane."""
    from blazar.catalog import inspect

    as_path = Path(name)
    if as_path.suffix == ".gguf" and as_path.exists():
        info = inspect(as_path)
        lane = None
    else:
        with opened() as (cfg, data, store):
            row = Catalog(store, data).get(name)
            info = inspect(row.path)
            try:
                e = serving_lane(cfg, row, registry.list_all(store))
                lane = f"{e.kind} {e.tag} ({e.path})"
            except LaneError as err:
                lane = f"unavailable: {err}"
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
    if lane is not None:
        lines.append(("serving lane", lane))
    for k, v in lines:
        console.print(f"  {k:<17} {v}", highlight=False, soft_wrap=True)
