"""`blazar engine ...`: build, register, list and activate engine binaries."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from blazar.cli.common import console, handles_errors, is_tty, opened
from blazar.engines import build, registry

app = typer.Typer(help="Build, register and choose inference engines.", no_args_is_help=True)


@app.command("build")
@handles_errors
def build_cmd(
    kind: Annotated[str, typer.Option(help="Engine kind to build; only llama-cpp has a build lane.")],
    source: Annotated[Path, typer.Option(help="llama.cpp source directory or tarball (.tar.gz).")],
    cuda: Annotated[bool, typer.Option(help="Build with CUDA (needs the CUDA toolkit).")] = False,
    version: Annotated[
        str | None, typer.Option(help="Build number to record; detected when omitted.")
    ] = None,
    jobs: Annotated[int | None, typer.Option(help="Parallel compile jobs (default: all cores).")] = None,
) -> None:
    """Compile llama-server from source into the data dir, record it and make it active."""
    registry.check_kind(kind)
    if kind != "llama-cpp":
        raise typer.BadParameter(f"only llama-cpp has a build lane, not {kind}", param_hint="--kind")
    with opened() as (_cfg, data, store):
        if is_tty():
            with Progress(
                TextColumn("building llama-server"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as bar:
                task = bar.add_task("build", total=None)

                def on_step(done: int, total: int, _line: str) -> None:
                    bar.update(task, completed=done, total=total or None)

                result = build.build_llama_server(
                    source, data.engines, cuda=cuda, version=version, jobs=jobs, progress=on_step
                )
        else:
            last = [-1]

            def on_line(done: int, total: int, _line: str) -> None:
                pct = done * 100 // total if total else 0
                if pct // 10 != last[0]:
                    last[0] = pct // 10
                    print(f"building llama-server: {done}/{total} steps ({pct}%)", flush=True)

            result = build.build_llama_server(
                source, data.engines, cuda=cuda, version=version, jobs=jobs, progress=on_line
            )
        row = registry.add(
            store,
            kind=kind,
            tag=result.tag,
            path=result.binary,
            source="build",
            version=result.version,
            accel=result.accel,
        )
    console.print(f"built {row.kind} {row.tag}: {row.path} (active)", highlight=False)


@app.command("add")
@handles_errors
def add_cmd(
    kind: Annotated[str, typer.Option(help="Engine kind of the binary (for example llama-cpp).")],
    path: Annotated[Path, typer.Option(help="Path to an existing engine binary (for example llama-server).")],
    tag: Annotated[str, typer.Option(help="Tag to record it under.")] = "local",
    activate: Annotated[bool, typer.Option(help="Make it the active engine of its kind.")] = True,
) -> None:
    """Register an engine binary you already have."""
    with opened() as (_cfg, _data, store):
        row = registry.add(store, kind=kind, tag=tag, path=path, source="local", activate=activate)
    console.print(
        f"added {row.kind} {row.tag}: {row.path}{' (active)' if row.active else ''}", highlight=False
    )


@app.command("use")
@handles_errors
def use_cmd(
    kind: Annotated[str, typer.Option(help="Engine kind.")],
    tag: Annotated[str, typer.Argument(help="Installed tag to make active.")],
) -> None:
    """Make an installed engine the active one of its kind."""
    with opened() as (_cfg, _data, store):
        row = registry.use(store, kind, tag)
    console.print(f"{row.kind} {row.tag} is now active", highlight=False)


@app.command("ls")
@handles_errors
def ls_cmd() -> None:
    """List installed engines."""
    with opened() as (_cfg, _data, store):
        rows = registry.list_all(store)
    if not rows:
        console.print(
            "no engines installed; build one with: blazar engine build --kind llama-cpp --source DIR"
        )
        return
    for r in rows:
        mark = "*" if r.active else " "
        console.print(
            f"{mark} {r.kind:<10} {r.tag:<16} {r.version or '-':<10} {r.accel:<5} {r.source:<6} {r.path}",
            highlight=False,
        )
