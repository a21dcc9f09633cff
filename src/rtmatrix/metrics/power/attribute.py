"""Which of a meter's sources a cell's energy comes from: those covering a device the cell ran on.

A GPU board's energy is not a CPU computation's, and a CPU package's is not all of a GPU cell's:
:func:`attribute` keeps, in ``[power].sources`` order, each open source that covers a device the
cell ran on, except one that would count a device again (a whole-system meter after RAPL), and
says why every other source was left out. With none left, the cell's energy is ``unavailable``
with that reason, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rtmatrix.metrics.power.devices import CPU, Device, DeviceError, where

# How a reason names each source.
SOURCE_WORDS = {
    "rapl": "RAPL",
    "nvml": "NVML",
    "external": "the external meter",
    "modelled": "the modelled source",
}
# Why a cell's devices are taken as the CPU when its stack did not name them.
ASSUMED_CPU = (
    "not reported by the cell's stack: taken as CPU-only (every rtmatrix row runs on the CPU)"
)


@dataclass(frozen=True)
class Attribution:
    """The sources of a meter that meter one cell, and why the others do not."""

    cell_devices: tuple[Device, ...]
    assumed: str | None  # why cell_devices were assumed; None: the cell's stack named them
    counted: tuple[str, ...]  # source names whose energy is the cell's, in sources order
    not_counted: dict[str, str] = field(default_factory=dict)  # open source -> why not
    meter_devices: dict[str, tuple[Device, ...]] = field(default_factory=dict)  # open sources
    unmetered: tuple[Device, ...] = ()  # cell devices no counted source covers
    tried: dict[str, str] = field(default_factory=dict)  # the meter's look at every source
    # cell devices not named by index (gpu:CUDA0) -> the metered devices counted for them
    matched: dict[str, list[str]] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        """Why no source meters this cell (None when one does), naming every source in order."""
        if self.counted:
            return None
        parts = [
            f"{name}: {self.not_counted.get(name, status)}"
            for name, status in self.tried.items()
            if status != "selected" or name in self.not_counted
        ]
        parts += [f"{n}: {why}" for n, why in self.not_counted.items() if n not in self.tried]
        return "no energy source: " + "; ".join(parts)

    def detail(self) -> dict[str, Any]:
        """The meter's devices and the cell's, side by side, for every energy metric."""
        out: dict[str, Any] = {
            "cell_devices": [str(d) for d in self.cell_devices],
            "meter_devices": {
                name: [d.label for d in devs] for name, devs in self.meter_devices.items()
            },
            "counted_meters": list(self.counted),
        }
        if self.assumed:
            out["cell_devices_assumed"] = self.assumed
        if self.not_counted:
            out["not_counted"] = dict(self.not_counted)
        if self.matched:
            out["device_match"] = {
                cell: f"not named by index: counted as {', '.join(labels)} (every metered "
                "device of its kind and vendor)"
                for cell, labels in self.matched.items()
            }
        if self.unmetered and self.counted:
            out["unmetered_devices"] = [str(d) for d in self.unmetered]
            out["partial"] = (
                f"only {where(self._counted_devices())} metered; no open source meters "
                f"{where(self.unmetered)}, which this cell also ran on"
            )
        return out

    def _counted_devices(self) -> list[Device]:
        return [d for name in self.counted for d in self.meter_devices.get(name, ())]


def _meter_devices(meter: Mapping[str, Any]) -> tuple[Device, ...]:
    names = meter.get("device_names") or {}
    vendors = meter.get("device_vendors") or {}
    return tuple(
        Device.parse(str(d), names.get(str(d)), vendors.get(str(d)))
        for d in meter.get("devices") or []
    )


def _cell(cell_devices: Sequence[str] | None) -> tuple[tuple[Device, ...], str | None]:
    if cell_devices is None:
        return (CPU,), ASSUMED_CPU
    if isinstance(cell_devices, str):
        msg = f"cell_devices must be a sequence of devices, not the string {cell_devices!r}"
        raise TypeError(msg)
    devs: list[Device] = []
    for text in cell_devices:
        dev = Device.parse(str(text))
        if dev not in devs:
            devs.append(dev)
    if not devs:
        return (CPU,), "the cell's stack named no device: " + ASSUMED_CPU.split(": ", 1)[1]
    return tuple(devs), None


def attribute(info: Mapping[str, Any], cell_devices: Sequence[str] | None) -> Attribution:
    """The sources of ``info`` (:meth:`PhaseMeter.info`) that meter a cell which ran on
    ``cell_devices`` (``("cpu",)``, ``("cpu", "gpu")``, ``("cpu", "gpu:0")``; None: not known,
    taken as CPU-only and said so). Pure: reads nothing but its arguments. Raises
    :class:`DeviceError` for a device written in no known form."""
    cell, assumed = _cell(cell_devices)
    ran_on = where(cell) + (" (assumed: the cell did not report its devices)" if assumed else "")
    counted: list[str] = []
    not_counted: dict[str, str] = {}
    meter_devices: dict[str, tuple[Device, ...]] = {}
    for meter in info.get("meters") or []:
        name = str(meter["meter"])
        devs = _meter_devices(meter)
        meter_devices[name] = devs
        word = SOURCE_WORDS.get(name, name)
        if not devs:
            not_counted[name] = f"{word} declares no device it meters"
            continue
        if not any(m.covers(c) for m in devs for c in cell):
            not_counted[name] = f"{word} meters {where(devs)} but this cell ran on {ran_on}"
            continue
        clash = next(
            (k for k in counted if any(a.overlaps(b) for a in devs for b in meter_devices[k])),
            None,
        )
        if clash is not None:
            not_counted[name] = (
                f"{word} meters {where(devs)}, which overlaps {where(meter_devices[clash])} "
                f"metered by {clash} (earlier in [power].sources; counted once)"
            )
            continue
        counted.append(name)
    unmetered = tuple(
        c for c in cell if not any(m.covers(c) for k in counted for m in meter_devices[k])
    )
    matched = {
        str(c): labels
        for c in cell
        if c.index is None
        and (
            labels := [
                m.label
                for k in counted
                for m in meter_devices[k]
                if m.kind == c.kind and m.identified and m.covers(c)
            ]
        )
    }
    return Attribution(
        cell_devices=cell,
        assumed=assumed,
        counted=tuple(counted),
        not_counted=not_counted,
        meter_devices=meter_devices,
        unmetered=unmetered,
        tried=dict(info.get("tried") or {}),
        matched=matched,
    )


__all__ = ["ASSUMED_CPU", "Attribution", "DeviceError", "attribute"]
