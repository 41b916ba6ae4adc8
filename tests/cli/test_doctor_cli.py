"""`blazar doctor`: each problem with its fix and a non-zero exit, a clean bill of health otherwise."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blazar.cli import doctor
from tests.conftest import Assets, Daemon, cleanup, make_daemon, provision


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[Daemon]:
    """SmolLM2 imported and the real engine registered; tests that change the config put it back."""
    d = provision(make_daemon(tmp_path_factory.mktemp("doctor")), assets)
    yield d
    cleanup(d)


def report(d: Daemon) -> tuple[int, dict[str, Any]]:
    r = d.cli("doctor", "--json", check=False)
    return r.returncode, json.loads(r.stdout)


def by_name(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in rep["checks"]}


def test_healthy_install(d: Daemon) -> None:
    r = d.cli("doctor")
    assert r.returncode == 0, r.stdout
    assert "no problems found" in r.stdout and "model smollm2:latest" in r.stdout
    code, rep = report(d)
    assert code == 0 and rep["ok"] is True
    checks = by_name(rep)
    assert (
        checks["engine llama-cpp"]["status"] == "ok"
        and "local active" in checks["engine llama-cpp"]["detail"]
    )
    assert (
        checks["model smollm2:latest"]["status"] == "ok"
        and "ctx 4096" in checks["model smollm2:latest"]["detail"]
    )
    assert checks["port"]["status"] == "ok" and "is free" in checks["port"]["detail"]
    assert checks["disk"]["status"] == "ok"
    hw = rep["hardware"]
    assert hw["ram_total"] > 0 and hw["cpu_threads"] >= 1
    assert checks["hardware"]["detail"].startswith("no NVIDIA GPU") == (not hw["gpus"])


def test_fresh_machine_needs_an_engine(tmp_path: Path) -> None:
    fresh = make_daemon(tmp_path)
    r = fresh.cli("doctor", check=False)
    assert r.returncode == 1
    assert "no engine is installed" in r.stdout and "fix: blazar engine" in r.stdout
    assert "1 problem found" in r.stdout and "blazar import PATH" in r.stdout
    assert not (tmp_path / "data").exists(), "doctor only reads"


def test_invalid_config_and_unfit_model(d: Daemon) -> None:
    config = d.root / "config.toml"
    try:
        config.write_text("ctx_size = -5\n")
        code, rep = report(d)
        checks = by_name(rep)
        assert code == 1 and checks["config"]["status"] == "fail"
        assert "ctx_size" in checks["config"]["detail"] and "config.toml" in checks["config"]["fix"]
        assert str(d.port) in checks["port"]["detail"]  # the defaults, with BLAZAR_PORT still applied
        config.write_text("memory_headroom_mib = 100000000\n")
        code, rep = report(d)
        model = by_name(rep)["model smollm2:latest"]
        assert code == 1 and model["status"] == "fail" and "does not fit in memory" in model["detail"]
    finally:
        config.write_text("")


def test_missing_weights(d: Daemon) -> None:
    d.cli("cp", "smollm2", "lost")
    try:
        (d.data_dir / "models" / "lost" / "latest.gguf").unlink()
        code, rep = report(d)
    finally:
        d.cli("rm", "lost")
    model = by_name(rep)["model lost:latest"]
    assert code == 1 and model["status"] == "fail" and "blazar rm lost:latest" in model["fix"]


def test_port_held_by_another_program(d: Daemon) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", d.port))
        s.listen()
        code, rep = report(d)
    port = by_name(rep)["port"]
    assert code == 1 and port["status"] == "fail" and "held by another program" in port["detail"]
    assert "BLAZAR_PORT" in port["fix"]


def test_port_held_by_a_running_blazar(d: Daemon) -> None:
    d.start()
    try:
        code, rep = report(d)
    finally:
        d.stop()
    port = by_name(rep)["port"]
    assert code == 0 and port["status"] == "ok" and "served by a running blazar" in port["detail"]


def test_low_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def usage(free: int) -> Any:
        return lambda _p: shutil._ntuple_diskusage(100 << 30, (100 << 30) - free, free)  # type: ignore[attr-defined]

    monkeypatch.setattr(doctor.shutil, "disk_usage", usage(512 << 20))
    check = doctor.check_disk(tmp_path / "not" / "yet")
    assert check.status == "fail" and check.fix is not None and "data_dir" in check.fix
    monkeypatch.setattr(doctor.shutil, "disk_usage", usage(3 << 30))
    assert doctor.check_disk(tmp_path).status == "warn"
    monkeypatch.setattr(doctor.shutil, "disk_usage", usage(50 << 30))
    assert doctor.check_disk(tmp_path).status == "ok"


def test_a_data_dir_that_is_not_one_is_named(tmp_path: Path) -> None:
    d = make_daemon(tmp_path)
    (tmp_path / "data").write_text("not a directory")
    r = d.cli("doctor", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"the data directory {tmp_path / 'data'} is not a directory" in r.stdout
    (tmp_path / "data").unlink()
    (tmp_path / "data" / "blazar.db").mkdir(parents=True)
    r = d.cli("doctor", check=False)
    assert f"the database {tmp_path / 'data' / 'blazar.db'} is not a file" in r.stdout


def test_config_names_the_catalog_lacks(d: Daemon) -> None:
    config = d.root / "config.toml"
    try:
        config.write_text(
            '[models."smollm"]\nparallel = 2\n[models.smollm2]\nchat_template_file = "/nonexistent.jinja"\n'
            '[[keys]]\nname = "k"\nsecret = "sk-doctor-0123456789abcdef"\nmodels = ["smolm2"]\n'
        )
        code, rep = report(d)
    finally:
        config.write_text("")
    found = [(c["status"], c["detail"], c["fix"]) for c in rep["checks"] if c["name"] == "config names"]
    assert code == 1 and found == [
        ("warn", '[models."smollm:latest"] names no catalog model, so it applies to none',
         "did you mean smollm2:latest? blazar ls lists the catalog"),
        ("fail", '[models."smollm2:latest"] chat_template_file /nonexistent.jinja is not a file',
         "fix the path, or remove chat_template_file to use the model's own template"),
        ("warn", "key 'k' lists model 'smolm2:latest', which is not in the catalog",
         "did you mean smollm2:latest? blazar ls lists the catalog"),
    ]  # fmt: skip
