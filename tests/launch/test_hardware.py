"""The hardware probe: real CPU/RAM numbers here, and GPUs through stand-in NVML modules (this machine has none),
including every way NVML can be missing or broken."""

from __future__ import annotations

import importlib
import types
from pathlib import Path
from typing import Any

import pytest

from blazar.launch import hardware
from blazar.launch.hardware import Gpu, Hardware, human_bytes


def test_probe_reports_this_machine() -> None:
    hw = hardware.probe()
    assert hw.cpu_threads >= hw.cpu_cores >= 1
    assert 0 < hw.ram_available <= hw.ram_total
    assert hw.cpu_model
    if not hw.gpus:
        assert hw.gpu_note and hw.vram_free == 0
    data = hw.to_json()
    assert data["ram_total"] == hw.ram_total and isinstance(data["gpus"], list)


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType | None) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> Any:
        if name == "pynvml":
            if module is None:
                raise ImportError("No module named 'pynvml'")
            return module
        return real(name, package)

    monkeypatch.setattr(hardware.importlib, "import_module", import_module)


def test_no_pynvml_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, None)
    gpus, driver, note = hardware.probe_gpus()
    assert (gpus, driver) == ((), None)
    assert "nvidia-ml-py" in note


class NVMLError(Exception):
    pass


def nvml_module(*, init_error: str | None = None, gpus: tuple[tuple[str, int, int], ...] = ()) -> Any:
    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if init_error:
            raise NVMLError(init_error)

    m: Any = types.ModuleType("pynvml")
    m.calls = calls
    m.nvmlInit = init
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: gpus[h][0]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=gpus[h][1], free=gpus[h][2])
    return m


def test_nvml_without_a_driver_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, nvml_module(init_error="Driver Not Loaded"))
    gpus, _driver, note = hardware.probe_gpus()
    assert gpus == () and note == "NVML unavailable: Driver Not Loaded"


def test_gpus_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    m = nvml_module(gpus=(("NVIDIA H200", 141 << 30, 139 << 30), ("NVIDIA L4", 24 << 30, 20 << 30)))
    _fake_nvml(monkeypatch, m)
    hw = hardware.probe()
    assert hw.gpus == (
        Gpu(0, "NVIDIA H200", 141 << 30, 139 << 30),
        Gpu(1, "NVIDIA L4", 24 << 30, 20 << 30),
    )
    assert hw.driver == "550.54.15" and hw.gpu_note == ""
    assert hw.vram_free == 159 << 30 and hw.vram_total == 165 << 30
    assert m.calls == ["init", "shutdown"]


def test_nvml_with_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, nvml_module())
    assert hardware.probe_gpus() == ((), "550.54.15", "NVML found no GPUs")


def test_container_memory_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "max").write_text("1073741824\n")
    (tmp_path / "current").write_text("268435456\n")
    monkeypatch.setattr(hardware, "_CGROUP_FILES", ((str(tmp_path / "max"), str(tmp_path / "current")),))
    assert hardware.cgroup_memory() == (1 << 30, 1 << 28)
    hw = hardware.probe()
    assert hw.ram_total <= 1 << 30 and hw.ram_available <= 3 << 28
    (tmp_path / "max").write_text("max\n")
    assert hardware.cgroup_memory() is None


def test_human_bytes() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(90 << 20) == "90.00 MiB"
    assert human_bytes(1536 << 20) == "1.50 GiB"
    assert isinstance(Hardware, type)
