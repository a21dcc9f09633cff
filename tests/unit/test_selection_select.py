"""The selection verdict end to end on golden runs: the defaults, no eligible candidate, real
checkpoints first, constraints from the newest run's table then the flags."""

from __future__ import annotations

import copy
from typing import Any

from rtmatrix.selection import Constraints, Limit, constraints_for, select
from rtmatrix.selection.answer import EXIT_ELIGIBLE, EXIT_NONE
from rtmatrix.selection.models import KINDS
from tests.browser.runs import as_run
from tests.helpers.selection_runs import (
    REAL,
    by_label,
    default_run,
    labels,
    make_cell,
    make_run,
    model_in,
)


def test_the_defaults_leave_every_real_row_eligible_front_first() -> None:
    sel = select([default_run()])
    m = model_in(sel)
    assert m.kind == KINDS[0] and not m.excluded and sel.exit_code == EXIT_ELIGIBLE
    assert labels(m.ranked)[0] == "llama_cpp q8_0"
    first = m.ranked[0]
    assert first.place == 1 and first.layer == 1 and not first.tied_with
    assert "on the Pareto front" in first.reasons[1]
    tvm = by_label(m.ranked, "tvm_aot f32")
    # both KLDs are negligible, so llama.cpp is as good on quality and better on speed, memory
    assert tvm.layer == 2 and "llama_cpp q8_0 is as good on quality" in "; ".join(tvm.reasons)


def test_no_eligible_candidate_for_the_first_model_exits_1() -> None:
    sel = select([default_run()], Constraints().with_overrides(["min_tg_tps=500"]))
    m = model_in(sel)
    assert not m.ranked and len(m.excluded) == 4 and sel.exit_code == EXIT_NONE
    assert "TG 111 tokens/s < min_tg_tps 500 tokens/s" in m.excluded[0].failures[0].text
    assert "No candidate meets the constraints." in sel.to_markdown()


def test_real_checkpoints_come_first_and_a_limit_without_figures_does_not_apply() -> None:
    run = make_run(0, [
        make_cell("alpha", "f32", tg=500, kld=None, model="tiny"),
        make_cell("alpha", "q8_0", tg=100),
    ])  # fmt: skip
    sel = select([run])
    assert [(m.model, m.kind) for m in sel.models] == [(REAL, KINDS[0]), ("tiny", KINDS[2])]
    tiny = model_in(sel, "tiny")
    assert tiny.ranked and "max_kld does not apply: no candidate has a KLD figure" in tiny.notes


def test_constraints_come_from_the_newest_runs_selection_table_then_the_flags() -> None:
    old = default_run()
    new: dict[str, Any] = copy.deepcopy(dict(old))
    new["run_id"], new["created_utc"] = "newer", "2026-12-09T00:00:00+00:00"
    new["matrix"]["selection"] = {"max_kld": 0.01, "priorities": ["tg"]}
    c = constraints_for([as_run(new), old], ["priorities=memory"])
    assert c.max_kld == Limit(0.01) and c.priorities[0] == "memory"
    assert c.origin == {"max_kld": "matrix", "priorities": "flag"}
    assert constraints_for([old]) == Constraints()
