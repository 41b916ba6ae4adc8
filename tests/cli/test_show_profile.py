"""`blazar show MODEL --profile`: the compiled command line and the memory estimate, as a user runs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
        "--port {port}",
        "--api-key-file {api_key_file}",
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
