"""``evidence.stack`` from real runtimes: four layers and the numerics on every ok cell, a
kernel-level fallback found where ONNX Runtime dequantizes weights at run time, and a kernel
choice changed by a setting (ONNX Runtime's graph optimization level) named first when the two
cells are compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.results.diff import compare_cells, default_checks
from rtmatrix.results.records import CellRecord
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def stack_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    text = (
        "[run]\nrepetitions = 1\nwarmup = 0\ntimeout_s = 120\n"
        "[params]\nn_ctx = 64\nprompt_tokens = 8\ngen_tokens = 4\n"
        "[[runtimes]]\nname = 'ort'\nadapter = 'onnxruntime'\n"
        "[[runtimes]]\nname = 'ort_unoptimized'\nadapter = 'onnxruntime'\n"
        "options = { graph_optimization_level = 'disable' }\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32', 'int4w']\n"
    )
    tmp = tmp_path_factory.mktemp("stack")
    m = parse_matrix(text, tmp / "m.toml")
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    )


def cell(run: dict[str, Any], runtime: str, dtype: str) -> CellRecord:
    found: CellRecord = next(
        c for c in run["cells"] if c["runtime"] == runtime and c["fixture"]["dtype"] == dtype
    )
    return found


def test_every_cell_that_ran_has_four_layers(stack_run: dict[str, Any]) -> None:
    for c in stack_run["cells"]:
        st = c["evidence"]["stack"]
        assert set(st) == {"format", "runtime", "backend", "kernels", "numerics"}, c["key"]
        assert st["format"]["container"] == "ONNX" and st["runtime"]["version"]
        assert "CPUExecutionProvider" in st["kernels"]["matmul_kernels"], st["kernels"]
        assert st["numerics"]["devices"] == ["cpu"], st["numerics"]  # from ORT's own home


def test_weights_dequantized_at_run_time_are_a_kernel_level_fallback(
    stack_run: dict[str, Any],
) -> None:
    c = cell(stack_run, "ort_unoptimized", "int4w")  # nothing fused: DQ nodes stay
    k = c["evidence"]["stack"]["kernels"]
    assert k["fallback"] and "DequantizeLinear" in k["fallback_reason"], k
    assert c["outcome"]["status"] == "fallback", c["outcome"]
    assert "kernel-level fallback" in c["outcome"]["message"]


def test_a_kernel_choice_changed_by_a_setting_is_named_first(stack_run: dict[str, Any]) -> None:
    a, b = cell(stack_run, "ort", "f32"), cell(stack_run, "ort_unoptimized", "f32")
    b = b | {"key": a["key"]}
    diff = compare_cells(a, b, default_checks())
    assert diff.stack, "the optimization level changes the optimized graph's kernels"
    assert diff.stack[0].startswith("kernels."), diff.stack
