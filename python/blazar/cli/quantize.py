"""`blazar quantize`: a catalog model quantized into a new one with llama.cpp's `llama-quantize`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from blazar.catalog import quantize
from blazar.catalog.models import Catalog
from blazar.cli.common import console, handles_errors, is_tty, opened


@handles_errors
def quantize_cmd(
    model: Annotated[str, typer.Argument(help="The catalog model to quantize (a single-file GGUF).")],
    type_: Annotated[
        str,
        typer.Option("--type", "-t", help=f"Target type, any case: {', '.join(quantize.TYPES)}."),
    ],
    name: Annotated[
        str | None,
        typer.Option(
            help="The new model's name[:tag]; default: the source's name, its tag followed by the type"
            " (smollm2:latest -> smollm2:latest-q4_k_m)."
        ),
    ] = None,
    allow_requantize: Annotated[
        bool,
        typer.Option(
            help="Quantize a model that is already quantized (it loses more quality than its original)."
        ),
    ] = False,
) -> None:
    """Quantize MODEL into a new catalog model with the llama-quantize that came with the llama-cpp engine
    (as `ollama create --quantize` does); the source stays as it is."""
    with opened() as (_cfg, data, store):
        cat = Catalog(store, data)
        job = quantize.plan(cat, store, model, type_, name, allow_requantize=allow_requantize)
        if is_tty():
            with Progress(
                TextColumn(job.status),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as bar:
                task = bar.add_task("quantize", total=None)
                row = quantize.run(
                    cat, job, lambda done, total: bar.update(task, completed=done, total=total)
                )
        else:
            console.print(job.status, highlight=False)
            row = quantize.run(cat, job)
    console.print(
        f"quantized {job.source.name} -> {row.name} ({row.size_bytes / 1e6:.1f} MB, {row.quantization or '-'})",
        highlight=False,
    )
