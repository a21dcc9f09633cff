"""Lifecycle scenarios (stream, cancel, serve) on real runtimes and the tiny fixture, through
``run_matrix`` and real worker processes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix
from rtmatrix.runtimes.llama_cpp.server import SERVER_DEPS
from tests.helpers.llama import KNOWN_TO_WORK

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HEAD = (
    "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 240\n"
    "[params]\nn_ctx = 128\nprompt_tokens = 16\ngen_tokens = 16\n"
)
CYCLES, K, BOUND = 20, 6, 1
MIB = 2**20


def _run(tmp: Path, body: str) -> dict[str, Any]:
    m = parse_matrix(HEAD + body, tmp / "m.toml")
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=REPO))
    )


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("llama_cpp")
    body = (
        f"[[runtimes]]\nname = 'llama_cpp'\n{KNOWN_TO_WORK}"
        "[[fixtures]]\nname = 'tiny-stream'\nmodel = 'tiny'\nscenario = 'stream'\n"
        "[[fixtures]]\nname = 'tiny-cancel'\nmodel = 'tiny'\nscenario = 'cancel'\n"
        f"options = {{ cancel_cycles = {CYCLES}, cancel_after_tokens = {K}, "
        f"cancel_max_tokens_after = {BOUND}, leak_tolerance_mb = 1 }}\n"
        # a bound no runtime can meet: the token in flight when the cancel lands is sampled
        "[[fixtures]]\nname = 'tiny-cancel-impossible'\nmodel = 'tiny'\nscenario = 'cancel'\n"
        "options = { cancel_cycles = 2, cancel_modes = ['stop'], cancel_max_tokens_after = 0, "
        "cancel_prefill_attempts = 0 }\n"
    )
    return _run(tmp_path_factory.mktemp("lifecycle"), body)


@pytest.fixture(scope="module")
def serve_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("llama_cpp")
    missing = [m for m in SERVER_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"llama-cpp-python[server] is not installed (missing {', '.join(missing)})")
    body = (
        f"[[runtimes]]\nname = 'llama_cpp'\n{KNOWN_TO_WORK}"
        "[[fixtures]]\nname = 'tiny-serve'\nmodel = 'tiny'\nscenario = 'serve'\n"
        "options = { serve_rounds = 1, serve_slow_tokens = 8 }\n"
    )
    return _run(tmp_path_factory.mktemp("serve"), body)


def cell(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in run["cells"] if c["fixture"]["name"] == name)


def checks(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in c["metrics"]["lifecycle_checks"]["checks"]}


@pytest.mark.parametrize("name", ["tiny-stream", "tiny-cancel", "tiny-serve"])
def test_scenario_cells_pass_every_check(request: pytest.FixtureRequest, name: str) -> None:
    run = request.getfixturevalue("serve_run" if name == "tiny-serve" else "llama_run")
    c = cell(run, name)
    assert c["outcome"]["status"] == "ok", c["outcome"]
    assert c["verdict"] == "PASS"
    failed = {n: k["detail"] for n, k in checks(c).items() if not k["ok"]}
    assert failed == {}
    lc = c["metrics"]["lifecycle_checks"]
    assert lc["value"] == f"{len(checks(c))}/{len(checks(c))}" and lc["traces"]
    for metric in c["metrics"].values():
        assert (metric["value"] is None) == (metric["source"] == "unavailable")


def test_stream_goes_through_the_streaming_api(llama_run: dict[str, Any]) -> None:
    c = cell(llama_run, "tiny-stream")
    m = c["metrics"]
    assert "create_completion" in m["stream_ttft_s"]["api"]
    assert m["stream_ttft_s"]["value"] > 0 and len(m["stream_ttft_s"]["samples"]) == 2
    assert m["stream_tokens"]["value"] >= 16
    p = [m[f"stream_token_gap_p{q}_s"]["value"] for q in (50, 90, 99)]
    assert 0 < p[0] <= p[1] <= p[2]
    assert checks(c)["stream_tokens_equal_greedy_loop"]["ok"]
    assert m["ttft_s"]["value"] is None and "stream_ttft_s" in m["ttft_s"]["reason"]
    assert m["cold_start_first_token_s"]["value"] > 0
    for t in m["lifecycle_checks"]["traces"]:
        seq = [t["queued"], t["prefill_start"], t["first_token"], t["terminal_t"], t["released"]]
        assert seq == sorted(seq) and t["terminal"] == "completed"
        assert t["tokens"] == sorted(t["tokens"])


def test_cancel_after_k_tokens_stops_within_a_bounded_number_of_tokens(
    llama_run: dict[str, Any],
) -> None:
    m = cell(llama_run, "tiny-cancel")["metrics"]
    traces = m["lifecycle_checks"]["traces"]
    assert len(traces) == 2 * (1 + CYCLES)  # modes stop and close, 1 warm-up cycle each
    for t in traces:
        assert t["terminal"] == "cancelled"
        assert t["tokens_after_cancel"] <= BOUND, t
        assert len([x for x in t["tokens"] if x <= t["cancel_requested"]]) >= K
        assert t["released"] >= t["terminal_t"] >= t["cancel_requested"]
    for mode in ("stop", "close"):
        assert m[f"cancel_{mode}_tokens_after"]["value"] <= BOUND
        assert len(m[f"cancel_{mode}_tokens_after"]["samples"]) == CYCLES
        assert 0 < m[f"cancel_{mode}_stop_latency_s"]["value"] < 5


def test_twenty_cancel_cycles_leave_memory_within_tolerance_of_one(
    llama_run: dict[str, Any],
) -> None:
    m = cell(llama_run, "tiny-cancel")["metrics"]
    for mode in ("stop", "close"):
        growth = m[f"cancel_{mode}_rss_growth_bytes"]
        assert growth["source"] == "os-accounting" and len(growth["rss_after_each"]) == CYCLES
        assert growth["tolerance_bytes"] == 1 * MIB
        assert growth["value"] <= 1 * MIB, growth
        # the runtime's own view: the KV state is back to empty after every cycle
        after = m[f"cancel_{mode}_state_bytes_after_release"]
        assert after["source"] == "runtime-counter"
        assert after["stats"]["max"] == after["stats"]["min"]
        assert m[f"cancel_{mode}_state_bytes_during"]["value"] > after["value"]


def test_cancel_mid_prefill_through_the_abort_callback(llama_run: dict[str, Any]) -> None:
    c = cell(llama_run, "tiny-cancel")
    pre = c["metrics"]["cancel_prefill_latency_s"]
    if pre["source"] == "unavailable":  # the prefill outran the cancel every time: say so
        assert "finished before" in pre["reason"]
    else:
        assert pre["value"] < 0.5 and "abort_callback" in pre["how"]
    assert checks(c)["cancel_prefill_context_usable"]["ok"]


def test_an_unmeetable_bound_fails_the_cell(llama_run: dict[str, Any]) -> None:
    c = cell(llama_run, "tiny-cancel-impossible")
    assert c["outcome"]["status"] == "wrong-output" and c["verdict"] == "FAIL"
    assert "cancel_stop_tokens_after_bounded" in c["outcome"]["message"]


def test_client_disconnect_does_not_kill_the_server(serve_run: dict[str, Any]) -> None:
    c = cell(serve_run, "tiny-serve")
    m = c["metrics"]
    assert m["serve_survived"]["value"] == "yes"
    assert m["serve_survived"]["alive"] and m["serve_survived"]["completion_status"] == 200
    ck = checks(c)
    assert ck["serve_disconnect_released"]["ok"] and ck["serve_survived"]["ok"]
    assert m["serve_disconnect_next_ttft_s"]["value"] > 0
    gone = next(t for t in m["lifecycle_checks"]["traces"] if t["name"] == "disconnect")
    assert gone["terminal"] == "cancelled" and len(gone["tokens"]) == 2


def test_serve_ttft_against_concurrency(serve_run: dict[str, Any]) -> None:
    m = cell(serve_run, "tiny-serve")["metrics"]
    for n in (1, 2, 4):  # one round each: n requests, n TTFT samples
        ttft = m[f"serve_c{n}_ttft_p50_s"]
        assert ttft["source"] == "harness-clock" and ttft["n"] == n and ttft["concurrency"] == n
        assert 0 < ttft["value"] <= m[f"serve_c{n}_ttft_p99_s"]["value"]
        assert m[f"serve_c{n}_errors"]["value"] == 0
        assert m[f"serve_c{n}_throughput_tps"]["value"] > 0
    for key in ("serve_health_status", "serve_metrics_status"):
        assert m[key]["source"] != "unavailable"
    assert m["serve_malformed_invalid_json_status"]["value"] >= 400


@pytest.fixture(scope="module")
def genai_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if importlib.util.find_spec("onnxruntime_genai") is None:
        pytest.skip("onnxruntime-genai is not installed")
    body = (
        "[[runtimes]]\nname = 'onnxruntime_genai'\noptions = { placement_log = false }\n"
        "[[fixtures]]\nname = 'tiny-stream'\nmodel = 'tiny'\nscenario = 'stream'\n"
        "[[fixtures]]\nname = 'tiny-cancel'\nmodel = 'tiny'\nscenario = 'cancel'\n"
        f"options = {{ cancel_cycles = {CYCLES}, cancel_after_tokens = {K} }}\n"
        "[[fixtures]]\nname = 'tiny-serve'\nmodel = 'tiny'\nscenario = 'serve'\n"
    )
    return _run(tmp_path_factory.mktemp("lifecycle-genai"), body)


def test_genai_stream_and_cancel_through_the_generator_loop(genai_run: dict[str, Any]) -> None:
    s, c = cell(genai_run, "tiny-stream"), cell(genai_run, "tiny-cancel")
    assert s["outcome"]["status"] == "ok", s["outcome"]
    assert "Generator" in s["metrics"]["stream_ttft_s"]["api"]
    assert checks(s)["stream_tokens_equal_greedy_loop"]["ok"]
    assert c["outcome"]["status"] == "ok", c["outcome"]
    m = c["metrics"]
    assert m["cancel_stop_tokens_after"]["value"] <= BOUND
    assert m["cancel_close_stop_latency_s"]["source"] == "unavailable"
    assert "no stream object" in m["cancel_close_stop_latency_s"]["reason"]
    pre = m["cancel_prefill_latency_s"]
    assert pre["source"] == "harness-clock" or "prefill" in pre["reason"]


def test_genai_has_no_server(genai_run: dict[str, Any]) -> None:
    c = cell(genai_run, "tiny-serve")
    assert c["outcome"]["status"] == "unavailable" and c["verdict"] == "unavailable"
    assert "server" in c["outcome"]["message"]
