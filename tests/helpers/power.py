"""Fakes for the power tests: a powercap tree on disk and just enough of pynvml."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

from rtmatrix.metrics.power.rapl import POWERCAP_ENV


def put(path: Path, text: str) -> None:
    """Replace a file atomically, as sysfs does: a concurrent reader never sees it half-written."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def zone(root: Path, dirname: str, name: str, uj: int, max_uj: int | None = 10**9) -> Path:
    d = root / dirname
    d.mkdir(parents=True)
    put(d / "name", f"{name}\n")
    put(d / "energy_uj", f"{uj}\n")
    if max_uj is not None:
        put(d / "max_energy_range_uj", f"{max_uj}\n")
    return d


def make_powercap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A powercap tree as /sys/class/powercap lays it out (subzones listed flat as well)."""
    root = tmp_path / "powercap"
    root.mkdir()
    (root / "intel-rapl").mkdir()  # the control type: no counter
    zone(root, "intel-rapl:0", "package-0", 999_000_000)
    zone(root, "intel-rapl:0:0", "core", 5)
    zone(root, "intel-rapl:0:2", "dram", 0)
    zone(root, "intel-rapl-mmio:0", "package-0", 7)  # duplicate of the MSR package zone
    monkeypatch.setenv(POWERCAP_ENV, str(root))
    return root


class FakeNvml:
    """Just enough of pynvml for the NVML paths, with or without the energy counter."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy: bool = True, count: int = 2) -> None:
        self.energy, self.count, self.mj, self.inited = energy, count, 1000, 0

    def nvmlInit(self) -> None:
        self.inited += 1

    def nvmlShutdown(self) -> None:
        self.inited -= 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H200"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.1"

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if not self.energy:
            msg = "Not Supported"
            raise self.NVMLError(msg)
        return self.mj * (h + 1)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 150_000  # mW

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return type("Mem", (), {"total": 141 * 2**30})()


def fake_nvml(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> FakeNvml:
    nv = FakeNvml(**kw)
    monkeypatch.setitem(sys.modules, "pynvml", cast(ModuleType, nv))
    return nv
