from __future__ import annotations

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
