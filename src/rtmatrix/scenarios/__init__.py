"""Lifecycle scenarios beside the plain timed generation: stream, cancel, serve, sample.

One registry, :data:`SPECS`: a :class:`~rtmatrix.scenarios.spec.ScenarioSpec` per scenario (what
it needs, its metric prefix, where the plain generation's figures went); its implementation is the
``IMPL`` of module ``rtmatrix.scenarios.<name>``, imported on first use (lm-eval's lazy registry).
The worker asks :func:`require_capability` before loading the model and
calls :func:`run_scenario` after it; the runner turns the result's dict form into labelled
metrics with :func:`scenario_metrics`. A scenario result may carry ``checks``
(``{"name", "ok", "detail"}``); a failed check makes the cell ``wrong-output``.

Every scenario also records each request's state trace (queued, prefill start, first token,
each token, terminal state, released); the traces, checks, findings (what the run showed about
the runtime, in words, each backed by a number in the metrics) and anything a phase skipped are
kept in the ``lifecycle_checks`` metric's detail.
"""

from __future__ import annotations

from typing import Any

from rtmatrix.adapters.base import Adapter, RuntimeUnavailable
from rtmatrix.adapters.capabilities import BatchEngine, Sampling, Serving, Streaming
from rtmatrix.metrics.registry import MetricFamily
from rtmatrix.names import GENERATE_ONLY, THROUGHPUT, M, Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job
from rtmatrix.scenarios.spec import Alternative, Mark, ScenarioResult, ScenarioSpec

__all__ = [
    "SPECS",
    "family",
    "metric_prefixes",
    "require_capability",
    "run_scenario",
    "scenario_metrics",
    "spec_of",
]

#: what a cancel mode's metrics are named after ``cancel_<mode>_`` (the report's per-mode rows)
CANCEL_MODE_MEMBERS = ("stop_latency_s", "release_latency_s", "tokens_after", "rss_growth_bytes",
                       "to_last_token_s")  # fmt: skip

#: every lifecycle scenario (``Scenario.lifecycle()``), by name
SPECS: dict[Scenario, ScenarioSpec] = {
    spec.name: spec
    for spec in (
        ScenarioSpec(
            name=Scenario.STREAM,
            capability=Streaming,
            family=MetricFamily("stream_"),
            see="stream_ttft_s, stream_token_gap_*",
            help="tokens streamed through the runtime's own streaming API",
            report="rtmatrix.report.lifecycle:stream_card",
            headline="rtmatrix.report.views:stream_headline",
        ),
        ScenarioSpec(
            name=Scenario.CANCEL,
            capability=Streaming,
            family=MetricFamily("cancel_", "mode", members=CANCEL_MODE_MEMBERS),
            see="cancel_*",
            help="a long generation cancelled after k tokens, cycle after cycle, per cancel mode",
            report="rtmatrix.report.lifecycle:cancel_card",
            headline="rtmatrix.report.views:cancel_headline",
        ),
        ScenarioSpec(
            name=Scenario.SERVE,
            capability=Serving,
            family=MetricFamily("serve_", "level", tag="c", value_pattern=r"\d+"),
            see="serve_c<N>_ttft_*, serve_c<N>_tpot_*",
            # served in process by the engine's own scheduler
            alternative=Alternative(BatchEngine, "rtmatrix.scenarios.batch:run"),
            unmeasured=tuple(
                (key, "s", "tokens come from the server process it starts; see serve_startup_s")
                for key in (M.COLD_FIRST_TOKEN, M.COLD_TOTAL)
            ),
            help="the runtime's own server on loopback, with concurrent streaming clients",
            report="rtmatrix.report.lifecycle:serve_card",
            headline="rtmatrix.report.views:serve_headline",
            reference="rtmatrix.runner.record:invariance_reference",
        ),
        ScenarioSpec(
            name=Scenario.SAMPLE,
            capability=Sampling,
            family=MetricFamily("sample_"),
            see="sample_*",
            help="the runtime's own sampler: seeds reproduced (twice, another process, other "
            "threads), the stage order and first-token distribution against the numpy reference",
            report="rtmatrix.report.lifecycle:sample_card",
            reference="rtmatrix.runner.record:sampler_reference",
        ),
    )
}
# the plain generation's metrics, which a scenario cell does not measure
_PLAIN = {k: ("tokens/s" if k in THROUGHPUT else "s") for k in GENERATE_ONLY}


def spec_of(name: str) -> ScenarioSpec | None:
    """The spec of lifecycle scenario ``name``; None for the plain generation or a name no
    scenario has."""
    return SPECS.get(Scenario(name)) if name in tuple(Scenario) else None


def family(scenario: Scenario) -> MetricFamily:
    """The metric family scenario ``scenario`` declares."""
    return SPECS[scenario].family


def metric_prefixes() -> dict[Scenario, str]:
    """Each lifecycle scenario's metric-name prefix (``stream_``, ``serve_``, ...)."""
    return {sc: spec.metric_prefix for sc, spec in SPECS.items()}


def require_capability(name: str, adapter: Adapter) -> None:
    """Raise :class:`RuntimeUnavailable` (the same reason the scenario itself gives) when the
    runtime lacks what scenario ``name`` needs: the worker asks before loading the model, so an
    unavailable scenario cell costs no load (a JIT row's compile, for one)."""
    spec = spec_of(name)
    if spec is not None:
        spec.require(adapter)


def run_scenario(
    name: str,
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Mark,
) -> dict[str, Any]:
    """Run scenario ``name`` (the run its spec picks for ``adapter``); the result's dict form."""
    spec = spec_of(name)
    if spec is None:
        msg = f"scenario {name!r} is not available in this build of rtmatrix"
        raise RuntimeUnavailable(msg)
    return spec.runner(adapter)(adapter, job, prompt, banned, mark).to_dict()


def scenario_metrics(name: str, result: dict[str, Any]) -> dict[str, Metric]:
    """The metrics of a scenario cell: the plain generation's (and what else the scenario
    cannot measure) unavailable, the scenario's own, and ``lifecycle_checks``."""
    spec = spec_of(name)
    if spec is None:
        return {}
    why = f"a '{spec.name.value}' cell runs no plain timed generation; see {spec.see}"
    out: dict[str, Metric] = {k.value: Metric.unavailable(unit, why) for k, unit in _PLAIN.items()}
    for key, unit, reason in spec.unmeasured:
        out[key.value] = Metric.unavailable(unit, reason)
    impl = spec.impl()
    typed = impl.read(result)
    out |= impl.metrics(typed)
    out[M.LIFECYCLE_CHECKS.value] = lifecycle_metric(spec, typed)
    return out


def lifecycle_metric(spec: ScenarioSpec, result: ScenarioResult) -> Metric:
    """``lifecycle_checks``: checks passed, with the checks, findings, skipped phases and
    traces in the detail."""
    lc = result.lifecycle()
    checks = list(lc.checks or [])
    passed = sum(1 for c in checks if c.get("ok"))
    return Metric(
        f"{passed}/{len(checks)}",
        "checks passed",
        Source.HARNESS_CLOCK,
        detail={
            "scenario": spec.name.value,
            "api": lc.api,
            "checks": checks,
            "findings": lc.findings or [],
            "skipped": lc.skipped or {},
            "traces": lc.traces or [],
            **lc.extra,
        },
    )
