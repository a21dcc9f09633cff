from __future__ import annotations

import json
from pathlib import Path

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
