from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rtmatrix.protocol import Job, JobParams, WorkerResult, read_events, read_log_lines
from rtmatrix.worker import describe, main


def test_describe_reports_metadata_without_the_runtime() -> None:
    info = describe("llama_cpp")
    assert info == {
        "name": "llama_cpp",
        "distribution": "llama-cpp-python",
        "extra": "llama-cpp",
        "container": "gguf",
        "converter": "llama_cpp",  # convert_hf_to_gguf.py for a checkpoint of another kind
        "prepares": True,  # builds llama-bench once per run
        "reference_tool": True,
        "reference_budget": {"benchmark_runs": 2, "quality_runs": 2},  # cell timeouts
        "reference_quality": True,  # llama-perplexity --kl-divergence on a real model
        "crash_control": {  # a crashed cell is rerun with extra buffer types off
            "options": {"extra_buffer_types": False},
            "explains": info["crash_control"]["explains"],
            "log_pattern": info["crash_control"]["log_pattern"],
        },
    }


def test_describe_cli_reports_errors_as_json(repo: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rtmatrix.worker", "--describe", "nope:X"],
        capture_output=True,
        text=True,
        check=False,
        cwd=repo,
    )
    assert out.returncode == 3 and "cannot be imported" in json.loads(out.stdout)["error"]


def test_bad_usage_and_bad_job(tmp_path: Path) -> None:
    assert main([]) == 2
    assert main([str(tmp_path / "missing.json")]) == 2


def test_error_result_is_written(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    params = JobParams(n_ctx=64, threads=1, prompt_tokens=4, gen_tokens=2, repetitions=1, warmup=0)
    Job(adapter="tests.helpers.adapters:RaisingAdapter", model_path="x.gguf", params=params).write(
        job
    )
    assert main([str(job)]) == 3
    result = WorkerResult.parse(json.loads((tmp_path / "result.json").read_text()), "result")
    assert result.status == "error" and result.phase == "load"
    assert result.error_kind  # always classified, "unclassified" at worst
    events = read_events(tmp_path / "events.jsonl")
    assert [e.phase for e in events if e.phase] == ["adapter", "import", "load"]


def test_a_scenario_the_runtime_cannot_run_is_unavailable_before_the_load(tmp_path: Path) -> None:
    # RaisingAdapter fails in load(); it offers no Streaming: the load must never be reached
    job = tmp_path / "job.json"
    params = JobParams(n_ctx=64, threads=1, prompt_tokens=4, gen_tokens=2, repetitions=1, warmup=0)
    Job(
        adapter="tests.helpers.adapters:RaisingAdapter",
        model_path="x.gguf",
        params=params,
        scenario="stream",
    ).write(job)
    main([str(job)])
    result = WorkerResult.parse(json.loads((tmp_path / "result.json").read_text()), "result")
    assert result.status == "unavailable", result.message
    assert "does not offer the Streaming capability" in (result.message or "")
    events = read_events(tmp_path / "events.jsonl")
    assert "load" not in [e.phase for e in events if e.phase]


def test_the_runtimes_log_lines_reach_the_phase_log_before_it_dies(tmp_path: Path) -> None:
    from rtmatrix.fixtures import prepare_fixture

    job = tmp_path / "job.json"
    params = JobParams(n_ctx=64, threads=1, prompt_tokens=4, gen_tokens=3, repetitions=1, warmup=0)
    model = prepare_fixture("tiny", "tiny", "f32", None, "gguf").path
    Job(adapter="tests.helpers.adapters:FastPathAdapter", model_path=str(model),
        params=params).write(job)  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "rtmatrix.worker", str(job)], check=False,
                          capture_output=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert proc.returncode == -11  # SIGSEGV in the first decode, no result written
    assert not (tmp_path / "result.json").exists()
    lines = read_log_lines(tmp_path / "events.jsonl")
    assert len(lines) == 101 and lines[-1] == "[info] load: fast path on: 3 tensors repacked"
    phases = [e.phase for e in read_events(tmp_path / "events.jsonl") if e.phase]
    assert phases[-1] == "generate"  # the log lines do not hide where it died


def test_an_engine_repetition_is_timed_by_its_token_callback() -> None:
    import time as _time
    from collections.abc import Callable, Sequence

    from rtmatrix.adapters.capabilities import EngineGeneration
    from rtmatrix.worker import _run_engine_repetition

    class Engine:
        def engine_generate(
            self, prompt: Sequence[int], n_gen: int, banned: Sequence[int],
            on_token: Callable[[int], None],
        ) -> list[int]:  # fmt: skip
            _time.sleep(0.02)  # the prefill
            for t in range(n_gen):
                on_token(t)
                _time.sleep(0.005)
            return list(range(n_gen))

        def counters(self) -> dict[str, float]:
            return {"pp_ms": 20.0, "pp_tokens": 4.0}

    engine = Engine()
    assert isinstance(engine, EngineGeneration)
    rep, logits = _run_engine_repetition(engine, [1, 2, 3, 4], 5, [], None)
    assert logits is None and rep.tokens == [0, 1, 2, 3, 4] and rep.pp_tokens == 4
    assert rep.ttft_s == rep.pp_s and rep.pp_s >= 0.02
    assert len(rep.decode_s) == 4 and all(d >= 0.004 for d in rep.decode_s)
    assert rep.counters == {"pp_ms": 20.0, "pp_tokens": 4.0}
