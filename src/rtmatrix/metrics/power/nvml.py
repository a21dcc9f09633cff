"""NVIDIA GPUs through nvidia-ml-py (``pynvml``, imported lazily): the energy counter, else
sampled board power."""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from rtmatrix.metrics.power.base import HARDWARE, EnergySource, PowerError, SampledPower
from rtmatrix.metrics.power.devices import GPU_KIND, Device

NVML_RESOLUTION_J = 1e-3  # nvmlDeviceGetTotalEnergyConsumption counts millijoules


def _nvml() -> ModuleType | str:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return "pynvml (nvidia-ml-py) not installed"


def _text(val: Any) -> str:
    return val.decode() if isinstance(val, bytes) else str(val)


class _Nvml:
    """The NVML handles of the chosen devices; init/shutdown paired."""

    def __init__(self, nv: ModuleType, indices: list[int]) -> None:
        self.nv = nv
        self.indices = indices
        self.handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.names = [_text(nv.nvmlDeviceGetName(h)) for h in self.handles]
        try:
            self.driver: str | None = _text(nv.nvmlSystemGetDriverVersion())
        except Exception:
            self.driver = None
        self.devices = tuple(
            Device(GPU_KIND, i, None, name, "nvidia")
            for i, name in zip(indices, self.names, strict=True)
        )

    def describe(self) -> dict[str, Any]:
        return {"devices": self.indices, "device_names": self.names, "driver": self.driver}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()


class NvmlEnergy(EnergySource):
    name = "nvml"
    source = HARDWARE
    resolution_j = NVML_RESOLUTION_J

    def __init__(self, dev: _Nvml) -> None:
        self.dev = dev
        self.devices = dev.devices
        self._lock = threading.Lock()
        self._first = self._total_mj()

    def _total_mj(self) -> int:
        return sum(
            int(self.dev.nv.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.dev.handles
        )

    def read_j(self) -> float:
        with self._lock:
            try:
                return (self._total_mj() - self._first) * 1e-3
            except Exception as exc:
                msg = f"NVML energy read failed: {exc}"
                raise PowerError(msg) from exc

    def describe(self) -> dict[str, Any]:
        return self.dev.describe() | {"method": "nvmlDeviceGetTotalEnergyConsumption (mJ)"}

    def close(self) -> None:
        self.dev.close()


class NvmlPower(SampledPower):
    name = "nvml"
    source = HARDWARE

    def __init__(self, dev: _Nvml, interval_s: float) -> None:
        self.dev = dev
        self.devices = dev.devices
        super().__init__(interval_s)

    def sample_w(self) -> float:
        return sum(int(self.dev.nv.nvmlDeviceGetPowerUsage(h)) for h in self.dev.handles) * 1e-3

    def describe(self) -> dict[str, Any]:
        return self.dev.describe() | {
            "method": "nvmlDeviceGetPowerUsage (mW) sampled and integrated; the energy counter "
            "is not supported on this device",
            "samples": self._n,
        }

    def close(self) -> None:
        self.dev.close()


def probe_nvml(cfg: Mapping[str, Any]) -> EnergySource | str:
    nv = _nvml()
    if isinstance(nv, str):
        return nv
    try:
        nv.nvmlInit()
    except Exception as exc:
        return f"NVML did not initialise ({exc})"
    try:
        count = int(nv.nvmlDeviceGetCount())
        if count == 0:
            nv.nvmlShutdown()
            return "no NVML device"
        indices = list(cfg["nvml_devices"]) or list(range(count))
        bad = [i for i in indices if i >= count]
        if bad:
            nv.nvmlShutdown()
            return f"nvml_devices {bad} out of range: {count} NVML device(s)"
        dev = _Nvml(nv, indices)
    except Exception as exc:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
        return f"NVML device query failed ({exc})"
    try:
        return NvmlEnergy(dev)
    except Exception:  # NotSupported before Volta: fall back to sampled power
        pass
    try:
        return NvmlPower(dev, cfg["sample_interval_s"])
    except Exception as exc:
        dev.close()
        return f"NVML device(s) {dev.names} report neither energy nor power ({exc})"
