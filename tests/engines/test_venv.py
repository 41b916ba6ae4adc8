"""Venv lanes with a stand-in package: pip from a local wheel (no network), the launcher, the compiled argv.

SGLang itself cannot run here (no CUDA), so the stand-in's module prints the argv it was started with: the test
checks the exact command line the sglang lane would run, down to ``python -m MODULE ARGS``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from blazar.engines.gate import gate_argv
from blazar.engines.installer import install
from blazar.engines.manifest import load_manifest
from blazar.engines.venv import KEY_FILE_FLAG, launched_argv, reads_key_file
from blazar.errors import EngineError
from blazar.paths import DataDir
from blazar.store import Store
from tests.engines.conftest import snapshot, write_manifest

ECHO_ARGV = "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"


def stand_in_wheel(
    into: Path, name: str = "blazar_standin", version: str = "0.1.0", server: str = ECHO_ARGV
) -> Path:
    """A pure-Python wheel written by hand: ``standin_lane.server`` runs ``server`` (by default it echoes its argv
    as JSON)."""
    files = {
        "standin_lane/__init__.py": b"",
        "standin_lane/server.py": server.encode(),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: blazar-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, body in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(body)}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    files[f"{name}-{version}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    into.mkdir(parents=True, exist_ok=True)
    wheel = into / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, body in files.items():
            zf.writestr(path, body)
    return wheel


def sglang_lane(wheels: Path) -> dict[str, object]:
    return {
        "source": "official",
        "binary": "sglang-server",
        "venv": {
            "requirement": "blazar-standin",
            "distribution": "blazar-standin",
            "module": "standin_lane.server",
            "accel": "cuda",
            "platforms": ["linux-x86_64"],
            "pip_args": ["--no-index", "--find-links", str(wheels)],
        },
        "releases": [{"version": "0.1.0"}],
    }


def test_sglang_lane_installs_from_a_local_wheel(tmp_path: Path, store: Store, data: DataDir) -> None:
    stand_in_wheel(tmp_path / "wheels")
    m = write_manifest(tmp_path / "m.json", {"sglang": sglang_lane(tmp_path / "wheels")})
    result = install(store, data, m, "sglang", platform="linux-x86_64")
    row = result.row
    tag_dir = data.engines / "sglang" / "0.1.0-cuda"
    assert (row.kind, row.tag, row.accel, row.version, row.active) == (
        "sglang",
        "0.1.0-cuda",
        "cuda",
        "0.1.0",
        True,
    )
    assert row.path == tag_dir / "sglang-server"
    assert result.gate.version == "blazar-standin version 0.1.0"
    assert (tag_dir / "venv" / "bin" / "python").exists()
    assert not [p for p in (data.engines / "sglang").iterdir() if p.name.startswith(".")], "no staging left"

    model = tmp_path / "Qwen2.5-7B-Instruct-AWQ"
    args = gate_argv("sglang", row.path, model, 31234)[1:]
    assert args == ["--model-path", str(model), "--host", "127.0.0.1", "--port", "31234"]
    assert launched_argv(tag_dir, m.lane("sglang").venv, args) == [  # type: ignore[arg-type]
        str(tag_dir / "venv" / "bin" / "python"), "-m", "standin_lane.server", *args,
    ]  # fmt: skip
    ran = subprocess.run([str(row.path), *args], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(ran.stdout) == args, (
        "the launcher hands the compiled argv to python -m MODULE unchanged"
    )
    key_file = tmp_path / "k.apikey"
    key_file.write_text("s3cret\n")
    ran = subprocess.run(
        [str(row.path), KEY_FILE_FLAG, str(key_file), "--api-key", *args],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(ran.stdout) == [*args, "--api-key", "s3cret"], (
        "with a key file the module sees the key after its other arguments, read inside Python"
    )
    assert reads_key_file(row.path) and not reads_key_file(tmp_path / "k.apikey")


def test_pip_failure_changes_nothing(tmp_path: Path, store: Store, data: DataDir) -> None:
    (tmp_path / "empty").mkdir()
    m = write_manifest(tmp_path / "m.json", {"sglang": sglang_lane(tmp_path / "empty")})
    before = snapshot(store, data)
    with pytest.raises(EngineError, match=r"pip install blazar-standin==0\.1\.0 failed \(exit 1\)"):
        install(store, data, m, "sglang", platform="linux-x86_64")
    assert snapshot(store, data) == before


def test_venv_lanes_refuse_other_platforms_before_any_work(store: Store, data: DataDir) -> None:
    m = load_manifest(env={})
    with pytest.raises(
        EngineError, match="the mlx lane runs on darwin-arm64 only, and this machine is linux-x86_64"
    ):
        install(store, data, m, "mlx", platform="linux-x86_64")
    with pytest.raises(EngineError, match="the sglang lane is built for cuda, not vulkan"):
        install(store, data, m, "sglang", platform="linux-x86_64", accel="vulkan")
    assert not (data.engines / "mlx").exists() and not (data.engines / "sglang").exists()


def test_mlx_and_cuda_command_lines(tmp_path: Path) -> None:
    launcher = tmp_path / "mlx-lm-server"
    assert gate_argv("mlx", launcher, tmp_path / "m-4bit", 9) == [
        str(launcher), "--model", str(tmp_path / "m-4bit"), "--host", "127.0.0.1", "--port", "9",
    ]  # fmt: skip
    gguf = tmp_path / "d" / "m.gguf"
    assert gate_argv("mistralrs", Path("/e/mistralrs"), gguf, 9) == [
        "/e/mistralrs", "serve", "-m", str(gguf.parent), "--format", "gguf", "-f", "m.gguf",
        "--host", "127.0.0.1", "--port", "9", "--no-ui",
    ]  # fmt: skip
    split = tmp_path / "d" / "big-00001-of-00002.gguf"
    assert gate_argv("mistralrs", Path("/e/mistralrs"), split, 9)[4:8] == [
        "--format", "gguf", "-f", "big-00001-of-00002.gguf;big-00002-of-00002.gguf"
    ]  # fmt: skip
    assert gate_argv("llama-cpp", Path("/e/llama-server"), gguf, 9) == [
        "/e/llama-server", "--model", str(gguf), "--host", "127.0.0.1", "--port", "9", "--ctx-size", "512",
    ]  # fmt: skip
