"""`engine install` over real HTTP from a 127.0.0.1 server: success, resume, and failures that change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.catalog.models import ModelRow
from blazar.engines import registry
from blazar.engines.gate import GateFailed
from blazar.engines.installer import gate_model, install
from blazar.engines.manifest import load_manifest
from blazar.errors import EngineError
from blazar.paths import DataDir
from blazar.store import Store
from tests.conftest import Assets
from tests.engines.conftest import (
    BAD_VERSION_SCRIPT,
    NEVER_HEALTHY_SCRIPT,
    PLATFORM,
    FileServer,
    llama_lane,
    make_archive,
    release,
    script_archive,
    sha256_of,
    snapshot,
    write_manifest,
)


def model_row(path: Path, name: str = "smollm2:latest", fmt: str = "gguf") -> ModelRow:
    return ModelRow(
        name, path, fmt, path.stat().st_size, "llama", 1, 2048, "Q4_1", True, "2026-01-01T00:00:00"
    )


def preinstalled(store: Store, data: DataDir, srv: FileServer, tmp_path: Path) -> None:
    """One installed, active engine (b1-cpu), so 'unchanged' is checked against a non-empty set."""
    m = write_manifest(
        tmp_path / "m0.json", {"llama-cpp": llama_lane(release(srv, script_archive(srv, "b1"), "b1"))}
    )
    install(store, data, m, "llama-cpp", platform=PLATFORM)


def test_real_llama_server_installs_gates_and_activates(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir, assets: Assets
) -> None:
    preinstalled(store, data, file_server, tmp_path)
    archive = make_archive(
        file_server.root / "llama-b9001-bin-ubuntu-x64.tar.gz",
        "llama-b9001",
        {"llama-server": assets.llama_server},
    )
    m = write_manifest(tmp_path / "m.json", {"llama-cpp": llama_lane(release(file_server, archive, "b9001"))})
    result = install(
        store, data, m, "llama-cpp", platform=PLATFORM, models=[model_row(assets.model)], gate_timeout=120
    )
    row = result.row
    assert (row.kind, row.tag, row.version, row.source, row.active) == (
        "llama-cpp",
        "b9001-cpu",
        "b9001",
        "install",
        True,
    )
    assert row.path == data.engines / "llama-cpp" / "b9001-cpu" / "llama-b9001" / "llama-server"
    assert row.path.is_file() and sha256_of(row.path) == sha256_of(assets.llama_server)
    assert result.previous is not None and result.previous.tag == "b1-cpu"
    assert result.gate.healthy and result.gate.model == assets.model and result.gate.reply
    assert "version" in result.gate.version
    assert [r.tag for r in registry.list_all(store) if r.active] == ["b9001-cpu"]
    assert not list((data.engines / ".downloads").iterdir()), "the verified archive is deleted after install"
    assert sorted(p.name for p in (data.engines / "llama-cpp").iterdir()) == ["b1-cpu", "b9001-cpu"]


def test_sha256_mismatch_changes_nothing(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    preinstalled(store, data, file_server, tmp_path)
    before = snapshot(store, data)
    archive = script_archive(file_server, "b2")
    m = write_manifest(
        tmp_path / "m.json", {"llama-cpp": llama_lane(release(file_server, archive, "b2", sha256="0" * 64))}
    )
    with pytest.raises(EngineError, match="sha256 mismatch") as e:
        install(store, data, m, "llama-cpp", platform=PLATFORM)
    assert "installed engines are unchanged" in str(e.value)
    assert snapshot(store, data) == before
    assert not list((data.engines / ".downloads").iterdir()), "a file that failed its sha256 is not kept"


def test_truncated_download_changes_nothing_and_resumes(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir, assets: Assets
) -> None:
    preinstalled(store, data, file_server, tmp_path)
    before = snapshot(store, data)
    archive = make_archive(
        file_server.root / "llama-b3-bin-ubuntu-x64.zip", "llama-b3", {"llama-server": assets.llama_server}
    )
    m = write_manifest(tmp_path / "m.json", {"llama-cpp": llama_lane(release(file_server, archive, "b3"))})
    cut = 1 << 20
    file_server.truncate[archive.name] = cut
    with pytest.raises(EngineError, match="interrupted after") as e:
        install(store, data, m, "llama-cpp", platform=PLATFORM)
    assert "rerun the same command to resume" in str(e.value)
    assert snapshot(store, data) == before
    [part] = (data.engines / ".downloads").iterdir()
    assert part.name.endswith(".part") and part.stat().st_size == cut

    result = install(store, data, m, "llama-cpp", platform=PLATFORM)
    assert file_server.ranges[-1] == f"bytes={cut}-"
    assert result.row.tag == "b3-cpu" and result.row.active
    assert sha256_of(result.row.path) == sha256_of(assets.llama_server), "zip kept the binary whole"
    assert not result.gate.healthy, "no GGUF in the catalog: the gate stops after --version"


@pytest.mark.parametrize(
    "script", [BAD_VERSION_SCRIPT, NEVER_HEALTHY_SCRIPT], ids=["version-exits-1", "never-healthy"]
)
def test_failing_gate_changes_nothing(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir, script: str
) -> None:
    preinstalled(store, data, file_server, tmp_path)
    before = snapshot(store, data)
    archive = script_archive(file_server, "b4", script)
    m = write_manifest(tmp_path / "m.json", {"llama-cpp": llama_lane(release(file_server, archive, "b4"))})
    fake_model = tmp_path / "tiny.gguf"
    fake_model.write_bytes(b"GGUF")
    with pytest.raises(GateFailed) as e:
        install(
            store, data, m, "llama-cpp", platform=PLATFORM, models=[model_row(fake_model)], gate_timeout=1
        )
    message = str(e.value)
    assert "llama-cpp b4-cpu failed its regression gate" in message
    assert message.endswith("nothing was installed; llama-cpp b1-cpu stays active")
    assert ("exited 1" in message) if script is BAD_VERSION_SCRIPT else ("did not answer" in message)
    assert snapshot(store, data) == before
    assert not list((data.engines / ".downloads").iterdir()), "an archive that failed its gate is not kept"


def test_size_cap_refuses_before_writing(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    before = snapshot(store, data)
    archive = script_archive(file_server, "b5")
    size = archive.stat().st_size
    m = write_manifest(
        tmp_path / "m.json", {"llama-cpp": llama_lane(release(file_server, archive, "b5", size=size - 1))}
    )
    with pytest.raises(EngineError, match=f"is {size} bytes, over the {size - 1}-byte cap"):
        install(store, data, m, "llama-cpp", platform=PLATFORM)
    assert snapshot(store, data) == before
    assert not list((data.engines / ".downloads").iterdir())


def test_unrecorded_sha256_needs_the_digest(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    archive = script_archive(file_server, "b6")
    m = write_manifest(
        tmp_path / "m.json", {"llama-cpp": llama_lane(release(file_server, archive, "b6", sha256=None))}
    )
    with pytest.raises(EngineError, match=r"records no sha256 .* never installs an unverified engine; pass"):
        install(store, data, m, "llama-cpp", platform=PLATFORM)
    assert file_server.ranges == [], "nothing was fetched"
    with pytest.raises(EngineError, match="sha256 mismatch"):
        install(store, data, m, "llama-cpp", platform=PLATFORM, sha256="1" * 64)
    row = install(store, data, m, "llama-cpp", platform=PLATFORM, sha256=sha256_of(archive)).row
    assert row.tag == "b6-cpu"


def test_already_installed_and_unknown_version(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    preinstalled(store, data, file_server, tmp_path)
    m = load_manifest(tmp_path / "m0.json")
    with pytest.raises(
        EngineError, match="already installed; activate it with: blazar engine use --kind llama-cpp b1-cpu"
    ):
        install(store, data, m, "llama-cpp", platform=PLATFORM)
    with pytest.raises(EngineError, match=r"no llama-cpp release 'b77' \(known: b1\)"):
        install(store, data, m, "llama-cpp", version="b77", platform=PLATFORM)
    with pytest.raises(EngineError, match="no llama-cpp b1 build for darwin-arm64"):
        install(store, data, m, "llama-cpp", platform="darwin-arm64")


def test_stale_staging_and_tag_dirs_are_swept(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    kind_root = data.engines / "llama-cpp"
    (kind_root / ".staging-b7-cpu-crashed").mkdir(parents=True)
    (kind_root / "b7-cpu").mkdir()
    (kind_root / "b7-cpu" / "junk").write_text("left by a crash before the row was written")
    m = write_manifest(
        tmp_path / "m.json",
        {"llama-cpp": llama_lane(release(file_server, script_archive(file_server, "b7"), "b7"))},
    )
    row = install(store, data, m, "llama-cpp", platform=PLATFORM).row
    assert sorted(p.name for p in kind_root.iterdir()) == ["b7-cpu"]
    assert not (kind_root / "b7-cpu" / "junk").exists() and row.path.is_file()


def test_gate_model_is_the_smallest_loadable(tmp_path: Path) -> None:
    big, small, st = (tmp_path / n for n in ("big.gguf", "small.gguf", "m.safetensors"))
    big.write_bytes(b"G" * 100)
    small.write_bytes(b"G" * 10)
    st.write_bytes(b"S")
    rows = [model_row(big, "big"), model_row(small, "small"), model_row(st, "st", "safetensors-quantized")]
    assert gate_model("llama-cpp", rows) == small
    assert gate_model("sglang", rows) == st
    assert gate_model("mlx", rows) is None
    small.unlink()
    assert gate_model("mistralrs", rows) == big


def test_extras_unpack_beside_the_binary(
    tmp_path: Path, file_server: FileServer, store: Store, data: DataDir
) -> None:
    """A CUDA build ships its runtime libraries as a second archive; both land in the one tag dir."""
    main = script_archive(file_server, "b8")
    extra = make_archive(
        file_server.root / "cudart-llama-b8-bin-ubuntu-cuda-12.8-x64.tar.gz",
        "llama-b8",
        {"libcudart.so.12": b"\0"},
    )
    asset = {
        "platform": PLATFORM,
        "accel": "cuda",
        "url": file_server.url(main.name),
        "sha256": sha256_of(main),
        "extras": [{"url": file_server.url(extra.name), "sha256": sha256_of(extra)}],
    }
    m = write_manifest(tmp_path / "m.json", {"llama-cpp": llama_lane({"version": "b8", "assets": [asset]})})
    row = install(store, data, m, "llama-cpp", platform=PLATFORM, accel="cuda").row
    assert row.tag == "b8-cuda" and row.accel == "cuda"
    assert sorted(p.name for p in row.path.parent.iterdir()) == [
        "libcudart.so.12",
        "libfake.so",
        "llama-server",
    ]
