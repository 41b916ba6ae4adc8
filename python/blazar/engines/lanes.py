"""The routing matrix (``serving_lane``): which installed engine serves a model, or a teaching LaneError.

Pure over its inputs (config, model row, installed engines). The LaneError strings are the same bytes in the CLI
and in API bodies; changing their wording is a breaking change.
"""

from __future__ import annotations

from collections.abc import Sequence

from blazar.catalog import ModelRow
from blazar.config import Config
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError

FORMAT_LANES: dict[str, tuple[str, ...]] = {"gguf": ("llama-cpp", "mistralrs")}
"""Lane preference per weight format, mainstream first."""

LAUNCHABLE: frozenset[str] = frozenset({"llama-cpp"})
"""Kinds this Blazar can compile a launch profile for."""

INSTALL_HINT: dict[str, str] = {
    "llama-cpp": (
        "blazar engine build --kind llama-cpp --source DIR|TARBALL"
        " (or register a binary: blazar engine add --kind llama-cpp --path BINARY)"
    ),
}


def _roster(engines: Sequence[EngineRow]) -> str:
    return ", ".join(f"{e.kind} {e.tag}{'*' if e.active else ''}" for e in engines) or "none"


def missing_engine(model: ModelRow, kind: str, engines: Sequence[EngineRow]) -> LaneError:
    hint = INSTALL_HINT.get(kind, f"blazar engine install --kind {kind}")
    return LaneError(
        f"no {kind} engine is installed to serve model '{model.name}' ({model.format}); install one with: "
        f"{hint}; installed engines: {_roster(engines)}"
    )


def serving_lane(cfg: Config, model: ModelRow, engines: Sequence[EngineRow]) -> EngineRow:
    """Pick the engine for ``model``: the override pin, then manual mode's active engine, then the format matrix."""
    active = {e.kind: e for e in engines if e.active}
    pin = cfg.model_override(model.name).engine
    if pin:
        if pin in active:
            return active[pin]
        raise missing_engine(model, pin, engines)
    lanes = FORMAT_LANES.get(model.format)
    if lanes is None:
        raise LaneError(
            f"model '{model.name}' has format '{model.format}', which no lane in this Blazar serves"
        )
    if cfg.engine_mode == "manual":
        chosen = next((active[k] for k in lanes if k in active), None)
        if chosen is None:
            raise missing_engine(model, lanes[0], engines)
        return chosen
    for kind in lanes:
        if kind in active and kind in LAUNCHABLE:
            return active[kind]
    raise missing_engine(model, lanes[0], engines)
