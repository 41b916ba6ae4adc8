"""`blazar lora add | ls | rm`: LoRA adapters served by name on top of a catalog model (``blazar.catalog.loras``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from blazar.catalog.loras import MAX_SCALE, Loras
from blazar.catalog.models import Catalog
from blazar.cli.common import console, handles_errors, opened

app = typer.Typer(
    help="LoRA adapters (GGUF) served as models of their own on a catalog model's engine.",
    no_args_is_help=True,
)


@app.command("add")
@handles_errors
def add_cmd(
    path: Annotated[
        Path, typer.Argument(help="A LoRA adapter GGUF (llama.cpp's convert_lora_to_gguf.py makes one).")
    ],
    base: Annotated[str, typer.Option(help="The catalog model the adapter was trained on.")],
    name: Annotated[
        str | None, typer.Option(help="The name requests use, name[:tag]; derived from the file name.")
    ] = None,
    scale: Annotated[
        float, typer.Option(help=f"How strongly it is applied, above 0 and at most {MAX_SCALE:g}.")
    ] = 1.0,
) -> None:
    """Add a LoRA adapter: a request for its name is answered by its base model's engine with the adapter
    applied to that request alone (the engine loads every adapter of its base, once)."""
    with opened() as (_cfg, data, store):
        row = Loras(Catalog(store, data)).add(path, base, name, scale)
    console.print(
        f"added LoRA {row.name} on {row.base} ({row.size_bytes / 1e6:.1f} MB, scale {row.scale:g}); a running"
        f" engine of {row.base} restarts to load it on the first request for it",
        highlight=False,
    )


@app.command("ls")
@handles_errors
def ls_cmd() -> None:
    """List the LoRA adapters."""
    with opened() as (_cfg, data, store):
        rows = Loras(Catalog(store, data)).list()
    if not rows:
        console.print("no LoRA adapters; add one with: blazar lora add FILE --base MODEL")
        return
    console.print(f"{'NAME':<32} {'BASE':<32} {'DIGEST':<12} {'SIZE':>9} {'SCALE':>5}", highlight=False)
    for r in rows:
        console.print(
            f"{r.name:<32} {r.base:<32} {r.sha256[:12]:<12} {r.size_bytes / 1e6:>7.1f}MB {r.scale:>5g}",
            highlight=False,
        )


@app.command("rm")
@handles_errors
def rm_cmd(name: Annotated[str, typer.Argument(help="The adapter's name.")]) -> None:
    """Remove a LoRA adapter (an engine that loaded it keeps it, unapplied, until it restarts)."""
    with opened() as (_cfg, data, store):
        row = Loras(Catalog(store, data)).remove(name)
    console.print(f"removed LoRA {row.name}", highlight=False)
