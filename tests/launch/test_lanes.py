"""Launch profiles of the lanes beside llama-cpp, down to the exact command line: SGLang, mlx-lm and CUDA cannot
run here, so what they would run is checked flag by flag (``tests/engines/test_lane_child.py`` starts a stand-in
SGLang through the supervisor and the gateway)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from blazar.catalog.models import ModelRow
from blazar.engines.manifest import VenvSpec
from blazar.engines.registry import EngineRow
from blazar.engines.venv import KEY_FILE_FLAG, launcher_text
from blazar.errors import LaneError
from blazar.launch.compilers import compile_profile
from blazar.launch.spec import OPENAI_COMPATIBLE, WHISPER_SERVER, render_command
from tests.launch.test_llama_cpp import ROOMY, cfg_from


def engine(kind: str, path: Path) -> EngineRow:
    return EngineRow(kind, "t", None, path, "install", "cpu", None, True)


def launcher(tmp_path: Path, name: str = "sglang-server") -> Path:
    """A venv launcher as the installer writes it (it reads the API key from a file)."""
    path = tmp_path / "engines" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(launcher_text(VenvSpec("sglang", "sglang", "sglang.launch_server", "cuda", ())))
    path.chmod(0o755)
    return path


def model_dir(tmp_path: Path, name: str, config: dict[str, object]) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors").write_bytes(b"\0" * 8)
    return d


def row(path: Path, fmt: str, name: str = "qwen-awq:latest", quant: str | None = None) -> ModelRow:
    return ModelRow(name, path, fmt, 8, None, None, None, quant, True, "")


AWQ = {"quantization_config": {"quant_method": "awq", "bits": 4}, "max_position_embeddings": 32768}
MLX = {"quantization": {"bits": 4, "group_size": 64}, "max_position_embeddings": 40960}


def test_sglang_on_quantized_safetensors(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "Qwen2.5-7B-Instruct-AWQ", AWQ)
    tmpl = tmp_path / "chat.jinja"
    tmpl.write_text("{{ messages }}")
    cfg = cfg_from(
        tmp_path,
        f'ctx_size = 16384\nthreads = 6\n[models."qwen-awq"]\nparallel = 4\nchat_template_file = "{tmpl}"\n'
        'extra_args = ["--mem-fraction-static", "0.7"]\n',
    )
    exe = launcher(tmp_path)
    spec = compile_profile(
        cfg, row(d, "safetensors-quantized", quant="awq"), engine("sglang", exe), hardware=ROOMY
    )
    assert spec.argv_template == (
        str(exe), KEY_FILE_FLAG, "{api_key_file}", "--api-key",
        "--model-path", str(d), "--host", "127.0.0.1", "--port", "{port}",
        "--served-model-name", "qwen-awq--latest",
        "--context-length", "4096", "--max-running-requests", "4",
        "--chat-template", str(tmpl),
        "--mem-fraction-static", "0.7",
    )  # fmt: skip
    assert (spec.ctx_size, spec.parallel, spec.ctx_per_slot) == (16384, 4, 4096)
    assert spec.engine_model == "qwen-awq--latest" and spec.checks_api_key and spec.health_path == "/health"
    assert spec.estimate is None  # SGLang sizes its own memory
    assert "{api_key_file}" in render_command(spec).split()

    # a named template, embeddings, and the trained context when ctx_size = 0
    cfg = cfg_from(tmp_path, 'ctx_size = 0\n[models."qwen-awq"]\nchat_template = "chatml"\n')
    spec = compile_profile(cfg, row(d, "safetensors-quantized"), engine("sglang", exe), embeddings=True)
    a = spec.argv_template
    assert a[a.index("--chat-template") + 1] == "chatml" and a[-1] == "--is-embedding"
    assert "--context-length" not in a and spec.ctx_per_slot == 32768


def test_sglang_refusals_and_a_binary_that_is_no_launcher(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = model_dir(tmp_path, "awq", AWQ)
    exe = launcher(tmp_path)
    inline = cfg_from(
        tmp_path, '[models."qwen-awq"]\nchat_template = "{% for m in messages %}{% endfor %}"\n'
    )
    with pytest.raises(
        LaneError, match="not inline Jinja; save the template to a file and set chat_template_file"
    ):
        compile_profile(inline, row(d, "safetensors-quantized"), engine("sglang", exe))
    (tmp_path / "t.jinja").write_text("x")
    both = cfg_from(
        tmp_path,
        f'[models."qwen-awq"]\nchat_template = "chatml"\nchat_template_file = "{tmp_path / "t.jinja"}"\n',
    )
    with pytest.raises(LaneError, match="sets both chat_template and chat_template_file"):
        compile_profile(both, row(d, "safetensors-quantized"), engine("sglang", exe))
    gone = cfg_from(tmp_path, f'[models."qwen-awq"]\nchat_template_file = "{tmp_path / "nope.jinja"}"\n')
    with pytest.raises(LaneError, match=r"chat_template_file .*nope\.jinja does not exist"):
        compile_profile(gone, row(d, "safetensors-quantized"), engine("sglang", exe))

    own = tmp_path / "my-sglang"  # registered with `engine add`: it cannot take the key file
    own.write_text('#!/bin/sh\nexec python3 -m sglang.launch_server "$@"\n')
    with caplog.at_level("WARNING", logger="blazar.profile"):
        spec = compile_profile(cfg_from(tmp_path), row(d, "safetensors-quantized"), engine("sglang", own))
    assert spec.argv_template[:3] == (str(own), "--model-path", str(d)) and not spec.checks_api_key
    assert "will check no API key" in caplog.text


def test_mlx_directory(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "Qwen3-4B-4bit", MLX)
    exe = launcher(tmp_path, "mlx-lm-server")
    tmpl = tmp_path / "chat.jinja"
    tmpl.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    cfg = cfg_from(
        tmp_path,
        f'ctx_size = 8192\n[models."qwen3:4b"]\nparallel = 2\nchat_template_file = "{tmpl}"\n'
        'extra_args = ["--prompt-cache-size", "4"]\n',
    )
    spec = compile_profile(cfg, row(d, "mlx", "qwen3:4b"), engine("mlx", exe), hardware=ROOMY)
    assert spec.argv_template == (
        str(exe), "--model", str(d), "--host", "127.0.0.1", "--port", "{port}",
        "--decode-concurrency", "2", "--prompt-concurrency", "2",
        "--chat-template", "{% for m in messages %}{{ m.content }}{% endfor %}",
        "--prompt-cache-size", "4",
    )  # fmt: skip
    assert (spec.ctx_size, spec.ctx_per_slot, spec.engine_model) == (8192, 4096, "default_model")
    assert not spec.checks_api_key and "{api_key_file}" not in spec.argv_template

    zero = cfg_from(tmp_path, "ctx_size = 0\n")
    assert compile_profile(zero, row(d, "mlx", "qwen3:4b"), engine("mlx", exe)).ctx_per_slot == 40960
    named = cfg_from(tmp_path, '[models."qwen3:4b"]\nchat_template = "chatml"\n')
    with pytest.raises(LaneError, match="mlx-lm takes the chat template's Jinja text, not a template name"):
        compile_profile(named, row(d, "mlx", "qwen3:4b"), engine("mlx", exe))
    with pytest.raises(LaneError, match="the mlx lane serves chat and completions only, not embeddings"):
        compile_profile(cfg, row(d, "mlx", "qwen3:4b"), engine("mlx", exe), embeddings=True)


def test_mistralrs_on_a_gguf(tmp_path: Path, model_file: Path) -> None:
    tmpl = tmp_path / "chat.jinja"
    tmpl.write_text("{{ messages }}")
    cfg = cfg_from(
        tmp_path,
        f'ctx_size = 4096\ngpu_layers = 0\n[models.smollm2]\nparallel = 2\nchat_template_file = "{tmpl}"\n'
        'extra_args = ["--prefix-cache-n", "4"]\n',
    )
    exe = Path("/opt/mistralrs/mistralrs")
    gguf = ModelRow(
        "smollm2:latest", model_file, "gguf", model_file.stat().st_size, "llama", 0, 8192, "Q4_1", True, ""
    )
    spec = compile_profile(cfg, gguf, engine("mistralrs", exe), hardware=ROOMY)
    assert spec.argv_template == (
        str(exe), "serve", "-m", str(model_file.parent), "--format", "gguf", "-f", model_file.name,
        "--host", "127.0.0.1", "--port", "{port}", "--no-ui",
        "--max-seqs", "2", "--max-batch-size", "2", "--max-seq-len", "2048", "--pa-context-len", "4096",
        "--cpu", "--chat-template", str(tmpl),
        "--prefix-cache-n", "4",
    )  # fmt: skip
    assert (
        spec.estimate is not None and spec.estimate.settings.cache_type_k == "f16"
    )  # fitted from GGUF metadata
    assert (spec.ctx_size, spec.parallel, spec.engine_model, spec.checks_api_key) == (
        4096,
        2,
        "default",
        False,
    )
    assert spec.can == OPENAI_COMPATIBLE  # no slot pinning, token counting, infill, ... asked of mistral.rs

    # a split GGUF names every shard; the context shrinks to what fits, as on llama-cpp
    d = tmp_path / "split"
    d.mkdir()
    for i in (1, 2):
        os.symlink(model_file, d / f"smol-0000{i}-of-00002.gguf")
    first = d / "smol-00001-of-00002.gguf"
    split = ModelRow("smollm2:latest", first, "gguf", 1, "llama", 0, 8192, "Q4_1", True, "")
    a = compile_profile(
        cfg_from(tmp_path, "ctx_size = 2048\n"), split, engine("mistralrs", exe)
    ).argv_template
    assert a[a.index("-f") + 1] == "smol-00001-of-00002.gguf;smol-00002-of-00002.gguf"
    assert "--cpu" not in a  # gpu_layers -1: mistral.rs maps devices itself

    named = cfg_from(tmp_path, '[models.smollm2]\nchat_template = "chatml"\n')
    with pytest.raises(LaneError, match=r"mistral\.rs takes a chat template as a file"):
        compile_profile(named, gguf, engine("mistralrs", exe), hardware=ROOMY)


def test_mistralrs_on_safetensors(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "Llama-3.2-1B", {"max_position_embeddings": 131072})
    spec = compile_profile(
        cfg_from(tmp_path, "ctx_size = 0\n"),
        row(d, "safetensors", "llama3.2:1b"),
        engine("mistralrs", Path("/m")),
    )
    assert spec.argv_template == (
        "/m", "serve", "-m", str(d), "--host", "127.0.0.1", "--port", "{port}", "--no-ui",
        "--max-seqs", "4", "--max-batch-size", "4",
    )  # fmt: skip
    # parallel = "auto": 4 sequences sharing the context, each able to use all of it
    assert spec.ctx_per_slot == 131072 and spec.kv_unified and spec.estimate is None


def test_media_lanes_teach(tmp_path: Path, model_file: Path) -> None:
    gguf = ModelRow("smollm2:latest", model_file, "gguf", 1, "llama", 0, 8192, "Q4_1", True, "")
    with pytest.raises(LaneError) as exc:
        compile_profile(cfg_from(tmp_path), gguf, engine("sd", Path("/x")), hardware=ROOMY)
    assert str(exc.value) == (
        "the sd lane serves images (stable-diffusion.cpp), and the gateway has no image routes, so it cannot serve"
        " model 'smollm2:latest'; pin a language-model lane (llama-cpp, mistralrs, sglang or mlx) with"
        ' engine = "KIND" under [models."smollm2:latest"] in config.toml'
    )
    with pytest.raises(LaneError) as exc:
        compile_profile(cfg_from(tmp_path), gguf, engine("whisper", Path("/x")), hardware=ROOMY)
    assert "the whisper lane serves whisper.cpp models (ggml .bin), and 'smollm2:latest' is gguf" in str(
        exc.value
    )


def test_whisper_lane(tmp_path: Path) -> None:
    model = ModelRow(
        "whisper-tiny:latest", tmp_path / "m.bin", "whisper", 1, "whisper", None, 1500, "F16", False, ""
    )
    spec = compile_profile(cfg_from(tmp_path, "threads = 3\n"), model, engine("whisper", Path("/w")))
    assert spec.argv_template == (
        "/w", "-m", str(tmp_path / "m.bin"), "--host", "127.0.0.1", "--port", "{port}", "-l", "auto", "-t", "3",
    )  # fmt: skip
    assert spec.parallel == 1 and not spec.checks_api_key
    assert spec.can == WHISPER_SERVER  # transcription and nothing else
