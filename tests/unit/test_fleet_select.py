"""Which cells a run covers and where: ``--cluster``, ``--target``, ``[cluster] address``."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from rtmatrix.fleet import FleetError, plan_run
from rtmatrix.fleet.select import combine
from rtmatrix.matrix import Matrix, parse_matrix

ROW = "[[runtimes]]\nname = 'llama_cpp'\n[[fixtures]]\nmodel = 'tiny'\n"
HERE = f"[[targets]]\nlabel = 'here'\nos = '{platform.system()}'\narch = '{platform.machine()}'\n"
ELSEWHERE = "[[targets]]\nlabel = 'elsewhere'\narch = 'riscv64'\n"


def matrix(text: str) -> Matrix:
    return parse_matrix(text + ROW, Path("m.toml"))


def test_a_matrix_without_targets_runs_here() -> None:
    plan = plan_run(matrix(""), None, None)
    assert plan.address is None and all(plan.only(c) for c in matrix("").cells())


def test_targets_without_a_cluster_need_target_naming_this_host() -> None:
    m = matrix(HERE + ELSEWHERE)
    with pytest.raises(FleetError, match=r"--cluster ADDRESS .* --target LABEL"):
        plan_run(m, None, None)
    plan = plan_run(m, None, ["here"])
    assert [c.target for c in m.cells() if plan.only(c)] == ["here"]
    with pytest.raises(FleetError, match="expects arch 'riscv64'"):
        plan_run(m, None, ["elsewhere"])
    with pytest.raises(FleetError, match="valid: here, elsewhere"):
        plan_run(m, None, ["there"])


def test_the_cluster_comes_from_the_flag_or_the_matrix() -> None:
    m = matrix("[cluster]\naddress = 'tls://sched:8786'\n" + HERE + ELSEWHERE)
    assert plan_run(m, None, None).address == "tls://sched:8786"
    plan = plan_run(m, "tls://other:8786", ["elsewhere"])  # no host check on a cluster
    assert plan.address == "tls://other:8786" and plan.targets == ("elsewhere",)


def test_combine_ands_the_filters() -> None:
    cells = matrix(HERE + ELSEWHERE).cells()
    f = combine(lambda c: c.runtime == "llama_cpp", None, lambda c: c.target == "here")
    assert f is not None and [c.target for c in cells if f(c)] == ["here"]
    assert combine(None) is None
