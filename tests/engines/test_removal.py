"""`engine rm` (aside-first, restored on failure), `engine prune` and `engine rollback` over installed tags."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from blazar.engines import registry, removal
from blazar.engines.installer import install
from blazar.errors import EngineError
from blazar.paths import DataDir
from blazar.store import Store
from tests.engines.conftest import (
    PLATFORM,
    FileServer,
    llama_lane,
    release,
    script_archive,
    snapshot,
    write_manifest,
)


def install_versions(store: Store, data: DataDir, srv: FileServer, tmp_path: Path, *versions: str) -> None:
    """Install each version in turn (each becomes active); fake script engines, so no model gate."""
    releases = [release(srv, script_archive(srv, v), v) for v in versions]
    m = write_manifest(tmp_path / "m.json", {"llama-cpp": llama_lane(*releases)})
    for v in versions:
        install(store, data, m, "llama-cpp", version=v, platform=PLATFORM)


def tags(store: Store) -> list[tuple[str, bool]]:
    return [(r.tag, r.active) for r in registry.list_all(store)]


def dirs(data: DataDir) -> list[str]:
    return sorted(p.name for p in (data.engines / "llama-cpp").iterdir())


def test_rollback_returns_to_the_previous_active_tag(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    with pytest.raises(EngineError, match="no earlier active llama-cpp engine to roll back to"):
        registry.rollback(store, "llama-cpp")
    install_versions(store, data, file_server, tmp_path, "b1", "b2", "b3")
    assert registry.active(store, "llama-cpp").tag == "b3-cpu"  # type: ignore[union-attr]
    assert registry.rollback(store, "llama-cpp").tag == "b2-cpu"
    assert registry.rollback(store, "llama-cpp").tag == "b3-cpu", "a second rollback undoes the first"
    registry.use(store, "llama-cpp", "b1-cpu")
    assert registry.rollback(store, "llama-cpp").tag == "b3-cpu"
    assert [t for t, active in tags(store) if active] == ["b3-cpu"]


def test_rm_is_aside_first_and_leaves_no_trace(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    install_versions(store, data, file_server, tmp_path, "b1", "b2")
    with pytest.raises(EngineError, match="b2-cpu is the active llama-cpp engine; activate another first"):
        removal.remove(store, data, "llama-cpp", "b2-cpu")
    removed = removal.remove(store, data, "llama-cpp", "b1-cpu")
    assert removed.tag == "b1-cpu"
    assert tags(store) == [("b2-cpu", True)]
    assert dirs(data) == ["b2-cpu"]
    with pytest.raises(EngineError, match=r"no llama-cpp engine tagged 'b1-cpu' \(installed tags: b2-cpu\)"):
        removal.remove(store, data, "llama-cpp", "b1-cpu")
    removal.remove(store, data, "llama-cpp", "b2-cpu", force=True)
    assert tags(store) == [] and dirs(data) == []


def test_rm_restores_dir_and_row_when_the_row_delete_fails(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_versions(store, data, file_server, tmp_path, "b1", "b2")
    before = snapshot(store, data)
    seen: list[list[str]] = []

    def failing_delete(_store: Store, kind: str, tag: str) -> None:
        seen.append(dirs(data))  # the tag dir is already aside when the row delete runs
        raise RuntimeError("disk I/O error")

    monkeypatch.setattr(registry, "delete", failing_delete)
    with pytest.raises(RuntimeError, match="disk I/O error"):
        removal.remove(store, data, "llama-cpp", "b1-cpu")
    assert seen and seen[0][0].startswith(".aside-b1-cpu-") and "b1-cpu" not in seen[0]
    assert snapshot(store, data) == before
    assert registry.get(store, "llama-cpp", "b1-cpu") is not None
    assert (data.engines / "llama-cpp" / "b1-cpu" / "llama-b1" / "llama-server").is_file()


def test_a_failed_discard_never_leaves_a_live_row(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_versions(store, data, file_server, tmp_path, "b1", "b2")

    def failing_rmtree(path: Path, *args: object, **kwargs: object) -> None:
        raise OSError("device busy")

    monkeypatch.setattr(removal.shutil, "rmtree", failing_rmtree)
    removal.remove(store, data, "llama-cpp", "b1-cpu")
    monkeypatch.undo()
    assert registry.get(store, "llama-cpp", "b1-cpu") is None
    [aside] = [d for d in dirs(data) if d != "b2-cpu"]
    assert aside.startswith(".aside-b1-cpu-")
    removal.remove(store, data, "llama-cpp", "b2-cpu", force=True)  # the next removal sweeps it
    assert dirs(data) == []


def test_rm_refuses_an_engine_a_child_runs_from(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    install_versions(store, data, file_server, tmp_path, "b1", "b2")
    row = registry.get(store, "llama-cpp", "b1-cpu")
    assert row is not None
    sleeper = row.path.parent / "sleep"  # a real executable inside the tag dir, as a llama-server child is
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", sleeper)
    proc = subprocess.Popen([str(sleeper), "60"])
    try:
        data.run_file("m:latest", "pid").write_text(str(proc.pid))
        before = snapshot(store, data)
        with pytest.raises(
            EngineError, match=f"llama-cpp b1-cpu is serving \\(pid {proc.pid}\\); stop it first"
        ):
            removal.remove(store, data, "llama-cpp", "b1-cpu")
        assert snapshot(store, data) == before
    finally:
        proc.kill()
        proc.wait()


def test_rm_of_a_registered_binary_keeps_its_file(tmp_path: Path, store: Store, data: DataDir) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    registry.add(store, kind="llama-cpp", tag="local", path=binary, source="local", activate=False)
    removal.remove(store, data, "llama-cpp", "local")
    assert registry.list_all(store) == [] and binary.is_file()


def test_prune_keeps_the_active_and_the_newest_idle(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    install_versions(store, data, file_server, tmp_path, "b1", "b2", "b3", "b4")
    registry.use(store, "llama-cpp", "b2-cpu")
    removed = removal.prune(store, data, keep=1)
    assert [r.tag for r in removed] == ["b3-cpu", "b1-cpu"]
    assert tags(store) == [("b2-cpu", True), ("b4-cpu", False)]
    assert dirs(data) == ["b2-cpu", "b4-cpu"]
    assert [r.tag for r in removal.prune(store, data, kind="llama-cpp", keep=0)] == ["b4-cpu"]
    assert tags(store) == [("b2-cpu", True)] and dirs(data) == ["b2-cpu"]
    assert removal.prune(store, data, keep=0) == []
    with pytest.raises(EngineError, match="--keep must be 0 or more"):
        removal.prune(store, data, keep=-1)
