"""Turning a meter's info and the repetitions' phase energies into labelled metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rtmatrix.outcome import Metric, Source

ENERGY_KEYS = ("energy_prefill_j", "energy_decode_j", "energy_j", "power_w", "energy_per_token_j")
_UNITS = {"power_w": "W"}


def _unavailable(reason: str) -> dict[str, Metric]:
    return {k: Metric.unavailable(_UNITS.get(k, "J"), reason) for k in ENERGY_KEYS}


def _n_generated(rep: Mapping[str, Any]) -> int:
    if "n_generated" in rep:
        return int(rep["n_generated"])
    return len(rep.get("tokens") or [])


def power_metrics(info: Mapping[str, Any] | None, reps: list[dict[str, Any]]) -> dict[str, Metric]:
    """``energy_prefill_j``, ``energy_decode_j``, ``energy_j`` (both phases), ``power_w``
    (their energy / their time) and ``energy_per_token_j`` (``energy_j`` / generated tokens), one
    sample per counted repetition, from :meth:`PhaseMeter.info` and the repetitions' ``energy``
    entries (:meth:`PhaseMeter.take`)."""
    if not info:
        return _unavailable(
            "the worker recorded no power measurement (it ended before the "
            "first counted repetition)"
        )
    if not info.get("meter"):
        return _unavailable(str(info.get("reason") or "no energy source"))
    if not reps:
        return _unavailable("no counted repetition finished")
    source = Source(str(info["source"]))
    base = _base_detail(info)
    phases = _phase_records(reps)
    if isinstance(phases, str):
        return _unavailable(phases)
    pp, dec = phases
    min_steps = info.get("min_steps")
    both = list(zip(pp, dec, strict=True))
    total = [a["j"] + b["j"] for a, b in both]
    secs = [a["s"] + b["s"] for a, b in both]
    flag = _flagged([r for pair in both for r in pair], min_steps)
    return {
        "energy_prefill_j": _phase_metric(pp, "prefill", source, base, min_steps),
        "energy_decode_j": _phase_metric(dec, "decode", source, base, min_steps),
        "energy_j": Metric.measured(
            total,
            "J",
            source,
            **base,
            **flag,
            phase="prefill+decode",
            seconds=secs,
            cpu_s=[a["cpu_s"] + b["cpu_s"] for a, b in both],
        ),
        "power_w": _power(total, secs, source, base, flag),
        "energy_per_token_j": _per_token(total, both, reps, source, base, flag),
    }


def _base_detail(info: Mapping[str, Any]) -> dict[str, Any]:
    """The meter's description, shared by every energy metric's detail."""
    base: dict[str, Any] = {
        "meter": info["meter"],
        "resolution_j": info.get("resolution_j"),
        "update_interval_s": info.get("update_interval_s"),
        "sampled": bool(info.get("sampled")),
        "min_steps": info.get("min_steps"),
    }
    if info.get("sampled"):
        base["sample_interval_s"] = info.get("update_interval_s")
    base |= {f"input_{k}": v for k, v in (info.get("inputs") or {}).items()}
    return base


def _phase_records(
    reps: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | str:
    """Each repetition's prefill and decode energy records, or why one is missing or failed."""
    phases: dict[str, list[dict[str, Any]]] = {"prefill": [], "decode": []}
    for i, rep in enumerate(reps):
        energy = rep.get("energy") or {}
        for ph, recs in phases.items():
            rec = energy.get(ph)
            if rec is None:
                return f"repetition {i} has no metered {ph} phase"
            if rec.get("j") is None:
                return f"meter read failed in repetition {i} ({ph}): {rec.get('error')}"
            recs.append(rec)
    return phases["prefill"], phases["decode"]


def _flagged(recs: list[dict[str, Any]], min_steps: Any) -> dict[str, Any]:
    """Whether every record is above what the meter resolves; a note where not."""
    bad = sum(1 for r in recs if not r.get("resolved", False))
    out: dict[str, Any] = {"resolved": bad == 0, "unresolved_reps": bad}
    if bad:
        out["note"] = (
            f"{bad} of {len(recs)} repetition(s) shorter than {min_steps} counter "
            "updates or resolution steps: below what the meter resolves"
        )
    return out


def _phase_metric(
    recs: list[dict[str, Any]], phase: str, source: Source, base: dict[str, Any], min_steps: Any
) -> Metric:
    return Metric.measured(
        [r["j"] for r in recs],
        "J",
        source,
        **base,
        **_flagged(recs, min_steps),
        phase=phase,
        seconds=[r["s"] for r in recs],
        cpu_s=[r["cpu_s"] for r in recs],
    )


def _power(
    total: list[Any], secs: list[Any], source: Source, base: dict[str, Any], flag: dict[str, Any]
) -> Metric:
    if not all(s > 0 for s in secs):
        return Metric.unavailable("W", "a metered phase took no measurable time")
    return Metric.measured(
        [e / s for e, s in zip(total, secs, strict=True)],
        "W",
        source,
        **base,
        **flag,
        method="energy_j / metered seconds of prefill+decode",
    )


def _per_token(
    total: list[Any],
    both: list[tuple[dict[str, Any], dict[str, Any]]],
    reps: list[dict[str, Any]],
    source: Source,
    base: dict[str, Any],
    flag: dict[str, Any],
) -> Metric:
    gen = [_n_generated(r) for r in reps]
    if not all(g > 0 for g in gen):
        return Metric.unavailable("J", "no generated token")
    return Metric.measured(
        [e / g for e, g in zip(total, gen, strict=True)],
        "J",
        source,
        **base,
        **flag,
        method="energy_j (prefill+decode) / generated tokens",
        generated_tokens=gen,
        decode_only_j_per_token=[
            b["j"] / (g - 1) if g > 1 else None for (_, b), g in zip(both, gen, strict=True)
        ],
    )
