"""The phase meter: every usable source of ``[power].sources`` that meters a device no earlier
source meters, each read at the edges of named phases."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rtmatrix.metrics.power.base import EnergySource
from rtmatrix.metrics.power.config import normalize_config
from rtmatrix.metrics.power.devices import CPU, GPU, Device, covered, parse_devices, where
from rtmatrix.metrics.power.external import probe_external
from rtmatrix.metrics.power.metrics import power_metrics
from rtmatrix.metrics.power.modelled import probe_modelled
from rtmatrix.metrics.power.nvml import probe_nvml
from rtmatrix.metrics.power.rapl import RaplSource
from rtmatrix.outcome import Metric

# One probe per name of config.SOURCE_NAMES: a source, or why it cannot meter this cell.
PROBES: dict[str, Callable[[Mapping[str, Any]], EnergySource | str]] = {
    "rapl": RaplSource.probe,
    "nvml": probe_nvml,
    "external": probe_external,
    "modelled": probe_modelled,
}


def _nvml_devices(cfg: Mapping[str, Any]) -> tuple[Device, ...]:
    return tuple(Device(GPU.kind, i, vendor="nvidia") for i in cfg["nvml_devices"]) or (
        Device(GPU.kind, vendor="nvidia"),
    )


# What each source would meter, known before it is probed (NVML's indices and names come after).
DECLARED: dict[str, Callable[[Mapping[str, Any]], tuple[Device, ...]]] = {
    "rapl": lambda cfg: (CPU,),
    "nvml": _nvml_devices,
    "external": lambda cfg: parse_devices(cfg["meter_devices"]),
    "modelled": lambda cfg: (CPU,),
}


class PhaseMeter:
    """Energy of named phases (``with meter.phase("prefill"): ...``) from every open source,
    kept per source: which of them a cell's energy comes from is decided later, from the devices
    the cell ran on (:func:`rtmatrix.metrics.power.attribute`)."""

    def __init__(
        self,
        sources: EnergySource | Sequence[EnergySource] | None,
        tried: dict[str, str],
        cfg: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(sources, EnergySource):
            sources = [sources]
        self.srcs: list[EnergySource] = list(sources or [])
        self.tried = tried
        self.cfg = normalize_config(cfg)
        self.min_steps = int(self.cfg["min_steps"])
        self._open: dict[str, dict[str, Any]] = {}
        self._reps: list[dict[str, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._poll_errors: dict[str, int] = {}
        self._poll_error: dict[str, str] = {}
        self._threads: list[threading.Thread] = []
        self._thread_error: str | None = None
        for src in self.srcs:
            interval = src.poll_interval_s
            if not interval:
                continue
            thread = threading.Thread(
                target=self._poll, args=(src, interval), name="rtmatrix-power", daemon=True
            )
            try:  # may fail under a tight address-space cap: then reads at phase edges only
                thread.start()
                self._threads.append(thread)
            except RuntimeError as exc:
                self._thread_error = f"no background polling ({exc}): phase edges only"

    @property
    def src(self) -> EnergySource | None:
        """The first open source (in ``[power].sources`` order), if any."""
        return self.srcs[0] if self.srcs else None

    @property
    def available(self) -> bool:
        return bool(self.srcs)

    @property
    def reason(self) -> str | None:
        if self.srcs:
            return None
        return "no energy source: " + "; ".join(f"{k}: {v}" for k, v in self.tried.items())

    def _poll(self, src: EnergySource, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                src.poll()
            except Exception as exc:  # counted in info(); a broken source fails the edge reads
                self._poll_errors[src.name] = self._poll_errors.get(src.name, 0) + 1
                self._poll_error[src.name] = str(exc)

    def _read(self) -> tuple[float, list[tuple[float | None, str | None]]]:
        """(time at the middle of the reads, each source's (joules, error))."""
        a = time.perf_counter()
        out: list[tuple[float | None, str | None]] = []
        for src in self.srcs:
            try:
                out.append((src.read_j(), None))
            except Exception as exc:
                out.append((None, str(exc) or type(exc).__name__))
        return (a + time.perf_counter()) / 2, out

    def resolved(self, src: EnergySource, joules: float, seconds: float) -> bool:
        """False when the phase is under ``min_steps`` of ``src``'s updates or resolution steps."""
        if src.update_interval_s and seconds < self.min_steps * src.update_interval_s:
            return False
        return not (src.resolution_j and joules < self.min_steps * src.resolution_j)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Meter the enclosed block; repeated names within one repetition are summed. The
        record: ``{"s", "cpu_s", "meters": {source name: {"j", "resolved", ...}}}``."""
        if not self.srcs:
            yield
            return
        c0 = time.process_time()
        n0 = [s.sample_count() for s in self.srcs]
        t0, r0 = self._read()
        try:
            yield
        finally:
            t1, r1 = self._read()
            c1 = time.process_time()
            n1 = [s.sample_count() for s in self.srcs]
            rec = self._open.setdefault(
                name, {"s": 0.0, "cpu_s": 0.0, "meters": {s.name: {"j": 0.0} for s in self.srcs}}
            )
            rec["s"] += t1 - t0
            rec["cpu_s"] += c1 - c0
            for i, src in enumerate(self.srcs):
                m = rec["meters"][src.name]
                (j0, err0), (j1, err1) = r0[i], r1[i]
                a, b = n0[i], n1[i]
                if a is not None and b is not None:
                    m["samples"] = m.get("samples", 0) + b - a
                err = err0 or err1
                if err or j0 is None or j1 is None:
                    m["error"] = err or "no reading"
                    m["j"] = None
                elif m["j"] is not None:
                    m["j"] += j1 - j0
                if m["j"] is not None:
                    m["resolved"] = self.resolved(src, m["j"], rec["s"])

    def take(self) -> dict[str, dict[str, Any]]:
        """The phases recorded since the last take: one repetition's ``energy`` entry."""
        rep, self._open = self._open, {}
        if rep:
            self._reps.append(rep)
        return rep

    def _source_info(self, src: EnergySource) -> dict[str, Any]:
        names = {str(d): d.name for d in src.devices if d.name}
        vendors = {str(d): d.vendor for d in src.devices if d.vendor}
        return (
            {
                "meter": src.name,
                "source": str(src.source),
                "devices": [str(d) for d in src.devices],
            }
            | ({"device_names": names} if names else {})
            | ({"device_vendors": vendors} if vendors else {})
            | {
                "resolution_j": src.resolution_j,
                "update_interval_s": src.update_interval_s,
                "sampled": src.sampled,
                "inputs": src.describe(),
            }
            | (
                {
                    "poll_errors": self._poll_errors[src.name],
                    "last_poll_error": self._poll_error.get(src.name),
                }
                if self._poll_errors.get(src.name)
                else {}
            )
        )

    def info(self) -> dict[str, Any]:
        """JSON-able description of the meter, stored once per cell in the worker's result:
        ``meters`` lists each open source with the devices it meters."""
        if not self.srcs:
            return {"meter": None, "meters": [], "reason": self.reason, "tried": self.tried}
        return {
            "meter": "+".join(s.name for s in self.srcs),
            "meters": [self._source_info(s) for s in self.srcs],
            "devices": [str(d) for s in self.srcs for d in s.devices],
            "min_steps": self.min_steps,
            "tried": self.tried,
        } | ({"poll_thread": self._thread_error} if self._thread_error else {})

    def metrics(
        self, n_generated_tokens: int, cell_devices: Sequence[str] | None = None
    ) -> dict[str, Metric]:
        """The energy metrics of every repetition taken (plus any phases not yet taken), from the
        sources covering ``cell_devices`` (None: not known, taken as CPU-only)."""
        reps = [*self._reps, *([self._open] if self._open else [])]
        return power_metrics(
            self.info(),
            [{"energy": e, "n_generated": n_generated_tokens} for e in reps],
            cell_devices,
        )

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        for src in self.srcs:
            with contextlib.suppress(Exception):  # one source failing to close spares the rest
                src.close()

    def __enter__(self) -> PhaseMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_meter(config: Mapping[str, Any] | None = None) -> PhaseMeter:
    """Every usable source of ``config["sources"]``, in that order, except one whose devices an
    earlier open source already meters (not opened: the earlier one wins them); or an
    unavailable meter whose reason names every source looked for and why it was not used."""
    cfg = normalize_config(config)
    tried: dict[str, str] = {}
    srcs: list[EnergySource] = []
    for name in cfg["sources"]:
        declared = DECLARED[name](cfg)
        owner = next((s for s in srcs if covered(declared, s.devices)), None)
        if owner is not None:
            tried[name] = f"not needed: {owner.name} already meters {where(declared)}"
            continue
        try:
            got = PROBES[name](cfg)
        except Exception as exc:  # a broken probe makes that source unusable, not the cell
            got = f"probe failed: {type(exc).__name__}: {exc}"
        if isinstance(got, str):
            tried[name] = got
            continue
        tried[name] = "selected"
        srcs.append(got)
    return PhaseMeter(srcs, tried, cfg)


NULL_METER = PhaseMeter(None, {"none": "not metered"})  # for warm-up repetitions
