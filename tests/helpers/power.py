"""Fakes for the power tests: a powercap tree on disk, just enough of pynvml, and small energy
sources standing in for RAPL and NVML with the devices they meter."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

from rtmatrix.metrics.power import meter as power_meter
from rtmatrix.metrics.power.base import HARDWARE, EnergySource
from rtmatrix.metrics.power.devices import CPU, Device
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


def reading(phase: dict[str, Any], meter: str) -> dict[str, Any]:
    """One source's record of a phase (``meter.take()[phase]``), with the phase's seconds."""
    rec: dict[str, Any] = phase["meters"][meter]
    return rec | {"s": phase["s"], "cpu_s": phase["cpu_s"]}


def source_info(info: dict[str, Any], meter: str) -> dict[str, Any]:
    """One open source's entry of ``meter.info()``."""
    found: list[dict[str, Any]] = [m for m in info["meters"] if m["meter"] == meter]
    assert len(found) == 1, info
    return found[0]


H200 = Device("gpu", 0, name="NVIDIA H200", vendor="nvidia")


class FakeSource(EnergySource):
    """A hardware counter that advances ``step_j`` per read: each metered phase (two reads)
    shows ``step_j`` joules."""

    source = HARDWARE

    def __init__(self, name: str, devices: tuple[Device, ...], step_j: float) -> None:
        self.name, self.devices, self.step_j = name, devices, step_j
        self.reads = 0
        self.closed = False

    def read_j(self) -> float:
        self.reads += 1
        return (self.reads - 1) * self.step_j

    def close(self) -> None:
        self.closed = True


def fake_sources(
    monkeypatch: pytest.MonkeyPatch, rapl_j: float | None = None, nvml_j: float | None = None
) -> None:
    """Probes for this host: RAPL (the CPU) and NVML (one H200) only where given joules per
    phase; every other source absent, with the reason a bare host gives."""
    absent = {
        "rapl": "no /sys/class/powercap",
        "nvml": "pynvml (nvidia-ml-py) not installed",
        "external": "no external meter configured ([power].meter)",
        "modelled": "modelled source not enabled ([power].modelled = false)",
    }
    given = {"rapl": ((CPU,), rapl_j), "nvml": ((H200,), nvml_j)}
    for name, why in absent.items():
        devices, step = given.get(name, ((), None))

        def probe(
            cfg: Any, name: str = name, why: str = why, devs: Any = devices, step: Any = step
        ) -> EnergySource | str:
            return why if step is None else FakeSource(name, devs, step)

        monkeypatch.setitem(power_meter.PROBES, name, probe)
