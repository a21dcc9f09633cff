"""Turn a worker's raw measurements and the parent's process accounting into labelled metrics."""

from __future__ import annotations

from collections.abc import Sequence

from rtmatrix.metrics.registry import unit_of
from rtmatrix.names import M
from rtmatrix.outcome import Metric, Source, percentile
from rtmatrix.protocol import Repetition, WorkerResult


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def throughput(reps: Sequence[Repetition]) -> dict[str, Metric]:
    """PP and TG tokens/s from the harness clock and from the runtime's own counters."""
    out: dict[str, Metric] = {}
    if not reps:
        reason = "no counted repetition finished"
        for key in (M.PP_TPS, M.PP_TPS_COUNTER, M.TG_TPS, M.TG_TPS_COUNTER):
            out[key] = Metric.unavailable(unit_of(key), reason)
        return out
    pp = [r.pp_tokens / r.pp_s for r in reps if r.pp_s > 0]
    out[M.PP_TPS] = Metric.measured(
        pp,
        unit_of(M.PP_TPS),
        Source.HARNESS_CLOCK,
        method="prompt tokens / time of the prefill call",
    )
    tg = [v for r in reps if (v := _ratio(len(r.decode_s), sum(r.decode_s))) is not None]
    out[M.TG_TPS] = (
        Metric.measured(
            tg,
            unit_of(M.TG_TPS),
            Source.HARNESS_CLOCK,
            method="decode calls / summed time of the single-token decode calls",
        )
        if tg
        else Metric.unavailable(unit_of(M.TG_TPS), "fewer than 2 generated tokens: no decode step")
    )
    for phase, key in (("pp", M.PP_TPS_COUNTER), ("tg", M.TG_TPS_COUNTER)):
        vals = [
            v
            for r in reps
            if (c := r.counters or {}).get(f"{phase}_tokens")
            and (v := _ratio(c[f"{phase}_tokens"], c.get(f"{phase}_ms", 0.0) / 1e3))
        ]
        out[key] = (
            Metric.measured(
                vals, unit_of(key), Source.RUNTIME_COUNTER, counters=[r.counters for r in reps]
            )
            if vals
            else Metric.unavailable(
                unit_of(key), f"the runtime reported no {phase.upper()} counter for this cell"
            )
        )
    return out


def latency(reps: Sequence[Repetition]) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    if not reps:
        for key in (M.TTFT, M.TPOT, M.TOKEN_P50, M.TOKEN_P90):
            out[key] = Metric.unavailable(unit_of(key), "no counted repetition finished")
        return out
    out[M.TTFT] = Metric.measured(
        [r.ttft_s for r in reps],
        unit_of(M.TTFT),
        Source.HARNESS_CLOCK,
        method="prefill start -> first token id, warm",
    )
    steps = [s for r in reps for s in r.step_s]
    if not steps:
        reason = "fewer than 2 generated tokens: no inter-token interval"
        for key in (M.TPOT, M.TOKEN_P50, M.TOKEN_P90):
            out[key] = Metric.unavailable(unit_of(key), reason)
        return out
    tpot = [sum(r.step_s) / len(r.step_s) for r in reps if r.step_s]
    out[M.TPOT] = Metric.measured(
        tpot,
        unit_of(M.TPOT),
        Source.HARNESS_CLOCK,
        method="mean time per output token after the first",
    )
    for q, key in ((50, M.TOKEN_P50), (90, M.TOKEN_P90)):
        out[key] = Metric(
            percentile(steps, q),
            unit_of(key),
            Source.HARNESS_CLOCK,
            detail={"n": len(steps), "method": f"p{q} of per-token intervals, all counted reps"},
        )
    return out


def cold_start(timeline: dict[str, float], spawned: float) -> dict[str, Metric]:
    """Process start -> runtime imported -> model loaded -> first token, from the spawn."""
    marks = [
        (M.COLD_PROCESS, "spawned", "worker_start"),
        (M.COLD_IMPORT, "worker_start", "imported"),
        (M.COLD_LOAD, "imported", "loaded"),
        (M.COLD_FIRST_TOKEN, "loaded", "first_token"),
        (M.COLD_TOTAL, "spawned", "first_token"),
    ]
    t = {"spawned": spawned, **timeline}
    out: dict[str, Metric] = {}
    for key, start, end in marks:
        if start in t and end in t:
            out[key] = Metric(
                t[end] - t[start],
                unit_of(key),
                Source.HARNESS_CLOCK,
                detail={"from": start, "to": end},
            )
        else:
            out[key] = Metric.unavailable(unit_of(key), f"the worker never reached '{end}'")
    return out


def memory(
    peak_tree_rss: int | None,
    interval_s: float,
    maxrss: int | None,
    maxrss_method: str = "ru_maxrss of the reaped worker (wait4)",
) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    sampled, os_peak = M.PEAK_RSS_SAMPLED, M.PEAK_RSS_OS
    out[sampled] = (
        Metric(
            peak_tree_rss,
            unit_of(sampled),
            Source.OS_ACCOUNTING,
            detail={
                "method": "psutil RSS of the worker's process tree, sampled",
                "interval_s": interval_s,
            },
        )
        if peak_tree_rss
        else Metric.unavailable(unit_of(sampled), "no RSS sample was taken")
    )
    out[os_peak] = (
        Metric(maxrss, unit_of(os_peak), Source.OS_ACCOUNTING, detail={"method": maxrss_method})
        if maxrss
        else Metric.unavailable(unit_of(os_peak), maxrss_method)
    )
    return out


def power(
    result: WorkerResult | None, *, cell_devices: Sequence[str] | None = None
) -> dict[str, Metric]:
    """Energy of prefill and decode, power, energy per token, from the worker's meter: only its
    sources covering a device the cell ran on count. ``cell_devices``: the devices the cell's
    stack says it ran on (``("cpu",)``, ``("cpu", "gpu")``, ``("cpu", "gpu:0")``); None when not
    known, then taken as CPU-only (every rtmatrix row runs on the CPU), said in the detail."""
    from rtmatrix.metrics.power import power_metrics

    if result is None:
        return power_metrics(None, [])
    info = result.power.to_dict() if result.power is not None else None
    return power_metrics(info, [r.to_dict() for r in result.reps], cell_devices)
