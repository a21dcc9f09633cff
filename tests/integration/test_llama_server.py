"""The llama_server row for real: llama.cpp's own llama-server from the shared tool build of the
installed binding's sdist, on the tiny fixture, through ``run_matrix`` and real workers — stream,
cancel and serve (1/2/4/8 concurrent streams, the server's counters, batch invariance) — and no
llama-server left running afterwards.

The tools are resolved at import (the user's tool cache, as ``test_reftool`` does) and built there
if missing; the test is skipped only when they cannot be built here (the reason is the skip
message). The workers find them through ``RTMATRIX_TOOLS_DIR``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import psutil
import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix
from rtmatrix.runtimes.llama_cpp import reftool as rt

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOOLS_DIR = rt.tools_root()  # at import: the user's cache, not the session's
LEVELS = (1, 2, 4, 8)
MATRIX = (
    "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 240\n"
    "[params]\nn_ctx = 128\nprompt_tokens = 16\ngen_tokens = 16\n"
    "[[runtimes]]\nname = 'llama_server'\noptions = { parallel = 4, extra_buffer_types = false }\n"
    "[[fixtures]]\nname = 'tiny-stream'\nmodel = 'tiny'\nscenario = 'stream'\n"
    "[[fixtures]]\nname = 'tiny-cancel'\nmodel = 'tiny'\nscenario = 'cancel'\n"
    "options = { cancel_cycles = 8, cancel_after_tokens = 6 }\n"
    "[[fixtures]]\nname = 'tiny-serve'\nmodel = 'tiny'\nscenario = 'serve'\n"
    f"options = {{ serve_concurrency = {list(LEVELS)}, serve_rounds = 1, serve_slow_tokens = 8, "
    "serve_interrupt_probe = false }\n"
    "[[fixtures]]\nname = 'tiny-generate'\nmodel = 'tiny'\n"
)


@pytest.fixture(scope="module")
def tools() -> rt.ToolBuild:
    try:
        return rt.build_tools(cache_dir=TOOLS_DIR, log=print)
    except rt.ToolUnavailable as exc:
        pytest.skip(f"llama-server cannot be built here: {exc.reason}")


def server_processes(binary: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["exe", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if p.info.get("exe") == str(binary) or (cmd and cmd[0] == str(binary)):
            out.append(p)
    return out


@pytest.fixture(scope="module")
def run(tools: rt.ToolBuild, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    mp = pytest.MonkeyPatch()
    mp.setenv(rt.TOOLS_DIR_ENV, str(TOOLS_DIR))
    before = {p.pid for p in server_processes(tools.llama_server)}
    try:
        tmp = tmp_path_factory.mktemp("llama-server")
        m = parse_matrix(MATRIX, tmp / "m.toml")
        out = cast(
            dict[str, Any],
            load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=REPO)),
        )
    finally:
        mp.undo()
    out["_servers_left"] = [
        p.pid for p in server_processes(tools.llama_server) if p.pid not in before
    ]
    return out


def cell(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in run["cells"] if c["fixture"]["name"] == name)


def checks(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in c["metrics"]["lifecycle_checks"]["checks"]}


@pytest.mark.parametrize("name", ["tiny-stream", "tiny-cancel", "tiny-serve"])
def test_scenario_cells_pass_every_check(run: dict[str, Any], name: str) -> None:
    c = cell(run, name)
    assert c["outcome"]["status"] == "ok", c["outcome"]
    assert c["verdict"] == "PASS"
    failed = {n: k["detail"] for n, k in checks(c).items() if not k["ok"]}
    assert failed == {}
    assert "llama-server" in c["outcome"]["runtime_version"]
    assert c["evidence"]["leaked_processes"] == []


def test_no_llama_server_outlives_the_run(run: dict[str, Any]) -> None:
    assert run["_servers_left"] == []


def test_the_evidence_names_the_build_and_the_command_line(
    run: dict[str, Any], tools: rt.ToolBuild
) -> None:
    ev = cell(run, "tiny-stream")["evidence"]
    assert ev["argv"][0] == str(tools.llama_server)
    for arg in ("--parallel 4", "--cont-batching", "--metrics", "--host 127.0.0.1"):
        assert arg in ev["command_line"]
    build = ev["tool_build"]
    assert build["llama_server_version"] == tools.tool_version("llama-server")
    assert build["cmake_options"]["CMAKE_BUILD_TYPE"] == "Release"
    assert build["from_sdist"] == f"llama-cpp-python {tools.version}"
    # llama.cpp pads the context: a slot holds at least the n_ctx it was given
    assert ev["props"]["total_slots"] == 4 and ev["props"]["n_ctx_per_slot"] >= 128


def test_stream_goes_over_http_and_matches_the_unstreamed_answer(run: dict[str, Any]) -> None:
    c = cell(run, "tiny-stream")
    ch = checks(c)
    assert ch["stream_tokens_equal_unstreamed"]["ok"] and ch["stream_slots_released"]["ok"]
    assert "/completion" in c["metrics"]["lifecycle_checks"]["api"]
    assert c["metrics"]["stream_ttft_s"]["value"] > 0


def test_cancel_by_disconnect_frees_the_slot_and_reads_the_servers_memory(
    run: dict[str, Any],
) -> None:
    m = cell(run, "tiny-cancel")["metrics"]
    assert m["cancel_close_release_latency_s"]["value"] > 0
    assert m["cancel_close_busy_slots_after_release"]["value"] == 0
    assert m["cancel_close_busy_slots_after_release"]["source"] == "runtime-counter"
    assert "own process" in m["cancel_close_rss_growth_bytes"]["process"]
    assert (
        "trend over 8 cycles" in checks(cell(run, "tiny-cancel"))["cancel_close_rss_leak"]["detail"]
    )
    assert m["cancel_stop_stop_latency_s"]["value"] is None  # no per-token hook over HTTP
    assert "disconnecting" in m["cancel_stop_stop_latency_s"]["reason"]
    assert m["cancel_prefill_released_s"]["value"] is not None


def test_serve_levels_have_ttft_throughput_and_the_servers_counters(run: dict[str, Any]) -> None:
    m = cell(run, "tiny-serve")["metrics"]
    for n in LEVELS:
        assert m[f"serve_c{n}_ttft_p50_s"]["source"] == "harness-clock"
        assert m[f"serve_c{n}_throughput_tps"]["value"] > 0
        assert m[f"serve_c{n}_errors"]["value"] == 0
        counted = m[f"serve_c{n}_server_tokens_predicted"]
        assert counted["source"] == "runtime-counter" and counted["value"] == 16 * n
    # continuous batching: 4 concurrent requests share decode calls
    assert m["serve_c4_server_tokens_per_decode"]["value"] > 1
    assert m["serve_c8_server_busy_slots_max"]["value"] <= 4
    assert m["serve_health_status"]["value"] == 200 and m["serve_metrics_status"]["value"] == 200
    assert m["serve_disconnect_slot_free_s"]["value"] is not None
    started = m["serve_startup_s"]
    assert "--parallel" in started["argv"] and started["settings"]["parallel"] == 4
    assert "llama_server_version" in started["settings"]


def test_batch_invariance_is_recorded_against_one_at_a_time_and_the_reference(
    run: dict[str, Any],
) -> None:
    c = cell(run, "tiny-serve")
    inv = c["metrics"]["lifecycle_checks"]["invariance"]
    assert len(inv["requests"]) == 8
    assert len({r["prompt_tokens"] for r in inv["requests"]}) == 8
    for r in inv["requests"]:
        assert set(r["versus"]) == {
            "concurrent_sequential",
            "concurrent_reference",
            "sequential_reference",
        }
        assert all(v["kind"] in ("agree", "numerics") for v in r["versus"].values()), r
    ch = checks(c)
    assert ch["serve_invariance_isolation"]["ok"] and ch["serve_invariance_reference"]["ok"]
    assert c["metrics"]["serve_invariance"]["value"].endswith("/8")


def test_the_plain_generation_is_unavailable_on_a_server(run: dict[str, Any]) -> None:
    c = cell(run, "tiny-generate")
    assert c["outcome"]["status"] == "unavailable"
    assert "no single prefill/decode step" in c["outcome"]["message"]
