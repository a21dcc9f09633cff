"""Google's LiteRT exporter for real: its venv (built on first use in the tools cache, once, then
reused by every session), a Qwen3 toy converted offline by ``litert-torch export_hf`` to the
static-shape .tflite the ``litert`` row drives with rtmatrix's loop — its logits agree with
transformers' fp32 ones, at f32 and, within the quantized tolerance, at litert-torch's default
int8 recipe — and Gemma 3, which litert-torch refuses: an outcome charged to the converter.
Skipped, saying why, only where the venv cannot be built here (no package index)."""

from __future__ import annotations

import sys
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.converters import litert_torch as lt
from rtmatrix.fixtures.spec import ExporterUnavailable
from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
#: a correct f32 conversion agrees with transformers within ~1e-5 on the toys
EXACT = 1e-3


@pytest.fixture(scope="module")
def env() -> lt.Environment:
    # found, not imported: this process must stay free of torch (the toys' builder needs it)
    missing = [m for m in ("ai_edge_litert", "torch", "transformers") if find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    t0 = time.perf_counter()
    try:
        built = lt.environment(lambda msg: print(msg, file=sys.stderr))
    except ExporterUnavailable as exc:
        pytest.skip(f"litert-torch's venv cannot be built here: {exc}")
    print(f"litert-torch venv {'built' if built.built else 'found'} in "
          f"{time.perf_counter() - t0:.1f} s: {built.root}", file=sys.stderr)  # fmt: skip
    return built


@pytest.fixture(scope="module")
def lite_run(env: lt.Environment, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    del env
    tmp = tmp_path_factory.mktemp("litert-archs")
    text = (
        "[run]\nrepetitions = 1\nwarmup = 0\ntimeout_s = 300\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 40\ngen_tokens = 8\n"
        "[[runtimes]]\nname = 'litert'\noptions = { quality_tokens = 64 }\n"
        "[[fixtures]]\nmodel = 'qwen3-toy'\ndtypes = ['f32', 'litert-int8']\n"
        "[[fixtures]]\nmodel = 'gemma3-toy'\ndtypes = ['f32']\n"
    )
    m = parse_matrix(text, tmp / "m.toml")
    return cast(dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None,
                                                    cwd=REPO)))  # fmt: skip


def _cell(run: dict[str, Any], name: str, dtype: str = "f32") -> dict[str, Any]:
    return next(c for c in run["cells"] if c["fixture"]["model"] == name
                and c["fixture"]["dtype"] == dtype)  # fmt: skip


def test_the_litert_row_agrees_with_transformers_logits(lite_run: dict[str, Any]) -> None:
    c = _cell(lite_run, "qwen3-toy")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    conv = c["parity"]["conversion"]
    assert conv["changed_the_model"] is False, conv
    assert conv["top1_agree"] == conv["top1_positions"] > 0
    assert conv["max_abs_logit_diff"] < EXACT, conv
    kld = c["metrics"]["kld_mean"]
    assert kld["value"] is not None and kld["value"] < 1e-6, kld
    made = c["fixture"]["conversion"]
    assert (made["tool"], made["distribution"]) == (lt.TOOL, "litert-torch")
    assert made["options"] == {"quantization_recipe": "none", "prefill_lengths": "32",
                               "cache_length": "512"}  # fmt: skip
    assert "network namespace" in made["offline"] and made["network_attempts"] == []


def test_the_row_read_litert_torchs_layout(lite_run: dict[str, Any]) -> None:
    ev = _cell(lite_run, "qwen3-toy")["evidence"]
    shapes = ev["static_shapes"]
    assert shapes["made_by"] == "litert-torch export_hf"
    assert shapes["signatures"] == ["prefill_32", "decode"]
    assert (shapes["prefill_lengths"], shapes["cache_length"]) == ([32], 512)
    assert shapes["prefill_returns_logits"] is False
    kv = ev["stack"]["numerics"]["kv_cache"]
    assert kv["value"] == "f32" and kv["source"] == "litert-torch export_hf", kv


def test_the_default_int8_recipe_is_judged_by_what_it_made(lite_run: dict[str, Any]) -> None:
    c = _cell(lite_run, "qwen3-toy", "litert-int8")
    # judged as a quantized cell (KLD, same-top against transformers): a 64-wide toy at int8
    # with activations quantized per call may drift, but the conversion itself held
    assert c["outcome"]["status"] in ("ok", "wrong-output"), c["outcome"]
    assert c["outcome"].get("charged_to") is None
    made = c["fixture"]["conversion"]
    assert made["options"]["quantization_recipe"] == "dynamic_wi8_afp32"
    assert c["fixture"]["path"].endswith("model_quantized.tflite")
    kld = c["metrics"]["kld_mean"]
    assert kld["value"] is not None and 0 < kld["value"] < 0.5, kld
    act = c["evidence"]["stack"]["numerics"]["activation_quantization"]
    assert act["value"] == "i8", act


def test_gemma3_is_the_converters_refusal(lite_run: dict[str, Any]) -> None:
    c = _cell(lite_run, "gemma3-toy")
    out = c["outcome"]
    assert out["status"] == "error" and out["error_kind"] == "converter-refused", out
    assert out["charged_to"] == "converter"
    assert "LiteRT's exporter (litert-torch export_hf" in out["message"]


def test_a_second_conversion_is_the_caches(lite_run: dict[str, Any]) -> None:
    from rtmatrix.fixtures import archs

    path = Path(_cell(lite_run, "qwen3-toy")["fixture"]["path"])
    t0 = time.perf_counter()
    again = lt.convert(archs.checkpoint_folder("qwen3-toy"), "none")
    assert not again.built and again.path == path
    assert time.perf_counter() - t0 < 10.0  # the exporter did not run again
