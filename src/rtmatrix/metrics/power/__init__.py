"""Energy and power per cell: measured where the hardware allows, modelled only when the matrix
says so, otherwise ``unavailable`` with a reason naming everything that was looked for.

Energy sources, tried in the order of ``[power].sources``; every usable one is opened, except one
whose devices an earlier open source already meters (the earlier one wins them). Each source
declares the devices it meters (:class:`Device`: ``cpu``, ``gpu:N``, ``system``), recorded in
``meter.info()``. A cell's energy comes only from the sources covering a device the cell ran on
(:func:`attribute`), summed, never counting a device twice: a CPU cell takes RAPL (or an
external meter declared as the CPU's or the whole system's), not a GPU board's NVML energy; a
cell that placed work on a GPU takes NVML's beside the CPU's. With no such source every energy
value is ``unavailable`` with the reason ("nvml: NVML meters the GPU (gpu:0 NVIDIA H200) but this
cell ran on the CPU"); the metric detail holds ``meter_devices`` and ``cell_devices`` side by
side.

``rapl``
    Linux powercap: ``energy_uj`` of the ``package-N`` (and ``dram``) zones under
    ``/sys/class/powercap`` (``$RTMATRIX_POWERCAP_ROOT`` overrides the root, for tests), summed,
    with wrap-around at ``max_energy_range_uj`` (Intel and AMD both appear as ``intel-rapl``).
``nvml``
    NVIDIA GPUs through nvidia-ml-py (module ``pynvml``, imported lazily): the driver's total
    energy counter (Volta and newer), else board power sampled every ``sample_interval_s`` and
    integrated (trapezoids).
``external``
    ``[power].meter``, a command for lab rigs and USB meters, metering what
    ``[power].meter_devices`` says (default ``["system"]``, the whole machine; or ``"cpu"``,
    ``"gpu"``, ``"gpu:N"``). ``meter_unit = "J"``: it prints cumulative joules; ``"W"``: it
    prints watts, sampled and integrated. ``meter_mode = "poll"``: it is run once per reading and
    its last numeric line is the reading; ``"stream"``: it runs for the whole cell and prints one
    reading per line.
``modelled``
    Only with ``[power].modelled = true`` and ``tdp_w``. Formula (CPU only, accelerators are not
    modelled): ``E = tdp_w × process CPU seconds / logical CPUs``, i.e. TDP × utilisation × wall
    time, where utilisation = CPU seconds / (wall seconds × logical CPUs). Labelled ``modelled``,
    with ``tdp_w``, the CPU count and the CPU seconds of every phase in the metric.

The worker opens a :class:`PhaseMeter` with :func:`open_meter`, wraps the prefill and the decode of
each counted repetition in ``meter.phase(...)``, stores ``meter.take()`` in the repetition and
``meter.info()`` in its result; the parent turns those into metrics with :func:`power_metrics`,
given the devices the cell ran on (``energy_prefill_j``, ``energy_decode_j``, ``energy_j``,
``power_w``, ``energy_per_token_j``).
A phase whose duration is under ``min_steps`` counter updates, or whose energy is under
``min_steps`` counter resolution steps, is kept but flagged ``resolved: false``.
"""

from __future__ import annotations

from rtmatrix.metrics.power.attribute import Attribution, attribute
from rtmatrix.metrics.power.config import PowerConfigError, normalize_config
from rtmatrix.metrics.power.devices import Device, DeviceError
from rtmatrix.metrics.power.meter import NULL_METER, PhaseMeter, open_meter
from rtmatrix.metrics.power.metrics import power_metrics

__all__ = [
    "NULL_METER",
    "Attribution",
    "Device",
    "DeviceError",
    "PhaseMeter",
    "PowerConfigError",
    "attribute",
    "normalize_config",
    "open_meter",
    "power_metrics",
]
