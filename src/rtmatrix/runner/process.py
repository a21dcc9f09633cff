"""Process supervision: spawn a worker in its own process group, sample its tree, enforce the
deadline, reap it with ``wait4`` for the OS's own peak RSS, and read what it left behind."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from rtmatrix import memcap, proctrack
from rtmatrix.metrics.contention import HostCpuSampler
from rtmatrix.protocol import ProtocolError, WorkerResult, read_events

TAIL_CHARS = 4000


@dataclass(frozen=True)
class Launch:
    """How the worker process ended, as the parent saw it."""

    returncode: int
    signal: str | None
    timed_out: bool
    wall_s: float
    spawned: float
    peak_tree_rss: int | None
    maxrss: int | None
    stdout_tail: str
    stderr_tail: str
    maxrss_method: str = "ru_maxrss of the reaped worker (wait4)"
    pid: int = 0
    #: processes of the cell still alive after the worker ended (found and killed)
    leaked: tuple[proctrack.LeakedProcess, ...] = ()
    #: how the cell's processes were tracked (cgroup or descendants + environment marker)
    tracking: dict[str, Any] = field(default_factory=dict)
    #: system-wide vs the cell's own CPU, sampled while the worker ran
    cpu: HostCpuSampler | None = None


@dataclass(frozen=True)
class LaunchSpec:
    """What to run and how to watch it."""

    args: list[str]
    job_dir: Path
    timeout_s: float
    interval_s: float
    cwd: Path | None = None
    #: the Python interpreter that runs the worker (another environment's, for comparisons)
    python: str = field(default_factory=lambda: sys.executable)
    #: the CPUs to pin the worker to (a duet comparison's side), over ``RTMATRIX_WORKER_CPUS``
    cpus: tuple[int, ...] | None = None


def _tree_rss(tree: list[psutil.Process]) -> int:
    total = 0
    for p in tree:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _vm_hwm(pid: int) -> int:
    """The kernel's peak-RSS mark of a live process (VmHWM), 0 if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def os_peak(ru_maxrss: int | None, parent_peak: int, hwm: int) -> tuple[int | None, str]:
    """The worker's peak RSS as the OS accounts it.

    Linux carries the parent's high-water mark across fork + exec, so a child's ``ru_maxrss``
    that does not exceed the parent's own peak at spawn time may be the parent's figure, not
    the worker's; then the worker's own VmHWM (last sample before it exited) is used instead.
    """
    if ru_maxrss and ru_maxrss > parent_peak:
        return ru_maxrss, "ru_maxrss of the reaped worker (wait4)"
    if hwm:
        return hwm, (
            "VmHWM of the worker, last sample before exit (its ru_maxrss "
            f"{ru_maxrss} did not exceed the parent's own peak {parent_peak}, which Linux "
            "carries across fork+exec)"
        )
    return None, "no usable OS peak: ru_maxrss inherited from the parent, no VmHWM sample"


def tail(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - TAIL_CHARS))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GGML_NO_BACKTRACE"] = "1"  # no gdb attach, no core file on abort
    env["PYTHONFAULTHANDLER"] = "1"  # a Python traceback on SIGSEGV/SIGABRT in stderr
    return env


#: worker launch settings for measuring where process-to-process spread comes from (issue 31):
#: ``RTMATRIX_WORKER_NO_ASLR=1`` starts each worker with address-space randomization off
#: (``personality(ADDR_NO_RANDOMIZE)`` before exec, as ``setarch -R``), ``RTMATRIX_WORKER_CPUS``
#: ("0" or "0,1") pins it to those CPUs; the worker records both in ``evidence.launch``
NO_ASLR_ENV = "RTMATRIX_WORKER_NO_ASLR"
CPUS_ENV = "RTMATRIX_WORKER_CPUS"
ADDR_NO_RANDOMIZE = 0x0040000


def launch_settings(environ: dict[str, str] | None = None) -> tuple[bool, list[int] | None]:
    """(address-space randomization off, CPUs to pin to) from the parent's environment."""
    env = os.environ if environ is None else environ
    no_aslr = env.get(NO_ASLR_ENV, "") not in ("", "0")
    raw = env.get(CPUS_ENV, "").strip()
    try:
        cpus = [int(c) for c in raw.split(",") if c.strip()] or None
    except ValueError as exc:
        msg = f"{CPUS_ENV}={raw!r}: expected CPU numbers like 0 or 0,1"
        raise ValueError(msg) from exc
    return no_aslr, cpus


def pinned_cpus(cpus: tuple[int, ...] | None = None) -> list[int] | None:
    """The CPUs a worker is pinned to: ``cpus`` when given, else ``RTMATRIX_WORKER_CPUS``'s."""
    return list(cpus) if cpus else launch_settings()[1]


def _preexec(explicit: tuple[int, ...] | None = None) -> Any:
    """The child's setup between fork and exec for :func:`launch_settings` (CPUs given to
    :func:`launch` win over the environment's), or None."""
    no_aslr, cpus = launch_settings()
    cpus = list(explicit) if explicit else cpus
    if not no_aslr and not cpus:
        return None

    def setup() -> None:
        if no_aslr:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            current = libc.personality(0xFFFFFFFF)
            libc.personality(current | ADDR_NO_RANDOMIZE)
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


#: process groups of the workers running now (several at once in a duet comparison, each
#: supervised by its own thread; Ctrl-C reaches only the main thread, which kills them all)
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


def _forget(pgid: int) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(pgid)


def kill_live() -> None:
    """Kill every worker group still running (their supervising threads then reap them)."""
    with _LIVE_LOCK:
        groups = list(_LIVE)
    for pgid in groups:
        kill_group(pgid)


def _spawn(spec: LaunchSpec, env: dict[str, str]) -> subprocess.Popen[bytes]:
    out_path, err_path = spec.job_dir / "stdout.txt", spec.job_dir / "stderr.txt"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        return subprocess.Popen(
            [spec.python, "-m", "rtmatrix.worker", *spec.args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=spec.cwd,
            env=worker_env() | env,
            start_new_session=True,
            preexec_fn=_preexec(spec.cpus),  # personality() and sched_setaffinity() only
        )


class _HeldInterrupt:
    """Holds back Ctrl-C (SIGINT) while the worker is being spawned, then delivers it.

    Were ``KeyboardInterrupt`` raised inside ``Popen`` after the fork, or between ``Popen``
    returning and the supervising ``try``, nothing would know the worker's pid and it would run
    on after the parent exits. The signal is recorded instead and raised by :meth:`release`,
    which :func:`launch` calls inside the block that kills the worker's group. The worker does
    not inherit the holding handler (``exec`` resets caught signals). Only the main thread can
    set signal handlers; elsewhere (a fleet's worker thread) nothing is held."""

    def __init__(self) -> None:
        self._came: list[int] = []
        self._previous: Any = signal.getsignal(signal.SIGINT)
        main = threading.current_thread() is threading.main_thread()
        self._active = main and self._previous is not None  # None: a handler not set by Python
        if self._active:
            signal.signal(signal.SIGINT, lambda sig, _f: self._came.append(sig))

    def release(self) -> None:
        """Restore the previous handler; hand it the SIGINT that came meanwhile, if one did."""
        if not self._active:
            return
        self._active = False
        signal.signal(signal.SIGINT, self._previous)
        if not self._came:
            return
        if callable(self._previous):
            self._previous(signal.SIGINT, None)
        elif self._previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


class _PhaseWatch:
    """Follows the worker's ``events.jsonl`` as it grows, to tell when the counted repetitions
    run: the supervisor then samples less often, so its own wake-ups do not steal the cores it
    is timing (on 2 cores a 20 ms sampler preempting one of llama.cpp's 2 threads stalls both at
    the next barrier)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self.counting = False

    def update(self) -> None:
        try:
            if self._path.stat().st_size <= self._offset:
                return
            with self._path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except OSError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            phase = event.get("phase")
            if phase == "generate":
                self.counting = bool(event.get("counted"))
            elif phase is not None:
                self.counting = False


def _report_leaks(leaked: list[proctrack.LeakedProcess]) -> None:
    for lp in leaked:
        cmd = " ".join(lp.cmdline)[:200]
        print(f"rtmatrix: killed leftover process {lp.pid} ({cmd})", file=sys.stderr, flush=True)


def launch(
    args: list[str],
    job_dir: Path,
    timeout_s: float,
    interval_s: float,
    cwd: Path | None = None,
    *,
    python: str | None = None,
    cgroup: memcap.MemoryCgroup | None = None,
    counted_interval_s: float | None = None,
    cpus: tuple[int, ...] | None = None,
) -> Launch:
    """Run ``python -m rtmatrix.worker ARGS`` in a new process group; sample the cell's RSS and
    CPU; kill the whole group at the deadline (or when the parent is interrupted); reap with
    wait4 for the OS's own peak RSS; then find and kill every process the cell left behind
    (its own cgroup, or a tracked descendant set: see :mod:`rtmatrix.proctrack`). While the
    worker runs its counted repetitions, samples are taken every ``counted_interval_s``
    instead (the OS's own peak RSS is exact either way). ``cpus``: pin the worker there (and
    read contention on those CPUs only), over ``RTMATRIX_WORKER_CPUS``."""
    spec = LaunchSpec(args, job_dir, timeout_s, interval_s, cwd, python or sys.executable, cpus)
    parent_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with proctrack.Tracker(shared=cgroup) as tracker:
        held = _HeldInterrupt()
        try:
            spawned = time.monotonic()
            proc = _spawn(spec, tracker.env())
            with _LIVE_LOCK:
                _LIVE.add(proc.pid)
        except BaseException:
            held.release()
            raise
        peak, hwm, timed_out, status, usage = 0, 0, False, 0, None
        deadline = spawned + timeout_s
        watch = _PhaseWatch(job_dir / "events.jsonl")
        try:
            held.release()  # a Ctrl-C that came while spawning is raised here, inside the try
            tracker.start(proc.pid)
            track_cg = tracker.cgroup.path if tracker.cgroup else None
            cpu = HostCpuSampler(proc.pid, cgroup=track_cg, cpus=pinned_cpus(cpus))
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                tree = tracker.tree()
                tracker.poll(tree)
                cpu.sample(tree)
                peak = max(peak, _tree_rss(tree))
                hwm = max(hwm, _vm_hwm(proc.pid))
                if time.monotonic() > deadline:
                    timed_out = True
                    kill_group(proc.pid)
                    _, status, usage = os.wait4(proc.pid, 0)
                    break
                watch.update()
                pause = interval_s
                if watch.counting and counted_interval_s is not None:
                    pause = counted_interval_s
                time.sleep(pause)
        except BaseException:  # Ctrl-C or anything else: never leave a process behind
            kill_group(proc.pid)
            with contextlib.suppress(ChildProcessError):
                os.wait4(proc.pid, 0)
            proc.returncode = -9
            _forget(proc.pid)
            _report_leaks(tracker.finish(proctrack.FoundAt.INTERRUPT))
            raise
        wall = time.monotonic() - spawned
        cpu.sample()
        leaked = tracker.finish(proctrack.FoundAt.CELL_END)
        tracking = tracker.describe()
        _forget(proc.pid)
    kill_group(proc.pid)  # anything left in the group
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    ru = usage.ru_maxrss * 1024 if usage and usage.ru_maxrss else None
    maxrss, method = os_peak(ru, parent_peak, hwm)
    return Launch(
        returncode=code,
        signal=signal.Signals(-code).name if code < 0 else None,
        timed_out=timed_out,
        wall_s=wall,
        spawned=spawned,
        peak_tree_rss=peak or None,
        maxrss=maxrss,
        stdout_tail=tail(job_dir / "stdout.txt"),
        stderr_tail=tail(job_dir / "stderr.txt"),
        maxrss_method=method,
        pid=proc.pid,
        leaked=tuple(leaked),
        tracking=tracking,
        cpu=cpu,
    )


def last_phase(job_dir: Path) -> tuple[str | None, dict[str, float]]:
    """The last phase the worker entered and the timeline marks it wrote, even if it died."""
    phase: str | None = None
    marks: dict[str, float] = {}
    for event in read_events(job_dir / "events.jsonl"):
        if event.phase is not None:
            phase = event.phase
        elif event.mark is not None:
            marks[event.mark] = event.t
    return phase, marks


@dataclass(frozen=True)
class ReadResult:
    """``result.json`` as the parent found it: a typed result, or why there is none."""

    result: WorkerResult | None
    #: set when a file exists but is unreadable or speaks another protocol
    problem: str | None = None


def read_result(job_dir: Path) -> ReadResult:
    path = job_dir / "result.json"
    if not path.exists():
        return ReadResult(None)
    try:
        data = json.loads(path.read_text("utf-8"))
        return ReadResult(WorkerResult.parse(data, f"worker result {path.name}"))
    except (OSError, ValueError) as exc:
        problem = str(exc) if isinstance(exc, ProtocolError) else f"unreadable: {exc}"
        return ReadResult(None, problem)


def prepare_adapter(
    target: str, cwd: Path | None = None, python: str | None = None, timeout_s: float = 1800.0
) -> dict[str, Any]:
    """The adapter's one-time preparation in a child (its progress goes to our stderr)."""
    try:
        proc = subprocess.run(
            [python or sys.executable, "-m", "rtmatrix.worker", "--prepare", target],
            stdout=subprocess.PIPE,
            text=True,
            timeout=timeout_s,
            cwd=cwd,
            env=worker_env(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"preparing {target} took longer than {timeout_s:.0f} s"}
    try:
        info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        info = {"error": f"prepare failed (exit {proc.returncode})"}
    return info


def describe_adapter(
    target: str, cwd: Path | None = None, python: str | None = None
) -> dict[str, Any]:
    """Ask a child for the adapter's metadata (the parent never imports adapters)."""
    proc = subprocess.run(
        [python or sys.executable, "-m", "rtmatrix.worker", "--describe", target],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=worker_env(),
        check=False,
    )
    try:
        info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        info = {"error": f"describe failed (exit {proc.returncode}): {proc.stderr[-500:]}"}
    return info
