from __future__ import annotations

from typing import Any

from rtmatrix.outcome import Status
from rtmatrix.protocol import Repetition, WorkerResult
from rtmatrix.runner.classify import CellOutcome, classify, not_run, refine
from rtmatrix.runner.process import Launch


def _launch(**kw: Any) -> Launch:
    base: dict[str, Any] = {
        "returncode": 0,
        "signal": None,
        "timed_out": False,
        "wall_s": 1.0,
        "spawned": 0.0,
        "peak_tree_rss": 1,
        "maxrss": 1,
        "stdout_tail": "",
        "stderr_tail": "",
    }
    return Launch(**(base | kw))


def test_classify_order() -> None:
    hang = _launch(timed_out=True, returncode=-9, signal="SIGKILL")
    assert classify(hang, WorkerResult(status="ok"), "load", 0, None).status is Status.HANG
    killed = _launch(returncode=-9, signal="SIGKILL")
    assert classify(killed, None, "load", 512, None).status is Status.OOM_KILLED
    assert classify(killed, None, "load", 0, None).status is Status.CRASH
    assert classify(killed, None, "load", 0, None, cgroup_oom=True).status is Status.OOM_KILLED
    boom = classify(_launch(returncode=1, stderr_tail="boom\n"), None, "load", 0, None)
    assert boom.message.endswith("boom") and "no result" in boom.message
    err = WorkerResult(status="error", message="std::bad_alloc", phase="load")
    clean = classify(_launch(returncode=3), err, "load", 300, None)
    assert clean.status is Status.ERROR and clean.error_kind == "out-of-memory"


def test_worker_kind_wins_over_the_parent_hints() -> None:
    err = WorkerResult(status="error", message="bad_alloc", error_kind="dynamic-shape")
    assert classify(_launch(returncode=3), err, "load", 0, None).error_kind == "dynamic-shape"


def test_an_unreadable_result_is_a_crash_naming_the_problem() -> None:
    out = classify(_launch(returncode=0), None, "generate", 0, None, problem="protocol 7")
    assert out.status is Status.CRASH and "unreadable result (protocol 7)" in out.message


def test_unavailable_names_the_extra() -> None:
    res = WorkerResult(status="unavailable", message="no llama_cpp")
    out = classify(_launch(returncode=4), res, "import", 0, "llama-cpp")
    assert out.fix == "pip install 'rtmatrix[llama-cpp]'"


def test_outcome_dict_keeps_the_record_shape() -> None:
    before_worker = not_run(Status.ERROR, "fixture", "no such file").to_dict()
    assert before_worker == {"status": "error", "phase": "fixture", "message": "no such file"}
    err = classify(_launch(returncode=3), WorkerResult(status="error", message="x"), "l", 0, None)
    assert {"exit_code", "signal", "error_type"} <= set(err.to_dict())


def _rep(nonfinite: int = 0) -> Repetition:
    return Repetition(
        pp_s=0.1,
        pp_tokens=4,
        ttft_s=0.1,
        decode_s=[],
        step_s=[],
        tokens=[1],
        counters={},
        nonfinite_steps=nonfinite,
        first_token_monotonic=0.0,
        t_start=0.0,
        t_end=0.1,
    )


def test_refine_wrong_output_and_fallback() -> None:
    ok = CellOutcome(status=Status.OK, message="completed")
    nan = refine(ok, {"status": "unavailable"}, WorkerResult(status="ok", reps=[_rep(2)]))
    assert nan.status is Status.WRONG_OUTPUT and "non-finite" in nan.message
    par = {"status": "measured", "within_tolerance": False, "tokens_agree": 1, "tokens_compared": 8}
    broken = refine(ok, par, WorkerResult(status="ok", reps=[_rep()]))
    assert broken.status is Status.WRONG_OUTPUT and "parity broken" in broken.message
    placed = WorkerResult(
        status="ok", evidence={"placement": {"fallback": True, "requested": ["CUDA"]}}
    )
    assert refine(ok, {"status": "unavailable"}, placed).status is Status.FALLBACK
    checks = WorkerResult(status="ok", scenario={"checks": [{"name": "c", "ok": False}]})
    assert refine(ok, {}, checks).status is Status.WRONG_OUTPUT


def test_a_changed_model_is_wrong_output_charged_to_the_converter() -> None:
    ok = CellOutcome(status=Status.OK, message="completed")
    conv = {"changed_the_model": True, "summary": "top-1 39/48 positions agree"}
    par = {"status": "measured", "within_tolerance": False, "tokens_agree": 8,
           "tokens_compared": 8, "conversion": conv}  # fmt: skip
    out = refine(ok, par, WorkerResult(status="ok", reps=[_rep()]))
    assert out.status is Status.WRONG_OUTPUT and out.charged_to == "converter"
    assert "the conversion changed the model: top-1 39/48" in out.message
    assert out.to_dict()["charged_to"] == "converter"


def test_a_converter_refusal_is_its_own_kind_charged_to_the_converter() -> None:
    from rtmatrix.converters import Conversion, ConverterRefused
    from rtmatrix.runner.classify import converter_refused

    cmd = ["python", "convert_hf_to_gguf.py"]
    conv = Conversion("llama_cpp", "convert_hf_to_gguf.py", "llama-cpp-python", "0.3.36",
                      {"outtype": "f32"}, cmd, 1.0, "log", "ns")  # fmt: skip
    out = converter_refused(ConverterRefused("refused foo: NotImplementedError", conv))
    rec = out.to_dict()
    assert rec["status"] == "error" and rec["phase"] == "convert"
    assert rec["error_kind"] == "converter-refused" and rec["charged_to"] == "converter"
    assert "exit_code" not in rec and "llama-cpp-python" in rec["fix"]
    assert not_run(Status.ERROR, "fixture", "bad file", "input").to_dict()["charged_to"] == "input"
