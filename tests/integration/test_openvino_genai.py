"""OpenVINO GenAI's own engine (``LLMPipeline``) on the tiny fixture: converted to the stateful IR
it loads (cached), timed through its streamer, its perf_metrics as the runtime counters, greedy
ids against the numpy reference, and the failing fixtures' kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration
pytest.importorskip("openvino_genai")

FAILING = {"truncated": "bad-file", "unknown-arch": "unsupported-op",
           "missing-tensor": "missing-tensor"}  # fmt: skip


@pytest.fixture(scope="module")
def genai_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    failing = "".join(
        f"[[fixtures]]\nmodel = 'tiny'\nvariant = '{v}'\nexpect_kind = '{k}'\n"
        for v, k in FAILING.items()
    )
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 180\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 32\ngen_tokens = 16\n"
        "[[runtimes]]\nname = 'openvino_genai'\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\n"
        "[[fixtures]]\nname = 'tiny-stream'\nmodel = 'tiny'\nscenario = 'stream'\n"
        "[[fixtures]]\nname = 'tiny-cancel'\nmodel = 'tiny'\nscenario = 'cancel'\n"
        "options = { cancel_cycles = 10, cancel_after_tokens = 6 }\n"
        "[[fixtures]]\nname = 'tiny-serve'\nmodel = 'tiny'\nscenario = 'serve'\n"
        "options = { serve_concurrency = [1, 2, 4], serve_rounds = 1, invariance_requests = 4 }\n"
        + failing
    )
    tmp = tmp_path_factory.mktemp("ov-genai")
    m = parse_matrix(text, tmp / "m.toml")
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    )


def cell(run: dict[str, Any], fixture: str) -> dict[str, Any]:
    return next(c for c in run["cells"] if c["fixture"]["name"] == fixture)


def test_the_engine_generates_the_references_greedy_ids(genai_run: dict[str, Any]) -> None:
    c = cell(genai_run, "tiny")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    par = c["parity"]
    assert par["judged_on"] == "ids" and par["tokens_compared"] == 16, par
    assert par["within_tolerance"], par
    ev = c["evidence"]
    assert ev["settings"]["asked"]["KV_CACHE_PRECISION"] == "f32"
    assert ev["conversion"]["layers"] == 4 and ev["conversion"]["vocab"] == 512


def test_perf_metrics_beside_the_harness_clock(genai_run: dict[str, Any]) -> None:
    m = cell(genai_run, "tiny")["metrics"]
    assert m["tg_tps"]["source"] == "harness-clock" and m["tg_tps"]["value"] > 0
    assert m["tg_tps_counter"]["source"] == "runtime-counter"
    ratio = m["tg_tps_counter"]["value"] / m["tg_tps"]["value"]
    assert 0.5 < ratio < 2.0, (m["tg_tps_counter"], m["tg_tps"])


def checks(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in c["metrics"]["lifecycle_checks"]["checks"]}


def test_stream_and_cancel_through_the_engines_streamer(genai_run: dict[str, Any]) -> None:
    s, c = cell(genai_run, "tiny-stream"), cell(genai_run, "tiny-cancel")
    assert s["outcome"]["status"] == "ok", (s["outcome"], s["metrics"].get("lifecycle_checks"))
    assert "StreamerBase" in s["metrics"]["stream_ttft_s"]["api"]
    assert c["outcome"]["status"] == "ok", (c["outcome"], c["metrics"].get("lifecycle_checks"))
    m = c["metrics"]
    assert m["cancel_stop_tokens_after"]["value"] <= 1  # STOP ends the generation at that id


def test_continuous_batching_levels_and_batch_invariance(genai_run: dict[str, Any]) -> None:
    c = cell(genai_run, "tiny-serve")
    assert c["outcome"]["status"] == "ok", (c["outcome"], c["metrics"].get("lifecycle_checks"))
    m = c["metrics"]
    assert "ContinuousBatchingPipeline" in m["lifecycle_checks"]["api"]
    for n in (1, 2, 4):
        assert m[f"serve_c{n}_errors"]["value"] == 0
        assert m[f"serve_c{n}_throughput_tps"]["value"] > 0
    ok = {k["name"]: k["ok"] for k in m["lifecycle_checks"]["checks"]}
    assert ok["serve_invariance_isolation"] and ok["serve_invariance_reference"], ok
    assert m["serve_invariance_concurrent_reference_agree"]["value"] == 4


@pytest.mark.parametrize("variant", sorted(FAILING))
def test_failing_fixtures_end_with_their_kind(genai_run: dict[str, Any], variant: str) -> None:
    c = cell(genai_run, f"tiny-{variant}")
    assert c["verdict"] == "PASS", (c["outcome"], c.get("verdict_reason"))
    assert c["outcome"]["error_kind"] == FAILING[variant], c["outcome"]
