"""The phase meter: the first usable source of ``[power].sources``, metering named phases."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rtmatrix.metrics.power.base import EnergySource
from rtmatrix.metrics.power.config import normalize_config
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


class PhaseMeter:
    """Energy of named phases (``with meter.phase("prefill"): ...``) from one source."""

    def __init__(
        self,
        source: EnergySource | None,
        tried: dict[str, str],
        cfg: Mapping[str, Any] | None = None,
    ) -> None:
        self.src = source
        self.tried = tried
        self.cfg = normalize_config(cfg)
        self.min_steps = int(self.cfg["min_steps"])
        self._open: dict[str, dict[str, Any]] = {}
        self._reps: list[dict[str, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._poll_errors = 0
        self._poll_error: str | None = None
        self._thread: threading.Thread | None = None
        self._thread_error: str | None = None
        interval = source.poll_interval_s if source else None
        if interval:
            thread = threading.Thread(
                target=self._poll, args=(interval,), name="rtmatrix-power", daemon=True
            )
            try:  # may fail under a tight address-space cap: then reads at phase edges only
                thread.start()
                self._thread = thread
            except RuntimeError as exc:
                self._thread_error = f"no background polling ({exc}): phase edges only"

    @property
    def available(self) -> bool:
        return self.src is not None

    @property
    def reason(self) -> str | None:
        if self.src is not None:
            return None
        return "no energy source: " + "; ".join(f"{k}: {v}" for k, v in self.tried.items())

    def _poll(self, interval: float) -> None:
        assert self.src is not None
        while not self._stop.wait(interval):
            try:
                self.src.poll()
            except Exception as exc:  # counted in info(); a broken source fails the edge reads
                self._poll_errors += 1
                self._poll_error = str(exc)

    def _read(self) -> tuple[float, float | None, str | None]:
        """(time at the middle of the read, joules, error)."""
        assert self.src is not None
        a = time.perf_counter()
        try:
            j, err = self.src.read_j(), None
        except Exception as exc:
            j, err = None, str(exc) or type(exc).__name__
        return (a + time.perf_counter()) / 2, j, err

    def resolved(self, joules: float, seconds: float) -> bool:
        """False when the phase is under ``min_steps`` updates or resolution steps."""
        src = self.src
        if src is None:
            return False
        if src.update_interval_s and seconds < self.min_steps * src.update_interval_s:
            return False
        return not (src.resolution_j and joules < self.min_steps * src.resolution_j)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Meter the enclosed block; repeated names within one repetition are summed."""
        if self.src is None:
            yield
            return
        c0 = time.process_time()
        n0 = self.src.sample_count()
        t0, j0, err0 = self._read()
        try:
            yield
        finally:
            t1, j1, err1 = self._read()
            c1 = time.process_time()
            n1 = self.src.sample_count()
            rec = self._open.setdefault(name, {"j": 0.0, "s": 0.0, "cpu_s": 0.0})
            rec["s"] += t1 - t0
            rec["cpu_s"] += c1 - c0
            if n0 is not None and n1 is not None:
                rec["samples"] = rec.get("samples", 0) + n1 - n0
            err = err0 or err1
            if err or j0 is None or j1 is None:
                rec["error"] = err or "no reading"
                rec["j"] = None
            elif rec["j"] is not None:
                rec["j"] += j1 - j0
            if rec["j"] is not None:
                rec["resolved"] = self.resolved(rec["j"], rec["s"])

    def take(self) -> dict[str, dict[str, Any]]:
        """The phases recorded since the last take: one repetition's ``energy`` entry."""
        rep, self._open = self._open, {}
        if rep:
            self._reps.append(rep)
        return rep

    def info(self) -> dict[str, Any]:
        """JSON-able description of the meter, stored once per cell in the worker's result."""
        if self.src is None:
            return {"meter": None, "reason": self.reason, "tried": self.tried}
        src = self.src
        return (
            {
                "meter": src.name,
                "source": str(src.source),
                "resolution_j": src.resolution_j,
                "update_interval_s": src.update_interval_s,
                "sampled": src.sampled,
                "min_steps": self.min_steps,
                "inputs": src.describe(),
                "tried": self.tried,
            }
            | ({"poll_thread": self._thread_error} if self._thread_error else {})
            | (
                {"poll_errors": self._poll_errors, "last_poll_error": self._poll_error}
                if self._poll_errors
                else {}
            )
        )

    def metrics(self, n_generated_tokens: int) -> dict[str, Metric]:
        """The energy metrics of every repetition taken (plus any phases not yet taken)."""
        reps = [*self._reps, *([self._open] if self._open else [])]
        return power_metrics(
            self.info(), [{"energy": e, "n_generated": n_generated_tokens} for e in reps]
        )

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.src is not None:
            self.src.close()

    def __enter__(self) -> PhaseMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_meter(config: Mapping[str, Any] | None = None) -> PhaseMeter:
    """The first usable source of ``config["sources"]``, or an unavailable meter whose reason
    names every source looked for and why it was not used."""
    cfg = normalize_config(config)
    tried: dict[str, str] = {}
    for name in cfg["sources"]:
        try:
            got = PROBES[name](cfg)
        except Exception as exc:  # a broken probe makes that source unusable, not the cell
            got = f"probe failed: {type(exc).__name__}: {exc}"
        if isinstance(got, str):
            tried[name] = got
            continue
        tried[name] = "selected"
        return PhaseMeter(got, tried, cfg)
    return PhaseMeter(None, tried, cfg)


NULL_METER = PhaseMeter(None, {"none": "not metered"})  # for warm-up repetitions
