"""Energy and power per cell: measured where the hardware allows, modelled only when the matrix
says so, otherwise ``unavailable`` with a reason naming everything that was looked for.

Energy sources, tried in the order of ``[power].sources``; the first usable one meters the cell:

``rapl``
    Linux powercap: ``energy_uj`` of the ``package-N`` (and ``dram``) zones under
    ``/sys/class/powercap`` (``$RTMATRIX_POWERCAP_ROOT`` overrides the root, for tests), summed,
    with wrap-around at ``max_energy_range_uj`` (Intel and AMD both appear as ``intel-rapl``).
``nvml``
    NVIDIA GPUs through nvidia-ml-py (module ``pynvml``, imported lazily): the driver's total
    energy counter (Volta and newer), else board power sampled every ``sample_interval_s`` and
    integrated (trapezoids).
``external``
    ``[power].meter``, a command for lab rigs and USB meters. ``meter_unit = "J"``: it prints
    cumulative joules; ``"W"``: it prints watts, sampled and integrated. ``meter_mode = "poll"``:
    it is run once per reading and its last numeric line is the reading; ``"stream"``: it runs for
    the whole cell and prints one reading per line.
``modelled``
    Only with ``[power].modelled = true`` and ``tdp_w``. Formula (CPU only, accelerators are not
    modelled): ``E = tdp_w × process CPU seconds / logical CPUs``, i.e. TDP × utilisation × wall
    time, where utilisation = CPU seconds / (wall seconds × logical CPUs). Labelled ``modelled``,
    with ``tdp_w``, the CPU count and the CPU seconds of every phase in the metric.

The worker opens a :class:`PhaseMeter` with :func:`open_meter`, wraps the prefill and the decode of
each counted repetition in ``meter.phase(...)``, stores ``meter.take()`` in the repetition and
``meter.info()`` in its result; the parent turns those into metrics with :func:`power_metrics`
(``energy_prefill_j``, ``energy_decode_j``, ``energy_j``, ``power_w``, ``energy_per_token_j``).
A phase whose duration is under ``min_steps`` counter updates, or whose energy is under
``min_steps`` counter resolution steps, is kept but flagged ``resolved: false``.
"""

from __future__ import annotations

from rtmatrix.metrics.power.config import PowerConfigError, normalize_config
from rtmatrix.metrics.power.meter import NULL_METER, PhaseMeter, open_meter
from rtmatrix.metrics.power.metrics import power_metrics

__all__ = [
    "NULL_METER",
    "PhaseMeter",
    "PowerConfigError",
    "normalize_config",
    "open_meter",
    "power_metrics",
]
