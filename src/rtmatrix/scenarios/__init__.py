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
from rtmatrix.outcome import Metric, Source

SCENARIO_NAMES = ("stream", "cancel", "serve")

# the plain generation's metrics, which a scenario cell does not measure
_PLAIN = {
    "pp_tps": "tokens/s",
    "pp_tps_counter": "tokens/s",
    "tg_tps": "tokens/s",
    "tg_tps_counter": "tokens/s",
    "ttft_s": "s",
    "tpot_s": "s",
    "token_latency_p50_s": "s",
    "token_latency_p90_s": "s",
}
_SEE = {
    "stream": "stream_ttft_s, stream_token_gap_*",
    "cancel": "cancel_*",
    "serve": "serve_c<N>_ttft_*, serve_c<N>_tpot_*",
}


def run_scenario(
    name: str,
    adapter: Adapter,
    job: dict[str, Any],
    prompt: list[int],
    banned: list[int],
    mark: Callable[[str, float], None],
) -> dict[str, Any]:
    if name == "stream":
        from rtmatrix.scenarios import stream

        return stream.run(adapter, job, prompt, banned, mark)
    if name == "cancel":
        from rtmatrix.scenarios import cancel

        return cancel.run(adapter, job, prompt, banned, mark)
    if name == "serve":
        from rtmatrix.scenarios import serve

        return serve.run(adapter, job, prompt, banned, mark)
    msg = f"scenario {name!r} is not available in this build of rtmatrix"
    raise RuntimeUnavailable(msg)


def scenario_metrics(name: str, result: dict[str, Any]) -> dict[str, Metric]:
    if name not in SCENARIO_NAMES:
        return {}
    from rtmatrix.scenarios import cancel, serve, stream

    compute = {"stream": stream.metrics, "cancel": cancel.metrics, "serve": serve.metrics}[name]
    why = f"a '{name}' cell runs no plain timed generation; see {_SEE[name]}"
    out: dict[str, Metric] = {k: Metric.unavailable(unit, why) for k, unit in _PLAIN.items()}
    if name == "serve":
        for key in ("cold_start_first_token_s", "cold_start_total_s"):
            out[key] = Metric.unavailable(
                "s", "tokens come from the server process it starts; see serve_startup_s"
            )
    out |= compute(result)
    checks = list(result.get("checks") or [])
    passed = sum(1 for c in checks if c.get("ok"))
    out["lifecycle_checks"] = Metric(
        f"{passed}/{len(checks)}",
        "checks passed",
        Source.HARNESS_CLOCK,
        detail={
            "scenario": name,
            "api": result.get("api"),
            "checks": checks,
            "findings": result.get("findings") or [],
            "skipped": result.get("skipped") or {},
            "traces": result.get("traces") or [],
        },
    )
    return out
