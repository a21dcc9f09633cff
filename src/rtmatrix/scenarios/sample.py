"""The ``sample`` scenario: the runtime's own sampler as a reproducible decision pipeline.

With the fixture's sampling options (``temperature``, ``top_k``, ``top_p``, ``min_p``,
``repeat_penalty``, ``seed``, ``draws``, ``sample_tokens``), through the ``Sampling``
capability, the worker checks:

1. **reproducibility** — the same seed and parameters give the same ids twice in this process,
   in a second process (``python -m rtmatrix.scenarios.sample_child``, the model loaded again),
   and with another thread count (a second process with 1 thread, or 2 when the cell has 1);
   another seed gives another sequence. Each is its own check, with the first divergence
   (position and both ids; the parent adds the reference's logits of both);
2. **the first-token distribution** — ``draws`` one-token samples with seeds ``seed + 1000 + i``
   (a fresh sequence each): their counts per id go to the parent, which rebuilds each documented
   stage order from the numpy reference's logits (:mod:`rtmatrix.metrics.sampler`) and judges
   support, goodness of fit and which order the runtime applied (:func:`with_reference`).

A quantized cell (a dtype outside ``rtmatrix.metrics.parity.EXACT_TOKENS``) computes other
logits than the reference's: the worker also records the runtime's own logits after the prompt
(``runtime_logits``, where the adapter's ``prefill``/``last_logits`` give them), and the parent
judges the draws against those; without them, the support and order checks are
``unavailable``, with the reason — never failed on a distribution the model does not compute.

A failed check makes the cell ``wrong-output``, so an upgrade that changes what the sampler does
shows as a verdict change in ``diff``/``compare``. The order check's p-value is simulated (a
Monte-Carlo exact test, calibrated: ``benchmarks/sampler_calibration.py``); when the draws fit
several orders (the parameters leave them too alike to tell apart) it says ``undecided``, a
check that holds (``ok``) with ``status: "undecided"``, not a failure. Each judged check carries
``status``: ``pass``, ``fail``, ``undecided`` or ``unavailable`` (the last two with ``ok``
true and the detail starting with the word).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, cast

from rtmatrix.adapters.base import Adapter
from rtmatrix.adapters.capabilities import ConstrainedSampling, Sampling, missing
from rtmatrix.metrics.parity import EXACT_TOKENS
from rtmatrix.metrics.sampler import POWER_TO_DECIDE, Params
from rtmatrix.names import Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job
from rtmatrix.scenarios.invariance import first_divergence
from rtmatrix.scenarios.spec import (
    ABSENT_WHEN_NONE,
    Lifecycle,
    Mark,
    ScenarioImpl,
    ScenarioOptions,
    ScenarioResult,
)
from rtmatrix.scenarios.trace import check, clock

#: the constraint: one JSON object naming one of the allowed commands
COMMANDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"command": {"enum": ["start", "stop", "status", "reset"]}},
    "required": ["command"],
    "additionalProperties": False,
}
CHILD_TIMEOUT_S = 300.0
#: checks where another computation legitimately rounds differently (another batch composition
#: in the server, another thread split): a divergence at a near-tie of the reference's logits
#: (gap <= TIE_MARGIN) is numerics, recorded and accepted; a clear margin fails
NUMERICS_TOLERANT = ("sample_same_seed_beside_requests", "sample_same_seed_other_threads")
TIE_MARGIN = 0.05


@dataclass(frozen=True)
class SampleOptions(ScenarioOptions):
    """The fixture's sampling options: the sampler's parameters (``temperature`` to
    ``repeat_penalty``), the seed, and how much each phase draws."""

    temperature: float = 2.0
    top_k: int = 0
    top_p: float = 0.5
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    seed: int = 1234
    draws: int = 400
    sample_tokens: int = 32
    sample_alpha: float = 0.001
    sample_processes: bool = True
    constrained_draws: int = 10
    constrained_tokens: int = 64
    unsatisfiable_tokens: int = 3

    @classmethod
    def from_job(cls, job: Job) -> Self:
        known = cls.defaults()
        opts = {**known, **{k: v for k, v in job.options.items() if k in known}}
        sampler = Params.from_options(opts)
        sampler.validate()
        if int(opts["draws"]) < 1 or int(opts["sample_tokens"]) < 2:
            msg = "options.draws must be >= 1 and options.sample_tokens >= 2"
            raise ValueError(msg)
        return cls(
            **sampler.to_dict(),
            seed=int(opts["seed"]),
            draws=int(opts["draws"]),
            sample_tokens=int(opts["sample_tokens"]),
            sample_alpha=float(opts["sample_alpha"]),
            sample_processes=bool(opts["sample_processes"]),
            constrained_draws=int(opts["constrained_draws"]),
            constrained_tokens=int(opts["constrained_tokens"]),
            unsatisfiable_tokens=int(opts["unsatisfiable_tokens"]),
        )

    def params(self) -> dict[str, Any]:
        """The sampler's parameters (``rtmatrix.metrics.sampler.Params``) as the runtime takes
        them."""
        return Params.from_options(self.to_dict()).to_dict()


@dataclass
class SampleResult(ScenarioResult):
    """What the worker's half of ``sample`` found (its dict form crosses to the parent); the
    parent adds the reference's view (``first_steps_reference_top5``, ``order``) or why it has
    none (``order_unavailable``)."""

    scenario: str = Scenario.SAMPLE.value
    api: str | None = None
    order_documented: str | None = None
    order_source: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    prompt: list[int] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    sequence: list[int] = field(default_factory=list)
    sequence_wall_s: float | None = None
    constrained: dict[str, Any] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    draws_wall_s: float | None = None
    first_token_counts: dict[str, int] = field(default_factory=dict)
    alpha: float | None = None
    #: the cell's dtype (the job's; None: not known to the worker)
    dtype: str | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    #: a quantized cell's own logits after the prompt, to 5 decimals (None: not finite); the
    #: parent judges the draws against them and drops them from the result; or why none
    runtime_logits: list[float | None] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    runtime_logits_unavailable: str | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    checks: list[dict[str, Any]] = field(default_factory=list)
    first_steps_reference_top5: list[dict[str, Any]] | None = field(
        default=None, metadata=ABSENT_WHEN_NONE
    )
    order: dict[str, Any] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    order_unavailable: str | None = field(default=None, metadata=ABSENT_WHEN_NONE)

    def lifecycle(self) -> Lifecycle:
        return Lifecycle(
            self.api, self.checks, [], self.skipped, [], extra={"sampler": summary(self)}
        )


def compare_runs(label: str, a: Sequence[int], b: Sequence[int], same: bool) -> dict[str, Any]:
    """A check that ``a`` and ``b`` are equal (``same``) or differ; the first divergence."""
    pos = first_divergence(a, b)
    div = None
    if pos is not None:
        div = {
            "position": pos,
            "tokens": [a[pos] if pos < len(a) else None, b[pos] if pos < len(b) else None],
        }
    ok = (pos is None) if same else (pos is not None)
    what = "the same ids" if same else "different ids"
    detail = f"{len(a)} vs {len(b)} ids; expected {what}: " + (
        "identical" if pos is None else f"first divergence at {pos}: {div['tokens'] if div else ''}"
    )
    return check(label, ok, detail) | {"divergence": div, "a": list(a), "b": list(b)}


def in_child(
    job: Job, prompt: list[int], n: int, params: dict[str, Any], seed: int, threads: int
) -> dict[str, Any]:
    """The same sampling in a fresh process that loads the model again."""
    payload = {
        "adapter": job.adapter,
        "model_path": job.model_path,
        "n_ctx": job.params.n_ctx,
        "threads": threads,
        "options": job.options,
        "prompt": prompt,
        "n": n,
        "params": params,
        "seed": seed,
    }
    cmd = [sys.executable, "-m", "rtmatrix.scenarios.sample_child"]
    t0 = clock()
    try:
        proc = subprocess.run(
            cmd,
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the child ran past {CHILD_TIMEOUT_S:g} s", "wall_s": clock() - t0}
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip()[-400:]
        return {"error": f"exit {proc.returncode}: {tail}", "wall_s": clock() - t0}
    out: dict[str, Any] = json.loads(lines[-1])
    return out | {"wall_s": clock() - t0, "threads": threads}


def run(
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Mark,
) -> SampleResult:
    """Reproducibility, the constrained phase and the first-token draws. The registry has
    checked that ``adapter`` offers ``Sampling``."""
    sampler = cast(Sampling, adapter)
    opts = SampleOptions.from_job(job)
    params = opts.params()
    seed, n = opts.seed, opts.sample_tokens
    res = SampleResult(
        api=sampler.sampler_api,
        order_documented=sampler.sampler_order,
        order_source=sampler.sampler_order_source,
        params=params,
        seed=seed,
        prompt=list(prompt),
    )
    t0 = clock()
    first = sampler.sample_generate(prompt, n, params, seed)
    again = sampler.sample_generate(prompt, n, params, seed)
    other = sampler.sample_generate(prompt, n, params, seed + 1)
    res.sequence = first
    res.sequence_wall_s = (clock() - t0) / 3
    res.checks.append(compare_runs("sample_same_seed_twice", first, again, same=True))
    res.checks.append(compare_runs("sample_other_seed_differs", first, other, same=False))
    if opts.sample_processes:
        res.checks += process_checks(job, prompt, n, params, seed, first)
    else:
        res.skipped["processes"] = "options.sample_processes = false"
    beside = getattr(adapter, "sample_beside_requests", None)
    if callable(beside):  # a server: the same request while other slots generate
        again_beside = beside(prompt, n, params, seed)
        res.checks.append(
            compare_runs("sample_same_seed_beside_requests", first, again_beside, same=True)
        )
    else:
        res.skipped["beside_requests"] = "not a server: no concurrent requests to sample beside"
    if isinstance(adapter, ConstrainedSampling):
        res.constrained = constrained_phase(adapter, prompt, params, seed, opts)
        res.checks += constrained_checks(res.constrained)
    else:
        res.skipped["constrained"] = missing(adapter, ConstrainedSampling, "constrained output")
    t1 = clock()
    draws = [
        sampler.sample_generate(prompt, 1, params, seed + 1000 + i)[0] for i in range(opts.draws)
    ]
    res.draws_wall_s = clock() - t1
    res.first_token_counts = {str(k): v for k, v in sorted(Counter(draws).items())}
    res.alpha = opts.sample_alpha
    dtype = job.dtype
    res.dtype = str(dtype) if dtype is not None else None
    if res.dtype is not None and res.dtype not in EXACT_TOKENS:
        res.runtime_logits, res.runtime_logits_unavailable = own_logits(adapter, prompt)
    return res


def own_logits(
    adapter: Adapter, prompt: Sequence[int]
) -> tuple[list[float | None] | None, str | None]:
    """The runtime's logits after ``prompt`` through the adapter's own forward pass (the model
    its sampler draws from; to 5 decimals, far below the judge's boundary tolerance; None for
    a masked id), or why it gives none (an engine whose loop yields ids only)."""
    try:
        adapter.reset()
        adapter.prefill(list(prompt))
        logits = adapter.last_logits()
        adapter.reset()
    except Exception as exc:  # any refusal: the checks say unavailable, with these words
        return None, f"{type(exc).__name__}: {exc}"
    out = [round(float(x), 5) if math.isfinite(float(x)) else None for x in logits.reshape(-1)]
    return out, None


def process_checks(
    job: Job, prompt: list[int], n: int, params: dict[str, Any], seed: int, first: list[int]
) -> list[dict[str, Any]]:
    """The same sampling in a second process, and in one with another thread count."""
    out = []
    p = job.params
    for label, threads in (
        ("sample_same_seed_other_process", p.threads),
        ("sample_same_seed_other_threads", 1 if p.threads != 1 else 2),
    ):
        got = in_child(job, prompt, n, params, seed, threads)
        if "error" in got:
            out.append(check(label, False, f"the child process failed: {got['error']}"))
        else:
            out.append(compare_runs(label, first, got["tokens"], same=True) | {"threads": threads})
    return out


def valid(text: str, schema: dict[str, Any]) -> tuple[bool, str]:
    """Whether ``text`` parses as JSON and validates against ``schema``; why not."""
    import jsonschema

    try:
        doc = json.loads(text)
    except ValueError as exc:
        return False, f"not JSON: {exc}"
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as exc:
        return False, f"invalid: {exc.message}"
    return True, ""


def constrained_phase(
    adapter: ConstrainedSampling,
    prompt: list[int],
    params: dict[str, Any],
    seed: int,
    opts: SampleOptions,
) -> dict[str, Any]:
    """``constrained_draws`` sampled answers under the schema (each parsed and validated), the
    same count unconstrained for the cost, and one answer whose budget is too small to close
    the object (what the runtime does then)."""
    k, budget = opts.constrained_draws, opts.constrained_tokens
    answers: list[dict[str, Any]] = []
    t0 = clock()
    for i in range(k):
        got = adapter.sample_constrained(prompt, budget, params, seed + 2000 + i, COMMANDS_SCHEMA)
        ok, why = valid(str(got.get("text", "")), COMMANDS_SCHEMA)
        answers.append(
            {
                "text": got.get("text"),
                "tokens": len(got.get("tokens") or []),
                "stop": got.get("stop"),
                "valid": ok,
                "why": why,
            }
        )
    t_con = clock() - t0
    n_con = sum(int(a["tokens"]) for a in answers)
    free_tokens, t_free = 0, 0.0
    if isinstance(adapter, Sampling):
        t1 = clock()
        for i in range(k):
            free_tokens += len(
                adapter.sample_generate(prompt, max(1, n_con // max(1, k)), params, seed + 2000 + i)
            )
        t_free = clock() - t1
    t2 = clock()
    short = adapter.sample_constrained(
        prompt, opts.unsatisfiable_tokens, params, seed + 3000, COMMANDS_SCHEMA
    )
    short_ok, short_why = valid(str(short.get("text", "")), COMMANDS_SCHEMA)
    return {
        "api": adapter.constraint_api,
        "schema": COMMANDS_SCHEMA,
        "budget_tokens": budget,
        "answers": answers,
        "valid": sum(1 for a in answers if a["valid"]),
        "constrained_tps": n_con / t_con if t_con > 0 and n_con else None,
        "unconstrained_tps": free_tokens / t_free if t_free > 0 and free_tokens else None,
        "unsatisfiable": {
            "budget_tokens": opts.unsatisfiable_tokens,
            "text": short.get("text"),
            "stop": short.get("stop"),
            "valid": short_ok,
            "why": short_why,
            "wall_s": clock() - t2,
        },
    }


def constrained_checks(con: dict[str, Any]) -> list[dict[str, Any]]:
    answers = con["answers"]
    bad = [f"{a['text']!r} ({a['why']}; stop {a['stop']})" for a in answers if not a["valid"]]
    un = con["unsatisfiable"]
    return [
        check(
            "sample_constrained_valid",
            not bad and bool(answers),
            f"{con['valid']}/{len(answers)} answers parse as JSON and validate against the "
            "schema" + (f"; {'; '.join(bad[:3])}" if bad else ""),
        ),
        check(
            "sample_constrained_budget_ends",
            un["stop"] is not None,
            f"with {un['budget_tokens']} tokens, too few to close the object, the runtime "
            f"ended with {un['stop']!r} after {un['wall_s']:.3f} s: {un['text']!r} "
            f"({'valid' if un['valid'] else 'not valid: ' + un['why']})",
        ),
    ]


# -- metrics -----------------------------------------------------------------------------------
def metrics(res: SampleResult) -> dict[str, Metric]:
    clk = Source.HARNESS_CLOCK
    out: dict[str, Metric] = {}
    checks = {c["name"]: c for c in res.checks or []}
    for name, c in checks.items():
        if name.startswith("sample_"):
            detail = {k: v for k, v in c.items() if k not in ("a", "b")}
            status = c.get("status") or ("pass" if c["ok"] else "fail")
            out[name] = (
                Metric.unavailable("check", str(c["detail"]))
                if status == "unavailable"
                else Metric(status, "check", clk, detail=detail)
            )
    out |= order_metrics(res)
    out |= constrained_metrics(res)
    counts = res.first_token_counts or {}
    out["sample_draws"] = Metric(
        sum(counts.values()),
        "draws",
        clk,
        detail={
            "distinct_ids": len(counts),
            "wall_s": res.draws_wall_s,
            "first_token_counts": counts,
            "prompt": res.prompt,
        },
    )
    return out


def order_metrics(res: SampleResult) -> dict[str, Metric]:
    """Which stage order the draws fit, and how well the documented one fits (the parent's
    judgement against the reference)."""
    order = res.order or {}
    out: dict[str, Metric] = {}
    out["sample_order_found"] = (
        Metric(order.get("found"), "order", Source.MODELLED, detail=dict(order))
        if order
        else Metric.unavailable(
            "order", str(res.order_unavailable or "no reference for this model")
        )
    )
    fits = order.get("fits") or {}
    doc = fits.get(str(res.order_documented))
    out["sample_fit_p_value"] = (
        Metric(doc["p_value"], "p", Source.MODELLED, detail=dict(doc) | {"alpha": order["alpha"]})
        if doc
        else Metric.unavailable("p", "no fit against the documented order")
    )
    return out


def constrained_metrics(res: SampleResult) -> dict[str, Metric]:
    clk = Source.HARNESS_CLOCK
    con = res.constrained
    if not con:
        why = str((res.skipped or {}).get("constrained") or "not run")
        return {"sample_constrained_valid": Metric.unavailable("answers", why)}
    out: dict[str, Metric] = {}
    out["sample_constrained_valid"] = Metric(
        f"{con['valid']}/{len(con['answers'])}",
        "answers",
        clk,
        detail={
            "api": con["api"],
            "schema": con["schema"],
            "answers": con["answers"][:10],
            "unsatisfiable": con["unsatisfiable"],
        },
    )
    tc, tf = con.get("constrained_tps"), con.get("unconstrained_tps")
    out["sample_constrained_tg_ratio"] = (
        Metric(
            tc / tf,
            "ratio",
            clk,
            detail={
                "constrained_tps": tc,
                "unconstrained_tps": tf,
                "method": "ids/s of the constrained answers ÷ ids/s of as many "
                "unconstrained ones of their mean length, same settings",
            },
        )
        if tc and tf
        else Metric.unavailable("ratio", "no timed answers on one side")
    )
    return out


def summary(res: SampleResult) -> dict[str, Any]:
    """The sampler panel's facts: parameters, documented and found order, each check's result
    and first divergence (with the reference's logits there, where the parent added them)."""
    return {
        "api": res.api,
        "params": res.params,
        "seed": res.seed,
        "order_documented": res.order_documented,
        "order_source": res.order_source,
        "order": res.order,
        "order_unavailable": res.order_unavailable,
        "first_steps_reference_top5": res.first_steps_reference_top5,
        "checks": [{k: v for k, v in c.items() if k not in ("a", "b")} for c in res.checks or []],
    }


# -- against the numpy reference (in the parent) ---------------------------------------------
def with_reference(
    result: dict[str, Any],
    logits_after: Callable[[Sequence[int]], Any],
) -> list[dict[str, Any]]:
    """The parent's half: ``logits_after(ids)`` is the reference's next-token logits after
    ``ids``. Adds the reference's top-5 for the first sampled positions, the reference's logits
    of both ids at each reproducibility divergence, and the order/distribution judgement; returns
    the new checks (support and fit to the documented order; ``unavailable`` for a quantized
    cell without its runtime's own logits, see :func:`judged_logits`)."""
    import numpy as np

    from rtmatrix.metrics.sampler import judge_order

    prompt = [int(t) for t in result.get("prompt") or []]
    seq = [int(t) for t in result.get("sequence") or []]
    tops = []
    for i in range(min(3, len(seq))):
        lg = np.asarray(logits_after(prompt + seq[:i]), dtype=np.float64)
        top = np.argsort(-lg)[:5]
        tops.append(
            {
                "position": i,
                "sampled": seq[i],
                "top5": [[int(t), round(float(lg[t]), 4)] for t in top],
            }
        )
    result["first_steps_reference_top5"] = tops
    for c in result.get("checks") or []:
        div = c.get("divergence")
        if div and div.get("tokens") and None not in div["tokens"]:
            lg = np.asarray(logits_after(prompt + list(c["a"][: div["position"]])))
            div["reference_logits"] = [round(float(lg[t]), 4) for t in div["tokens"]]
            gap = abs(float(lg[div["tokens"][0]]) - float(lg[div["tokens"][1]]))
            div["kind"] = "numerics" if gap <= TIE_MARGIN else "clear-margin"
            if c["name"] in NUMERICS_TOLERANT and not c["ok"] and gap <= TIE_MARGIN:
                c["ok"] = True
                c["detail"] += (
                    f"; at a near-tie of the reference (logit gap {gap:.4f} <= {TIE_MARGIN}): "
                    "another computation's rounding moved the draw across the boundary of two "
                    "near-equal ids (numerics), not a lost seed"
                )
    ref_logits = np.asarray(logits_after(prompt), dtype=np.float64)
    params = Params.from_options(result.get("params") or {})
    documented = str(result.get("order_documented"))
    alpha = float(result.get("alpha") or SampleOptions().sample_alpha)
    logits, judged_on = judged_logits(result, ref_logits)
    if logits is None:
        result["order_unavailable"] = judged_on
        return [unavailable_check(name, judged_on) for name in ("sample_support", "sample_order")]
    counts_raw = result.get("first_token_counts") or {}
    counts = np.zeros(logits.shape[0], dtype=np.int64)
    for k, v in counts_raw.items():
        counts[int(k)] = int(v)
    order = judge_order(counts, logits, params, documented, alpha, prompt)
    order["logits_judged"] = judged_on
    result["order"] = order
    fits = order["fits"]
    doc = fits.get(documented)
    if doc is None:
        return []
    support_ok = doc["outside"] == 0
    return [
        check(
            "sample_support",
            support_ok,
            f"{order['draws'] - doc['outside']}/{order['draws']} first-token draws lie in the "
            f"candidate set the documented order allows ({order['candidates_documented']} ids; "
            f"{order['at_cut_boundary'].get(documented, 0)} draws on ids within "
            f"{order['boundary_tol_logit']} logits of a cut, where rounding decides the side, "
            f"are judged apart; logits: {judged_on})",
        )
        | {"status": "pass" if support_ok else "fail"},
        order_check(order, documented, alpha),
    ]


def judged_logits(result: dict[str, Any], ref_logits: Any) -> tuple[Any, str]:
    """The logits the draws are judged against and in words where they come from; (None, why)
    when there are none this model computes. An exact dtype (``EXACT_TOKENS``) is judged on the
    reference's; a quantized one on the runtime's own (``runtime_logits``, dropped from the
    result once read: the order's ``logits_judged`` names them), never on the reference's,
    which are not what its quantized arithmetic computes."""
    import numpy as np

    dtype = result.get("dtype")
    own = result.pop("runtime_logits", None)
    if dtype is None or dtype in EXACT_TOKENS:
        return ref_logits, "the numpy reference's, after the prompt"
    why_none = result.get("runtime_logits_unavailable") or "not recorded by the worker"
    base = (
        f"unavailable: the reference's logits are not the logits this {dtype} model computes "
        f"(the runtime's {dtype} arithmetic gives others: a candidate set and distribution "
        "built from the reference's are not what its sampler draws from)"
    )
    if own is None:
        return None, f"{base}, and the runtime gave none of its own ({why_none})"
    lg = np.array([-np.inf if v is None else float(v) for v in own], dtype=np.float64)
    if lg.shape != ref_logits.shape or not np.isfinite(lg).any():
        return None, (
            f"{base}, and the runtime's own are not usable ({lg.shape[0]} entries, "
            f"{int(np.isfinite(lg).sum())} finite; the reference has {ref_logits.shape[0]})"
        )
    both = np.isfinite(lg) & np.isfinite(ref_logits)
    diff = float(np.max(np.abs(lg[both] - ref_logits[both]))) if both.any() else float("nan")
    return lg, (
        f"the runtime's own ({dtype} model), after the prompt; max|Δlogit| from the "
        f"reference's {diff:.4g}"
    )


def unavailable_check(name: str, why: str) -> dict[str, Any]:
    """A check that cannot be judged: it holds (``ok``: no failure claimed) and says so."""
    return check(name, True, why) | {"status": "unavailable"}


def order_check(order: dict[str, Any], documented: str, alpha: float) -> dict[str, Any]:
    """``sample_order`` from :func:`rtmatrix.metrics.sampler.judge_order`'s verdict: fails only
    when the documented order is rejected; ``undecided`` (the draws fit another order too) is
    said as such and holds."""
    fits = order["fits"]
    doc = fits[documented]
    verdict = order.get("verdict") or "fail"
    pw, tv = order.get("power_against") or {}, order.get("distance_tv") or {}
    ps = "; ".join(f"{k}: p = {f['p_value']:.3g}" for k, f in fits.items())
    facts = (
        f"documented {documented} (p = {doc['p_value']:.3g}); found {order['found']}; {ps}; "
        f"power against the others at alpha {alpha}: {pw}"
        + (
            f"; power to catch a sampler that ignores {', '.join(ign)}: {ign}"
            if (ign := order.get("power_against_ignored"))
            else ""
        )
    )
    if verdict == "undecided":
        others = [k for k, f in fits.items() if k != documented and f["p_value"] >= alpha]
        low = {k: pw.get(k) for k in others if (pw.get(k) or 0.0) < POWER_TO_DECIDE}
        why = (
            f"with these parameters the orders give distributions too alike to tell apart with "
            f"{order['draws']} draws (power {low}, total variation "
            f"{ {k: tv.get(k) for k in low} })"
            if low
            else f"the draws fit {', '.join(others)} as well, though the test had power "
            f"{ {k: pw.get(k) for k in others} } to reject it: a chance fit"
        )
        detail = f"undecided: the draws fit the documented order and {', '.join(others)}; {why}"
        return check("sample_order", True, f"{detail}; {facts}") | {"status": "undecided"}
    return check("sample_order", verdict == "pass", facts) | {"status": verdict}


IMPL = ScenarioImpl(
    name=Scenario.SAMPLE,
    run=run,
    metrics=metrics,
    result=SampleResult,
    options=SampleOptions,
)
