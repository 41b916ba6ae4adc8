"""LoRA adapters on an engine: which adapters a base model's llama-server loads, whether a request for one
needs the engine restarted, and what the request body says to apply it.

The base model's engine loads every adapter registered for that base (``loras.Loras.for_base``), unapplied
at start-up (``--lora-init-without-apply``), and every request to it says which applies: ``"lora": [{"id": N,
"scale": S}]`` for an adapter, scale 0 for the base model itself; llama-server applies that to that request
alone (one engine, one copy of the weights, every adapter). An engine started before
an adapter was added restarts once its requests in flight finish, as it does for a larger ``num_ctx``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from blazar.catalog import names
from blazar.catalog.loras import LoraRow
from blazar.errors import BlazarError, ChildError, LaneError
from blazar.launch.spec import LaunchSpec
from blazar.supervisor.child import Child


def with_adapters(spec: LaunchSpec, adapters: list[LoraRow]) -> LaunchSpec:
    """``spec`` loading ``adapters`` unapplied (their engine ids are their positions here)."""
    if not adapters:
        return spec
    argv = [*spec.argv_template, "--lora-init-without-apply"]
    for a in adapters:
        argv += ["--lora", str(a.path)]  # one flag per file: a comma in a path would split a single list
    return dataclasses.replace(spec, argv_template=tuple(argv), loras=tuple(a.path for a in adapters))


def check_lane(child: Child, adapter: LoraRow) -> None:
    """Adapters are served only by an engine that applies them per request (llama-server)."""
    if not child.spec.can.lora_per_request:
        raise LaneError(
            f"LoRA adapter '{adapter.name}' is served on llama-server, but its base model '{adapter.base}' runs on"
            f' the {child.lane} lane; serve the base with llama-cpp (engine = "llama-cpp" under'
            f' [models."{adapter.base}"] in config.toml) to use it'
        )


def lacks(child: Child, adapter: LoraRow | None) -> bool:
    """Whether ``child`` must restart to serve ``adapter`` (it was started before the adapter was added)."""
    return adapter is not None and adapter.path not in child.spec.loras


def serve(child: Child, adapter: LoraRow | None) -> Child:
    """Record ``adapter``'s engine id and current scale on ``child`` for the gateway (``apply``)."""
    if adapter is not None:
        child.adapters[adapter.name] = (child.spec.loras.index(adapter.path), adapter.scale)
    return child


def choice(child: Child, model: str) -> list[dict[str, Any]] | None:
    """llama-server's ``lora`` member for an engine request for client model name ``model``: on an engine that
    loaded adapters every request names one, its base model's requests with scale 0 (llama-server applies its
    adapters at their load scale to a request that names none, ``--lora-init-without-apply`` or not); None on
    an engine without adapters."""
    if not child.spec.loras:
        return None
    hit = child.adapters.get(names.normalize(model))
    return [{"id": hit[0], "scale": hit[1]}] if hit is not None else [{"id": 0, "scale": 0.0}]


_FAILED = re.compile(r"failed to load lora adapter '([^']*)'")


def failed(log: str, loaded: tuple[Path, ...]) -> dict[Path, str]:
    """The adapters an engine that would not start named as unloadable in its log (``log``: its tail), with the
    line that said so; all of ``loaded`` when the log blames LoRA without naming a file; empty otherwise."""
    if not loaded:
        return {}
    lines = log.splitlines()
    named = {Path(m.group(1)): line.strip() for line in lines if (m := _FAILED.search(line))}
    hits = {p: why for p, why in named.items() if p in loaded}
    if hits:
        return hits
    blamed = next((line.strip() for line in reversed(lines) if "lora" in line.lower()), None)
    return dict.fromkeys(loaded, blamed) if blamed else {}


def unloadable(adapter: LoraRow, why: str, log_name: str) -> ChildError:
    return ChildError(
        f"LoRA adapter '{adapter.name}' could not be loaded by the engine of '{adapter.base}' ({why[:300]}), so the"
        f" base model runs without it; it was likely trained on another model; remove it (blazar lora rm"
        f" {adapter.name}); see {log_name}"
    )


class AdapterChanged(BlazarError):
    """The adapter was removed and added again while its base model's engine started: a retry finds it."""

    status = 503

    def __init__(self, adapter: LoraRow) -> None:
        super().__init__(f"LoRA adapter '{adapter.name}' changed while its engine started; retry the request")
