"""Record building: a finished cell (process evidence + typed worker result) -> its JSON record,
and the run record's header.

A cell's record is built once: :func:`cell_record` from the cell's own run, then the steps the
orchestrator takes after it (another attempt of a contended cell, the adapter's and the numerics
control, the runtime's own benchmark tool) each return an :class:`Addendum` — what they add,
read from the record but never written into it — and :func:`complete` merges them into the
final record in one place (:func:`rtmatrix.runner.orchestrate.run_cell`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from rtmatrix.fixtures import FixtureError, PreparedFixture, archs, reference_for
from rtmatrix.fixtures.model import Reference, greedy_pick
from rtmatrix.fixtures.prepare import reference_weights
from rtmatrix.fixtures.spec import ExporterUnavailable, get_spec
from rtmatrix.matrix import Cell, Matrix, options_text
from rtmatrix.metrics import cell as cell_metrics
from rtmatrix.metrics import (
    host,
    hostlimits,
    package,
    parity,
    quality,
    registry,
    selfcheck,
    utilization,
)
from rtmatrix.metrics.contention import DEFAULT_THRESHOLD_CORES, ContentionReading, gated_reading
from rtmatrix.metrics.quality import QualityPlan
from rtmatrix.names import M, Scenario
from rtmatrix.numerics import Judged, judged_as
from rtmatrix.outcome import Judgement, Metric, Source, Status, Verdict, judge
from rtmatrix.protocol import QUALITY_LOGITS, WorkerResult
from rtmatrix.results.store import SCHEMA_VERSION
from rtmatrix.runner.classify import CellOutcome, refine
from rtmatrix.runner.process import TAIL_CHARS, Launch


@dataclass
class Finished:
    """Everything known about a cell when it ends; the input of :func:`cell_record`."""

    cell: Cell
    outcome: CellOutcome
    fixture: PreparedFixture | None = None
    launch: Launch | None = None
    result: WorkerResult | None = None
    job_dir: Path | None = None
    timeline: dict[str, float] = field(default_factory=dict)
    #: extra evidence the parent gathered (memory cgroup, leaked processes, contention)
    evidence: dict[str, Any] = field(default_factory=dict)
    #: extra metrics the parent measured (e.g. host_busy_cores)
    metrics: dict[str, Metric] = field(default_factory=dict)
    #: the teacher-forced quality pass the job asked for (a real model's cell), or None
    quality: QualityPlan | None = None
    #: a real model's text: the prompt the job gave and how its output is decoded, or None
    text: QualityPlan | None = None


def _architecture(model: str | None) -> dict[str, str]:
    """A converted checkpoint's architecture (transformers' ``model_type``) for the record: the
    report's architecture view reads it, refused cells included; {} for rtmatrix's own models."""
    from rtmatrix.fixtures.prepare import is_converted

    try:
        if not is_converted(model):
            return {}
        return {"architecture": get_spec(str(model)).architecture}
    except (FixtureError, ExporterUnavailable, ValueError, OSError):  # the cell's own fixture
        return {}  # step records why (no torch to build the toy, an unreadable folder, ...)


def base_record(cell: Cell, container: str | None) -> dict[str, Any]:
    """The identifying part of a cell's record, known before anything runs."""
    return {
        "key": cell.key,
        "runtime": cell.runtime,
        **({"target": cell.target} if cell.target else {}),
        "adapter": cell.adapter,
        "fixture": {
            "name": cell.fixture.name,
            "dtype": cell.fixture.dtype,
            "model": cell.fixture.model,
            "variant": cell.fixture.variant,
            "scenario": cell.fixture.scenario,
            "container": container,
            "path": None,
            "sha256": None,
        }
        | _architecture(cell.fixture.model),
        "params": dict(cell.params),
        "expect": str(cell.expect),
        **({"expect_kind": list(cell.expect_kinds)} if cell.expect_kinds else {}),
    }


def _package_metrics(dist: str | None) -> dict[str, Metric]:
    if dist:
        return {M.PACKAGE_SIZE: package.package_size(dist), M.LICENSE: package.license_of(dist)}
    why = "the adapter declares no distribution"
    return {
        M.PACKAGE_SIZE: Metric.unavailable("bytes", why),
        M.LICENSE: Metric.unavailable("spdx", why),
    }


def metrics_for(fin: Finished, distribution: str | None) -> dict[str, dict[str, Any]]:
    lau, result = fin.launch, fin.result
    reps = result.reps if result else []
    m = _package_metrics(distribution)
    m |= cell_metrics.cold_start(fin.timeline, lau.spawned if lau else float("nan"))
    m |= cell_metrics.memory(
        lau.peak_tree_rss if lau else None,
        fin.cell.run["sample_interval_s"],
        lau.maxrss if lau else None,
        lau.maxrss_method if lau else "the worker never started",
    )
    m |= cell_metrics.throughput(reps)
    m |= cell_metrics.latency(reps)
    stack = result.stack if result else None
    devices = stack.numerics.devices if stack else None
    m |= cell_metrics.power(result, cell_devices=devices or None)
    if result is not None and result.scenario is not None:
        from rtmatrix.scenarios import scenario_metrics

        m |= scenario_metrics(Scenario(fin.cell.fixture.scenario), result.scenario)
    m |= fin.metrics
    return {str(k): v.to_dict() for k, v in m.items()}


def quality_for(fin: Finished, plan: QualityPlan) -> dict[str, Metric]:
    """The quality figures of the cell's teacher-forced pass, or unavailable saying why."""
    path = fin.job_dir / QUALITY_LOGITS if fin.job_dir else None
    if fin.outcome.status is not Status.OK:
        return quality.unavailable(f"cell outcome is {fin.outcome.status}")
    ran = fin.result.quality if fin.result else None
    if ran is not None and ran.error:
        return quality.unavailable(f"the teacher-forced pass failed: {ran.error}")
    if path is None or not path.exists():
        return quality.unavailable("the worker wrote no teacher-forced logits")
    try:
        ref = quality.reference_logits(plan)
    except (FixtureError, ExporterUnavailable, OSError, ValueError) as exc:
        return quality.unavailable(f"the f32 reference could not be built: {exc}")
    detail = plan.detail() | {
        "tokenizer": ran.tokenizer if ran else None,
        "teacher_forced_wall_s": ran.wall_s if ran else None,
    }
    anchor = quality.anchor_n_ctx(plan)
    return quality.figures(np.load(path), ref, plan.ids[1:], detail, anchor)


def parity_for(fin: Finished) -> dict[str, Any]:
    fx, result = fin.fixture, fin.result
    if fin.outcome.status is not Status.OK:
        return parity.unavailable(f"cell outcome is {fin.outcome.status}")
    if fx is None or fx.model is None or fx.dtype is None:
        return parity.unavailable("user-supplied model file: no numpy reference for it")
    if result is None or not result.reps:
        return parity.unavailable("the cell produced no counted generation to compare")
    p = fin.cell.params
    try:
        prompt_ids = fin.text.prompt_ids if fin.text else None
        ref = reference_for(fx.model, fx.dtype, p["prompt_tokens"], p["gen_tokens"], fx.container,
                            prompt_ids=prompt_ids)  # fmt: skip
    except (FixtureError, ExporterUnavailable, ValueError) as exc:
        return parity.unavailable(f"the reference could not be built: {exc}")
    logits_path = fin.job_dir / "first_logits.npy" if fin.job_dir else None
    logits = np.load(logits_path) if logits_path and logits_path.exists() else None
    reps = result.reps
    engine = (result.evidence or {}).get("engine_loop")
    ids_only = f"an engine's own loop ({engine['api']}): ids, no logits" if engine else None
    requant = (result.evidence or {}).get("requantized")
    judged = numerics_judged(fin)
    judged_as = str(requant["judged_as"]) if requant else judged.judged_as
    out = parity.compare(
        judged_as, ref.tokens, ref.first_logits, reps[0].tokens, logits, ref.margins, ids_only
    )
    if fx.conversion is not None:  # the runtime's converter wrote it: transformers judges
        out["reference"] = ("transformers' fp32 eager forward pass on the checkpoint (the file "
                            f"is {fx.conversion.label()}'s conversion of it)")  # fmt: skip
    if judged.downgraded and not requant:  # judged as what ran; also said at what was asked
        asked = parity.compare(fx.dtype, ref.tokens, ref.first_logits, reps[0].tokens, logits,
                               ref.margins, ids_only)  # fmt: skip
        out["numerics"] = judged.to_dict() | {
            "within_requested_tolerance": asked.get("within_tolerance"),
            "requested_tolerance": asked.get("logit_tolerance"),
        }
        out["reference"] += f" ({fx.dtype}); judged as {judged.judged_as}: {judged.reason}"
    if requant:  # the runtime quantized the file's weights itself: judged as that dtype
        out["requantized"] = dict(requant)
        out["reference"] += f" ({fx.dtype}); the runtime re-quantized them: {requant['by']}"
    out["deterministic_across_reps"] = all(r.tokens == reps[0].tokens for r in reps)
    return out


def numerics_judged(fin: Finished) -> Judged:
    """The dtype the cell's outputs are judged as: the requested one, or the lower precision
    its runtime's home says it computed in (:func:`rtmatrix.numerics.judged_as`)."""
    dtype = fin.fixture.dtype if fin.fixture and fin.fixture.dtype else ""
    report = fin.result.stack if fin.result else None
    return judged_as(dtype, report.numerics if report else None, fin.cell.runtime)


def scenario_reference(fin: Finished) -> None:
    """The cell's scenario's parent-side check against the reference, as its spec names it
    (``ScenarioSpec.reference``); nothing for the plain generation."""
    from rtmatrix.scenarios import spec_of

    spec = spec_of(fin.cell.fixture.scenario)
    hook = spec.hook("reference") if spec is not None else None
    if hook is not None:
        hook(fin)


def invariance_reference(fin: Finished) -> None:
    """The ``serve`` scenario's batch-invariance requests against the numpy reference, as
    parity is: on the weights as the file stores them; a failed check joins the scenario's
    checks (so it refines the outcome), for the dtypes whose tokens parity demands exactly."""
    from rtmatrix.scenarios import invariance

    scenario = fin.result.scenario if fin.result else None
    inv = (scenario or {}).get("invariance")
    if scenario is None or not inv or fin.outcome.status is not Status.OK:
        return
    fx = fin.fixture
    if fx is None or fx.model is None or fx.dtype is None:
        inv["reference_check"] = "user-supplied model file: no numpy reference for it"
        return
    try:
        spec = get_spec(fx.model)
        ref = Reference(spec, reference_weights(spec, fx.container, fx.dtype))
    except (FixtureError, ExporterUnavailable) as exc:
        inv["reference_check"] = f"the numpy reference could not be built: {exc}"
        return
    banned = [int(t) for t in inv.get("banned") or []]

    def generate(prompt: Sequence[int], n: int) -> tuple[list[int], list[Any]]:
        cache = ref.new_cache()
        logits = ref.forward(prompt, cache)[-1]
        ids, steps = [], []
        for i in range(n):
            steps.append(logits)
            ids.append(greedy_pick(logits, banned))
            if i + 1 < n:
                logits = ref.forward([ids[-1]], cache)[-1]
        return ids, steps

    how = "numpy forward pass on the weights as stored in the file, greedy, same ids masked"
    judged = numerics_judged(fin)
    exact = judged.judged_as in parity.EXACT_TOKENS
    tol = parity.LOGIT_TOLERANCE.get(judged.judged_as)
    if judged.downgraded and tol is not None:  # a near-tie is judged at what ran
        inv["tie_margin"] = max(float(inv.get("tie_margin") or 0.0), tol)
        inv["numerics"] = judged.to_dict()
    scenario.setdefault("checks", []).extend(invariance.with_reference(inv, generate, exact, how))


def sampler_reference(fin: Finished) -> None:
    """The ``sample`` scenario's draws against the numpy reference (the stage orders rebuilt
    from its logits); failed checks join the scenario's (so they refine the outcome)."""
    from rtmatrix.scenarios import sample

    scenario = fin.result.scenario if fin.result else None
    if scenario is None:
        return
    if fin.outcome.status is not Status.OK:
        return
    fx = fin.fixture
    if fx is None or fx.model is None or fx.dtype is None:
        scenario["order_unavailable"] = "user-supplied model file: no numpy reference for it"
        return
    try:
        spec = get_spec(fx.model)
        ref = Reference(spec, reference_weights(spec, fx.container, fx.dtype))
    except (FixtureError, ExporterUnavailable) as exc:
        scenario["order_unavailable"] = f"the numpy reference could not be built: {exc}"
        return

    def logits_after(ids: Sequence[int]) -> Any:
        return ref.forward(list(ids), ref.new_cache())[-1]

    scenario.setdefault("checks", []).extend(sample.with_reference(scenario, logits_after))


def contention(fin: Finished) -> ContentionReading | None:
    """CPU used on the host outside the cell's processes, over its counted repetitions (or the
    worker's whole life for a cell without them); None when no worker ran."""
    lau = fin.launch
    if lau is None or lau.cpu is None:
        return None
    threshold = float(fin.cell.run.get("contention_threshold_cores", DEFAULT_THRESHOLD_CORES))
    reps = fin.result.reps if fin.result else []
    turns = fin.result.turns if fin.result else None
    if reps and turns is not None and turns.gated_reps:  # the other side ran in between
        return gated_reading(lau.cpu, [(r.t_start, r.t_end) for r in reps], threshold)
    if reps:
        t0, t1 = min(r.t_start for r in reps), max(r.t_end for r in reps)
        window = "the counted repetitions"
    else:
        t0, t1 = lau.spawned, lau.spawned + lau.wall_s
        window = "the worker's whole run (no counted repetitions)"
    reading = lau.cpu.reading(t0, t1, threshold)
    reading.detail["window"] = window
    return reading


def _contention_metrics(reading: ContentionReading | None) -> dict[str, Metric]:
    if reading is None:
        why = "no worker ran for this cell"
        return {
            M.HOST_BUSY_CORES: Metric.unavailable("cores", why),
            M.HOST_STEAL_CORES: Metric.unavailable("cores", why),
        }
    return dict(reading.metrics())


def _judge(fin: Finished, outcome: CellOutcome) -> Judgement:
    cell = fin.cell
    j = judge(
        cell.expect,
        outcome.status,
        cell.verdicts,
        cell.expect_kinds,
        outcome.error_kind,
        outcome.message,
    )
    leaked = fin.launch.leaked if fin.launch else ()
    if leaked and j.verdict is Verdict.PASS:
        pids = ", ".join(str(lp.pid) for lp in leaked)
        return Judgement(Verdict.WARN, f"{len(leaked)} process(es) outlived the cell: {pids}")
    return j


def _evidence(fin: Finished) -> dict[str, Any]:
    result = fin.result
    ev: dict[str, Any] = dict((result.evidence if result else None) or {})
    if fin.launch:
        ev["stderr_tail"] = fin.launch.stderr_tail[-TAIL_CHARS:]
        ev["stdout_tail"] = fin.launch.stdout_tail[-TAIL_CHARS:]
    if result and result.traceback_tail:
        ev["traceback_tail"] = result.traceback_tail
    if result and result.turns is not None:
        ev["turns"] = result.turns.to_dict()  # how the counted repetitions took turns
    if fin.launch:
        ev["leaked_processes"] = [lp.to_dict() for lp in fin.launch.leaked]
        ev["process_tracking"] = fin.launch.tracking
    return ev | fin.evidence


def stack_for(
    record: dict[str, Any],
    evidence: dict[str, Any],
    outcome: CellOutcome,
    distribution: str | None,
    result: WorkerResult | None = None,
) -> dict[str, Any] | None:
    """``evidence.stack`` (format, runtime, backend, kernels) for a cell that ran; None for a
    cell that never loaded a model (nothing ran on any layer)."""
    from rtmatrix.metrics import stack

    if outcome.status not in (Status.OK, Status.WRONG_OUTPUT, Status.FALLBACK):
        return None
    draft = record | {"evidence": evidence, "outcome": outcome.to_dict()}
    report = result.stack if result else None
    why = (result.stack_unavailable if result else None) or "the worker sent no stack report"
    return stack.build(draft, {"distribution": distribution}, report, why)


@dataclass(frozen=True)
class Addendum:
    """What one step after the cell's own run adds to its record: top-level fields (``control``,
    ``diagnosed``, ``numerics_control``, ``attempts``), metrics, evidence entries, and the
    sentences appended to ``verdict_reason``."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    evidence: Mapping[str, Any] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()


def complete(rec: Mapping[str, Any], addenda: Sequence[Addendum]) -> dict[str, Any]:
    """The final record: ``rec`` (from :func:`cell_record`, not changed) with every addendum
    merged in order."""
    out = dict(rec)
    if not addenda:
        return out
    metrics = dict(rec.get("metrics") or {})
    evidence = dict(rec.get("evidence") or {})
    reasons = [str(rec["verdict_reason"])] if rec.get("verdict_reason") else []
    for add in addenda:
        out |= add.fields
        metrics |= add.metrics
        evidence |= add.evidence
        reasons += add.reasons
    out["metrics"] = metrics
    if evidence or "evidence" in rec:
        out["evidence"] = evidence
    if reasons:
        out["verdict_reason"] = "; ".join(reasons)
    return out


def cell_record(fin: Finished, base: dict[str, Any], distribution: str | None) -> dict[str, Any]:
    """The finished cell's record: outcome (refined by parity), verdict, metrics, evidence."""
    par = parity_for(fin)
    if fin.quality is not None:  # a real model: quantized rows are judged by their KLD
        figures = quality_for(fin, fin.quality)
        fin.metrics |= figures
        # what the cell is judged as: the runtime's own re-quantization, else what ran
        judged = (par.get("requantized") or {}).get("judged_as") or \
            (par.get("numerics") or {}).get("judged_as")  # fmt: skip
        dtype = judged or (fin.fixture.dtype if fin.fixture else None)
        par = parity.judged_by_quality(par, dtype, figures)
        conv = fin.fixture.conversion if fin.fixture else None
        if conv is not None:  # a vendor's conversion: did it change the model?
            kld = figures.get(M.KLD_MEAN)
            agree = (kld.detail or {}) if kld is not None and kld.value is not None else {}
            par = parity.conversion_judged(par, dtype, agree, conv.label())
            if (par.get("conversion") or {}).get("changed_the_model") and conv.source:
                from rtmatrix.fixtures.checkpoints import features  # what to look at first

                par["conversion"]["config_features"] = features(Path(conv.source))
    scenario_reference(fin)
    outcome = refine(fin.outcome, par, fin.result)
    if fin.result and fin.result.runtime_version:
        outcome = replace(outcome, runtime_version=fin.result.runtime_version)
    record = dict(base)
    if fin.fixture is not None:
        record["fixture"] = (
            record["fixture"] | fin.fixture.to_dict() | {"scenario": fin.cell.fixture.scenario}
        )
    busy = contention(fin)
    fin.metrics |= _contention_metrics(busy)
    evidence = _evidence(fin)
    layers = stack_for(record, evidence, outcome, distribution, fin.result)
    if layers is not None:
        evidence["stack"] = layers
        kernels = layers["kernels"]
        if kernels.get("fallback") and outcome.status is Status.OK:
            outcome = outcome.with_status(
                Status.FALLBACK, f"kernel-level fallback: {kernels['fallback_reason']}"
            )
    checks = self_checks_for(fin, outcome.status, par)
    j = selfcheck.judged(_judge(fin, outcome), checks)  # a failed self-check: PASS -> WARN
    out = record | {
        "outcome": outcome.to_dict(),
        "verdict": str(j.verdict),
        "metrics": metrics_for(fin, distribution),
        "parity": par,
        "evidence": evidence,
        "wall_s": fin.launch.wall_s if fin.launch else 0.0,
        "contended": bool(busy and busy.contended),
    }
    out["metrics"] |= utilization.metrics_for(out)  # ÷ this host's measured limits
    if checks is not None:  # each check passed / failed with its figures / not applicable
        selfcheck.annotate(out, checks)
    mark = numerics_mark(numerics_judged(fin), par) if outcome.status is Status.OK else None
    if mark:  # a downgrade never passes silently as the requested dtype
        out["numerics_mark"] = mark
    reason = "; ".join(r for r in (j.reason, mark) if r)
    if reason:
        out["verdict_reason"] = reason
    if fin.text is not None and not archs.is_member(fin.text.model):  # a real checkpoint's
        out["fixture"] = out["fixture"] | {"source": get_spec(fin.text.model).source}  # cell
    if fin.text is not None and fin.result is not None and fin.result.reps:
        q = fin.text
        out["generated_text"] = generated_text(q.model, fin.result.reps[0].tokens) | {
            "prompt": q.prompt_name
            if q.prompt_ids
            else "seeded token ids (the text is shorter than prompt_tokens, or text_prompt = false)"
        }
    return out


def self_checks_for(
    fin: Finished, status: Status, par: dict[str, Any]
) -> selfcheck.SelfChecks | None:
    """An ok cell's self-checks (:mod:`rtmatrix.metrics.selfcheck`) against what its job
    asked; None for a cell that is not ok."""
    if status is not Status.OK:
        return None
    p, result = fin.cell.params, fin.result
    text_ids = fin.text.prompt_ids if fin.text else None
    expected = selfcheck.Expected(len(text_ids) if text_ids else int(p["prompt_tokens"]),
                                  int(p["gen_tokens"]), par.get("logit_tolerance"))  # fmt: skip
    why = f"the {fin.cell.fixture.scenario} scenario has no timed repetitions"
    return selfcheck.run_checks(result.reps if result else [],
                                result.self_check if result else None, expected, why)  # fmt: skip


def numerics_mark(judged: Judged, par: dict[str, Any]) -> str | None:
    """The cell's visible mark when it computed below the requested precision (whatever its
    scenario: a lifecycle cell's checks are judged at what ran too)."""
    if not judged.downgraded:
        return None
    num = par.get("numerics") or {}
    at = (f"; outside the {judged.requested} tolerance ({num.get('requested_tolerance')})"
          if num.get("within_requested_tolerance") is False else "")  # fmt: skip
    return f"judged as {judged.judged_as}, not {judged.requested}: {judged.reason}{at}"


def generated_text(model: str, tokens: list[int]) -> dict[str, Any]:
    """A real model's greedy output as text, decoded with the checkpoint's tokenizer."""
    from rtmatrix.fixtures.spec import get_spec
    from rtmatrix.fixtures.tokenizer import TokenizerError, tokenizer_for

    try:
        text = tokenizer_for(get_spec(model).source).decode(tokens, skip_special_tokens=False)
    except (TokenizerError, FixtureError, OSError) as exc:
        return {"unavailable": f"no tokenizer to decode with: {exc}"}
    how = "the first counted repetition's greedy tokens, decoded with the checkpoint's tokenizer"
    return {"text": str(text), "tokens": len(tokens), "how": how}


def reference_metrics(
    rec: Mapping[str, Any], ref: WorkerResult, busy: ContentionReading | None = None
) -> Addendum:
    """The runtime's own benchmark figures (``*_tps_reference``, source reference-tool) and the
    harness ÷ tool ratios for a finished cell's record; unavailable with the reason. The tool
    runs after the cell: how busy the host was meanwhile goes with its figures and the ratios
    (``contended``: a ratio from a busy reference run is not a finding)."""
    data = ref.reference if ref.status == "ok" else None
    load = {
        "reference_host_busy_cores": busy.busy_cores if busy else None,
        "contended": bool(rec.get("contended")) or bool(busy and busy.contended),
    }
    why = ref.message or "the reference tool reported nothing"
    ours_m: Mapping[str, Any] = rec["metrics"]
    m: dict[str, dict[str, Any]] = {}
    for phase, key, ref_key, ratio_key in (
        ("pp", M.PP_TPS, M.PP_TPS_REFERENCE, M.PP_REFERENCE_RATIO),
        ("tg", M.TG_TPS, M.TG_TPS_REFERENCE, M.TG_REFERENCE_RATIO),
    ):
        samples = (data.pp_tps if phase == "pp" else data.tg_tps) if data else []
        if data is None or not samples:
            reason = why if data is None else f"the tool reported no {phase} test"
            m[ref_key] = Metric.unavailable("tokens/s", reason).to_dict()
            m[ratio_key] = Metric.unavailable("ratio", reason).to_dict()
            continue
        ref_metric = Metric.measured(samples, "tokens/s", Source.REFERENCE_TOOL,
                                     **data.evidence, **load)  # fmt: skip
        m[ref_key] = ref_metric.to_dict()
        ours = ours_m.get(key, {}).get("value")
        m[ratio_key] = (
            Metric(ours / ref_metric.value, "ratio", Source.HARNESS_CLOCK,
                   detail={"method": f"{key} median / {ref_key} median", **load}).to_dict()
            if isinstance(ours, int | float) and isinstance(ref_metric.value, int | float)
            else Metric.unavailable("ratio", f"no {key} figure in this cell").to_dict()
        )  # fmt: skip
    evidence = {"reference_tool": data.evidence} if data is not None else {}
    if data is not None and data.quality is not None:
        merged = {**ours_m, **m}
        m |= {str(k): v.to_dict() for k, v in quality_reference(merged, data.quality).items()}
    return Addendum(metrics=m, evidence=evidence)


#: llama-perplexity prints its mean KLD with 6 decimals: below this, fewer than 2 digits
KLD_RESOLVED = 1e-4


def quality_reference(m: dict[str, Any], tool: dict[str, Any]) -> dict[M, Metric]:
    """The runtime's own quality tool's mean KLD and same-top % (source reference-tool), and
    the harness's figures over the same positions against them: ratio of mean KLDs, and the
    difference of same-top % in points (``tool``: the reference task's ``quality``)."""
    names = (M.KLD_REFERENCE, M.SAME_TOP_REFERENCE, M.KLD_REFERENCE_RATIO,
             M.SAME_TOP_REFERENCE_DIFF)  # fmt: skip
    units = tuple(registry.unit_of(n) for n in names)
    if "unavailable" in tool:
        why = f"the runtime's quality tool: {tool['unavailable']}"
        return {n: Metric.unavailable(u, why) for n, u in zip(names, units, strict=True)}
    evidence = dict(tool.get("evidence", {}))
    src = Source.REFERENCE_TOOL
    kld_ref = Metric(
        float(tool["kld_mean"]),
        registry.unit_of(M.KLD_REFERENCE),
        src,
        detail=evidence | {"uncertainty": tool.get("kld_mean_uncertainty")},
    )
    top_ref = Metric(
        float(tool["same_top_pct"]),
        registry.unit_of(M.SAME_TOP_REFERENCE),
        src,
        detail=evidence | {"uncertainty": tool.get("same_top_pct_uncertainty")},
    )
    out = {M.KLD_REFERENCE: kld_ref, M.SAME_TOP_REFERENCE: top_ref}
    window = m.get(M.KLD_MEAN, {}).get("anchor_window") or {}  # a Metric's detail, flattened
    if "kld_mean" not in window or window.get("n_ctx") != evidence.get("n_ctx"):
        why = "the harness's pass has no figures over the tool's positions"
        return out | {M.KLD_REFERENCE_RATIO: Metric.unavailable("ratio", why),
                      M.SAME_TOP_REFERENCE_DIFF: Metric.unavailable("points", why)}  # fmt: skip
    detail = {"positions": window["positions"], "harness_kld_mean": window["kld_mean"],
              "harness_same_top_pct": window["same_top_pct"]}  # fmt: skip
    tool_kld, tool_top = float(tool["kld_mean"]), float(tool["same_top_pct"])
    ratio = (
        Metric(window["kld_mean"] / tool_kld, "ratio", Source.HARNESS_COMPARISON,
               detail=detail | {"method": "harness mean KLD / tool mean KLD, same positions"})
        if tool_kld >= KLD_RESOLVED
        else Metric.unavailable("ratio", f"the tool's mean KLD {tool_kld:g} is below "
                                f"{KLD_RESOLVED:g}: it prints 6 decimals, too few digits for a "
                                "ratio (an f32/f16 file)")
    )  # fmt: skip
    diff = Metric(
        window["same_top_pct"] - tool_top,
        "points",
        Source.HARNESS_COMPARISON,
        detail=detail | {"method": "harness same-top % - tool same-top %"},
    )
    return out | {M.KLD_REFERENCE_RATIO: ratio, M.SAME_TOP_REFERENCE_DIFF: diff}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes() if path.is_file() else b"").hexdigest()


def new_record(matrix: Matrix, describe: dict[str, dict[str, Any]]) -> dict[str, Any]:
    now = datetime.now(UTC)
    runtimes = {}
    for rt in matrix.runtimes:
        info = describe[rt.name]
        dist = info.get("distribution")
        entry = {
            "adapter": rt.adapter,
            "options": rt.options,
            "distribution": dist,
            "version": package.version(dist) if dist else None,
            "extra": info.get("extra"),
            "container": info.get("container"),
        }
        control = rt.crash_control
        if control is None:  # the adapter's own, if it declares one
            control = (info.get("crash_control") or {}).get("options")
        if control is not None:  # the options a crashed cell is rerun with (False: none)
            entry["crash_control"] = control
        if rt.swept:  # a row a [[runtimes]] sweep made: which table, which values
            entry["sweep"] = {"base": rt.base_name, "values": rt.swept}
        if "error" in info:
            entry["error"] = info["error"]
        runtimes[rt.name] = entry
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": now.strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex(),
        "created_utc": now.isoformat(),
        "finished_utc": None,
        "status": "running",
        "matrix": {
            "path": str(matrix.path),
            "sha256": sha256_of(matrix.path),
            "n_cells": 0,
            "description": matrix.description,
            "run": matrix.run,
            "power": matrix.power,
            "gate": matrix.raw.get("gate", {}),
            "selection": matrix.raw.get("selection", {}),
        },
        "machine": host.machine_info()
        | hostlimits.machine_entry({int(c.params["threads"]) for c in matrix.cells()}),
        "project": host.project_info(),
        "runtimes": runtimes,
        "skipped": [],
        "cells": [],
    }


def _quality_text(m: dict[str, Any]) -> str:
    """A real model's KLD and same-top % (and ÷ the runtime's own tool) for the progress line."""
    kld, top = m.get(M.KLD_MEAN, {}).get("value"), m.get(M.SAME_TOP, {}).get("value")
    if kld is None or top is None:
        return ""
    ratio = m.get(M.KLD_REFERENCE_RATIO, {}).get("value")
    anchor = f" (÷ tool {ratio:.2f})" if ratio is not None else ""
    return f"  KLD {kld:.4f}{anchor} same-top {top:.0f}%"


def progress_line(i: int, n: int, cell: Cell, rec: dict[str, Any]) -> str:
    out = rec["outcome"]
    m = rec["metrics"]
    figs = ""
    if out["status"] == "ok":
        pp, tg = m[M.PP_TPS]["value"], m[M.TG_TPS]["value"]
        figs = (f"  PP {pp:.0f} tok/s" if pp else "") + (f"  TG {tg:.0f} tok/s" if tg else "")
        par = rec["parity"]
        if par["status"] == "measured":
            figs += f"  parity {par['tokens_agree']}/{par['tokens_compared']}"
        figs += _quality_text(m)
    else:
        figs = f"  {out['message'][:120]}"
    if rec.get("contended") and out["status"] == "ok":
        busy = m[M.HOST_BUSY_CORES]["value"]
        figs += f"  CONTENDED: {busy:.2f} cores busy outside the cell (figures not comparable)"
    failed = [n for n, c in (rec.get("self_checks") or {}).items() if c.get("status") == "failed"]
    if failed:  # what the figures measured is in question: said, never silent
        figs += f"  SELF-CHECK FAILED: {', '.join(failed)}"
    ctl = rec.get("control")
    if ctl:  # a crash rerun with the row's control setting: say what it showed first
        opts = options_text(ctl["options"])
        said = "diagnosed" if rec.get("diagnosed") else "not diagnosed"
        figs += f"  [{said}: control with {opts} ended {ctl['outcome']['status']}]"
    if rec.get("verdict_reason"):
        figs += f"  [{rec['verdict_reason'][:160]}]"
    tag = cell.key.rsplit("|", 1)[-1]
    where = cell.key.split("|", 1)[0]  # runtime, or runtime@target
    head = f"[{i}/{n}] {where} x {cell.fixture.label} {tag}: {out['status']} {rec['verdict']}"
    return f"{head} ({rec['wall_s']:.1f} s){figs}"
