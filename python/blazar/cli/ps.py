"""`blazar ps` and `blazar stop MODEL`: the models the running daemon has loaded (and the engine updates its
last check found), and unloading one, as `ollama ps` and `ollama stop` do.

Both speak the daemon's Ollama API: ``GET /api/ps`` lists the running engines; ``stop`` is ``POST /api/generate``
with ``keep_alive: 0`` and no prompt, the request Ollama's own CLI sends to unload a model, which stops every
engine of that model (its chat and its embedding child). ``ps`` also names the daemon `blazar run` started in the
background, and ``stop --server`` stops that one (``cli.background``).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import httpx
import orjson
import typer

from blazar.catalog import names
from blazar.cli import background
from blazar.cli.client import ApiKey, DaemonError, Host, Port, address, call, client, json_object
from blazar.cli.common import config, console, handles_errors
from blazar.launch.hardware import human_bytes

FOREVER_AFTER_SECS = 5 * 365 * 86400
"""An engine whose unload is further off than this is shown as kept "forever" (the daemon puts a model kept
loaded forever ten years ahead)."""


def listing(c: httpx.Client, path: str, field: str) -> list[dict[str, Any]]:
    """The objects in the list ``field`` of the daemon's answer to ``GET path``."""
    items = json_object(call(c, "GET", path)).get(field)
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def until(expires_at: Any, now: datetime) -> str:
    """``expires_at`` as Ollama's ps shows it: "in 4 minutes", "forever", "now"."""
    try:
        when = datetime.fromisoformat(str(expires_at).replace("Z", "+00:00"))
    except ValueError:
        return "-"
    secs = (when - now).total_seconds()
    if secs > FOREVER_AFTER_SECS:
        return "forever"
    if secs < 1:
        return "now"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if secs >= size:
            n = int(secs // size)
            return f"in {n} {unit}{'s' if n != 1 else ''}"
    return "now"


@handles_errors
def ps_cmd(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the running models and the held-back engines as JSON.")
    ] = False,
    reset: Annotated[
        bool,
        typer.Option(
            "--reset", help="Let engines held back after repeated crashes start again on the next request."
        ),
    ] = False,
    host: Host = None,
    port: Port = None,
    api_key: ApiKey = None,
) -> None:
    """List the models the running daemon has loaded (`blazar serve`), like `ollama ps`, and the engines whose
    restarts it holds back because they keep crashing."""
    url = address(host, port)
    if reset:
        with client(url, api_key) as c:
            cleared = json_object(call(c, "POST", "/api/breakers/reset", b"{}")).get("reset") or []
        console.print(
            f"reset: {', '.join(map(str, cleared))}" if cleared else "no engine was held back",
            highlight=False,
        )
        return
    with client(url, api_key) as c:
        models, held = listing(c, "/api/ps", "models"), listing(c, "/api/breakers", "held")
        updates = listing(c, "/api/engines/updates", "updates")
    if as_json:
        out = {"models": models, "held": held, "engine_updates": updates}
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    cfg = config()
    pid = background.running(cfg) if background.is_local(cfg, host) else None
    if pid is not None:
        console.print(
            f"daemon: pid {pid}, started in the background by `blazar run` (log: {background.log_file(cfg)};"
            " `blazar stop --server` ends it)",
            highlight=False,
        )
    if not models:
        idle = "no models are running" + ("" if held else "; a request to one starts it")
        console.print(idle, highlight=False)
    else:
        show_running(models)
    if held:
        console.print(
            "held back after repeated crashes (`blazar ps --reset` lets them start again now):",
            highlight=False,
        )
        for h in held:
            console.print(
                f"  {h.get('engine')}: {h.get('crashes')} crashes, next start allowed in"
                f" {h.get('retry_in_secs')}s; last: {h.get('last')}",
                highlight=False,
            )
    if updates:
        console.print("engine updates (`blazar engine update --kind KIND` installs one):", highlight=False)
        for u in updates:
            console.print(f"  {u.get('line')}", highlight=False)


_ENGINE_MARKS = {"embeddings": " (embeddings)", "late_chunking": " (late chunking)"}


def _shown_name(m: dict[str, Any]) -> str:
    """The model's name, marked when the row is one of its embedding engines (pooled, or late chunking's
    per-token one): a model may run them beside its chat one."""
    replica = m.get("replica")
    instance = (
        f"#{replica}" if isinstance(replica, int) and replica > 0 else ""
    )  # one of the model's replicas
    return str(m.get("name", "?")) + instance + _ENGINE_MARKS.get(str(m.get("engine")), "")


def _share(value: Any) -> str:
    """A 0-1 hint as a percentage; "-" until the daemon has measured it."""
    return f"{value:.0%}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def show_running(models: list[dict[str, Any]]) -> None:
    now = datetime.now(UTC)
    console.print(
        f"{'NAME':<40} {'ID':<12} {'SIZE':>10} {'CONTEXT':>8} {'CACHED':>7}  UNTIL", highlight=False
    )
    for m in models:
        size = m.get("size")
        context = m.get("context_length")
        console.print(
            f"{_shown_name(m):<40} {str(m.get('digest') or '-')[:12]:<12}"
            f" {human_bytes(size) if isinstance(size, int) else '-':>10}"
            f" {context if isinstance(context, int) else '-':>8} {_share(m.get('cache_hint')):>7}"
            f"  {until(m.get('expires_at'), now)}"
            + (" (asleep: its model reloads on the next request)" if m.get("asleep") is True else ""),
            highlight=False,
        )


@handles_errors
def stop_cmd(
    model: Annotated[
        str | None, typer.Argument(help="Model to unload, as `blazar ps` names it (name or name:tag).")
    ] = None,
    server: Annotated[
        bool, typer.Option("--server", help="Stop the daemon `blazar run` started in the background instead.")
    ] = False,
    host: Host = None,
    port: Port = None,
    api_key: ApiKey = None,
) -> None:
    """Unload a model from the running daemon now (its engines stop), like `ollama stop`; or, with --server, stop the
    daemon `blazar run` started in the background."""
    if server:
        if model is not None:
            raise DaemonError("give a MODEL to unload or --server to stop the daemon, not both")
        cfg = config()
        pid = background.stop(cfg, cfg.stop_grace_secs + 30.0)
        console.print(f"stopped the daemon (pid {pid})", highlight=False)
        return
    if model is None:
        raise DaemonError(
            "name the MODEL to unload (`blazar ps` lists them), or give --server to stop the daemon `blazar run`"
            " started"
        )
    name = names.normalize(model)
    url = address(host, port)
    with client(url, api_key, timeout=60.0) as c:
        running = listing(c, "/api/ps", "models")
        served = {str(n) for m in running for n in [m.get("model", ""), *(m.get("names") or [])]}
        if name not in served:  # a copy over another's weights, an adapter: their engine's names say it
            raise DaemonError(f"model '{name}' is not running; `blazar ps` lists the ones that are")
        call(c, "POST", "/api/generate", orjson.dumps({"model": name, "keep_alive": 0}))
    console.print(f"stopped {name}", highlight=False)
