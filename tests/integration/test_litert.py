"""LiteRT (the ``litert`` row) on the tiny fixture family through real worker processes:
rtmatrix's own .tflite export with static prefill/decode signatures, greedy parity with the numpy
reference with the XNNPACK delegate on and off (and which nodes it took), and each failing
fixture's kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration
pytest.importorskip("ai_edge_litert")
pytest.importorskip("tflite")

ON, OFF = "litert[xnnpack=true]", "litert[xnnpack=false]"
FAILING = {
    "truncated": "bad-file",
    "garbage-header": "bad-file",
    "empty": "bad-file",
    "missing-tensor": "missing-tensor",
    "unknown-arch": "unsupported-op",
}


@pytest.fixture(scope="module")
def lite_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    failing = "".join(
        f"[[fixtures]]\nmodel = 'tiny'\nvariant = '{v}'\nexpect_kind = '{k}'\nruntimes = ['{ON}']\n"
        for v, k in FAILING.items()
    )
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 120\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 40\ngen_tokens = 16\n"
        "[[runtimes]]\nname = 'litert'\nsweep = { xnnpack = [true, false] }\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32', 'int8']\n"
        "[[fixtures]]\nname = 'tiny-too-long'\nmodel = 'tiny'\nparams = { n_ctx = 1024 }\n"
        "expect = 'error'\nexpect_kind = 'context-length'\n"
        f"runtimes = ['{ON}']\n" + failing
    )
    tmp = tmp_path_factory.mktemp("litert")
    m = parse_matrix(text, tmp / "m.toml")
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    )


def cell(run: dict[str, Any], runtime: str, fixture: str = "tiny", dtype: str = "f32") -> Any:
    return next(
        c
        for c in run["cells"]
        if c["runtime"] == runtime
        and c["fixture"]["name"] == fixture
        and c["fixture"]["dtype"] == dtype
    )


@pytest.mark.parametrize("runtime", [ON, OFF])
def test_f32_greedy_tokens_equal_the_reference_with_and_without_xnnpack(
    lite_run: dict[str, Any], runtime: str
) -> None:
    c = cell(lite_run, runtime)
    assert c["outcome"]["status"] == "ok", c["outcome"]
    par = c["parity"]
    assert par["tokens_agree"] == par["tokens_compared"] == 16 and par["within_tolerance"], par
    assert c["fixture"]["container"] == "tflite"
    shapes = c["evidence"]["static_shapes"]
    assert shapes["prefill_chunk"] == 32 and shapes["max_ctx"] >= 128  # 40 ids: 32 + 8 padded


def test_the_delegate_takes_the_math_and_leaves_the_cache_writes(
    lite_run: dict[str, Any],
) -> None:
    on = cell(lite_run, ON)["evidence"]["partitions"]
    off = cell(lite_run, OFF)["evidence"]["partitions"]
    assert off["partitions"] == 0 and off["delegated_nodes"] == 0
    assert on["partitions"] >= 1 and on["delegated_by_type"]["FULLY_CONNECTED"] > 0, on
    assert on["kept_by_type"]["DYNAMIC_UPDATE_SLICE"] > 0, on  # XNNPACK leaves them on the CPU
    assert on["nodes"] == off["nodes"]


def test_int8_runs_and_is_judged_as_quantized(lite_run: dict[str, Any]) -> None:
    c = cell(lite_run, ON, dtype="int8")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    assert c["parity"]["within_tolerance"], c["parity"]


@pytest.mark.parametrize("variant", sorted(FAILING))
def test_failing_fixtures_end_with_their_kind(lite_run: dict[str, Any], variant: str) -> None:
    c = cell(lite_run, ON, f"tiny-{variant}")
    assert c["verdict"] == "PASS", (c["outcome"], c.get("verdict_reason"))
    assert c["outcome"]["error_kind"] == FAILING[variant], c["outcome"]


def test_a_context_beyond_the_static_cache_is_a_context_length_error(
    lite_run: dict[str, Any],
) -> None:
    c = cell(lite_run, ON, "tiny-too-long")
    assert c["verdict"] == "PASS" and c["outcome"]["error_kind"] == "context-length", c["outcome"]
