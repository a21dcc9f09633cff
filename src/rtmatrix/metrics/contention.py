"""Contention: CPU used on the host outside a cell's process tree and outside rtmatrix's parent.

The parent samples, at its RSS sampling rate, the system-wide busy CPU time of the CPUs the cell
may run on (``/proc/stat``) and the CPU time of the cell's tree plus its own. Over a window (the
counted repetitions, in ``time.monotonic()`` seconds, the clock the worker's events use) the
difference, per second, is the number of cores something else kept busy — ``host_busy_cores``.
Over a short window the value is coarse (the accounting counts 10 ms ticks): its
``resolution_cores`` is in the detail.
Steal (time a hypervisor gave the vCPU to someone else) is busy-elsewhere too; it is included
and also reported on its own.

Which ``/proc/stat`` fields count as busy: user, nice, system, irq, softirq (guest and guest_nice
are already inside user and nice, so adding them would count guest time twice; idle and iowait
are an idle CPU). Steal is kept apart so it can be reported separately.

The tree's CPU: a cgroup's cumulative usage when the cell has one (nothing is lost, not even a
process that left the tree and exited between two samples); else psutil over the live tree, each
process's own time plus its reaped children's (``cutime``/``cstime``), so a child that exited
and was waited for by its parent in the tree is kept. What this fallback loses is CPU of an
orphan (re-parented away from the tree) between the last sample that saw it and its exit: that
shows as contention. rtmatrix's parent adds its own ``os.times()`` (and, without a cgroup, its
reaped children, which is where the worker's CPU goes once it has been reaped).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from rtmatrix.outcome import Metric, Source

PROC_STAT = Path("/proc/stat")
DEFAULT_THRESHOLD_CORES = 0.25
# /proc/stat cpuN columns after the name: user nice system idle iowait irq softirq steal guest ...
_BUSY_COLUMNS = (0, 1, 2, 5, 6)
_STEAL_COLUMN = 7
METHOD = (
    "(system-wide busy CPU of the cell's CPUs from /proc/stat: user+nice+system+irq+softirq, "
    "+ steal) - (CPU of the cell's process tree + rtmatrix's parent), over the window, per second"
)


@dataclass(frozen=True)
class CpuSample:
    """One reading: a monotonic time and three cumulative CPU-second counters."""

    t: float  # time.monotonic()
    busy_s: float  # system-wide busy CPU seconds of the watched CPUs, steal excluded
    steal_s: float  # system-wide steal seconds of the watched CPUs
    own_s: float  # CPU seconds of the cell's tree + rtmatrix's parent


@dataclass(frozen=True)
class ContentionReading:
    """What the window shows; ``busy_cores`` is None exactly when ``reason`` says why."""

    busy_cores: float | None  # outside the tree and the parent, steal included
    steal_cores: float | None
    contended: bool | None
    threshold_cores: float
    t0: float
    t1: float
    reason: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, Metric]:
        """``host_busy_cores`` and ``host_steal_cores``, source ``os-accounting``."""
        if self.busy_cores is None or self.steal_cores is None:
            why = self.reason or "no reading"
            return {
                "host_busy_cores": Metric.unavailable("cores", why),
                "host_steal_cores": Metric.unavailable("cores", why),
            }
        busy = Metric(
            self.busy_cores,
            "cores",
            Source.OS_ACCOUNTING,
            detail={
                "method": METHOD,
                "contended": self.contended,
                "threshold_cores": self.threshold_cores,
                "steal_cores": self.steal_cores,
                **self.detail,
            },
        )
        steal = Metric(
            self.steal_cores,
            "cores",
            Source.OS_ACCOUNTING,
            detail={"method": "steal column of /proc/stat over the window, per second"},
        )
        return {"host_busy_cores": busy, "host_steal_cores": steal}


def read_proc_stat(
    path: Path = PROC_STAT, cpus: Iterable[int] | None = None
) -> tuple[float, float]:
    """(busy seconds without steal, steal seconds), summed over the ``cpuN`` lines in ``cpus``
    (all when None). Raises OSError when the file cannot be read, ValueError when malformed."""
    hz = os.sysconf("SC_CLK_TCK")
    wanted = set(cpus) if cpus is not None else None
    busy = steal = 0
    seen = 0
    for line in path.read_text().splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        if wanted is not None and int(name[3:]) not in wanted:
            continue
        cols = [int(c) for c in rest.split()]
        busy += sum(cols[i] for i in _BUSY_COLUMNS)
        steal += cols[_STEAL_COLUMN] if len(cols) > _STEAL_COLUMN else 0
        seen += 1
    if not seen:
        msg = f"{path}: no cpuN line for CPUs {sorted(wanted or [])}"
        raise ValueError(msg)
    return busy / hz, steal / hz


def cgroup_cpu_s(path: Path) -> float | None:
    """A cgroup's cumulative CPU seconds (v2 ``cpu.stat`` usage_usec, v1 ``cpuacct.usage``)."""
    with contextlib.suppress(OSError, ValueError):
        for line in (path / "cpu.stat").read_text().splitlines():
            key, _, val = line.partition(" ")
            if key == "usage_usec":
                return int(val) / 1e6
    with contextlib.suppress(OSError, ValueError):
        return int((path / "cpuacct.usage").read_text()) / 1e9
    return None


def tree_cpu_s(procs: Iterable[psutil.Process]) -> float:
    """CPU seconds of a live process tree: own + reaped children's time of every member."""
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            c = p.cpu_times()
            total += c.user + c.system + c.children_user + c.children_system
    return total


def walk(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its live descendants (empty when it is gone)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def parent_cpu_s(with_children: bool) -> float:
    """This process's own CPU seconds, and its reaped children's when asked."""
    t = os.times()
    own = t.user + t.system
    return own + (t.children_user + t.children_system if with_children else 0.0)


class HostCpuSampler:
    """Call :meth:`sample` every 20-50 ms from the parent while the worker ``pid`` runs.

    ``cgroup``: a cgroup holding the whole cell (e.g. the process tracker's); its cumulative
    CPU replaces the psutil tree walk. ``cpus``: the CPUs the cell may use (default: this
    process's affinity) — busy time on other CPUs is not contention for the cell.
    """

    def __init__(
        self,
        pid: int,
        *,
        cgroup: Path | None = None,
        cpus: Iterable[int] | None = None,
        proc_stat: Path = PROC_STAT,
    ) -> None:
        self.samples: list[CpuSample] = []
        self.unavailable_reason: str | None = None
        self._proc_stat = proc_stat
        self._cgroup = cgroup if cgroup is not None and cgroup_cpu_s(cgroup) is not None else None
        self._root: psutil.Process | None = None
        self._cpus = sorted(cpus if cpus is not None else _affinity())
        if not sys.platform.startswith("linux"):
            self.unavailable_reason = f"no /proc/stat CPU accounting on {sys.platform}"
            return
        with contextlib.suppress(psutil.Error):
            self._root = psutil.Process(pid)

    def describe(self) -> dict[str, Any]:
        tree = "cgroup cumulative CPU" if self._cgroup else "psutil over the live tree"
        out: dict[str, Any] = {"cpus": self._cpus, "tree_source": tree}
        if self._cgroup:
            out["cgroup"] = str(self._cgroup)
        return out

    def sample(self, tree: Sequence[psutil.Process] | None = None) -> CpuSample | None:
        """Take and keep one sample; None when it cannot (``unavailable_reason`` says why when
        it never will). ``tree``: the worker and its descendants if the caller has just listed
        them (walking /proc costs milliseconds of CPU with a few hundred processes)."""
        if self.unavailable_reason:
            return None
        try:
            busy, steal = read_proc_stat(self._proc_stat, self._cpus)
        except (OSError, ValueError) as exc:
            self.unavailable_reason = f"cannot read system CPU accounting: {exc}"
            return None
        own = self._own_s(tree)
        if own is None:  # the cgroup is gone: this sample would be meaningless
            return None
        s = CpuSample(time.monotonic(), busy, steal, own)
        self.samples.append(s)
        return s

    def reading(
        self, t0: float, t1: float, threshold_cores: float = DEFAULT_THRESHOLD_CORES
    ) -> ContentionReading:
        if self.unavailable_reason:
            return _unavailable(t0, t1, threshold_cores, self.unavailable_reason)
        return busy_cores(
            self.samples, t0, t1, threshold_cores, detail=self.describe(), n_cpus=len(self._cpus)
        )

    def _own_s(self, tree: Sequence[psutil.Process] | None) -> float | None:
        if self._cgroup is not None:
            cg = cgroup_cpu_s(self._cgroup)
            # not the parent's reaped children: they would count the reaped worker twice
            return None if cg is None else cg + parent_cpu_s(with_children=False)
        if tree is None:
            tree = walk(self._root) if self._root is not None else []
        return tree_cpu_s(tree) + parent_cpu_s(with_children=True)


def resolution_cores(span_s: float, n_cpus: int) -> float:
    """How far a reading over ``span_s`` can be off from accounting granularity alone:
    ``/proc/stat`` counts whole clock ticks (``SC_CLK_TCK``, 10 ms) per CPU and process times
    count ticks too, so each side of the difference may be short by about a tick per CPU (plus
    one for the tree, one for the parent)."""
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    return (n_cpus + 2) * tick / span_s


def busy_cores(
    samples: Sequence[CpuSample],
    t0: float,
    t1: float,
    threshold_cores: float = DEFAULT_THRESHOLD_CORES,
    *,
    detail: Mapping[str, Any] | None = None,
    n_cpus: int = 1,
) -> ContentionReading:
    """Cores busy outside the cell and the parent between the first and last sample inside
    ``[t0, t1]``; contended when above ``threshold_cores``. ``resolution_cores`` in the detail
    says how coarse the reading is (:func:`resolution_cores`: a 50 ms window on 2 CPUs resolves
    only ~0.8 core, so a short cell can read contended on tick noise alone; subtracting it
    missed a real 2-process hog beside a short cell, so it is reported, not subtracted). The
    value is not clipped at 0: tick-based system accounting against per-process accounting can
    read a little below."""
    inside = [s for s in samples if t0 <= s.t <= t1]
    bracketed = False
    if len(inside) < 2 or inside[-1].t <= inside[0].t:
        # a window shorter than the sampling interval: the samples just around it
        before = [s for s in samples if s.t <= t0][-1:]
        after = [s for s in samples if s.t >= t1][:1]
        inside = before + [s for s in inside if s not in before + after] + after
        bracketed = True
    if len(inside) < 2 or inside[-1].t <= inside[0].t:
        why = f"{len(inside)} CPU sample(s) around the {t1 - t0:.3f} s window; at least 2 needed"
        return _unavailable(t0, t1, threshold_cores, why)
    a, b = inside[0], inside[-1]
    span = b.t - a.t
    system = (b.busy_s - a.busy_s) / span
    own = (b.own_s - a.own_s) / span
    steal = (b.steal_s - a.steal_s) / span
    busy = system - own + steal
    resolution = resolution_cores(span, n_cpus)
    info = {
        "window_s": t1 - t0,
        "window_monotonic": [t0, t1],
        "span_s": span,
        "resolution_cores": resolution,
        "n_samples": len(inside),
        "bracketing_samples": bracketed,
        "system_busy_cores": system,
        "own_cores": own,
        **(detail or {}),
    }
    contended = busy > threshold_cores  # resolution is reported, not subtracted (see docstring)
    return ContentionReading(busy, steal, contended, threshold_cores, t0, t1, None, info)


def gated_reading(
    sampler: HostCpuSampler,
    windows: Sequence[tuple[float, float]],
    threshold_cores: float = DEFAULT_THRESHOLD_CORES,
) -> ContentionReading:
    """Busy cores over each window alone, weighted by its length: the counted repetitions of a
    worker that took turns with another process (``compare --mode alternate``), whose own
    repetitions ran between these windows and are not contention for this one."""
    t0, t1 = min(w[0] for w in windows), max(w[1] for w in windows)
    parts = [sampler.reading(a, b, threshold_cores) for a, b in windows]
    ok = [(r, b - a) for r, (a, b) in zip(parts, windows, strict=True) if r.busy_cores is not None]
    if not ok:
        why = next((r.reason for r in parts if r.reason), "no reading")
        return _unavailable(t0, t1, threshold_cores, f"no repetition had a reading: {why}")
    total = sum(w for _, w in ok)
    busy = sum(float(r.busy_cores or 0.0) * w for r, w in ok) / total
    steal = sum(float(r.steal_cores or 0.0) * w for r, w in ok) / total
    detail = sampler.describe() | {
        "window": "each counted repetition alone (they took turns with another process)",
        "window_monotonic": [t0, t1],
        "windows": len(windows),
        "windows_read": len(ok),
        "busy_cores_per_window": [r.busy_cores for r, _ in ok],
    }
    return ContentionReading(busy, steal, busy > threshold_cores, threshold_cores, t0, t1, None,
                             detail)  # fmt: skip


def _unavailable(t0: float, t1: float, threshold: float, reason: str) -> ContentionReading:
    return ContentionReading(None, None, None, threshold, t0, t1, reason)


def _affinity() -> set[int]:
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))
