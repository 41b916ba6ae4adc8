"""What this machine has to run engines on: NVIDIA GPUs through NVML (``pynvml``), the CPU and RAM through psutil.

It only reads, and it never fails: no ``pynvml`` module, no NVIDIA driver, or an NVML error all mean "no GPUs",
with the reason kept in ``Hardware.gpu_note`` for ``blazar doctor``. It must not decide anything from what it
finds; fitting a launch profile to these numbers is ``fit.py``'s job.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
from dataclasses import asdict, dataclass
from typing import Any

import psutil


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as NVML reports it, or a device an RPC worker lends (``remote``); memory in bytes."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    remote: bool = False


@dataclass(frozen=True, slots=True)
class Hardware:
    """A snapshot of the machine; memory in bytes. ``gpus`` is empty when NVML finds none (see ``gpu_note``)."""

    gpus: tuple[Gpu, ...]
    driver: str | None
    gpu_note: str
    cpu_model: str
    cpu_cores: int
    cpu_threads: int
    ram_total: int
    ram_available: int

    @property
    def vram_free(self) -> int:
        return sum(g.free_bytes for g in self.gpus)

    @property
    def vram_total(self) -> int:
        return sum(g.total_bytes for g in self.gpus)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["gpus"] = [asdict(g) for g in self.gpus]
        return out


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def probe_gpus() -> tuple[tuple[Gpu, ...], str | None, str]:
    """``(gpus, driver version, note)``; the note says why the tuple is empty, or is ``""``."""
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return (), None, "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError subclasses: no library, no driver, no permission
        return (), None, f"NVML unavailable: {e}"
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(Gpu(i, _text(nvml.nvmlDeviceGetName(handle)), int(mem.total), int(mem.free)))
        return tuple(gpus), driver, "" if gpus else "NVML found no GPUs"
    except Exception as e:
        return (), None, f"NVML error: {e}"
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware", "Processor") and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


_CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def cgroup_memory() -> tuple[int, int] | None:
    """``(limit, usage)`` of this process's memory cgroup (v2, then v1) when a real limit is set."""
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            with open(limit_file, encoding="ascii") as f:
                raw = f.read().strip()
            with open(usage_file, encoding="ascii") as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if raw == "max" or not raw.isdigit() or int(raw) >= 1 << 60:
            return None
        return int(raw), usage
    return None


def probe() -> Hardware:
    """The machine now: GPUs (when NVML answers), CPU, and RAM total/available (within a container's memory
    limit when one is set)."""
    gpus, driver, note = probe_gpus()
    vm = psutil.virtual_memory()
    total, available = int(vm.total), int(vm.available)
    limit = cgroup_memory()
    if limit is not None:
        total = min(total, limit[0])
        available = max(0, min(available, limit[0] - limit[1]))
    threads = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    cores = psutil.cpu_count(logical=False) or threads
    return Hardware(
        gpus=gpus,
        driver=driver,
        gpu_note=note,
        cpu_model=cpu_model(),
        cpu_cores=int(cores),
        cpu_threads=int(threads),
        ram_total=total,
        ram_available=available,
    )


def human_bytes(n: float) -> str:
    """``1536 MiB`` -> ``"1.50 GiB"``: binary units, two decimals past KiB."""
    for unit, div in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{int(n)} B"
