"""`blazar engine install / ls / check / rollback / rm / prune` as a user runs them, in-process through typer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from blazar.cli.engine import app
from blazar.engines import registry
from blazar.store import Store
from tests.engines.conftest import FileServer, llama_lane, release, script_archive


@pytest.fixture
def cli(tmp_path: Path, file_server: FileServer, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    cfg = tmp_path / "config.toml"
    cfg.write_text("")
    manifest = tmp_path / "manifest.json"
    releases = [release(file_server, script_archive(file_server, v), v) for v in ("b1", "b2", "b3")]
    manifest.write_text(json.dumps({"schema": 1, "lanes": {"llama-cpp": llama_lane(*releases)}}))
    for name in ("BLAZAR_HOST", "BLAZAR_PORT", "BLAZAR_KEYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BLAZAR_CONFIG", str(cfg))
    monkeypatch.setenv("BLAZAR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BLAZAR_ENGINE_MANIFEST", str(manifest))
    return CliRunner()


def run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, (result.stdout, result.stderr)
    return " ".join(result.stdout.split()) if code == 0 else " ".join(result.stderr.split())


def test_engine_lifecycle(cli: CliRunner, tmp_path: Path) -> None:
    data = tmp_path / "data" / "engines" / "llama-cpp"
    out = run(cli, "install", "--kind", "llama-cpp", "--version", "b1")
    assert "gate passed: version: b1 (fake); no model of this lane in the catalog" in out
    assert f"installed llama-cpp b1-cpu: {data / 'b1-cpu' / 'llama-b1' / 'llama-server'} (active)" in out
    out = run(cli, "install", "--kind", "llama-cpp", "--version", "b2")
    assert "(previous: b1-cpu; undo with: blazar engine rollback --kind llama-cpp)" in out
    listing = [" ".join(line.split()) for line in cli.invoke(app, ["ls"]).stdout.splitlines()]
    assert [line.split(" /")[0] for line in listing] == [
        "llama-cpp b1-cpu b1 cpu install",
        "* llama-cpp b2-cpu b2 cpu install",
    ]
    assert run(cli, "check") == (
        "llama-cpp b2 (active b2-cpu); update available: b3: blazar engine install --kind llama-cpp --version b3"
    )
    assert run(cli, "rollback", "--kind", "llama-cpp") == "llama-cpp b1-cpu is active again (was b2-cpu)"
    assert run(cli, "rm", "--kind", "llama-cpp", "b2-cpu") == "removed llama-cpp b2-cpu"
    assert run(cli, "prune") == "nothing to prune"
    assert sorted(p.name for p in data.iterdir()) == ["b1-cpu"]


def test_errors_are_one_red_line(cli: CliRunner) -> None:
    run(cli, "install", "--kind", "llama-cpp", "--version", "b1")
    err = run(cli, "install", "--kind", "llama-cpp", "--version", "b1", code=1)
    assert err == (
        "error: llama-cpp b1-cpu is already installed; activate it with: blazar engine use --kind llama-cpp b1-cpu"
        " (or remove it first: blazar engine rm --kind llama-cpp b1-cpu)"
    )
    assert "is the active llama-cpp engine; activate another first" in run(
        cli, "rm", "--kind", "llama-cpp", "b1-cpu", code=1
    )
    assert "disagrees with the manifest's" in run(
        cli, "install", "--kind", "llama-cpp", "--version", "b2", "--sha256", "a" * 64, code=1
    )
    assert "unknown engine kind 'vllm'" in run(cli, "check", "--kind", "vllm", code=1)


def test_add_a_capability_fork(cli: CliRunner, tmp_path: Path) -> None:
    binary = tmp_path / "ik-llama-server"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    args = [
        "add",
        "--kind",
        "llama-cpp",
        "--path",
        str(binary),
        "--tag",
        "ik",
        "--fork",
        "--arch",
        "qwen3next",
    ]
    assert run(cli, *args, "--no-activate") == f"added llama-cpp ik: {binary}"
    assert run(cli, "ls").endswith(f"{binary} fork")
    with Store.open(tmp_path / "data" / "blazar.db") as store:
        row = registry.get(store, "llama-cpp", "ik")
    assert row is not None and (row.lane_class, row.architectures, row.active, row.version) == (
        "fork",
        ("qwen3next",),
        False,
        None,  # its --version printed no build
    )


def test_add_records_what_the_binary_says_it_is(cli: CliRunner, tmp_path: Path) -> None:
    """The version decides, for llama-server, whether the child listens on a unix socket."""
    binary = tmp_path / "llama-server"
    binary.write_text(
        '#!/bin/sh\necho "version: 0.6.0-dev (build 11434, commit unknown)"\necho built with cc\n'
    )
    binary.chmod(0o755)
    run(cli, "add", "--kind", "llama-cpp", "--path", str(binary))
    broken = tmp_path / "broken-server"
    broken.write_text("#!/bin/sh\nexit 2\n")
    broken.chmod(0o755)
    run(cli, "add", "--kind", "llama-cpp", "--path", str(broken), "--tag", "broken")
    with Store.open(tmp_path / "data" / "blazar.db") as store:
        good, bad = registry.get(store, "llama-cpp", "local"), registry.get(store, "llama-cpp", "broken")
    assert good is not None and good.version == "b11434"
    assert bad is not None and bad.version is None


def test_update_installs_the_newest_and_then_has_nothing_to_do(cli: CliRunner) -> None:
    out = run(cli, "update", "--kind", "llama-cpp")  # nothing installed: the newest
    assert "installed llama-cpp b3-cpu" in out and "(active)" in out
    assert run(cli, "update", "--kind", "llama-cpp") == "llama-cpp b3 (active b3-cpu); up to date (newest b3)"
    run(cli, "install", "--kind", "llama-cpp", "--version", "b1")  # an older one installed and active
    out = run(cli, "update", "--kind", "llama-cpp")
    assert (
        "installed" not in out and "up to date (newest b3)" in out
    )  # b3 is installed: use or rollback, not update
    assert "unknown engine kind 'vllm'" in run(cli, "update", "--kind", "vllm", code=1)
