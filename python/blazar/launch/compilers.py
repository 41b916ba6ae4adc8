"""Which compiler launches which lane, behind one protocol: ``compile_profile`` gives the ``LaunchSpec`` for a
model on an engine, from the compiler its engine kind names (``llama_cpp``, ``mistralrs``, ``sglang``, ``mlx``,
``whisper``); only llama-server gives per-token embeddings (late chunking), so only ``llama_cpp.compile`` takes
``tokens``. Compiling has no side effects; ``spec.prepare`` does the few a start needs, and spawning is the
supervisor's. A lane with no compiler (sd: images, which the gateway has no routes for) is a teaching
``LaneError``.
"""

from __future__ import annotations

from typing import Protocol

from blazar.catalog.models import ModelRow
from blazar.config import Config
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError
from blazar.launch import llama_cpp, mistralrs, mlx, sglang, whisper
from blazar.launch.hardware import Hardware
from blazar.launch.shared import no_tokens
from blazar.launch.spec import LaunchSpec


class Compiler(Protocol):
    """A lane's compiler: the launch spec for ``model`` on ``engine``. ``embeddings``: its pooled embedding
    engine; ``hardware`` defaults to probing the
    machine now; ``ctx_size`` (e.g. Ollama's ``num_ctx``) replaces the configured context. A lane refuses what
    its engine cannot do with a ``LaneError`` naming the fix; a model that cannot fit is ``ProfileUnfit``."""

    def __call__(
        self,
        cfg: Config,
        model: ModelRow,
        engine: EngineRow,
        *,
        embeddings: bool = False,
        hardware: Hardware | None = None,
        ctx_size: int | None = None,
    ) -> LaunchSpec: ...


COMPILERS: dict[str, Compiler] = {
    "llama-cpp": llama_cpp.compile,
    "mistralrs": mistralrs.compile,
    "sglang": sglang.compile,
    "mlx": mlx.compile,
    "whisper": whisper.compile,
}
MEDIA_LANES: dict[str, str] = {
    "sd": "images (stable-diffusion.cpp)",
}


def compile_profile(
    cfg: Config,
    model: ModelRow,
    engine: EngineRow,
    *,
    embeddings: bool = False,
    hardware: Hardware | None = None,
    ctx_size: int | None = None,
    tokens: bool = False,
) -> LaunchSpec:
    """The launch spec for ``model`` on ``engine`` (see ``Compiler``); ``tokens``: its late-chunking engine
    (per-token embeddings), which only the llama-cpp lane has."""
    if engine.kind == "llama-cpp":
        return llama_cpp.compile(
            cfg, model, engine, embeddings=embeddings, hardware=hardware, ctx_size=ctx_size, tokens=tokens
        )
    compiler = COMPILERS.get(engine.kind)
    if compiler is not None:
        if tokens:
            raise no_tokens(engine.kind, model)
        return compiler(cfg, model, engine, embeddings=embeddings, hardware=hardware, ctx_size=ctx_size)
    serves = MEDIA_LANES.get(engine.kind)
    if serves is not None:
        raise LaneError(
            f"the {engine.kind} lane serves {serves}, and the gateway has no image routes, so it cannot"
            f" serve model '{model.name}'; pin a language-model lane (llama-cpp, mistralrs, sglang or mlx) with"
            f' engine = "KIND" under [models."{model.name}"] in config.toml'
        )
    raise LaneError(
        f"the {engine.kind} lane has no launch profile in this Blazar; serve '{model.name}' with another"
    )
