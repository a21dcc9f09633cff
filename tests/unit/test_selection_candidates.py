"""Candidates: a crashed cell its control run rescued is a candidate with the control's setting and
figures; a broken one fails ``runs``."""

from __future__ import annotations

import copy

from rtmatrix.selection import select
from tests.helpers.selection_runs import make_cell, make_metric, make_run, model_in


def test_a_crash_its_control_setting_rescued_is_a_candidate_with_that_setting() -> None:
    crashed = make_cell("gamma", "q8_0", tg=1.0)
    figures = copy.deepcopy(crashed["metrics"]) | {"tg_tps": make_metric(90.0, "tokens/s")}
    crashed["outcome"] |= {"status": "crash", "signal": "SIGSEGV", "message": "killed"}
    crashed["verdict"] = "FAIL"
    crashed["control"] = {"options": {"extra_buffer_types": False}, "outcome": {"status": "ok"},
                          "verdict": "PASS", "metrics": figures, "diagnosed": True}  # fmt: skip
    broken = make_cell("delta", "q8_0", tg=1.0)
    broken["outcome"] |= {"status": "wrong-output", "message": "parity broken"}
    broken["verdict"] = "FAIL"
    m = model_in(select([make_run(0, [crashed, broken])]))
    (gamma,) = m.ranked
    assert gamma.label == "gamma q8_0 (extra_buffer_types=false)"
    assert gamma.figures["tg_tps"].value == 90.0
    assert any("runs with extra_buffer_types=false" in r for r in gamma.reasons)
    (delta,) = m.excluded
    assert delta.failures[0].text == "ends wrong-output (verdict FAIL): parity broken"
