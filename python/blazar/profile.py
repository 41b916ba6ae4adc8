"""The launch-profile compiler: the argv that starts an engine child for one (model, engine).

Pure: it reads the config, the model row and the engine row and returns a list of strings. Spawning is the
supervisor's job. Only the llama-cpp lane has a compiler so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from blazar.catalog import ModelRow
from blazar.config import Config
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything the supervisor needs to start one child, except the port and key, which it picks."""

    argv_template: tuple[str, ...]
    ctx_size: int = 0
    health_path: str = "/health"

    def argv(self, *, port: int, api_key_file: Path) -> list[str]:
        out = []
        for a in self.argv_template:
            if a == "{port}":
                out.append(str(port))
            elif a == "{api_key_file}":
                out.append(str(api_key_file))
            else:
                out.append(a)
        return out


def compile_llama_cpp(
    cfg: Config, model: ModelRow, engine: EngineRow, *, embeddings: bool = False
) -> LaunchSpec:
    ov = cfg.model_override(model.name)
    ctx = ov.ctx_size if ov.ctx_size is not None else cfg.ctx_size
    parallel = ov.parallel if ov.parallel is not None else cfg.parallel
    threads = ov.threads if ov.threads is not None else cfg.threads
    ngl = ov.gpu_layers if ov.gpu_layers is not None else cfg.gpu_layers
    argv = [
        str(engine.path),
        "--model", str(model.path),
        "--alias", model.name,
        "--host", "127.0.0.1",
        "--port", "{port}",
        "--api-key-file", "{api_key_file}",
        "--ctx-size", str(ctx),
        "--parallel", str(parallel),
        "--jinja",
        "--no-webui",
        "--metrics",
    ]  # fmt: skip
    if threads > 0:
        argv += ["--threads", str(threads)]
    if ngl >= 0:
        argv += ["--n-gpu-layers", str(ngl)]
    if embeddings:
        argv += ["--embeddings", "--pooling", "mean"]
    argv += list(ov.extra_args)
    return LaunchSpec(argv_template=tuple(argv), ctx_size=ctx)


def compile_profile(
    cfg: Config, model: ModelRow, engine: EngineRow, *, embeddings: bool = False
) -> LaunchSpec:
    if engine.kind == "llama-cpp":
        return compile_llama_cpp(cfg, model, engine, embeddings=embeddings)
    raise LaneError(
        f"the {engine.kind} lane has no launch profile in this Blazar yet; serve '{model.name}' with"
        " llama-cpp: blazar engine use --kind llama-cpp TAG"
    )
