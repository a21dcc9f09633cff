"""What every energy source is: a cumulative joule reading, or power samples integrated."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from typing import Any

from rtmatrix.metrics.power.devices import Device
from rtmatrix.outcome import Source

# The kernel's RAPL counter and the NVIDIA driver's counter are hardware energy counters reported
# through the OS / driver; an external meter is the user's own instrument.
HARDWARE = Source.HARDWARE_COUNTER
EXTERNAL = Source.EXTERNAL_METER


class PowerError(RuntimeError):
    """A meter that could not be read."""


class EnergySource(ABC):
    """A cumulative energy reading in joules since the source was opened."""

    name: str = ""  # "rapl", "nvml", "external", "modelled"
    source: Source = Source.UNAVAILABLE  # provenance label of the values
    # what it meters: a cell's energy comes only from sources covering a device the cell ran on
    devices: tuple[Device, ...] = ()
    resolution_j: float | None = None  # smallest energy step it can show; None = not known
    update_interval_s: float | None = None  # how often the reading changes; None = not known
    sampled: bool = False  # energy integrated from power samples (not a counter)

    @abstractmethod
    def read_j(self) -> float:
        """Cumulative joules since open; monotonic non-decreasing."""

    def describe(self) -> dict[str, Any]:
        """JSON-able inputs recorded with every value (zones, devices, command, model inputs)."""
        return {}

    @property
    def poll_interval_s(self) -> float | None:
        """If set, :meth:`poll` is called this often in the background while the meter is open."""
        return None

    def poll(self) -> None:
        self.read_j()

    def sample_count(self) -> int | None:
        return None

    def close(self) -> None:  # noqa: B027 - most sources hold nothing
        pass


class SampledPower(EnergySource):
    """Energy integrated (trapezoids) from power samples taken in the background and at every
    read; ``update_interval_s`` is the sampling interval."""

    sampled = True

    def __init__(self, interval_s: float) -> None:
        self.update_interval_s = interval_s
        self._lock = threading.Lock()
        self._acc = 0.0
        self._n = 0
        self._last: tuple[float, float] | None = None
        self._sample()

    @abstractmethod
    def sample_w(self) -> float:
        """Instantaneous (or the device's short-average) power in watts."""

    def _sample(self) -> None:
        with self._lock:
            w = self.sample_w()
            t = time.perf_counter()
            if self._last is not None:
                t0, w0 = self._last
                self._acc += (w0 + w) / 2 * (t - t0)
            self._last = (t, w)
            self._n += 1

    def read_j(self) -> float:
        self._sample()
        return self._acc

    def poll(self) -> None:
        self._sample()

    @property
    def poll_interval_s(self) -> float | None:
        return self.update_interval_s

    def sample_count(self) -> int | None:
        return self._n
