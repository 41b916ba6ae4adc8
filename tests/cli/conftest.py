"""Fixtures for the CLI tests run as real subprocesses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from blazar.engines import releases
from tests.conftest import NO_GITHUB


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with BLAZAR_CONFIG, BLAZAR_DATA_DIR and HOME in ``tmp_path`` and no other BLAZAR_ variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
    env.update(
        HOME=str(tmp_path / "home"),
        BLAZAR_CONFIG=str(tmp_path / "etc" / "blazar" / "config.toml"),
        BLAZAR_DATA_DIR=str(tmp_path / "data"),
        NO_COLOR="1",
        COLUMNS="200",
    )
    env[releases.API_ENV] = NO_GITHUB
    return env
