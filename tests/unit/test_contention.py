"""host_busy_cores: pure arithmetic on synthetic samples, then real processes on this host."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rtmatrix import proctrack
from rtmatrix.metrics import contention
from rtmatrix.metrics.contention import CpuSample, HostCpuSampler, busy_cores
from rtmatrix.outcome import Source

LINUX = sys.platform.startswith("linux")
HOG = "import time\nwhile True: pass  # rtmatrix-test-hog"
IDLE = "import time; time.sleep(60)  # rtmatrix-test-idle-worker"


def _samples(rows: list[tuple[float, float, float, float]]) -> list[CpuSample]:
    return [CpuSample(*r) for r in rows]


# --- pure unit tests -----------------------------------------------------------------------


def test_busy_is_system_minus_own_plus_steal() -> None:
    # 2 s: the system kept 3.0 core-s busy, the cell + parent used 1.0, steal 0.2
    s = _samples([(10.0, 100.0, 5.0, 40.0), (11.0, 101.0, 5.1, 40.5), (12.0, 103.0, 5.2, 41.0)])
    r = busy_cores(s, 10.0, 12.0)
    assert r.reason is None
    assert r.busy_cores == pytest.approx((3.0 - 1.0 + 0.2) / 2)
    assert r.steal_cores == pytest.approx(0.1)
    assert r.contended is True
    assert r.detail["n_samples"] == 3 and r.detail["span_s"] == pytest.approx(2.0)


def test_only_samples_inside_the_window_count() -> None:
    # a burst of outside load before t0 must not show in the window
    s = _samples([(0.0, 0.0, 0, 0), (1.0, 2.0, 0, 0), (2.0, 2.0, 0, 0), (3.0, 2.1, 0, 0)])
    r = busy_cores(s, 1.5, 3.0)
    assert r.busy_cores == pytest.approx(0.1)
    assert r.contended is False


def test_the_tree_being_busy_is_not_contention() -> None:
    # the system is one core busy, all of it the cell's own tree
    s = _samples([(0.0, 0.0, 0.0, 0.0), (1.0, 1.0, 0.0, 1.0)])
    r = busy_cores(s, 0.0, 1.0)
    assert r.busy_cores == pytest.approx(0.0) and r.contended is False


# over 1 s on one CPU the reading resolves (1 + 2) ticks of 10 ms: 0.03 core
@pytest.mark.parametrize(("outside", "flag"), [(0.24, False), (0.26, True), (0.30, True)])
def test_threshold_plus_resolution(outside: float, flag: bool) -> None:
    s = _samples([(0.0, 0.0, 0.0, 0.0), (1.0, outside, 0.0, 0.0)])
    r = busy_cores(s, 0.0, 1.0)
    assert r.contended is flag
    assert r.detail["resolution_cores"] == pytest.approx(3 / os.sysconf("SC_CLK_TCK"))
    assert busy_cores(s, 0.0, 1.0, threshold_cores=0.1).contended is True


def test_a_short_window_reports_how_coarse_it_is() -> None:
    # 50 ms on 2 CPUs: one tick more on each CPU reads as 0.4 core busy
    s = _samples([(0.0, 0.0, 0.0, 0.0), (0.05, 0.02, 0.0, 0.0)])
    r = busy_cores(s, 0.0, 0.05, n_cpus=2)
    assert r.busy_cores == pytest.approx(0.4)
    assert r.detail["resolution_cores"] == pytest.approx(0.8)


def test_fewer_than_two_samples_is_unavailable() -> None:
    s = _samples([(5.0, 1.0, 0.0, 0.0)])
    r = busy_cores(s, 1.0, 5.5)
    assert r.busy_cores is None and r.contended is None
    assert r.reason is not None and "1 CPU sample(s)" in r.reason
    m = r.metrics()
    assert m["host_busy_cores"].source is Source.UNAVAILABLE
    assert m["host_busy_cores"].reason == r.reason
    assert m["host_steal_cores"].source is Source.UNAVAILABLE


def test_metrics_carry_source_method_and_flag() -> None:
    s = _samples([(0.0, 0.0, 0.0, 0.0), (2.0, 1.0, 0.5, 0.2)])
    m = busy_cores(s, 0.0, 2.0, detail={"cpus": [0, 1]}).metrics()
    busy, steal = m["host_busy_cores"], m["host_steal_cores"]
    assert busy.source is Source.OS_ACCOUNTING and busy.unit == "cores"
    assert busy.value == pytest.approx((1.0 - 0.2 + 0.5) / 2)
    assert busy.detail["contended"] is True and busy.detail["threshold_cores"] == 0.25
    assert "steal" in busy.detail["method"] and busy.detail["cpus"] == [0, 1]
    assert steal.value == pytest.approx(0.25) and steal.source is Source.OS_ACCOUNTING
    assert busy.to_dict()["source"] == "os-accounting"


def test_proc_stat_fields(tmp_path: Path) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  999 999 999 999 999 999 999 999 999 999\n"
        "cpu0 10 1 2 1000 500 3 4 7 6 1\n"
        "cpu1 20 0 0 1000 0 0 0 1 0 0\n"
        "cpu3 100 0 0 0 0 0 0 100 0 0\n"
        "intr 12345\n"
    )
    busy, steal = contention.read_proc_stat(stat, cpus=[0, 1])
    # idle, iowait not busy; guest/guest_nice already inside user/nice; steal apart
    assert busy == pytest.approx((10 + 1 + 2 + 3 + 4 + 20) / hz)
    assert steal == pytest.approx((7 + 1) / hz)
    with pytest.raises(ValueError, match="no cpuN line"):
        contention.read_proc_stat(stat, cpus=[2])


def test_cgroup_cpu_files(tmp_path: Path) -> None:
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "cpuacct.usage").write_text("1500000000\n")
    assert contention.cgroup_cpu_s(tmp_path / "v2") == pytest.approx(2.5)
    assert contention.cgroup_cpu_s(tmp_path / "v1") == pytest.approx(1.5)
    assert contention.cgroup_cpu_s(tmp_path) is None


def test_no_proc_stat_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    s = HostCpuSampler(os.getpid(), proc_stat=tmp_path / "missing")
    assert s.sample() is None
    r = s.reading(0.0, 1.0)
    assert r.busy_cores is None and r.reason and "cannot read system CPU accounting" in r.reason
    monkeypatch.setattr(sys, "platform", "darwin")
    r = HostCpuSampler(os.getpid()).reading(0.0, 1.0)
    assert r.reason == "no /proc/stat CPU accounting on darwin"


# --- real processes ------------------------------------------------------------------------


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[bytes]]:
    """An idle stand-in for a worker (the cell's tree root)."""
    p = subprocess.Popen([sys.executable, "-c", IDLE])
    yield p
    p.kill()
    p.wait()


def _hog() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", HOG])


def _cpu(procs: list[psutil.Process]) -> float:
    return sum(float(t.user + t.system) for t in (p.cpu_times() for p in procs))


def _window(
    sampler: HostCpuSampler, seconds: float, watch: list[psutil.Process] | None = None
) -> tuple[contention.ContentionReading, float]:
    """Sample every 25 ms for ``seconds``; also the CPU cores ``watch`` used over the same span
    (psutil on those processes: a ground truth independent of the sampler)."""
    watch = watch or []
    t0 = time.monotonic()
    c0 = _cpu(watch)
    first = sampler.sample()
    last = first
    while time.monotonic() - t0 < seconds:
        time.sleep(0.025)
        last = sampler.sample()
    c1 = _cpu(watch)
    assert first is not None and last is not None
    return sampler.reading(t0, time.monotonic()), (c1 - c0) / (last.t - first.t)


@pytest.mark.skipif(not LINUX, reason="/proc/stat is Linux's")
def test_a_cpu_hog_is_flagged_every_time(worker: subprocess.Popen[bytes]) -> None:
    """Busy processes outside the tree are contention, 3 windows of 3. Whatever else loads the
    host only adds to the reading, so the hogs' own CPU (measured on them) is a lower bound."""
    weakest = float("inf")
    for _ in range(3):
        hogs = [_hog(), _hog()]  # two: a fair share of a loaded host is still enough
        try:
            time.sleep(0.2)  # the interpreters are up and spinning
            sampler = HostCpuSampler(worker.pid)
            r, hog_cores = _window(sampler, 0.8, [psutil.Process(h.pid) for h in hogs])
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        assert r.reason is None and r.busy_cores is not None
        assert r.contended is True, r.detail
        assert r.busy_cores >= hog_cores - 0.15, (r.busy_cores, hog_cores, r.detail)
        weakest = min(weakest, hog_cores)
    if weakest < r.threshold_cores + 0.1:
        pytest.skip(f"held, but the hogs got only {weakest:.2f} core: the flag may be other load's")


def _busy_child_worker(seconds: float, report: Path, detach: bool) -> list[str]:
    """A worker that starts a busy child which writes its own CPU time to ``report`` and exits;
    ``detach``: the child double-forks away from the tree first (an orphan of init)."""
    child = (
        "import os, time\n"
        f"if {detach}:\n"
        "    if os.fork(): os._exit(0)\n"
        "    os.setsid()\n"
        "t = time.monotonic()\n"
        f"while time.monotonic() - t < {seconds}: pass\n"
        f"open({str(report)!r}, 'w').write(str(time.process_time()))\n"
    )
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {child!r}])\n"
        "time.sleep(60)\n"
    )
    return [sys.executable, "-c", code]


def _own_cores_covering_busy_child(
    tmp_path: Path, use_cgroup: bool, detach: bool
) -> tuple[float, float, HostCpuSampler]:
    report = tmp_path / "child-cpu"
    with proctrack.Tracker(use_cgroup=use_cgroup) as tr:
        if use_cgroup and tr.cgroup is None:
            pytest.skip(f"no cgroup here: {tr.cgroup_reason}")
        p = subprocess.Popen(_busy_child_worker(0.6, report, detach), env=os.environ | tr.env())
        try:
            tr.start(p.pid)
            cg = tr.cgroup.path if tr.cgroup else None
            sampler = HostCpuSampler(p.pid, cgroup=cg)
            t0 = time.monotonic()
            while not report.exists() and time.monotonic() - t0 < 20:
                sampler.sample()
                time.sleep(0.025)
            time.sleep(0.1)
            sampler.sample()
        finally:
            p.kill()
            p.wait()
            tr.finish()
    s = sampler.samples
    return s[-1].own_s - s[0].own_s, float(report.read_text()), sampler


@pytest.mark.skipif(not LINUX, reason="/proc/stat is Linux's")
def test_a_busy_child_inside_the_tree_is_its_own_cpu(tmp_path: Path) -> None:
    """The tree's busy child, reaped by its parent inside the window, stays counted as the
    cell's own (psutil: the parent's cutime), so it is never read as contention."""
    own, child_cpu, sampler = _own_cores_covering_busy_child(tmp_path, False, detach=False)
    assert sampler.describe()["tree_source"] == "psutil over the live tree"
    assert child_cpu > 0.1
    assert own >= child_cpu - 0.05, (own, child_cpu)


@pytest.mark.skipif(not LINUX, reason="/proc/stat is Linux's")
def test_a_detached_busy_child_is_counted_through_the_cgroup(tmp_path: Path) -> None:
    """A child that double-forked out of the tree and exited between samples: only the
    cgroup's cumulative usage still has its CPU."""
    own, child_cpu, sampler = _own_cores_covering_busy_child(tmp_path, True, detach=True)
    assert sampler.describe()["tree_source"] == "cgroup cumulative CPU"
    assert own >= child_cpu - 0.05, (own, child_cpu)


QUIET = os.environ.get("RTMATRIX_QUIET_HOST") == "1"


@pytest.mark.skipif(
    not (LINUX and QUIET),
    reason="needs a host nothing else loads (set RTMATRIX_QUIET_HOST=1 on a dedicated machine): "
    "without the hog the reading is whatever else runs here",
)
def test_no_hog_is_not_flagged_on_a_quiet_host(worker: subprocess.Popen[bytes]) -> None:
    quiet, _ = _window(HostCpuSampler(worker.pid), 0.8)
    hog = _hog()
    try:
        time.sleep(0.2)
        loud, _ = _window(HostCpuSampler(worker.pid), 0.8)
    finally:
        hog.kill()
        hog.wait()
    assert quiet.contended is False, quiet.detail
    assert loud.busy_cores is not None and quiet.busy_cores is not None
    assert loud.busy_cores - quiet.busy_cores >= 0.7


def test_a_window_shorter_than_the_interval_uses_the_samples_around_it() -> None:
    s = _samples([(0.0, 0.0, 0.0, 0.0), (1.0, 0.5, 0.0, 0.0)])
    r = busy_cores(s, 0.4, 0.6)
    assert r.busy_cores == pytest.approx(0.5) and r.detail["bracketing_samples"] is True
