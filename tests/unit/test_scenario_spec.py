"""The scenario registry (one ``ScenarioSpec`` per scenario, the implementation imported on first
use) and the typed results whose dict form crosses the worker -> parent boundary."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import rtmatrix.scenarios as registry
from rtmatrix.adapters.capabilities import BatchEngine, Serving
from rtmatrix.names import Scenario
from rtmatrix.protocol import Job, JobParams
from rtmatrix.scenarios.cancel import CancelOptions, CancelResult
from rtmatrix.scenarios.serve_result import BATCH_KEYS, SERVER_KEYS, ServeOptions, ServeResult
from rtmatrix.scenarios.spec import (
    ABSENT_WHEN_NONE,
    Lifecycle,
    ScenarioImpl,
    ScenarioResult,
)
from rtmatrix.scenarios.stream import StreamOptions, StreamResult

SCENARIOS = Path(registry.__file__).parent


def test_every_lifecycle_scenario_has_one_spec_and_one_implementation() -> None:
    assert list(registry.SPECS) == list(Scenario.lifecycle())
    for sc, spec in registry.SPECS.items():
        assert spec.name is sc and spec.module == f"rtmatrix.scenarios.{sc.value}"
        impl = spec.impl()
        assert isinstance(impl, ScenarioImpl) and impl.name is sc
        assert issubclass(impl.result, ScenarioResult)
    assert registry.spec_of("generate") is None and registry.spec_of("juggle") is None
    assert registry.spec_of("serve") is registry.SPECS[Scenario.SERVE]


def test_the_metric_prefixes_are_the_registrys() -> None:
    assert registry.metric_prefixes() == {
        Scenario.STREAM: "stream_",
        Scenario.CANCEL: "cancel_",
        Scenario.SERVE: "serve_",
        Scenario.SAMPLE: "sample_",
    }


def test_serve_is_served_in_process_where_the_runtime_has_no_server() -> None:
    spec = registry.SPECS[Scenario.SERVE]
    assert spec.capability is Serving and spec.alternative is not None
    assert spec.alternative.capability is BatchEngine
    from rtmatrix.scenarios import batch

    assert spec.alternative.load() is batch.run


def test_the_capability_check_before_the_load_imports_no_scenario() -> None:
    """An import there would count in the cell's cold_start_load_s."""
    code = (
        "import sys\n"
        "import rtmatrix.scenarios as s\n"
        "class A:\n"
        "    name = 'a'\n"
        "    def stream_backend(self): ...\n"
        "for name in ('stream', 'cancel'):\n"
        "    s.require_capability(name, A())\n"
        "print(sorted(m for m in sys.modules if m.startswith('rtmatrix.scenarios.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['rtmatrix.scenarios.spec']"


@dataclass
class Toy(ScenarioResult):
    scenario: str = "toy"
    when: float | None = None
    phase: dict[str, Any] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    checks: list[dict[str, Any]] = field(default_factory=list)

    def lifecycle(self) -> Lifecycle:
        return Lifecycle(None, self.checks, [], {}, [])


def test_a_phase_that_did_not_run_is_absent_from_the_dict_form() -> None:
    assert Toy().to_dict() == {"scenario": "toy", "when": None, "checks": []}
    full = Toy(phase={"ran": True}).to_dict()
    assert list(full) == ["scenario", "when", "phase", "checks"]
    assert Toy.from_dict(full) == Toy(phase={"ran": True})


def test_a_key_the_result_does_not_have_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"Toy: unknown key\(s\) 'extra'; valid: checks, phase"):
        Toy.from_dict({"scenario": "toy", "extra": 1})


def test_the_serve_result_keeps_each_ways_key_order() -> None:
    server = ServeResult(counters_doc=None, rss_start=None).to_dict()
    assert list(server) == [k for k in SERVER_KEYS if k not in {
        "counter_labels", "invariance", "disconnect", "slow", "malformed", "interrupt_probe"
    }]  # fmt: skip
    assert server["counters_doc"] is None and server["rss_start"] is None  # present, None
    batch = ServeResult(in_process=True, startup_s=None).to_dict()
    assert list(batch) == [k for k in BATCH_KEYS if k not in {"startup_error", "invariance"}]
    assert ServeResult.from_dict(batch).to_dict() == batch


def test_results_read_back_what_they_wrote() -> None:
    res = StreamResult(api="x", reps=[{"counted": True, "n_tokens": 3}], streamed_ids=None)
    assert StreamResult.from_dict(res.to_dict()) == res
    assert list(res.to_dict())[:3] == ["scenario", "findings", "runtime"]
    cancel = CancelResult(k=3, modes={"stop": {"unavailable": "no"}})
    assert CancelResult.from_dict(cancel.to_dict()) == cancel
    assert cancel.lifecycle().skipped == {}


def _job(**options: Any) -> Job:
    params = JobParams(n_ctx=64, threads=1, prompt_tokens=4, gen_tokens=8, repetitions=1, warmup=0)
    return Job(adapter="t", model_path="m", params=params, options=options, timeout_s=60)


def test_options_are_typed_with_their_defaults() -> None:
    assert StreamOptions.from_job(_job()).stream_tokens == 8  # the job's gen_tokens
    assert StreamOptions.from_job(_job(stream_tokens=5)).stream_tokens == 5
    serve = ServeOptions.from_job(_job(serve_tokens=0, serve_invariance=0))
    assert serve.serve_tokens is None and serve.serve_invariance is False
    assert serve.serve_concurrency == [1, 2, 4] and serve.invariance_requests == 8
    assert CancelOptions.defaults()["cancel_modes"] == ["stop", "close"]
    assert (
        "serve_rounds" in ServeOptions.defaults() and "cancel_cycles" not in ServeOptions.defaults()
    )


def test_no_scenario_spells_a_runtimes_metric_names() -> None:
    for path in SCENARIOS.glob("*.py"):
        text = path.read_text("utf-8")
        assert "llamacpp:" not in text and "llama_decode" not in text, path.name
