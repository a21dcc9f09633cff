"""Turn a worker's raw measurements and the parent's process accounting into labelled metrics."""

from __future__ import annotations

from collections.abc import Sequence

from rtmatrix.outcome import Metric, Source, percentile
from rtmatrix.protocol import Repetition, WorkerResult


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def throughput(reps: Sequence[Repetition]) -> dict[str, Metric]:
    """PP and TG tokens/s from the harness clock and from the runtime's own counters."""
    out: dict[str, Metric] = {}
    if not reps:
        reason = "no counted repetition finished"
        for key in ("pp_tps", "pp_tps_counter", "tg_tps", "tg_tps_counter"):
            out[key] = Metric.unavailable("tokens/s", reason)
        return out
    pp = [r.pp_tokens / r.pp_s for r in reps if r.pp_s > 0]
    out["pp_tps"] = Metric.measured(
        pp, "tokens/s", Source.HARNESS_CLOCK, method="prompt tokens / time of the prefill call"
    )
    tg = [v for r in reps if (v := _ratio(len(r.decode_s), sum(r.decode_s))) is not None]
    out["tg_tps"] = (
        Metric.measured(
            tg,
            "tokens/s",
            Source.HARNESS_CLOCK,
            method="decode calls / summed time of the single-token decode calls",
        )
        if tg
        else Metric.unavailable("tokens/s", "fewer than 2 generated tokens: no decode step")
    )
    for phase in ("pp", "tg"):
        vals = [
            v
            for r in reps
            if (c := r.counters or {}).get(f"{phase}_tokens")
            and (v := _ratio(c[f"{phase}_tokens"], c.get(f"{phase}_ms", 0.0) / 1e3))
        ]
        out[f"{phase}_tps_counter"] = (
            Metric.measured(
                vals, "tokens/s", Source.RUNTIME_COUNTER, counters=[r.counters for r in reps]
            )
            if vals
            else Metric.unavailable(
                "tokens/s", f"the runtime reported no {phase.upper()} counter for this cell"
            )
        )
    return out


def latency(reps: Sequence[Repetition]) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    if not reps:
        for key in ("ttft_s", "tpot_s", "token_latency_p50_s", "token_latency_p90_s"):
            out[key] = Metric.unavailable("s", "no counted repetition finished")
        return out
    out["ttft_s"] = Metric.measured(
        [r.ttft_s for r in reps],
        "s",
        Source.HARNESS_CLOCK,
        method="prefill start -> first token id, warm",
    )
    steps = [s for r in reps for s in r.step_s]
    if not steps:
        reason = "fewer than 2 generated tokens: no inter-token interval"
        for key in ("tpot_s", "token_latency_p50_s", "token_latency_p90_s"):
            out[key] = Metric.unavailable("s", reason)
        return out
    tpot = [sum(r.step_s) / len(r.step_s) for r in reps if r.step_s]
    out["tpot_s"] = Metric.measured(
        tpot, "s", Source.HARNESS_CLOCK, method="mean time per output token after the first"
    )
    for q in (50, 90):
        out[f"token_latency_p{q}_s"] = Metric(
            percentile(steps, q),
            "s",
            Source.HARNESS_CLOCK,
            detail={"n": len(steps), "method": f"p{q} of per-token intervals, all counted reps"},
        )
    return out


def cold_start(timeline: dict[str, float], spawned: float) -> dict[str, Metric]:
    """Process start -> runtime imported -> model loaded -> first token, from the spawn."""
    marks = [
        ("process", "spawned", "worker_start"),
        ("import", "worker_start", "imported"),
        ("load", "imported", "loaded"),
        ("first_token", "loaded", "first_token"),
        ("total", "spawned", "first_token"),
    ]
    t = {"spawned": spawned, **timeline}
    out: dict[str, Metric] = {}
    for name, start, end in marks:
        key = f"cold_start_{name}_s"
        if start in t and end in t:
            out[key] = Metric(
                t[end] - t[start], "s", Source.HARNESS_CLOCK, detail={"from": start, "to": end}
            )
        else:
            out[key] = Metric.unavailable("s", f"the worker never reached '{end}'")
    return out


def memory(
    peak_tree_rss: int | None,
    interval_s: float,
    maxrss: int | None,
    maxrss_method: str = "ru_maxrss of the reaped worker (wait4)",
) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    out["peak_rss_sampled_bytes"] = (
        Metric(
            peak_tree_rss,
            "bytes",
            Source.OS_ACCOUNTING,
            detail={
                "method": "psutil RSS of the worker's process tree, sampled",
                "interval_s": interval_s,
            },
        )
        if peak_tree_rss
        else Metric.unavailable("bytes", "no RSS sample was taken")
    )
    out["peak_rss_os_bytes"] = (
        Metric(maxrss, "bytes", Source.OS_ACCOUNTING, detail={"method": maxrss_method})
        if maxrss
        else Metric.unavailable("bytes", maxrss_method)
    )
    return out


def power(result: WorkerResult | None) -> dict[str, Metric]:
    """Energy of prefill and decode, power, energy per token, from the worker's meter."""
    from rtmatrix.metrics.power import power_metrics

    if result is None:
        return power_metrics(None, [])
    return power_metrics(result.power, [r.to_dict() for r in result.reps])
