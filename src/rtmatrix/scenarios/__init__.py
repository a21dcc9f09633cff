"""Lifecycle scenarios beside the plain timed generation: stream, cancel, serve.

The worker calls :func:`run_scenario` after the model is loaded; the runner turns its result
into labelled metrics with :func:`scenario_metrics`. A scenario result may carry ``checks``
(``{"name", "ok", "detail"}``); a failed check makes the cell ``wrong-output``.

Every scenario also records each request's state trace (queued, prefill start, first token,
each token, terminal state, released); the traces, checks, findings (what the run showed about
the runtime, in words, each backed by a number in the metrics) and anything a phase skipped are
kept in the ``lifecycle_checks`` metric's detail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rtmatrix.adapters.base import Adapter, RuntimeUnavailable
from rtmatrix.names import GENERATE_ONLY, THROUGHPUT, M, Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job

# the plain generation's metrics, which a scenario cell does not measure
_PLAIN = {k: ("tokens/s" if k in THROUGHPUT else "s") for k in GENERATE_ONLY}
_SEE = {
    Scenario.STREAM: "stream_ttft_s, stream_token_gap_*",
    Scenario.CANCEL: "cancel_*",
    Scenario.SERVE: "serve_c<N>_ttft_*, serve_c<N>_tpot_*",
    Scenario.SAMPLE: "sample_*",
}


def require_capability(name: str, adapter: Adapter) -> None:
    """Raise :class:`RuntimeUnavailable` (the same reason the scenario itself gives) when the
    runtime lacks what scenario ``name`` needs: the worker asks before loading the model, so an
    unavailable scenario cell costs no load (a JIT row's compile, for one)."""
    from rtmatrix.adapters.capabilities import BatchEngine, Sampling, Serving, Streaming, missing

    needs = {Scenario.STREAM: Streaming, Scenario.CANCEL: Streaming, Scenario.SERVE: Serving,
             Scenario.SAMPLE: Sampling}  # fmt: skip
    cap = needs.get(Scenario(name)) if name in tuple(Scenario) else None
    if cap is Serving and isinstance(adapter, BatchEngine):
        return  # served in process by the engine's own scheduler (scenarios.batch)
    if cap is not None and not isinstance(adapter, cap):
        raise RuntimeUnavailable(missing(adapter, cap, f"scenario {name!r}"))


def run_scenario(
    name: str,
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Callable[[str, float], None],
) -> dict[str, Any]:
    if name == Scenario.STREAM:
        from rtmatrix.scenarios import stream

        return stream.run(adapter, job, prompt, banned, mark)
    if name == Scenario.CANCEL:
        from rtmatrix.scenarios import cancel

        return cancel.run(adapter, job, prompt, banned, mark)
    if name == Scenario.SERVE:
        from rtmatrix.scenarios import serve

        return serve.run(adapter, job, prompt, banned, mark)
    if name == Scenario.SAMPLE:
        from rtmatrix.scenarios import sample

        return sample.run(adapter, job, prompt, banned, mark)
    msg = f"scenario {name!r} is not available in this build of rtmatrix"
    raise RuntimeUnavailable(msg)


def scenario_metrics(name: str, result: dict[str, Any]) -> dict[str, Metric]:
    if name not in Scenario.lifecycle():
        return {}
    from rtmatrix.scenarios import cancel, invariance, sample, serve, stream

    sc = Scenario(name)
    compute = {
        Scenario.STREAM: stream.metrics,
        Scenario.CANCEL: cancel.metrics,
        Scenario.SERVE: serve.metrics,
        Scenario.SAMPLE: sample.metrics,
    }[sc]
    why = f"a '{sc.value}' cell runs no plain timed generation; see {_SEE[sc]}"
    out: dict[str, Metric] = {k.value: Metric.unavailable(unit, why) for k, unit in _PLAIN.items()}
    if sc is Scenario.SERVE:
        for key in (M.COLD_FIRST_TOKEN, M.COLD_TOTAL):
            out[key.value] = Metric.unavailable(
                "s", "tokens come from the server process it starts; see serve_startup_s"
            )
    out |= compute(result)
    checks = list(result.get("checks") or [])
    passed = sum(1 for c in checks if c.get("ok"))
    out[M.LIFECYCLE_CHECKS.value] = Metric(
        f"{passed}/{len(checks)}",
        "checks passed",
        Source.HARNESS_CLOCK,
        detail={
            "scenario": sc.value,
            "api": result.get("api"),
            "checks": checks,
            "findings": result.get("findings") or [],
            "skipped": result.get("skipped") or {},
            "traces": result.get("traces") or [],
            **(
                {"invariance": invariance.summary(result["invariance"])}
                if result.get("invariance")
                else {}
            ),
            **({"sampler": sample.summary(result)} if sc is Scenario.SAMPLE else {}),
        },
    )
    return out
