"""`blazar show MODEL --profile`: the compiled command line and the memory estimate, as a user runs it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from blazar.engines.manifest import VenvSpec
from blazar.engines.venv import launcher_text
from blazar.store import Store
from tests.conftest import Assets, Daemon, make_daemon, provision


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[Daemon]:
    """SmolLM2 imported and the real engine registered; each test writes the config it needs."""
    d = provision(make_daemon(tmp_path_factory.mktemp("show")), assets)
    yield d


def configure(d: Daemon, text: str) -> None:
    (d.root / "config.toml").write_text(text)


def test_profile_of_a_catalog_model(d: Daemon, assets: Assets) -> None:
    configure(d, "ctx_size = 2048\n[models.smollm2]\nparallel = 2\n")
    out = d.cli("show", "smollm2", "--profile").stdout
    lines = {line.split(None, 1)[0]: line for line in out.splitlines() if line.startswith("  ")}
    command = lines["command"]
    assert str(assets.llama_server) in command
    for needle in (
        "--ctx-size 2048",
        "--parallel 2",
        f"--host {d.data_dir / 'run' / 'smollm2--latest.sock'} --api-key-file {{api_key_file}}",
        "--jinja",
    ):
        assert needle in command, command
    assert "2 slots x 1024 tokens; K f16, V f16" in out
    assert "kv cache          45.00 MiB" in out  # 2048 cells of SmolLM2 at f16
    for key in ("weights", "compute", "total", "available", "placement"):
        assert key in lines, out
    assert "fitted ctx        2048 (requested 2048, trained 8192)" in out


def test_profile_that_cannot_fit(d: Daemon) -> None:
    configure(d, "memory_headroom_mib = 100000000\n")
    r = d.cli("show", "smollm2", "--profile", check=False)
    assert r.returncode == 1
    assert "fitted ctx        -" in r.stdout and "command           -" in r.stdout
    err = r.stderr
    assert "does not fit in memory" in err and "memory_headroom_mib" in err and "Traceback" not in err
    assert '[models."smollm2:latest"]' in err


def test_profile_without_an_engine_and_of_a_file(d: Daemon, assets: Assets) -> None:
    configure(d, '[models.smollm2]\nengine = "mistralrs"\n')
    out = d.cli("show", "smollm2", "--profile").stdout
    assert "command           unavailable: no mistralrs engine is installed" in out
    assert "kv cache          90.00 MiB" in out
    out = d.cli("show", str(assets.model), "--profile").stdout
    assert "command           import the model to compile its command line" in out
    assert "fitted ctx        4096" in out


def test_profile_of_other_lanes(tmp_path: Path, assets: Assets) -> None:
    """The sglang lane on a quantized safetensors directory and mistral.rs on a GGUF print their command lines."""
    d = provision(make_daemon(tmp_path / "lanes"), assets, engine=False)
    sglang = tmp_path / "sglang-server"
    sglang.write_text(launcher_text(VenvSpec("sglang", "sglang", "sglang.launch_server", "cuda", ())))
    mistralrs = tmp_path / "mistralrs"
    mistralrs.write_text("#!/bin/sh\nexit 0\n")
    for kind, exe in (("sglang", sglang), ("mistralrs", mistralrs)):
        exe.chmod(0o755)
        d.cli("engine", "add", "--kind", kind, "--path", str(exe))
    weights = tmp_path / "Qwen2.5-0.5B-Instruct-AWQ"
    weights.mkdir()
    (weights / "config.json").write_text(
        json.dumps({"quantization_config": {"quant_method": "awq"}, "max_position_embeddings": 32768})
    )
    (weights / "model.safetensors").write_bytes(b"\0" * 8)
    store = Store.open(d.data_dir / "blazar.db")
    with store.transaction():
        store.conn.execute(
            "INSERT INTO models (name, path, format, size_bytes, quantization, created_at)"
            " VALUES ('qwen-awq:latest', ?, 'safetensors-quantized', 8, 'awq', '2026-01-01T00:00:00+00:00')",
            (str(weights),),
        )
    store.close()
    configure(d, 'ctx_size = 8192\n[models."qwen-awq"]\nparallel = 2\n')
    out = d.cli("show", "qwen-awq", "--profile").stdout
    lines = {line.split(None, 1)[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "format            safetensors-quantized" in out and "context length    32768" in out
    assert f"serving lane      sglang local ({sglang})" in out
    assert (
        f"command           {sglang} --blazar-api-key-file {{api_key_file}} --api-key --model-path {weights}"
        " --host 127.0.0.1 --port {port} --served-model-name qwen-awq--latest --context-length 4096"
        " --max-running-requests 2"
    ) in out
    assert "context           2 slots x 4096 tokens" in out
    assert (
        "memory            not estimated for safetensors-quantized weights; the sglang engine sizes its own"
        in out
    )
    assert "api" not in lines  # SGLang checks the key

    configure(d, '[models.smollm2]\nengine = "mistralrs"\n')
    out = d.cli("show", "smollm2", "--profile").stdout
    model = d.data_dir / "models"
    assert (
        f"command           {mistralrs} serve -m " in out
        and " --format gguf -f " in out
        and str(model) in out
    )
    # parallel = "auto": 4 sequences over one shared 4096-token context
    assert "--max-seqs 4 --max-batch-size 4 --max-seq-len 4096 --pa-context-len 4096" in out
    assert "api key           not checked by this engine; it listens on 127.0.0.1 only" in out
    assert (
        "kv cache          90.00 MiB (4 slots sharing 4096 tokens; K f16, V f16)" in out
    )  # fitted from its metadata


def test_what_looks_like_markup_is_printed_as_it_is(d: Daemon) -> None:
    """A Mistral-style template ("[INST] ... [/INST]") and an argument with "[bold]" are data, not Rich markup."""
    template = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
    configure(
        d,
        f'[models.smollm2]\nchat_template = "{template}"\nextra_args = ["--override-kv", "x=str:[bold]hi"]\n',
    )
    r = d.cli("show", "smollm2", "--profile", check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "[/INST]" in r.stdout and "x=str:[bold]hi" in r.stdout
