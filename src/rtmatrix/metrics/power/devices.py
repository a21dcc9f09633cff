"""The devices a power source meters and the devices a cell ran on, and which covers which.

A device is written ``kind``, ``kind:index`` or ``kind:ref``: ``cpu`` (every CPU package of the
host, as RAPL meters them), ``gpu`` (any GPU), ``gpu:0`` (NVML's index) or ``gpu:CUDA0`` /
``gpu:GPU.0`` / ``gpu:CUDAExecutionProvider`` (the runtime's own name for the device, as a cell's
stack reports it), and, for meters only, ``system`` (the whole machine: a wall or USB meter),
which covers every device. A cell's stack may name other kinds (``npu``); only a ``system`` meter
covers those.

A runtime's name for a GPU is not NVML's index (CUDA orders devices its own way), so a cell GPU
named by the runtime is covered by every metered GPU of its vendor, where the name tells the
vendor (``CUDA``/``TensorRT``: NVIDIA; ``ROCm``/``MIGraphX``/``HIP``: AMD; OpenVINO's ``GPU.N``:
Intel; ``Metal``/``CoreML``: Apple), by every metered GPU where it does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

CPU_KIND = "cpu"
GPU_KIND = "gpu"
SYSTEM_KIND = "system"
# The kinds a meter may declare ([power].meter_devices); a cell's devices may be of any kind.
METER_KINDS = (SYSTEM_KIND, CPU_KIND, GPU_KIND)

_WORDS = {CPU_KIND: "CPU", GPU_KIND: "GPU", SYSTEM_KIND: "whole system", "npu": "NPU"}
_KIND = re.compile(r"[a-z][a-z0-9_]*")
# A runtime's device name -> the GPU's vendor (lower-cased name matched against each pattern).
_VENDORS = (
    ("nvidia", re.compile(r"cuda|tensorrt|nvidia")),
    ("amd", re.compile(r"rocm|migraphx|(?<![a-z])hip|amd")),
    ("intel", re.compile(r"^gpu(\.\d+)?$|level_zero|intel")),  # OpenVINO names its GPUs GPU.N
    ("apple", re.compile(r"metal|coreml|apple")),
)


class DeviceError(ValueError):
    """A device written in no form of :meth:`Device.parse`."""


def vendor_of(text: str | None) -> str | None:
    """The GPU vendor a runtime's device name implies (``CUDA0`` -> ``nvidia``), else None."""
    low = (text or "").lower()
    return next((v for v, pat in _VENDORS if pat.search(low)), None) if low else None


@dataclass(frozen=True, order=True)
class Device:
    """One device, or every device of a kind (``index`` and ``ref`` None). ``ref`` is the
    runtime's own name for it (``CUDA0``); ``name`` (``NVIDIA H200``) and ``vendor`` label it."""

    kind: str
    index: int | None = None
    ref: str | None = None
    name: str | None = field(default=None, compare=False)
    vendor: str | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, text: str, name: str | None = None, vendor: str | None = None) -> Device:
        """``"cpu"``, ``"gpu"``, ``"gpu:1"``, ``"gpu:CUDA0"``, ``"system"``; raises
        :class:`DeviceError`."""
        kind, sep, qual = str(text).strip().partition(":")
        kind, qual = kind.strip().lower(), qual.strip()
        if not _KIND.fullmatch(kind) or (sep and not qual):
            msg = (
                f'{text!r} is not a device: write a kind ("cpu", "gpu"), kind:index ("gpu:0") '
                'or kind:name ("gpu:CUDA0")'
            )
            raise DeviceError(msg)
        if kind == SYSTEM_KIND and qual:
            msg = f"{text!r}: the system is one device, without an index"
            raise DeviceError(msg)
        if qual.isdigit():
            return cls(kind, int(qual), None, name, vendor)
        return cls(kind, None, qual or None, name, vendor or vendor_of(qual))

    def __str__(self) -> str:
        if self.index is not None:
            return f"{self.kind}:{self.index}"
        return f"{self.kind}:{self.ref}" if self.ref else self.kind

    @property
    def label(self) -> str:
        """``gpu:0 NVIDIA H200``: the id and, where known, the device's own name."""
        return f"{self} {self.name}" if self.name else str(self)

    @property
    def identified(self) -> bool:
        """Whether it names one device by index (NVML's), not a kind or a runtime's name."""
        return self.index is not None

    def covers(self, other: Device) -> bool:
        """Whether a meter of this device meters (some of) ``other``'s energy: a system meter
        covers everything; otherwise the same kind, of the same vendor where both are known,
        the same index where both have one, the same runtime name where both have one."""
        if self.kind == SYSTEM_KIND:
            return True
        if self.kind != other.kind:
            return False
        if self.vendor and other.vendor and self.vendor != other.vendor:
            return False
        if self.index is not None and other.index is not None:
            return self.index == other.index
        if self.ref and other.ref:
            return self.ref.lower() == other.ref.lower()
        return True

    def overlaps(self, other: Device) -> bool:
        """Whether two meters of these devices would count some energy twice."""
        return self.covers(other) or other.covers(self)


CPU = Device(CPU_KIND)
GPU = Device(GPU_KIND)
SYSTEM = Device(SYSTEM_KIND)


def parse_devices(texts: Iterable[str]) -> tuple[Device, ...]:
    """Devices in the order given, each once; raises :class:`DeviceError`."""
    out: list[Device] = []
    for text in texts:
        dev = Device.parse(text)
        if dev not in out:
            out.append(dev)
    return tuple(out)


def covered(devices: Iterable[Device], by: Iterable[Device]) -> bool:
    """Whether every one of ``devices`` is covered by one of ``by``."""
    meters = list(by)
    return all(any(m.covers(d) for m in meters) for d in devices)


def where(devices: Iterable[Device]) -> str:
    """``the CPU``, ``the GPU (gpu:0 NVIDIA H200)``, ``the CPU and the GPU``: for reasons."""
    kinds: dict[str, list[Device]] = {}
    for dev in devices:
        kinds.setdefault(dev.kind, []).append(dev)
    parts = []
    for kind, devs in kinds.items():
        word = f"the {_WORDS.get(kind, kind)}"
        shown = [d.label for d in devs if d.index is not None or d.ref or d.name]
        parts.append(f"{word} ({', '.join(shown)})" if shown else word)
    if not parts:
        return "no device"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
