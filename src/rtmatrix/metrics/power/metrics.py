"""Turning a meter's info and the repetitions' phase energies into labelled metrics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rtmatrix.metrics.power.attribute import attribute
from rtmatrix.metrics.power.devices import DeviceError
from rtmatrix.outcome import Metric, Source

ENERGY_KEYS = ("energy_prefill_j", "energy_decode_j", "energy_j", "power_w", "energy_per_token_j")
_UNITS = {"power_w": "W"}


def _unavailable(reason: str) -> dict[str, Metric]:
    return {k: Metric.unavailable(_UNITS.get(k, "J"), reason) for k in ENERGY_KEYS}


def _n_generated(rep: Mapping[str, Any]) -> int:
    if "n_generated" in rep:
        return int(rep["n_generated"])
    return len(rep.get("tokens") or [])


def power_metrics(
    info: Mapping[str, Any] | None,
    reps: list[dict[str, Any]],
    cell_devices: Sequence[str] | None = None,
) -> dict[str, Metric]:
    """``energy_prefill_j``, ``energy_decode_j``, ``energy_j`` (both phases), ``power_w``
    (their energy / their time) and ``energy_per_token_j`` (``energy_j`` / generated tokens), one
    sample per counted repetition, from :meth:`PhaseMeter.info` and the repetitions' ``energy``
    entries (:meth:`PhaseMeter.take`). Only the sources covering a device of ``cell_devices``
    count (:func:`attribute`; None: not known, taken as CPU-only); their energies are summed.
    With none, every value is ``unavailable`` saying which device each source meters."""
    if not info:
        return _unavailable(
            "the worker recorded no power measurement (it ended before the "
            "first counted repetition)"
        )
    if not info.get("meter"):
        return _unavailable(str(info.get("reason") or "no energy source"))
    if "meters" not in info:
        return _unavailable("the meter's record lists no sources with their devices")
    try:
        att = attribute(info, cell_devices)
    except DeviceError as exc:  # a stack's device in no known form: said, not a crash
        return _unavailable(f"cannot tell which source meters this cell's devices: {exc}")
    if att.reason is not None:
        return _unavailable(att.reason)
    if not reps:
        return _unavailable("no counted repetition finished")
    meters = {str(m["meter"]): m for m in info["meters"]}
    used = [meters[name] for name in att.counted]
    source = _weakest(Source(str(m["source"])) for m in used)
    base = _base_detail(used, info) | att.detail()
    phases = _phase_records(reps, att.counted)
    if isinstance(phases, str):
        return _unavailable(phases)
    pp, dec = phases
    min_steps = info.get("min_steps")
    both = list(zip(pp, dec, strict=True))
    total = [a["j"] + b["j"] for a, b in both]
    secs = [a["s"] + b["s"] for a, b in both]
    flag = _flagged([r for pair in both for r in pair], min_steps)
    by_meter = (
        {
            "j_by_meter": {
                name: [a["by_meter"][name] + b["by_meter"][name] for a, b in both]
                for name in att.counted
            }
        }
        if len(att.counted) > 1
        else {}
    )
    return {
        "energy_prefill_j": _phase_metric(pp, "prefill", source, base, min_steps),
        "energy_decode_j": _phase_metric(dec, "decode", source, base, min_steps),
        "energy_j": Metric.measured(
            total,
            "J",
            source,
            **base,
            **flag,
            **by_meter,
            phase="prefill+decode",
            seconds=secs,
            cpu_s=[a["cpu_s"] + b["cpu_s"] for a, b in both],
        ),
        "power_w": _power(total, secs, source, base, flag),
        "energy_per_token_j": _per_token(total, both, reps, source, base, flag),
    }


# A value summed from sources of several provenances carries the weakest one's label.
_PROVENANCE_ORDER = (Source.MODELLED, Source.EXTERNAL_METER, Source.HARDWARE_COUNTER)


def _weakest(sources: Iterable[Source]) -> Source:
    got = set(sources)
    return next((s for s in _PROVENANCE_ORDER if s in got), Source.HARDWARE_COUNTER)


def _meter_detail(meter: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "resolution_j": meter.get("resolution_j"),
        "update_interval_s": meter.get("update_interval_s"),
        "sampled": bool(meter.get("sampled")),
    }
    if meter.get("sampled"):
        out["sample_interval_s"] = meter.get("update_interval_s")
    return out | {f"input_{k}": v for k, v in (meter.get("inputs") or {}).items()}


def _base_detail(used: list[Mapping[str, Any]], info: Mapping[str, Any]) -> dict[str, Any]:
    """The counted sources' description, shared by every energy metric's detail: one source's
    fields at the top (as with a single meter), several under ``meters``."""
    base: dict[str, Any] = {"meter": "+".join(str(m["meter"]) for m in used)}
    if len(used) == 1:
        base |= _meter_detail(used[0])
    else:
        base["sampled"] = any(m.get("sampled") for m in used)
        base["meters"] = {
            str(m["meter"]): {"source": m.get("source")} | _meter_detail(m) for m in used
        }
    base["min_steps"] = info.get("min_steps")
    return base


def _phase_records(
    reps: list[dict[str, Any]], counted: tuple[str, ...]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | str:
    """Each repetition's prefill and decode energy of the counted sources, summed (``j``, with
    ``by_meter``), or why one is missing or failed."""
    phases: dict[str, list[dict[str, Any]]] = {"prefill": [], "decode": []}
    for i, rep in enumerate(reps):
        energy = rep.get("energy") or {}
        for ph, recs in phases.items():
            rec = energy.get(ph)
            if rec is None:
                return f"repetition {i} has no metered {ph} phase"
            per = rec.get("meters") or {}
            by_meter: dict[str, float] = {}
            resolved = True
            for name in counted:
                m = per.get(name)
                if m is None:
                    return f"repetition {i} has no {name} reading of its {ph} phase"
                if m.get("j") is None:
                    return f"meter read failed in repetition {i} ({ph}, {name}): {m.get('error')}"
                by_meter[name] = m["j"]
                resolved = resolved and bool(m.get("resolved", False))
            recs.append(
                {
                    "j": sum(by_meter.values()),
                    "s": rec["s"],
                    "cpu_s": rec["cpu_s"],
                    "resolved": resolved,
                    "by_meter": by_meter,
                }
            )
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
    names = list(recs[0]["by_meter"]) if recs else []
    by_meter = (
        {"j_by_meter": {n: [r["by_meter"][n] for r in recs] for n in names}}
        if len(names) > 1
        else {}
    )
    return Metric.measured(
        [r["j"] for r in recs],
        "J",
        source,
        **base,
        **_flagged(recs, min_steps),
        **by_meter,
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
