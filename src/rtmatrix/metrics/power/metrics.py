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

    phases: dict[str, list[dict[str, Any]]] = {"prefill": [], "decode": []}
    for i, rep in enumerate(reps):
        energy = rep.get("energy") or {}
        for ph, recs in phases.items():
            rec = energy.get(ph)
            if rec is None:
                return _unavailable(f"repetition {i} has no metered {ph} phase")
            if rec.get("j") is None:
                return _unavailable(
                    f"meter read failed in repetition {i} ({ph}): {rec.get('error')}"
                )
            recs.append(rec)

    def flagged(recs: list[dict[str, Any]]) -> dict[str, Any]:
        bad = sum(1 for r in recs if not r.get("resolved", False))
        out: dict[str, Any] = {"resolved": bad == 0, "unresolved_reps": bad}
        if bad:
            out["note"] = (
                f"{bad} of {len(recs)} repetition(s) shorter than {info.get('min_steps')} counter "
                "updates or resolution steps: below what the meter resolves"
            )
        return out

    pp, dec = phases["prefill"], phases["decode"]
    both = [[a, b] for a, b in zip(pp, dec, strict=True)]
    cpu = {"cpu_s": [r["cpu_s"] for r in pp]}
    out: dict[str, Metric] = {}
    out["energy_prefill_j"] = Metric.measured(
        [r["j"] for r in pp],
        "J",
        source,
        **base,
        **flagged(pp),
        phase="prefill",
        seconds=[r["s"] for r in pp],
        **cpu,
    )
    out["energy_decode_j"] = Metric.measured(
        [r["j"] for r in dec],
        "J",
        source,
        **base,
        **flagged(dec),
        phase="decode",
        seconds=[r["s"] for r in dec],
        cpu_s=[r["cpu_s"] for r in dec],
    )
    total = [a["j"] + b["j"] for a, b in both]
    secs = [a["s"] + b["s"] for a, b in both]
    any_flag = flagged([r for pair in both for r in pair])
    out["energy_j"] = Metric.measured(
        total,
        "J",
        source,
        **base,
        **any_flag,
        phase="prefill+decode",
        seconds=secs,
        cpu_s=[a["cpu_s"] + b["cpu_s"] for a, b in both],
    )
    if all(s > 0 for s in secs):
        out["power_w"] = Metric.measured(
            [e / s for e, s in zip(total, secs, strict=True)],
            "W",
            source,
            **base,
            **any_flag,
            method="energy_j / metered seconds of prefill+decode",
        )
    else:
        out["power_w"] = Metric.unavailable("W", "a metered phase took no measurable time")
    gen = [_n_generated(r) for r in reps]
    if all(g > 0 for g in gen):
        out["energy_per_token_j"] = Metric.measured(
            [e / g for e, g in zip(total, gen, strict=True)],
            "J",
            source,
            **base,
            **any_flag,
            method="energy_j (prefill+decode) / generated tokens",
            generated_tokens=gen,
            decode_only_j_per_token=[
                b["j"] / (g - 1) if g > 1 else None for (_, b), g in zip(both, gen, strict=True)
            ],
        )
    else:
        out["energy_per_token_j"] = Metric.unavailable("J", "no generated token")
    return out
