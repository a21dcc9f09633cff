from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.protocol import WorkerResult
from rtmatrix.runner.process import last_phase, launch, os_peak, read_result


def test_launch_samples_memory_and_reads_maxrss(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text("{not json")
    lau = launch([str(job)], tmp_path, 20, 0.01)
    assert lau.returncode == 2 and "cannot read job file" in lau.stderr_tail
    assert lau.maxrss and lau.maxrss > 1_000_000
    assert lau.leaked == () and lau.tracking["nets"]
    assert lau.cpu is not None and len(lau.cpu.samples) >= 1


def test_os_peak_refuses_the_inherited_high_water_mark() -> None:
    assert os_peak(500, 100, 50)[0] == 500
    value, method = os_peak(100, 100, 50)
    assert value == 50 and "VmHWM" in method
    assert os_peak(None, 100, 0)[0] is None


def test_read_result_typed_unreadable_or_missing(tmp_path: Path) -> None:
    assert read_result(tmp_path).result is None and read_result(tmp_path).problem is None
    (tmp_path / "result.json").write_bytes(b"\x00{{")
    assert "unreadable" in str(read_result(tmp_path).problem)
    (tmp_path / "result.json").write_text(json.dumps({"status": "ok", "protocol": 42}))
    assert "protocol version 42" in str(read_result(tmp_path).problem)
    WorkerResult(status="ok").write(tmp_path / "result.json")
    got = read_result(tmp_path).result
    assert got is not None and got.status == "ok"


def test_last_phase_and_marks(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text(
        '{"t": 1.0, "phase": "load"}\n{"t": 2.0, "mark": "loaded"}\n{"t": 3'
    )
    assert last_phase(tmp_path) == ("load", {"loaded": 2.0})


def _hanging_python(tmp_path: Path) -> str:
    """A stand-in for the worker's interpreter that ignores its arguments and sleeps."""
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    script.chmod(0o755)
    return str(script)


def _gone(pid: int) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@pytest.mark.usefixtures("ctrl_c")
@pytest.mark.parametrize("where", ["spawn", "tracker-start"])
def test_ctrl_c_at_spawn_still_kills_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Ctrl-C that lands while the worker is spawned (inside Popen, or before the supervising
    loop starts) must not leave the worker running with nobody knowing its pid."""
    from rtmatrix import proctrack
    from rtmatrix.runner import process

    pids: list[int] = []
    real_spawn, real_start = process._spawn, proctrack.Tracker.start

    def spawn(spec: Any, env: dict[str, str]) -> Any:
        proc = real_spawn(spec, env)
        pids.append(proc.pid)
        if where == "spawn":
            os.kill(os.getpid(), signal.SIGINT)
        return proc

    def start(self: Any, pid: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        real_start(self, pid)

    monkeypatch.setattr(process, "_spawn", spawn)
    if where == "tracker-start":
        monkeypatch.setattr(proctrack.Tracker, "start", start)
    with pytest.raises(KeyboardInterrupt):
        launch(["job.json"], tmp_path, 30, 0.01, python=_hanging_python(tmp_path))
    assert pids and _gone(pids[0])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_worker_launch_settings_from_the_environment() -> None:
    from rtmatrix.runner.process import CPUS_ENV, NO_ASLR_ENV, launch_settings

    assert launch_settings({}) == (False, None)
    assert launch_settings({NO_ASLR_ENV: "1", CPUS_ENV: "0,1"}) == (True, [0, 1])
    assert launch_settings({NO_ASLR_ENV: "0", CPUS_ENV: " "}) == (False, None)
    with pytest.raises(ValueError, match="expected CPU numbers"):
        launch_settings({CPUS_ENV: "all"})


def test_kill_live_ends_workers_supervised_by_other_threads(tmp_path: Path) -> None:
    """A duet comparison supervises two workers from threads; Ctrl-C reaches the main thread
    only, which kills every live worker group so the threads return and nothing is left."""
    import threading

    from rtmatrix.runner import process

    done: list[Any] = []
    hang = _hanging_python(tmp_path)
    threads = [
        threading.Thread(
            target=lambda d=d: done.append(launch(["job.json"], d, 60, 0.01, python=hang))
        )
        for d in (tmp_path / "one", tmp_path / "two")
    ]
    for d in (tmp_path / "one", tmp_path / "two"):
        d.mkdir()
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(process._LIVE) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(process._LIVE) == 2
    pids = list(process._LIVE)
    process.kill_live()
    for t in threads:
        t.join(10)
    assert len(done) == 2 and all(lau.returncode == -9 for lau in done)
    assert all(_gone(p) for p in pids) and not process._LIVE


def test_explicit_cpus_pin_the_worker_over_the_environment(tmp_path: Path) -> None:
    from rtmatrix.runner.process import pinned_cpus

    assert pinned_cpus((1,)) == [1]
    job = tmp_path / "job.json"
    job.write_text("{}")
    first = min(os.sched_getaffinity(0))  # CPU 0 may be outside this host's cpuset
    lau = launch([str(job)], tmp_path, 20, 0.01, cpus=(first,))
    assert lau.cpu is not None and lau.cpu.describe()["cpus"] == [first]
