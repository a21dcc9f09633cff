"""MNN (the ``mnn`` row) on the tiny fixture family through real worker processes: its own
converter (cached, in a child), greedy parity with the numpy reference, the converter's weight
quantization judged as a quantized dtype, and each failing fixture's kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration
pytest.importorskip("MNN")

FAILING = {  # variant -> the error kind that passes (as the ONNX Runtime row's)
    "truncated": "bad-file",
    "garbage-header": "bad-file",
    "empty": "bad-file",
    "missing-tensor": "missing-tensor",
    "unknown-arch": "unsupported-op",
}


@pytest.fixture(scope="module")
def mnn_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    failing = "".join(
        f"[[fixtures]]\nmodel = 'tiny'\nvariant = '{v}'\nexpect_kind = '{k}'\n"
        f"runtimes = ['mnn[weight_quant_bits=0]']\n"
        for v, k in FAILING.items()
    )
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 120\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 32\ngen_tokens = 16\n"
        "[[runtimes]]\nname = 'mnn'\nsweep = { weight_quant_bits = [0, 8] }\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\n"
        "[[fixtures]]\nmodel = 'tiny'\nvariant = 'fixed-shape'\nexpect = 'error'\n"
        "expect_kind = 'dynamic-shape'\nruntimes = ['mnn[weight_quant_bits=0]']\n" + failing
    )
    tmp = tmp_path_factory.mktemp("mnn")
    m = parse_matrix(text, tmp / "m.toml")
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    )


def cell(run: dict[str, Any], runtime: str, fixture: str = "tiny") -> dict[str, Any]:
    return next(
        c for c in run["cells"] if c["runtime"] == runtime and c["fixture"]["name"] == fixture
    )


def test_f32_greedy_tokens_equal_the_reference(mnn_run: dict[str, Any]) -> None:
    rt = mnn_run["runtimes"]["mnn[weight_quant_bits=0]"]
    assert rt["distribution"] == "mnn" and rt["container"] == "onnx"
    c = cell(mnn_run, "mnn[weight_quant_bits=0]")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    par = c["parity"]
    assert par["tokens_agree"] == par["tokens_compared"] == 16 and par["within_tolerance"], par
    ev = c["evidence"]
    assert ev["settings"]["asked"] == {"backend": "CPU", "precision": "normal", "numThread": 2}
    assert ev["conversion"]["flags"] == [] and "requantized" not in ev
    assert c["metrics"]["tg_tps"]["source"] == "harness-clock"


def test_converter_quantized_weights_are_judged_as_a_quantized_dtype(
    mnn_run: dict[str, Any],
) -> None:
    c = cell(mnn_run, "mnn[weight_quant_bits=8]")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    assert c["evidence"]["conversion"]["flags"] == ["--weightQuantBits", "8"]
    par = c["parity"]
    assert par["requantized"]["judged_as"] == "int8w" and par["logit_tolerance"] == 1.0, par
    assert 0 < par["max_abs_logit_err"] <= 1.0, par  # quantized: not the f32 logits, but close
    f32 = cell(mnn_run, "mnn[weight_quant_bits=0]")["evidence"]["conversion"]["size_bytes"]
    assert c["evidence"]["conversion"]["size_bytes"] < f32 / 2


@pytest.mark.parametrize("variant", sorted(FAILING))
def test_failing_fixtures_end_with_their_kind(mnn_run: dict[str, Any], variant: str) -> None:
    c = cell(mnn_run, "mnn[weight_quant_bits=0]", f"tiny-{variant}")
    assert c["verdict"] == "PASS", (c["outcome"], c.get("verdict_reason"))
    assert c["outcome"]["error_kind"] == FAILING[variant], c["outcome"]


def test_a_static_shape_is_ignored_and_the_cell_says_the_expected_error_never_came(
    mnn_run: dict[str, Any],
) -> None:
    c = cell(mnn_run, "mnn[weight_quant_bits=0]", "tiny-fixed-shape")
    assert c["outcome"]["status"] == "ok" and c["parity"]["within_tolerance"], c["outcome"]
    assert c["verdict"] == "FAIL"  # the file says [1, 32]; MNN reshapes and runs 32 + decode
