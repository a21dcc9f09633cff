"""The control run for crashes: which control a cell gets, what the record says, and a
third-party adapter that crashes only with a setting on, diagnosed end to end in real workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtmatrix.matrix import Cell, parse_matrix
from rtmatrix.runner.control import Control, control_for, diagnose, log_at_crash, wants_control
from rtmatrix.runner.record import complete
from tests.unit.test_runner import HELPERS, run

DECLARED = {
    "crash_control": {
        "options": {"fast_path": False},
        "explains": "the fast path",
        "log_pattern": "fast path",
    }
}


def cell(extra: str = "", options: str = "") -> Cell:
    text = (
        f"[[runtimes]]\nname = 'x'\nadapter = '{HELPERS}:FastPathAdapter'\n{extra}\n"
        f"{'options = ' + options if options else ''}\n"
        "[[fixtures]]\nmodel = 'tiny'\n"
    )
    return parse_matrix(text, Path("m.toml")).cells()[0]


def test_the_adapter_declares_the_control_and_a_matrix_can_replace_or_refuse_it() -> None:
    declared = control_for(cell(), DECLARED)
    assert declared is not None and declared.options == {"fast_path": False}
    assert declared.source == "adapter" and declared.log_pattern == "fast path"
    own = control_for(cell("crash_control = { graph_optimization_level = 'disable' }"), DECLARED)
    assert own is not None and own.options == {"graph_optimization_level": "disable"}
    assert own.source == "matrix"
    assert control_for(cell("crash_control = false"), DECLARED) is None
    assert control_for(cell(), {}) is None  # the row declares none


def test_no_control_for_a_cell_that_already_runs_with_the_control_options() -> None:
    assert control_for(cell(options="{ fast_path = false }"), DECLARED) is None


def test_the_control_cell_merges_the_options_and_has_no_control_of_its_own() -> None:
    c = cell(options="{ threads_hint = 3 }")
    ctl = Control({"fast_path": False}, "", "", "adapter").cell(c)
    assert ctl.options == {"threads_hint": 3, "fast_path": False}
    assert ctl.crash_control is False and ctl.key == c.key


def _rec(status: str, signal: str | None = "SIGSEGV") -> dict[str, Any]:
    return {"outcome": {"status": status, "signal": signal, "phase": "generate"}}


def test_only_a_signal_death_of_a_cell_expected_to_run_gets_a_control() -> None:
    assert wants_control(cell(), _rec("crash"))
    assert not wants_control(cell(), _rec("crash", None))  # exited without a result
    assert not wants_control(cell(), _rec("hang"))
    assert not wants_control(cell(), _rec("ok"))
    expects_error = parse_matrix(
        "[[runtimes]]\nname = 'llama_cpp'\n[[fixtures]]\nmodel = 'tiny'\nvariant = 'truncated'\n",
        Path("m.toml"),
    ).cells()[0]
    assert not wants_control(expects_error, _rec("crash"))


def test_the_log_at_a_crash_keeps_the_tail_and_the_lines_naming_the_path() -> None:
    lines = [f"[info] line {i}" for i in range(200)]
    lines[3] = "[info] AMX model buffer size = 13.50 MiB"
    found = log_at_crash(lines, "AMX", keep=10)
    assert found["lines_total"] == 200 and found["tail"] == lines[-10:]
    assert found["matching"] == [lines[3]]


def _control_rec(status: str) -> dict[str, Any]:
    metrics = {"pp_tps": {"value": 812.4}, "tg_tps": {"value": 95.0}} if status == "ok" else {}
    return {
        "outcome": {"status": status},
        "verdict": "PASS",
        "parity": {},
        "metrics": metrics,
        "wall_s": 1.0,
        "evidence": {"settings": {"requested": {"fast_path": False}}},
    }


def test_an_ok_control_diagnoses_the_crash_and_names_the_log_lines_and_figures() -> None:
    rec = _rec("crash") | {
        "verdict": "FAIL",
        "evidence": {"runtime_log_at_crash": {"matching": ["[info] fast path on", "[error] x"]}},
    }
    ctl = Control({"fast_path": False}, "the fast path", "fast path", "adapter")
    rec = complete(rec, [diagnose(rec, ctl, _control_rec("ok"))])
    assert rec["diagnosed"] is True and rec["outcome"]["status"] == "crash"
    reason = rec["verdict_reason"]
    assert "SIGSEGV in phase 'generate'" in reason and "fast path on" in reason
    assert "runs with fast_path=false (control ok, PP 812 tok/s, TG 95 tok/s)" in reason
    assert "[error] x" not in reason  # only the lines naming the path
    assert rec["control"]["metrics"]["tg_tps"]["value"] == 95.0


def test_a_failing_control_says_the_setting_does_not_explain_the_crash() -> None:
    rec = _rec("crash") | {"verdict": "FAIL", "verdict_reason": "earlier"}
    ctl = Control({"fast_path": False}, "", "", "adapter")
    rec = complete(rec, [diagnose(rec, ctl, _control_rec("crash"))])
    assert rec["diagnosed"] is False
    assert rec["verdict_reason"].startswith("earlier; ")
    assert "ends crash too: not explained by that setting" in rec["verdict_reason"]


@pytest.fixture(scope="module")
def fast_path_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 30\n"
        "[params]\nn_ctx = 64\nprompt_tokens = 6\ngen_tokens = 5\n"
        f"[[runtimes]]\nname = 'fast'\nadapter = '{HELPERS}:FastPathAdapter'\n"
        f"[[runtimes]]\nname = 'fast_off'\nadapter = '{HELPERS}:FastPathAdapter'\n"
        "options = { fast_path = false }\n"
        f"[[runtimes]]\nname = 'fast_nocontrol'\nadapter = '{HELPERS}:FastPathAdapter'\n"
        "crash_control = false\n"
        "[[fixtures]]\nmodel = 'tiny'\n"
    )
    return run(tmp_path_factory.mktemp("fast"), Path(__file__).resolve().parents[2], text)


def test_a_third_party_crash_only_with_its_setting_on_is_diagnosed_by_the_control(
    fast_path_run: dict[str, Any],
) -> None:
    c = next(c for c in fast_path_run["cells"] if c["runtime"] == "fast")
    assert c["outcome"]["status"] == "crash" and c["outcome"]["signal"] == "SIGSEGV"
    assert c["verdict"] == "FAIL"  # the default setting's truth stays the cell's
    assert c["diagnosed"] is True
    ctl = c["control"]
    assert ctl["options"] == {"fast_path": False} and ctl["outcome"]["status"] == "ok"
    assert ctl["parity"]["status"] == "measured" and ctl["parity"]["within_tolerance"]
    assert ctl["metrics"]["tg_tps"]["value"] > 0
    assert "load: fast path on: 3 tensors repacked" in c["verdict_reason"]
    assert "runs with fast_path=false (control ok" in c["verdict_reason"]
    # the runtime's own lines survived the crash, though the worker never reported them
    log = c["evidence"]["runtime_log_at_crash"]
    assert log["lines_total"] == 101 and log["tail"][-1].endswith("3 tensors repacked")
    # and the row's own figures are not the control's
    assert c["metrics"]["tg_tps"]["value"] is None
    line = next(
        ln for ln in fast_path_run["_progress"] if ln.startswith("[1/3] fast x") and ": " in ln
    )
    assert "crash FAIL" in line and "[diagnosed: control with fast_path=false ended ok]" in line


def test_no_control_runs_where_the_setting_is_already_off_or_control_is_refused(
    fast_path_run: dict[str, Any],
) -> None:
    cells = {c["runtime"]: c for c in fast_path_run["cells"]}
    assert cells["fast_off"]["outcome"]["status"] == "ok" and "control" not in cells["fast_off"]
    refused = cells["fast_nocontrol"]
    assert refused["outcome"]["status"] == "crash" and "control" not in refused
    assert "runtime_log_at_crash" in refused["evidence"]


def _numerics_rec(par: dict[str, Any], status: str = "ok") -> dict[str, Any]:
    num = {"control": {"precision": "f32"}, "control_explains": "PRECISION"}
    return {"outcome": {"status": status}, "parity": par,
            "evidence": {"stack": {"numerics": num}}}  # fmt: skip


def test_a_numerics_control_follows_the_precision_not_a_scenarios_own_checks() -> None:
    from rtmatrix.runner.control import numerics_control_for

    c = cell()
    outside = {"status": "measured", "within_tolerance": True,
               "numerics": {"downgraded": True, "within_requested_tolerance": False}}  # fmt: skip
    ctl = numerics_control_for(c, _numerics_rec(outside))
    assert ctl is not None and ctl.options == {"precision": "f32"} and ctl.source == "numerics"
    broken = {"status": "measured", "within_tolerance": False}
    assert numerics_control_for(c, _numerics_rec(broken, "wrong-output")) is not None
    held = {"status": "measured", "within_tolerance": True,
            "numerics": {"downgraded": True, "within_requested_tolerance": True}}  # fmt: skip
    assert numerics_control_for(c, _numerics_rec(held)) is None
    scenario = {"status": "unavailable", "reason": "a lifecycle cell"}
    assert numerics_control_for(c, _numerics_rec(scenario, "wrong-output")) is None
    asked = cell(options="{ precision = 'f32' }")
    assert numerics_control_for(asked, _numerics_rec(broken)) is None
