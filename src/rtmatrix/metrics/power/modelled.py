"""The modelled source: CPU TDP x utilisation, only when the matrix enables it."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from rtmatrix.metrics.power.base import EnergySource
from rtmatrix.metrics.power.devices import CPU
from rtmatrix.outcome import Source

MODEL_FORMULA = "tdp_w * process_cpu_s / logical_cpus (= TDP x utilisation x wall time; CPU only)"


class ModelledSource(EnergySource):
    """CPU TDP × utilisation, utilisation from this process's CPU time (all its threads)."""

    name = "modelled"
    source = Source.MODELLED
    devices = (CPU,)  # the formula models the CPU only

    def __init__(self, tdp_w: float, logical_cpus: int) -> None:
        self.tdp_w = tdp_w
        self.logical_cpus = logical_cpus
        clock = time.get_clock_info("process_time").resolution
        self.resolution_j = tdp_w * clock / logical_cpus
        self.update_interval_s = clock
        self._t0 = time.process_time()

    def read_j(self) -> float:
        return self.tdp_w * (time.process_time() - self._t0) / self.logical_cpus

    def describe(self) -> dict[str, Any]:
        return {
            "formula": MODEL_FORMULA,
            "tdp_w": self.tdp_w,
            "logical_cpus": self.logical_cpus,
            "cpu_time": "time.process_time() of the worker (all threads)",
        }


def probe_modelled(cfg: Mapping[str, Any]) -> EnergySource | str:
    if not cfg["modelled"]:
        return "modelled source not enabled ([power].modelled = false)"
    return ModelledSource(float(cfg["tdp_w"]), os.cpu_count() or 1)
