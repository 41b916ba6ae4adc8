"""The ``blazar`` command: one typer app with a sub-app per command group; commands stay thin."""

from __future__ import annotations

from typing import Annotated

import typer

from blazar import __version__
from blazar.cli import (
    bench,
    config,
    doctor,
    engine,
    keys,
    log,
    lora,
    models,
    ps,
    pull,
    quantize,
    run,
    serve,
    worker,
)

app = typer.Typer(
    help="Blazar: one local endpoint for every inference engine.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"blazar {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print Blazar's version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Blazar: one local endpoint for every inference engine."""


app.add_typer(engine.app, name="engine")
app.add_typer(keys.app, name="keys")
app.add_typer(config.app, name="config")
app.add_typer(lora.app, name="lora")
app.add_typer(worker.app, name="worker")
app.command("serve")(serve.serve_cmd)
app.command("import")(models.import_cmd)
app.command("ls")(models.ls_cmd)
app.command("rm")(models.rm_cmd)
app.command("cp")(models.cp_cmd)
app.command("show")(models.show_cmd)
app.command("run")(run.run_cmd)
app.command("ps")(ps.ps_cmd)
app.command("log")(log.log_cmd)
app.command("stop")(ps.stop_cmd)
app.command("doctor")(doctor.doctor_cmd)
app.command("pull")(pull.pull_cmd)
app.command("quantize")(quantize.quantize_cmd)
app.command("bench")(bench.bench_cmd)


def main() -> None:
    app()
