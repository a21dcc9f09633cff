from __future__ import annotations

from pathlib import Path
from typing import Any

from rtmatrix.metrics.contention import ContentionReading
from rtmatrix.protocol import WorkerResult
from rtmatrix.runner.record import reference_metrics


def _rec() -> dict[str, Any]:
    tps = {"unit": "tokens/s", "source": "harness-clock"}
    return {
        "metrics": {"pp_tps": tps | {"value": 900.0}, "tg_tps": tps | {"value": 90.0}},
        "evidence": {},
        "contended": False,
    }


def _ref() -> WorkerResult:
    evidence = {"tool": "llama-bench", "command": "llama-bench -m f", "tool_version": "v"}
    data = {"pp_tps": [1000.0, 1000.0], "tg_tps": [100.0, 100.0], "evidence": evidence}
    return WorkerResult(status="ok", reference=data)


def _busy(cores: float) -> ContentionReading:
    return ContentionReading(cores, 0.0, cores > 0.25, 0.25, 0.0, 1.0)


def test_reference_figures_and_ratios_carry_source_and_the_reference_runs_load() -> None:
    rec = _rec()
    reference_metrics(rec, _ref(), _busy(0.01))
    m = rec["metrics"]
    assert m["tg_tps_reference"]["source"] == "reference-tool"
    assert m["tg_tps_reference"]["value"] == 100.0 and m["tg_reference_ratio"]["value"] == 0.9
    assert m["pp_reference_ratio"]["contended"] is False
    assert m["tg_reference_ratio"]["reference_host_busy_cores"] == 0.01
    assert rec["evidence"]["reference_tool"]["tool"] == "llama-bench"


def test_a_busy_reference_run_marks_its_ratio_contended() -> None:
    rec = _rec()
    reference_metrics(rec, _ref(), _busy(1.2))
    assert rec["metrics"]["tg_reference_ratio"]["contended"] is True
    assert rec["metrics"]["tg_tps_reference"]["contended"] is True


def test_a_failed_reference_is_unavailable_with_its_reason() -> None:
    rec = _rec()
    reference_metrics(rec, WorkerResult(status="unavailable", message="not built"), None)
    for key in ("pp_tps_reference", "tg_tps_reference", "pp_reference_ratio"):
        assert rec["metrics"][key]["value"] is None
        assert rec["metrics"][key]["reason"] == "not built"


def test_a_failed_quality_pass_is_unavailable_with_its_reason(tmp_path: Path) -> None:
    from rtmatrix.matrix import parse_matrix
    from rtmatrix.metrics.quality import QualityPlan
    from rtmatrix.names import M
    from rtmatrix.outcome import Status
    from rtmatrix.runner.classify import CellOutcome
    from rtmatrix.runner.record import Finished, quality_for

    cell = parse_matrix(
        "[[runtimes]]\nname = 'llama_cpp'\n[[fixtures]]\nmodel = 'tiny'\n", tmp_path / "m.toml"
    ).cells()[0]
    plan = QualityPlan("m", "quality.txt", "t", [1, 2, 3], 2)
    result = WorkerResult(status="ok", quality={"error": "RuntimeError: decode failed"})
    ok = CellOutcome(Status.OK, "completed")
    fin = Finished(cell, ok, result=result, job_dir=tmp_path, quality=plan)
    out = quality_for(fin, plan)
    assert out[M.KLD_MEAN].value is None
    assert out[M.KLD_MEAN].reason == "the teacher-forced pass failed: RuntimeError: decode failed"
