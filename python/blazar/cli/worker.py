"""`blazar worker ...`: run a llama.cpp RPC worker on this host (`rpc-server`, kept running), stop it, check one.

Thin typer commands over ``supervisor.worker`` (the running) and ``launch.workers`` (the protocol, the address
guard); every domain error is one red line (``handles_errors``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from blazar.cli.common import console, err_console, handles_errors, opened, steps_on
from blazar.config.model import DEFAULT_RPC_PORT, RpcWorker
from blazar.engines import registry
from blazar.engines.build import RPC_SERVER, RPC_SERVER_NAMES
from blazar.launch import workers
from blazar.supervisor import worker as supervised

app = typer.Typer(
    help="Run a llama.cpp RPC worker on this host: a model's llama-server elsewhere (rpc_workers in its"
    " config) offloads layers to it. Stop it with `blazar worker stop`.",
    invoke_without_command=True,
)


def _no_rpc_server(engines: list[registry.EngineRow]) -> str:
    if not engines:
        return (
            f"a worker runs llama.cpp's {RPC_SERVER}, which comes with a llama-cpp engine: install one with"
            " `blazar engine install --kind llama-cpp` (from source: add `--from source`)"
        )
    where = ", ".join(str(Path(r.path).parent) for r in engines)
    return (
        f"no {RPC_SERVER} beside the installed llama-cpp engines ({where}), which were built without ggml's RPC"
        " backend: reinstall with `blazar engine install --kind llama-cpp --force` (a release, or `--from source`,"
        " both of which bring it)"
    )


@app.callback(invoke_without_command=True)
@handles_errors
def worker_cmd(
    ctx: typer.Context,
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on: loopback or a private network's (the RPC protocol has no authentication)."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port to listen on.")] = DEFAULT_RPC_PORT,
    device: Annotated[
        list[str] | None,
        typer.Option(
            help="A device to lend, as the RPC server names it (repeatable, e.g. --device CUDA0); default: every"
            " GPU, else the CPU."
        ),
    ] = None,
    threads: Annotated[
        int, typer.Option(min=0, help="CPU threads for a CPU device (0: rpc-server's default).")
    ] = 0,
    cache: Annotated[
        bool, typer.Option(help="Keep received tensors in a local cache, so a restarted model loads faster.")
    ] = False,
    allow_public: Annotated[
        bool,
        typer.Option(
            help="Listen on a public address (or every interface) anyway: anyone who reaches it can use the"
            " devices. Prefer a private network or a tunnel."
        ),
    ] = False,
) -> None:
    """Run llama.cpp's rpc-server on HOST:PORT and keep it running (restarted when it dies) until Ctrl-C or
    `blazar worker stop`; a model lists it as "HOST:PORT" in its rpc_workers."""
    if ctx.invoked_subcommand is not None:
        return
    problem = workers.listen_problem(host)
    if problem is not None and not allow_public:
        raise supervised.WorkerError(
            f"refusing to listen on {host}: {problem}, and llama.cpp's RPC protocol has no authentication (anyone"
            " who reaches the port can use the devices and read their memory). Listen on a loopback or private"
            " address (--host 10.x.x.x, a VPN's or tunnel's), or pass --allow-public if you really mean it"
        )
    with opened() as (_cfg, data, store):
        binary, engines = registry.beside(store, "llama-cpp", *RPC_SERVER_NAMES)
        if binary is None:
            raise supervised.WorkerError(_no_rpc_server(engines))
        spec = supervised.WorkerSpec(binary, host, port, tuple(device or ()), threads, cache)
    say = steps_on(err_console)
    if problem is not None:
        say(f"warning: {problem}; anyone who reaches {spec.address} can use this worker")
    say(f"starting {binary.name} on {spec.address} (Ctrl-C or `blazar worker stop --port {port}` stops it)")
    supervised.Worker(spec, data, say).run()
    say("worker stopped")


@app.command("stop")
@handles_errors
def stop_cmd(
    port: Annotated[int, typer.Option(min=1, max=65535, help="The worker's port.")] = DEFAULT_RPC_PORT,
) -> None:
    """Stop the worker this data directory runs on PORT (its rpc-server too)."""
    with opened() as (_cfg, data, _store):
        pid = supervised.stop(data, port)
    console.print(f"stopped the worker on port {port} (pid {pid})", highlight=False)


@app.command("check")
@handles_errors
def check_cmd(
    address: Annotated[str, typer.Argument(help="The worker's host:port.")] = f"127.0.0.1:{DEFAULT_RPC_PORT}",
) -> None:
    """Ask a worker for its RPC protocol version and its devices' memory, as a model's engine will: exit 0 when it
    answers, 1 (with the reason and the fix) when it cannot be used."""
    try:
        worker = RpcWorker.parse(address)
    except ValueError as e:
        raise supervised.WorkerError(
            f"'{address}' is not a host:port address, such as 127.0.0.1:{DEFAULT_RPC_PORT} ({e})"
        ) from None
    report = workers.read(worker)
    console.print(workers.describe(report), highlight=False)
