"""`engine check` and the background check: installed versions against the manifest's newest; never installs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path

import pytest

from blazar.cli.doctor import check_updates
from blazar.config import Config
from blazar.engines import registry
from blazar.engines.check import check_loop, check_once, compare
from blazar.engines.manifest import MANIFEST_ENV, Manifest
from blazar.paths import DataDir
from blazar.store import Store
from tests.conftest import until
from tests.engines.conftest import write_manifest


def manifest(tmp_path: Path) -> Manifest:
    def lane(*versions: str) -> dict[str, object]:
        return {"source": "official", "binary": "x", "releases": [{"version": v} for v in versions]}

    return write_manifest(
        tmp_path / "m.json",
        {
            "llama-cpp": lane("b100", "b200"),
            "sglang": lane("0.5.9", "0.5.10"),
            "mlx": lane("0.3"),
            "sd": lane(),
        },
    )


def registered(
    store: Store, tmp_path: Path, kind: str, tag: str, version: str, activate: bool = True
) -> None:
    binary = tmp_path / f"{kind}-{tag}"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    registry.add(store, kind=kind, tag=tag, path=binary, source="local", version=version, activate=activate)


def test_compare_lines(tmp_path: Path, store: Store) -> None:
    registered(store, tmp_path, "llama-cpp", "b100-cpu", "b100")
    registered(store, tmp_path, "sglang", "0.5.10-cuda", "0.5.10")
    registered(store, tmp_path, "mlx", "old", "0.2", activate=False)
    lines = [s.line() for s in compare(manifest(tmp_path), registry.list_all(store))]
    assert lines == [
        "llama-cpp  b100 (active b100-cpu); update available: b200: blazar engine install --kind llama-cpp --version b200",
        "sglang     0.5.10 (active 0.5.10-cuda); up to date (newest 0.5.10)",
        "mlx        0.2; update available: 0.3: blazar engine install --kind mlx --version 0.3",
        "sd         not installed; the manifest lists no release",
    ]
    # a lane with no release in the manifest and an engine added by hand (whisper-server, say)
    registered(store, tmp_path, "sd", "local", "unknown")
    [sd] = compare(manifest(tmp_path), registry.list_all(store), kind="sd")
    assert sd.line() == "sd         unknown version (active local); the manifest lists no release"
    only = compare(manifest(tmp_path), [], kind="sglang")
    assert [s.line() for s in only] == [
        "sglang     not installed; newest 0.5.10: blazar engine install --kind sglang --version 0.5.10"
    ]
    assert not only[0].update, "nothing installed is not an update"


def test_a_built_engine_matches_its_release(tmp_path: Path, store: Store) -> None:
    registered(
        store, tmp_path, "llama-cpp", "b200-cpu", "200"
    )  # `engine build` records the bare build number
    [status] = compare(manifest(tmp_path), registry.list_all(store), kind="llama-cpp")
    assert not status.update and status.installed == "200"


def test_check_once_records_for_doctor(tmp_path: Path, store: Store, data: DataDir) -> None:
    registered(store, tmp_path, "llama-cpp", "b100-cpu", "b100")
    cfg = Config(data_dir=data.root)
    statuses = check_once(cfg, store, manifest=manifest(tmp_path))
    doc = json.loads((data.engines / "check.json").read_text())
    assert doc["manifest"] == str(tmp_path / "m.json")
    assert doc["lanes"][0] == dataclasses.asdict(statuses[0]) | {"update": True}
    assert [r.tag for r in registry.list_all(store)] == ["b100-cpu"], "check never installs"
    [update] = check_updates(data)  # what doctor shows: only the lane with an update
    assert update.name == "update llama-cpp" and update.status == "warn"
    assert (
        update.detail.startswith("llama-cpp  b100 (active b100-cpu); update available: b200")
        and "checked " in update.detail
    )
    assert update.fix == "blazar engine install --kind llama-cpp --version b200"
    (data.engines / "check.json").write_text("{not json")
    assert check_updates(data) == []  # a file that cannot be read shows nothing


def test_check_loop(
    tmp_path: Path,
    store: Store,
    data: DataDir,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    registered(store, tmp_path, "llama-cpp", "b100-cpu", "b100")
    manifest(tmp_path)
    monkeypatch.setenv(MANIFEST_ENV, str(tmp_path / "m.json"))
    log = logging.getLogger("blazar.test.check")

    async def run() -> None:
        await asyncio.wait_for(check_loop(Config(data_dir=data.root, engine_check_secs=0), store, log), 30)
        assert not (data.engines / "check.json").exists(), "0 turns the check off"
        task = asyncio.create_task(check_loop(Config(data_dir=data.root, engine_check_secs=3600), store, log))
        # the first check runs at once (the next in an hour): written, and logged in the same step
        await until((data.engines / "check.json").exists, "the first engine check")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.INFO, logger="blazar.test.check"):
        asyncio.run(run())
    assert any("engine update available: llama-cpp" in r.getMessage() for r in caplog.records)
