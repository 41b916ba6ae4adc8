"""The wheels `make wheels` built, installed alone into a fresh venv: `pip install blazar` as a user gets it.

No source tree on the path, no index: the two wheels from dist/ and their dependencies from the test assets'
wheelhouse. Then `blazar --version`, `blazar doctor`, `blazar serve` and a whole and a streamed chat through the
real llama-server and SmolLM2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import Assets, Daemon, _manifest, cleanup, make_daemon, provision

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def built(name: str) -> Path:
    """dist/'s one wheel of ``name`` at this version, tagged for CPython 3.11's stable ABI on manylinux."""
    dist = ROOT / os.environ.get("DIST", "dist")
    found = sorted(dist.glob(f"{name}-{VERSION}-cp311-abi3-*.whl"))
    if len(found) != 1:
        pytest.fail(f"{dist} holds {[p.name for p in found]} for {name}: run `make wheels`", pytrace=False)
    return found[0]


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        [name] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return z.read(name).decode()


def test_both_wheels_are_abi3_manylinux_and_blazar_requires_the_scheduler_at_its_version() -> None:
    blazar, sched = built("blazar"), built("blazar_sched")
    for wheel in (blazar, sched):
        platforms = wheel.name.removesuffix(".whl").split("-")[-1].split(".")
        assert all(p.startswith(("manylinux", "musllinux")) for p in platforms), wheel.name
    meta = metadata(blazar)
    assert f"Version: {VERSION}\n" in meta and f"Requires-Dist: blazar-sched=={VERSION}\n" in meta, meta[
        :2000
    ]
    assert f"Version: {VERSION}\n" in metadata(sched)
    with zipfile.ZipFile(blazar) as z:
        names = z.namelist()
    assert "blazar/gateway/status.html" in names  # package data travels in the wheel
    assert any(n.startswith("blazar/_native.abi3.so") for n in names), names


def test_the_sdists_carry_the_sources_they_build_from() -> None:
    """make wheels builds the scheduler's wheel from its sdist; blazar's sdist holds the Rust crate and the
    package, so pip can build either where no wheel fits."""
    dist = ROOT / os.environ.get("DIST", "dist")
    for name, wanted in [
        ("blazar", ["native/Cargo.toml", "native/Cargo.lock", "native/src/lib.rs", "python/blazar/__init__.py",
                    "python/blazar/gateway/status.html", "pyproject.toml"]),
        ("blazar_sched", ["src/blazar_sched/_scheduler.pyx", "setup.py", "pyproject.toml", "PKG-INFO"]),
    ]:  # fmt: skip
        sdist = dist / f"{name}-{VERSION}.tar.gz"
        if not sdist.is_file():
            pytest.fail(f"{sdist} is missing: run `make wheels`", pytrace=False)
        with tarfile.open(sdist) as t:
            names = {n.removeprefix(f"{name}-{VERSION}/") for n in t.getnames()}
        assert set(wanted) <= names, sorted(set(wanted) - names)
        assert not any(n.endswith("_scheduler.c") for n in names)  # built from the .pyx, never a stale C file


def test_a_fresh_venv_with_the_two_wheels_serves_a_whole_and_a_streamed_chat(
    tmp_path: Path, assets: Assets
) -> None:
    house = Path(_manifest().get("wheelhouse", ""))
    if not (house / ".requirements").is_file():
        pytest.fail("the test assets have no wheelhouse: run `make assets`", pytrace=False)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
    python = str(venv / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(house),
         str(built("blazar")), str(built("blazar_sched"))],
        env=clean, cwd=tmp_path, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr

    d: Daemon = make_daemon(tmp_path / "home")
    d.env = {k: v for k, v in d.env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    d.python = python
    where = subprocess.run(
        [python, "-c", "import json, blazar, blazar_sched, blazar._native as n; "
         "print(json.dumps([blazar.__file__, blazar_sched.__file__, n.__file__]))"],
        env=d.env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for f in json.loads(where.stdout):
        assert Path(f).is_relative_to(site), (f, site)

    assert d.cli("--version").stdout == f"blazar {VERSION}\n"
    provision(d, assets)
    doctor = d.cli("doctor", "--json", check=False)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert json.loads(doctor.stdout)["ok"] is True
    try:
        d.start()
        # "version" is the Ollama API served (clients gate features on it), "blazar" the package's own
        assert httpx.get(d.url + "/api/version", timeout=30).json()["blazar"] == VERSION
        chat = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
        whole = httpx.post(d.url + "/v1/chat/completions", json=chat, timeout=600)
        assert whole.status_code == 200, whole.text
        assert whole.json()["choices"][0]["message"]["content"]
        with httpx.stream(
            "POST", d.url + "/v1/chat/completions", json={**chat, "stream": True}, timeout=600
        ) as r:
            assert r.status_code == 200
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]", lines
        chunks = [json.loads(line[6:]) for line in lines[:-1]]
        deltas = [c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]]
        assert "".join(deltas), lines
    finally:
        cleanup(d)
