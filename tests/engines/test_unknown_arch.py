"""An unknown architecture, as the real llama-server reports it, classified and re-routed once."""

from __future__ import annotations

import dataclasses
import shlex
import struct
import subprocess
from pathlib import Path

from blazar.catalog.models import ModelRow
from blazar.engines.lanes import UnservedArchitecture, classify_unknown_arch, reroute_once
from blazar.engines.registry import EngineRow
from tests.conftest import Assets

ARCH = "blazar-nope-\u00fc"


def gguf_with_arch(path: Path, arch: str) -> Path:
    """A GGUF v3 header with no tensors and one key: general.architecture."""

    def text(s: str) -> bytes:
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    path.write_bytes(
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + text("general.architecture")
        + struct.pack("<I", 8)
        + text(arch)
    )
    return path


def test_real_llama_server_death_is_classified_and_rerouted(tmp_path: Path, assets: Assets) -> None:
    model_path = gguf_with_arch(tmp_path / "new.gguf", ARCH)
    r = subprocess.run(
        [str(assets.llama_server), "--model", str(model_path), "--host", "127.0.0.1", "--port", "1"],
        capture_output=True,
        timeout=120,
    )
    assert r.returncode != 0
    assert classify_unknown_arch(r.stderr + r.stdout) == ARCH

    model = ModelRow("new:latest", model_path, "gguf", 1, ARCH, None, None, None, False, "2026-01-01")
    main = EngineRow("llama-cpp", "b11434-cpu", "b11434", assets.llama_server, "build", "cpu", None, True)
    fork = dataclasses.replace(main, tag="fork-1", active=False, lane_class="fork", architectures=(ARCH,))
    assert reroute_once(model, main, [main, fork], ARCH) == fork
    final = reroute_once(model, fork, [main, fork], ARCH, already_rerouted=True)
    assert isinstance(final, UnservedArchitecture) and final.status == 502
    assert f"--fork --arch {shlex.quote(ARCH)};" in str(final), "the command is safe to paste into a shell"
