"""Capabilities: which built-in adapters offer what (no runtime imported), the reason a missing
one gives, evidence collection, and a third-party adapter that offers Streaming running the
stream and cancel scenarios in real worker processes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.adapters.base import Adapter, load_adapter_class
from rtmatrix.adapters.capabilities import (
    Abortable,
    Placement,
    Serving,
    Streaming,
    collect_evidence,
    missing,
)
from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix
from tests.helpers.adapters import NumpyAdapter, StreamingNumpyAdapter

CAPS = (Streaming, Abortable, Serving, Placement)
OFFERED = {
    "llama_cpp": {Streaming, Abortable, Serving},
    "onnxruntime": {Placement},
    "onnxruntime_genai": {Streaming, Abortable, Placement},
    "onnxruntime_openvino": {Placement},
    "tvm": {Placement},
}
RUNTIMES = ("llama_cpp", "onnxruntime", "onnxruntime_genai", "onnxruntime_openvino", "tvm")


@pytest.mark.parametrize("name", sorted(OFFERED))
def test_builtin_adapters_declare_their_capabilities_without_importing_a_runtime(
    name: str,
) -> None:
    before = set(sys.modules)
    adapter = load_adapter_class(name)()
    assert {c for c in CAPS if isinstance(adapter, c)} == OFFERED[name]
    assert not [m for m in RUNTIMES if m in set(sys.modules) - before]


def test_a_missing_capability_names_itself_and_its_method() -> None:
    why = missing(NumpyAdapter(), Serving, "scenario 'serve'")
    assert why == (
        "scenario 'serve': runtime 'numpy' does not offer the Serving capability "
        "(rtmatrix.adapters.capabilities.Serving: server_driver())"
    )


class _Placed(NumpyAdapter):
    def placement(self) -> dict[str, Any] | None:
        return {"requested": ["cpu"], "used": ["gpu"], "fallback": True}


class _OldStyle(NumpyAdapter):
    def evidence(self) -> dict[str, Any]:
        return {"placement": {"requested": ["cpu"], "used": ["cpu"], "fallback": False}}


def test_collect_evidence_adds_placement_or_says_why_not() -> None:
    ev = collect_evidence(_Placed())
    assert ev["placement"]["fallback"] is True and "placement_unavailable" not in ev
    ev = collect_evidence(NumpyAdapter())
    assert "placement" not in ev and "Placement capability" in ev["placement_unavailable"]
    assert ev["note"] == "numpy reference adapter (tests only)"
    # an adapter that reports placement inside evidence() keeps it
    ev = collect_evidence(_OldStyle())
    assert ev["placement"]["used"] == ["cpu"] and "placement_unavailable" not in ev


def test_the_third_party_test_adapter_offers_streaming_only() -> None:
    adapter: Adapter = StreamingNumpyAdapter()
    assert isinstance(adapter, Streaming)
    assert not isinstance(adapter, Abortable | Serving | Placement)


@pytest.fixture(scope="module")
def third_party_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 120\n"
        "[params]\nn_ctx = 64\nprompt_tokens = 6\ngen_tokens = 6\n"
        "[[runtimes]]\nname = 'numpy_streaming'\n"
        "adapter = 'tests.helpers.adapters:StreamingNumpyAdapter'\n"
        "[[fixtures]]\nname = 'tiny-stream'\nmodel = 'tiny'\nscenario = 'stream'\n"
        "[[fixtures]]\nname = 'tiny-cancel'\nmodel = 'tiny'\nscenario = 'cancel'\n"
        "options = { cancel_cycles = 2, cancel_after_tokens = 3 }\n"
        "[[fixtures]]\nname = 'tiny-serve'\nmodel = 'tiny'\nscenario = 'serve'\n"
    )
    tmp = tmp_path_factory.mktemp("third-party")
    m = parse_matrix(text, tmp / "m.toml")
    repo = Path(__file__).resolve().parents[2]
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    )


def _cell(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in run["cells"] if c["fixture"]["name"] == name)


def test_a_third_party_streaming_adapter_runs_the_stream_scenario(
    third_party_run: dict[str, Any],
) -> None:
    c = _cell(third_party_run, "tiny-stream")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    m = c["metrics"]
    assert "numpy reference" in m["stream_ttft_s"]["api"] and m["stream_ttft_s"]["value"] > 0
    checks = {k["name"]: k for k in m["lifecycle_checks"]["checks"]}
    assert checks["stream_tokens_equal_greedy_loop"]["ok"]
    assert all(k["ok"] for k in checks.values()), checks
    assert "Placement capability" in c["evidence"]["placement_unavailable"]


def test_a_third_party_adapter_without_abortable_still_cancels_streams(
    third_party_run: dict[str, Any],
) -> None:
    c = _cell(third_party_run, "tiny-cancel")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    m = c["metrics"]
    assert m["cancel_stop_tokens_after"]["value"] <= 1
    assert m["cancel_close_stop_latency_s"]["value"] is not None
    assert "Abortable capability" in m["cancel_prefill_latency_s"]["reason"]


def test_a_third_party_adapter_without_serving_is_unavailable_for_serve(
    third_party_run: dict[str, Any],
) -> None:
    c = _cell(third_party_run, "tiny-serve")
    assert c["outcome"]["status"] == "unavailable" and c["verdict"] == "unavailable"
    assert "does not offer the Serving capability" in c["outcome"]["message"]
