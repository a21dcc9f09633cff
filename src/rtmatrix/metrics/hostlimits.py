"""This host's limits, measured once per host and thread count and cached: the sustained memory
read bandwidth and the peak matmul throughput of each dtype the host computes natively (f32;
int8 and bf16 where they can be measured). The run record's ``machine.host_limits`` carries them
for the thread counts of the matrix's cells; :mod:`rtmatrix.metrics.utilization` divides a cell's
achieved bytes/s and FLOP/s by them.

The probes run in a child (:mod:`rtmatrix.metrics.hostprobe`, which says why) started with the
BLAS/OpenMP thread variables set to the thread count; its progress lines are passed on as they
come. A result is cached under ``<cache>/host-limits/`` (the cache folder of
:func:`rtmatrix.fixtures.cache.cache_base`), keyed by the hostname, kernel release, CPU model,
thread count and the probe's version and settings: a later run on the same host reads it.
``RTMATRIX_HOST_LIMITS=off`` skips the probe (the limits are then unavailable, saying so);
``RTMATRIX_HOST_LIMITS=remeasure`` measures again and replaces the cached result.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rtmatrix.fixtures.cache import cache_base, key_hash, safe_label
from rtmatrix.metrics.contention import ContentionReading, HostCpuSampler
from rtmatrix.metrics.hostprobe import MATMULS, MAX_SIDE, PROBE_VERSION, THREAD_VARS

ENV = "RTMATRIX_HOST_LIMITS"
CACHE_FOLDER = "host-limits"
#: the child's wall-clock limit (the probes take a few seconds; a busy host, longer)
CHILD_TIMEOUT_S = 240.0
#: how often the parent samples the host's CPU while the probe runs (contention)
SAMPLE_S = 0.05
TAIL_LINES = 20

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ProbeConfig:
    """How much the probe measures: buffer size, repetitions, largest matmul side, dtypes."""

    buffer_mib: float = 512.0
    repeats: int = 7
    max_side: int = MAX_SIDE
    dtypes: tuple[str, ...] = tuple(MATMULS)

    def argv(self, threads: int, out: Path, python: str = sys.executable) -> list[str]:
        return [python, "-m", "rtmatrix.metrics.hostprobe", "--threads", str(threads),
                "--out", str(out), "--buffer-mib", f"{self.buffer_mib:g}",
                "--repeats", str(self.repeats), "--max-side", str(self.max_side),
                "--dtypes", ",".join(self.dtypes)]  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"buffer_mib": self.buffer_mib, "repeats": self.repeats,
                "max_side": self.max_side, "dtypes": list(self.dtypes)}  # fmt: skip


DEFAULT = ProbeConfig()


@dataclass(frozen=True)
class Probe:
    """One measured limit (the median of the repetitions, with all of them), or unavailable."""

    unit: str
    value: float | None = None
    samples: tuple[float, ...] = ()
    method: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.reason is None):
            msg = "a probe has a value or a reason why not, never both or neither"
            raise ValueError(msg)

    @property
    def spread(self) -> tuple[float, float] | None:
        """(min, max) of the repetitions."""
        return (min(self.samples), max(self.samples)) if self.samples else None

    def to_dict(self) -> dict[str, Any]:
        if self.value is None:
            return {"value": None, "unit": self.unit, "reason": self.reason}
        lo, hi = self.spread or (self.value, self.value)
        return {"value": self.value, "unit": self.unit, "min": lo, "max": hi,
                "samples": list(self.samples), "method": self.method,
                "params": self.params}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        value = data.get("value")
        if value is None:
            return cls(str(data["unit"]), reason=str(data.get("reason") or "no reason recorded"))
        return cls(str(data["unit"]), float(value),
                   tuple(float(s) for s in data.get("samples") or ()),
                   str(data.get("method", "")), dict(data.get("params") or {}))  # fmt: skip


@dataclass(frozen=True)
class HostLimits:
    """The limits of this host at one thread count, with how and when they were measured."""

    key: dict[str, Any]
    bandwidth: Probe
    matmul: dict[str, Probe]
    command: str
    measured_utc: str
    wall_s: float
    #: the 1/5/15-minute load averages when the probe started (the host may have been shared)
    load_avg: tuple[float, ...] = ()
    #: cores kept busy outside the probe while it ran (metrics.contention), None: no reading;
    #: a contended result is kept for this run but measured again by the next
    host_busy_cores: float | None = None
    contended: bool | None = None

    @property
    def threads(self) -> int:
        return int(self.key["threads"])

    def peak(self, dtype: str) -> Probe:
        """The matmul peak of ``dtype``, or an unavailable probe saying it was not measured."""
        found = self.matmul.get(dtype)
        if found is not None:
            return found
        return Probe("FLOP/s", reason=f"no {dtype} matmul peak was measured (probed: "
                     f"{', '.join(self.matmul) or 'none'})")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "bandwidth": self.bandwidth.to_dict(),
                "matmul": {k: v.to_dict() for k, v in self.matmul.items()},
                "command": self.command, "measured_utc": self.measured_utc,
                "wall_s": self.wall_s, "load_avg": list(self.load_avg),
                "host_busy_cores": self.host_busy_cores, "contended": self.contended}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostLimits:
        return cls(dict(data["key"]), Probe.from_dict(data["bandwidth"]),
                   {k: Probe.from_dict(v) for k, v in dict(data.get("matmul") or {}).items()},
                   str(data.get("command", "")), str(data.get("measured_utc", "")),
                   float(data.get("wall_s", 0.0)),
                   tuple(float(x) for x in data.get("load_avg") or ()),
                   _float(data.get("host_busy_cores")), data.get("contended"))  # fmt: skip


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _cpu_model() -> str | None:
    from rtmatrix.metrics.host import cpu_model

    return cpu_model()


def host_key(threads: int, config: ProbeConfig = DEFAULT) -> dict[str, Any]:
    """What a cached result is valid for: this host, kernel and CPU, at ``threads`` threads,
    measured by this version of the probe with these settings."""
    return {"hostname": platform.node(), "kernel": platform.release(),
            "cpu_model": _cpu_model(), "threads": int(threads),
            "probe_version": PROBE_VERSION, "config": config.to_dict()}  # fmt: skip


def cache_path(key: dict[str, Any], root: Path | None = None) -> Path:
    name = f"{safe_label(str(key['hostname']))}-t{key['threads']}-{key_hash(key)[:16]}.json"
    return (root or cache_base()) / CACHE_FOLDER / name


def load_cached(threads: int, config: ProbeConfig = DEFAULT,
                root: Path | None = None) -> HostLimits | None:  # fmt: skip
    path = cache_path(host_key(threads, config), root)
    try:
        return HostLimits.from_dict(json.loads(path.read_text("utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(limits: HostLimits, root: Path | None = None) -> Path:
    path = cache_path(limits.key, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(limits.to_dict(), fh, indent=1)
    Path(tmp).replace(path)
    return path


def _watch(sampler: HostCpuSampler, stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_S):
        sampler.sample()


def _run_child(argv: list[str], env: dict[str, str], progress: Progress,
               timeout_s: float) -> tuple[int, list[str], ContentionReading]:  # fmt: skip
    """Run the probe, passing its stderr lines on as they come, and watch how busy the host
    was outside it: (exit code, last lines, the contention reading)."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    stop = threading.Event()
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True) as proc:  # fmt: skip
        sampler = HostCpuSampler(proc.pid)
        t0 = time.monotonic()
        sampler.sample()
        watcher = threading.Thread(target=_watch, args=(sampler, stop), daemon=True)
        watcher.start()
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            for line in proc.stderr or ():
                tail.append(line.rstrip())
                progress(line.rstrip())
            rc = proc.wait()
        finally:
            timer.cancel()
            stop.set()
            watcher.join()
    sampler.sample()
    return rc, list(tail), sampler.reading(t0, time.monotonic())


def measure(threads: int, config: ProbeConfig = DEFAULT, progress: Progress = _stderr,
            timeout_s: float = CHILD_TIMEOUT_S) -> HostLimits | str:  # fmt: skip
    """Run the probe in a child at ``threads`` threads: the limits, or why there are none."""
    env = dict(os.environ) | {k: str(threads) for k in THREAD_VARS}
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    with tempfile.TemporaryDirectory(prefix="rtmatrix-hostprobe-") as tmp:
        out = Path(tmp) / "limits.json"
        argv = config.argv(threads, out)
        shown = config.argv(threads, Path("limits.json"))  # the temporary folder is gone after
        command = " ".join([*(f"{k}={threads}" for k in THREAD_VARS), *map(shlex.quote, shown)])
        t0 = time.perf_counter()
        try:
            rc, tail, busy = _run_child(argv, env, progress, timeout_s)
        except OSError as exc:
            return f"the host-limits probe could not start: {exc}"
        wall = time.perf_counter() - t0
        if rc != 0 or not out.exists():
            why = f"killed after {timeout_s:.0f} s" if wall >= timeout_s else f"exit code {rc}"
            return f"the host-limits probe failed ({why}): " + " | ".join(tail[-3:])[:400]
        data = json.loads(out.read_text("utf-8"))
    return HostLimits(
        key=host_key(threads, config),
        bandwidth=_probe(data.get("bandwidth") or {}, "bytes/s"),
        matmul={k: _probe(v, "FLOP/s") for k, v in dict(data.get("matmul") or {}).items()},
        command=command,
        measured_utc=datetime.now(UTC).isoformat(),
        wall_s=wall,
        load_avg=tuple(round(x, 2) for x in load),
        host_busy_cores=busy.busy_cores,
        contended=busy.contended,
    )


def _probe(raw: dict[str, Any], unit: str) -> Probe:
    if raw.get("value") is None:
        return Probe(str(raw.get("unit", unit)), reason=str(raw.get("reason") or "not measured"))
    params = dict(raw.get("params") or {}) | {"stats": raw.get("stats")}
    return Probe(str(raw["unit"]), float(raw["value"]), tuple(raw.get("samples") or ()),
                 str(raw.get("method", "")), params)  # fmt: skip


def mode() -> str:
    """``RTMATRIX_HOST_LIMITS``: ``off``, ``remeasure`` or ``""`` (measure once, then cached)."""
    return os.environ.get(ENV, "").strip().lower()


def limits_for(threads: int, config: ProbeConfig = DEFAULT, progress: Progress = _stderr,
               root: Path | None = None) -> HostLimits | str:  # fmt: skip
    """The cached limits at ``threads`` threads, else measured now and cached; or why none."""
    if mode() == "off":
        return f"not measured: {ENV}=off"
    found = load_cached(threads, config, root) if mode() != "remeasure" else None
    if found is not None and not found.contended:
        return found
    again = " again: the cached result was measured on a busy host" if found else ""
    progress(f"rtmatrix: measuring this host's limits at {threads} thread(s){again} (once; "
             f"cached under {(root or cache_base()) / CACHE_FOLDER})")  # fmt: skip
    limits = measure(threads, config, progress)
    if isinstance(limits, str) and found is not None:  # the busy host's result still stands
        progress(f"rtmatrix: {limits}; keeping the result measured on a busy host")
        return found
    if isinstance(limits, HostLimits) and limits.bandwidth.value is not None:
        store(limits, root)
        if limits.contended:
            busy = f"{limits.host_busy_cores:.2f} core(s) were busy outside the probe"
            progress(f"rtmatrix: note: {busy}: its limits read low (measured again next run)")
    return limits


def cached_or_reason(threads: int, config: ProbeConfig = DEFAULT,
                     root: Path | None = None) -> HostLimits | str:  # fmt: skip
    """What a cell is divided by: the limits the run measured (cached), never a new probe."""
    if mode() == "off":
        return f"host limits not measured ({ENV}=off)"
    found = load_cached(threads, config, root)
    if found is None:
        return (f"no host limits measured on this host at {threads} thread(s) (a run measures "
                "them at its start, for its cells' thread counts)")  # fmt: skip
    return found


def machine_entry(threads: Iterable[int], progress: Progress = _stderr,
                  config: ProbeConfig = DEFAULT) -> dict[str, Any]:  # fmt: skip
    """The run record's ``machine.host_limits``: per thread count, the limits or why none."""
    out: dict[str, Any] = {}
    for n in sorted(set(threads)):
        found = limits_for(n, config, progress)
        out[str(n)] = found.to_dict() if isinstance(found, HostLimits) else {"unavailable": found}
    return {"host_limits": out}
