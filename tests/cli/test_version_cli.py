"""`blazar --version`: the package's version, as its metadata carries it, set once in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import blazar


def test_version_is_the_packages_one_and_set_once() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "blazar", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert r.stdout == f"blazar {pyproject['project']['version']}\n"
    assert blazar.__version__ == version("blazar") == pyproject["project"]["version"]


def test_the_scheduler_is_required_and_built_at_blazars_version() -> None:
    """blazar-sched has no version of its own: cython/setup.py reads blazar's, and blazar requires exactly it."""
    root = Path(__file__).parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert f"blazar-sched=={project['version']}" in [d.split(";")[0].strip() for d in project["dependencies"]]
    sched = tomllib.loads((root / "cython" / "pyproject.toml").read_text())["project"]
    assert "version" not in sched and sched["dynamic"] == ["version"]
    # the installed scheduler was built from cython/, so its metadata shows the version setup.py read
    assert version("blazar-sched") == project["version"]
