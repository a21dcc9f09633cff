"""The ``sample`` scenario through real worker processes on the tiny fixture: the samplers of
llama.cpp (its binding's chain), onnxruntime-genai and OpenVINO GenAI reproduce their seeds and
follow their documented stage order; adapters with a deliberately wrong sampler are caught."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration

HELPERS = "tests.helpers.wrong_sampler"
ROWS = {
    "llama_cpp": "llama_cpp",
    "llama_server": "llama_server",
    "onnxruntime_genai": "onnxruntime_genai",
    "openvino_genai": "openvino_genai",
    "numpy_right": f"{HELPERS}:NumpySampler",
    "numpy_temp_after_top_p": f"{HELPERS}:TemperatureAfterTopP",
    "numpy_seedless": f"{HELPERS}:IgnoresTheSeed",
}


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    rows = "".join(f"[[runtimes]]\nname = '{n}'\nadapter = '{a}'\n" for n, a in ROWS.items())
    text = (
        "[run]\nrepetitions = 1\nwarmup = 0\ntimeout_s = 300\n"
        "[params]\nthreads = 2\nn_ctx = 128\nprompt_tokens = 16\ngen_tokens = 16\n"
        + rows
        + "[[fixtures]]\nname = 'tiny-sample'\nmodel = 'tiny'\nscenario = 'sample'\n"
        "options = { temperature = 2.0, top_p = 0.5, draws = 300, sample_tokens = 24 }\n"
    )
    tmp = tmp_path_factory.mktemp("sample")
    m = parse_matrix(text, tmp / "m.toml")
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    )


def cell(run: dict[str, Any], runtime: str) -> dict[str, Any]:
    return next(c for c in run["cells"] if c["runtime"] == runtime)


def checks(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in c["metrics"]["lifecycle_checks"]["checks"]}


@pytest.mark.parametrize("runtime", ["llama_cpp", "llama_server", "onnxruntime_genai",
                                     "openvino_genai", "numpy_right"])  # fmt: skip
def test_a_runtimes_own_sampler_reproduces_and_follows_its_documented_order(
    sample_run: dict[str, Any], runtime: str
) -> None:
    c = cell(sample_run, runtime)
    got = checks(c)
    assert c["outcome"]["status"] == "ok", (c["outcome"], got)
    assert all(k["ok"] for k in got.values()), got
    assert set(got) >= {"sample_same_seed_twice", "sample_other_seed_differs",
                        "sample_same_seed_other_process", "sample_same_seed_other_threads",
                        "sample_support", "sample_order"}  # fmt: skip
    order = c["metrics"]["sample_order_found"]
    assert order["value"] == order["documented"], order
    assert min(order["power_against"].values()) > 0.9, order  # the probe could tell them apart


def test_temperature_applied_after_top_p_is_caught_as_the_other_order(
    sample_run: dict[str, Any],
) -> None:
    c = cell(sample_run, "numpy_temp_after_top_p")
    got = checks(c)
    assert c["outcome"]["status"] == "wrong-output", c["outcome"]
    assert not got["sample_order"]["ok"], got["sample_order"]
    assert c["metrics"]["sample_order_found"]["value"] == "truncate-then-temperature"
    assert got["sample_same_seed_twice"]["ok"]  # the seed is honoured: only the order is wrong


def test_a_sampler_that_ignores_the_seed_is_caught(sample_run: dict[str, Any]) -> None:
    c = cell(sample_run, "numpy_seedless")
    got = checks(c)
    assert c["outcome"]["status"] == "wrong-output", c["outcome"]
    assert not got["sample_same_seed_twice"]["ok"]
    div = got["sample_same_seed_twice"]["divergence"]
    assert div["position"] >= 0 and len(div["reference_logits"]) == 2, div


@pytest.mark.parametrize("runtime", ["llama_cpp", "llama_server"])
def test_a_json_schema_constraint_holds_and_its_cost_is_measured(
    sample_run: dict[str, Any], runtime: str
) -> None:
    c = cell(sample_run, runtime)
    got = checks(c)
    assert got["sample_constrained_valid"]["ok"], got["sample_constrained_valid"]
    assert got["sample_constrained_budget_ends"]["ok"], got["sample_constrained_budget_ends"]
    m = c["metrics"]
    assert m["sample_constrained_valid"]["value"] == "10/10"
    assert m["sample_constrained_tg_ratio"]["value"] > 0


def test_a_server_draws_the_same_ids_beside_other_requests(sample_run: dict[str, Any]) -> None:
    got = checks(cell(sample_run, "llama_server"))
    assert got["sample_same_seed_beside_requests"]["ok"], got["sample_same_seed_beside_requests"]
