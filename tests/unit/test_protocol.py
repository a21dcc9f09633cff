from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rtmatrix.protocol import (
    PROTOCOL_VERSION,
    Job,
    JobParams,
    PhaseEvent,
    ProtocolError,
    Repetition,
    WorkerResult,
    read_events,
    read_log_lines,
)
from rtmatrix.worker import EXIT_BAD_JOB


def job() -> Job:
    params = JobParams(
        n_ctx=512, threads=2, prompt_tokens=16, gen_tokens=8, repetitions=2, warmup=1
    )
    return Job(adapter="llama_cpp", model_path="/m.gguf", params=params, options={"a": 1})


def rep() -> Repetition:
    return Repetition(
        pp_s=0.1,
        pp_tokens=16,
        ttft_s=0.11,
        decode_s=[0.01],
        step_s=[0.011],
        tokens=[3, 4],
        counters={"pp_ms": 99.0},
        nonfinite_steps=0,
        first_token_monotonic=5.0,
        t_start=4.9,
        t_end=5.2,
    )


def test_job_round_trips_through_json(tmp_path: Path) -> None:
    job().write(tmp_path / "job.json")
    back = Job.read(tmp_path / "job.json")
    assert back == job() and isinstance(back.params, JobParams)
    assert json.loads((tmp_path / "job.json").read_text())["protocol"] == PROTOCOL_VERSION


def test_job_of_another_version_is_refused_naming_both(tmp_path: Path) -> None:
    data = job().to_dict() | {"protocol": PROTOCOL_VERSION + 1}
    (tmp_path / "job.json").write_text(json.dumps(data))
    with pytest.raises(ProtocolError) as err:
        Job.read(tmp_path / "job.json")
    text = str(err.value)
    assert str(PROTOCOL_VERSION + 1) in text and f"speaks {PROTOCOL_VERSION}" in text
    assert "fix:" in text and "job.json" in text


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: d.pop("model_path"), "missing key 'model_path'"),
        (lambda d: d.update(modelpath="x"), "unknown key(s) 'modelpath'"),
        (lambda d: d.update(timeout_s="soon"), "key 'timeout_s' has str"),
        (lambda d: d["params"].pop("n_ctx"), "job file"),
        (lambda d: d["params"].update(threads=True), "key 'threads' has bool"),
    ],
)
def test_bad_keys_are_named(tmp_path: Path, change: object, needle: str) -> None:
    data = job().to_dict()
    change(data)  # type: ignore[operator]
    (tmp_path / "job.json").write_text(json.dumps(data))
    with pytest.raises(ProtocolError) as err:
        Job.read(tmp_path / "job.json")
    assert needle in str(err.value)


def test_worker_refuses_a_job_of_another_protocol(tmp_path: Path) -> None:
    data = job().to_dict() | {"protocol": 99}
    (tmp_path / "job.json").write_text(json.dumps(data))
    proc = subprocess.run(
        [sys.executable, "-m", "rtmatrix.worker", str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == EXIT_BAD_JOB
    assert "99" in proc.stderr and f"speaks {PROTOCOL_VERSION}" in proc.stderr
    assert not (tmp_path / "result.json").exists()


def test_result_round_trips_with_typed_repetitions(tmp_path: Path) -> None:
    res = WorkerResult(status="ok", reps=[rep()], timeline={"worker_start": 1.0})
    res.write(tmp_path / "result.json")
    back = WorkerResult.parse(json.loads((tmp_path / "result.json").read_text()), "r")
    assert back == res and isinstance(back.reps[0], Repetition)


def test_result_of_another_version_is_refused() -> None:
    data = WorkerResult(status="ok").to_dict() | {"protocol": 0}
    with pytest.raises(ProtocolError, match="protocol version 0"):
        WorkerResult.parse(data, "worker result")


def test_events_skip_a_line_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [PhaseEvent(t=1.0, phase="load").to_json(), PhaseEvent(t=2.0, mark="loaded").to_json()]
    path.write_text("\n".join(lines) + '\n{"phase": "gener')
    events = read_events(path)
    assert [(e.phase, e.mark) for e in events] == [("load", None), (None, "loaded")]


def test_runtime_log_lines_are_events_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [
        PhaseEvent(t=1.0, phase="load").to_json(),
        PhaseEvent(t=1.1, log=["info", "AMX model buffer size = 13.50 MiB"]).to_json(),
        PhaseEvent(t=1.2, log=["warn", "odd"]).to_json(),
    ]
    path.write_text("\n".join(lines) + "\n")
    assert read_log_lines(path) == ["[info] AMX model buffer size = 13.50 MiB", "[warn] odd"]
    assert [e.phase for e in read_events(path)] == ["load", None, None]
