"""How long the reference process (the runtime's own benchmark and quality tools) may run: the
adapter's ReferenceBudget, read from its description, and the timeout the parent gives it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

from rtmatrix.adapters.capabilities import (
    DEFAULT_REFERENCE_BUDGET,
    ReferenceBudget,
    reference_budget,
)
from rtmatrix.runner.orchestrate import _reference_timeout
from rtmatrix.worker import describe


def test_the_budget_counts_one_cell_timeout_per_tool_run() -> None:
    budget = ReferenceBudget(benchmark_runs=3, quality_runs=1)
    assert budget.seconds(50.0, quality=False) == 150.0
    assert budget.seconds(50.0, quality=True) == 200.0
    assert ReferenceBudget.from_dict(budget.to_dict()) == budget
    assert ReferenceBudget.from_dict(None) == DEFAULT_REFERENCE_BUDGET
    assert ReferenceBudget.from_dict({"quality_runs": 5}) == ReferenceBudget(2, 5)


def test_an_adapter_declares_its_budget_or_gets_the_default() -> None:
    class Declares:
        reference_budget: ClassVar[ReferenceBudget] = ReferenceBudget(benchmark_runs=1)

    class Silent:
        pass

    assert reference_budget(Declares) == ReferenceBudget(1, 2)
    assert reference_budget(Silent) is DEFAULT_REFERENCE_BUDGET


def test_describe_carries_the_budget_of_a_reference_tool_row() -> None:
    assert describe("llama_cpp")["reference_budget"] == {"benchmark_runs": 2, "quality_runs": 2}
    assert "reference_budget" not in describe("onnxruntime")  # no reference tool


def _ctx(info: dict[str, Any]) -> Any:
    return SimpleNamespace(describe={"rt": info})


def test_the_parent_gives_the_reference_process_the_budget_it_describes() -> None:
    cell: Any = SimpleNamespace(runtime="rt", run={"timeout_s": 100})
    llama = {"reference_budget": {"benchmark_runs": 2, "quality_runs": 2}}
    # llama-bench twice; with the quality tool, llama-perplexity twice more
    assert _reference_timeout(_ctx(llama), cell, quality=False) == 200.0
    assert _reference_timeout(_ctx(llama), cell, quality=True) == 400.0
    # a description without a budget (another environment's older rtmatrix): the default
    assert _reference_timeout(_ctx({}), cell, quality=True) == 400.0
    # never under two minutes
    short: Any = SimpleNamespace(runtime="rt", run={"timeout_s": 20})
    assert _reference_timeout(_ctx(llama), short, quality=False) == 120.0
    one = {"reference_budget": {"benchmark_runs": 1, "quality_runs": 0}}
    assert _reference_timeout(_ctx(one), cell, quality=True) == 120.0
    long: Any = SimpleNamespace(runtime="rt", run={"timeout_s": 300})
    assert _reference_timeout(_ctx(one), long, quality=True) == 300.0
