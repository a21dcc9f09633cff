"""The fixed-shape fixture on every runtime row (issue 16), real runtimes, real workers.

The artifact is built for one prefill of ``FIXED_SHAPE_PROMPT_TOKENS`` tokens. Fed 16 tokens,
every row with a shape to check refuses cleanly (an error, not a crash); llama.cpp's row is a
skip whose reason says why GGUF has no such thing. Fed exactly the built length, the ONNX graph
(every dimension of the trace fixed, past_sequence 0 included) still refuses the first decode
step, while the TVM library (only prefill is compiled for one length; decode is its own
function for one token) runs: what each format fixes is visible."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.fixtures.variants import FIXED_SHAPE_PROMPT_TOKENS
from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = FIXED_SHAPE_PROMPT_TOKENS
ROWS = {
    "llama_cpp": ("llama_cpp", "[[runtimes]]\nname = 'llama_cpp'\n"),
    "onnxruntime": ("onnxruntime", "[[runtimes]]\nname = 'onnxruntime'\n"),
    "onnxruntime_genai": ("onnxruntime_genai", "[[runtimes]]\nname = 'onnxruntime_genai'\n"),
    "tvm_aot": ("tvm", "[[runtimes]]\nname = 'tvm_aot'\nadapter = 'tvm'\noptions = {mode='aot'}\n"),
    "tvm_jit": ("tvm", "[[runtimes]]\nname = 'tvm_jit'\nadapter = 'tvm'\noptions = {mode='jit'}\n"),
}
# the runtime's own words for the refused shape, per row
REFUSAL = {
    "onnxruntime": "INVALID_ARGUMENT : Got invalid dimensions for input: ",
    "onnxruntime_genai": "Got invalid dimensions for input: input_ids",
    "tvm_aot": f"Check failed: input_shape[i] == reg (16 vs. {N})",
    "tvm_jit": f"Check failed: input_shape[i] == reg (16 vs. {N})",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    rows = "".join(text for module, text in ROWS.values() if find_spec(module) is not None)
    if not rows:
        pytest.skip("no runtime installed")
    tmp = tmp_path_factory.mktemp("dynamic-shape")
    text = (
        "[run]\nrepetitions = 1\nwarmup = 0\ntimeout_s = 300\n"
        f"[params]\nthreads = 1\nn_ctx = 128\nprompt_tokens = [16, {N}]\ngen_tokens = 8\n"
        + rows
        + "[[fixtures]]\nmodel = 'tiny'\nvariant = 'fixed-shape'\nexpect_kind = 'dynamic-shape'\n"
    )
    m = parse_matrix(text, tmp / "m.toml")
    repo = Path(__file__).resolve().parents[2]
    rec = load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    return cast(dict[str, Any], rec)


def cell(run: dict[str, Any], runtime: str, prompt: int) -> dict[str, Any]:
    cells: list[dict[str, Any]] = run["cells"]
    for c in cells:
        if c["runtime"] == runtime and c["params"]["prompt_tokens"] == prompt:
            return c
    pytest.skip(f"{runtime} is not installed")


@pytest.mark.parametrize("runtime", list(REFUSAL))
def test_another_prompt_length_is_refused_cleanly(run: dict[str, Any], runtime: str) -> None:
    c = cell(run, runtime, 16)
    assert c["expect"] == "error"
    assert c["outcome"]["status"] == "error" and c["verdict"] == "PASS", c["outcome"]
    assert REFUSAL[runtime] in c["outcome"]["message"]
    assert c["outcome"]["error_kind"] == "dynamic-shape"  # the kind the fixture declares
    assert c["outcome"]["phase"] == "generate"  # it loads; the shape is checked at the call


@pytest.mark.parametrize("runtime", ["onnxruntime", "onnxruntime_genai"])
def test_onnx_fixes_every_traced_dim_so_decode_is_refused(
    run: dict[str, Any], runtime: str
) -> None:
    out = cell(run, runtime, N)["outcome"]
    assert out["status"] == "error" and out["error_kind"] == "dynamic-shape"
    assert f"Got: 1 Expected: {N}" in out["message"]  # the first decode step: one token


@pytest.mark.parametrize("runtime", ["tvm_aot", "tvm_jit"])
def test_tvm_runs_the_length_it_was_compiled_for(run: dict[str, Any], runtime: str) -> None:
    c = cell(run, runtime, N)
    assert c["outcome"]["status"] == "ok"
    assert c["parity"]["all_tokens_agree"]


def test_gguf_is_a_skip_that_says_why(run: dict[str, Any]) -> None:
    if find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    reasons = [s["reason"] for s in run["skipped"] if s["key"].startswith("llama_cpp|")]
    assert len(reasons) == 2
    assert all("no input shapes" in r and "per batch at run time" in r for r in reasons)
    assert not [c for c in run["cells"] if c["runtime"] == "llama_cpp"]
