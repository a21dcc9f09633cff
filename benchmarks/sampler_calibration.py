"""The sampler judge's calibration and power, by simulation (a script, not a timed test).

    .venv/bin/python benchmarks/sampler_calibration.py                  # 2000 seeds per row
    .venv/bin/python benchmarks/sampler_calibration.py --seeds 200 --no-small   # quick

Issue 39 item 5: the ``sample`` scenario's order check (:func:`rtmatrix.metrics.sampler.
judge_order`) must reject the documented order in at most ``alpha`` of the runs of a sampler
that does exactly what it documents. Each row draws ``--draws`` first tokens per seed from the
documented order's own distribution and counts the judge's verdicts: ``fail`` (a false
rejection), ``pass``, ``undecided`` (the draws fit another order too). The false-rejection rate
is printed with its Clopper–Pearson 95 % interval (``scipy.stats.binomtest``), beside the rate
the chi-square approximation's p-value would have given (the test before issue 39). Then the
power rows: draws from a wrong sampler (the other order; one that ignores top-k; one that
ignores the repetition penalty), the share caught against the power the judge claims. A
``rounding`` row draws from logits moved by N(0, σ) (a runtime's own rounding) and judges them
against the unmoved ones: what the boundary tolerance absorbs.

Logits: ``random`` (vocabulary 1000, N(0, 1): the seeded ``small`` model's spread) and, unless
``--no-small``, the numpy reference of the ``small`` fixture after a seeded 16-id prompt (its
history for the penalty). Shapes: the issue's: temperature 2 and top-p 0.5 (400 draws over
~140-310 ids), top-k 3 (with the scenario's default top-p 0.5), repetition penalty 3.

Wall time: ~6 ms per judged sample, so ~3-4 min at the defaults on one core. Exit 1 when the
pooled false-rejection interval (over the rows whose fit can reject) lies above ``alpha`` (a
miscalibrated test).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from rtmatrix.metrics import sampler as sm

TT, TF = "truncate-then-temperature", "temperature-then-truncate"


def small_reference() -> tuple[NDArray[np.float64], list[int]]:
    """The ``small`` fixture's reference logits after a seeded prompt, and the prompt."""
    from rtmatrix.fixtures.model import Reference, make_weights
    from rtmatrix.fixtures.spec import get_spec

    spec = get_spec("small")
    ref = Reference(spec, make_weights(spec))
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, spec.vocab_size, 16)]
    return np.asarray(ref.forward(prompt, ref.new_cache())[-1], dtype=np.float64), prompt


def random_logits() -> tuple[NDArray[np.float64], list[int]]:
    rng = np.random.default_rng(39)
    logits = rng.normal(0.0, 1.0, 1000)
    top = np.argsort(-logits)
    history = np.concatenate([top[:40:5], rng.choice(top[40:], 8, replace=False)])
    return logits, [int(t) for t in history]


def shapes(history: Sequence[int]) -> dict[str, tuple[sm.Params, Sequence[int]]]:
    return {
        "T 2, top-p 0.5": (sm.Params(temperature=2.0, top_p=0.5), ()),
        "T 2, top-k 3 (top-p 0.5)": (sm.Params(temperature=2.0, top_k=3, top_p=0.5), ()),
        "T 2, top-p 0.5, penalty 3": (
            sm.Params(temperature=2.0, top_p=0.5, repeat_penalty=3.0),
            history,
        ),
    }


def ci(k: int, n: int) -> tuple[float, float]:
    got = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(got.low), float(got.high)


def row(label: str, k: int, n: int, extra: str) -> dict[str, Any]:
    lo, hi = ci(k, n)
    print(f"| {label} | {k}/{n} | {k / n:.4f} | [{lo:.4f}, {hi:.4f}] | {extra} |", flush=True)
    return {"row": label, "count": k, "trials": n, "rate": k / n, "ci95": [lo, hi], "extra": extra}


def without(p: sm.Params, name: str) -> sm.Params:
    return sm.Params.from_options(p.to_dict() | {name: sm.NEUTRAL[name]})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seeds", type=int, default=2000, help="samples per calibration row")
    ap.add_argument("--power-seeds", type=int, default=500, help="samples per power row")
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--no-small", action="store_true", help="random logits only")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    alpha, n, seeds = args.alpha, args.draws, range(args.seeds)
    sets = {"random": random_logits()}
    if not args.no_small:
        sets["small"] = small_reference()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    print(f"alpha {alpha}, {n} draws per sample, Monte-Carlo p from {sm.MC_SIMULATIONS} "
          f"simulations; 95 % Clopper–Pearson intervals\n")  # fmt: skip
    print("## False rejections: draws from the documented order's own distribution\n")
    print("| logits · shape · documented | fail | rate | 95 % CI | undecided · pass · "
          "chi-square approximation's rejections |")  # fmt: skip
    print("|---|---|---|---|---|")
    fails = trials = t_fails = t_trials = 0
    for set_name, (logits, history) in sets.items():
        for shape, (p, hist) in shapes(history).items():
            for doc in (TT, TF):
                prob = sm.distribution(logits, p, sm.ORDERS[doc], hist)
                got = sm.simulate_verdicts(logits, p, doc, prob, seeds, n, alpha, hist)
                fails, trials = fails + got["fail"], trials + len(seeds)
                expected = np.round(prob * n).astype(np.int64)
                if sm.judge_order(expected, logits, p, doc, alpha, hist)["fits"][doc]["dof"]:
                    t_fails, t_trials = t_fails + got["fail"], t_trials + len(seeds)
                extra = (f"{got['undecided']} · {got['pass']} · {got['asymptotic_rejects']} "
                         f"({got['asymptotic_rejects'] / len(seeds):.4f}); "
                         f"{int((prob > 0).sum())} ids")  # fmt: skip
                rows.append(row(f"{set_name} · {shape} · {doc}", got["fail"], len(seeds), extra))
        logits, history = sets[set_name]
        p = sm.Params(temperature=2.0, top_p=0.5)
        for sigma in (0.01, 0.02, 0.05):
            moved = logits + np.random.default_rng(7).normal(0.0, sigma, len(logits))
            prob = sm.distribution(moved, p, sm.ORDERS[TT])
            got = sm.simulate_verdicts(logits, p, TT, prob, seeds, n, alpha)
            rows.append(row(f"{set_name} · rounding σ {sigma} · T 2, top-p 0.5 · {TT}",
                            got["fail"], len(seeds),
                            f"{got['undecided']} · {got['pass']} · {got['asymptotic_rejects']}; "
                            "not pooled"))  # fmt: skip
    lo, hi = ci(fails, trials)
    print(f"\npooled false-rejection rate (documented distribution, all rows above but the "
          f"rounding ones): {fails}/{trials} = {fails / trials:.4f}, 95 % CI "
          f"[{lo:.4f}, {hi:.4f}] (alpha {alpha})")  # fmt: skip
    tlo, thi = ci(t_fails, t_trials)
    print(f"pooled over the rows whose fit has >= 2 bins (the top-k 3 rows keep one id beside "
          f"the cut's boundary band: nothing to reject): {t_fails}/{t_trials} = "
          f"{t_fails / t_trials:.4f}, 95 % CI [{tlo:.4f}, {thi:.4f}]\n")  # fmt: skip
    pooled = {"fails": fails, "trials": trials, "rate": fails / trials, "ci95": [lo, hi],
              "testable": {"fails": t_fails, "trials": t_trials, "ci95": [tlo, thi]}}  # fmt: skip
    print("## Power: draws from a wrong sampler, documented truncate-then-temperature\n")
    print("| logits · shape · wrong sampler | caught | rate | 95 % CI | power the judge claims |")
    print("|---|---|---|---|---|")
    pseeds = range(10**6, 10**6 + args.power_seeds)
    for set_name, (logits, history) in sets.items():
        sh = shapes(history)
        cases = [
            ("T 2, top-p 0.5", "the other order", TF, None),
            ("T 2, top-k 3 (top-p 0.5)", "ignores top-k", TT, "top_k"),
            ("T 2, top-p 0.5, penalty 3", "ignores the penalty", TT, "repeat_penalty"),
        ]
        for shape, what, order, ignored in cases:
            p, hist = sh[shape]
            draw_p = without(p, ignored) if ignored else p
            prob = sm.distribution(logits, draw_p, sm.ORDERS[order], hist)
            one = np.zeros(len(logits), dtype=np.int64)
            one[int(np.argmax(logits))] = n
            judged = sm.judge_order(one, logits, p, TT, alpha, hist)
            claimed = (judged["power_against_ignored"].get(ignored) if ignored
                       else judged["power_against"].get(TF))  # fmt: skip
            got = sm.simulate_verdicts(logits, p, TT, prob, pseeds, n, alpha, hist)
            rows.append(row(f"{set_name} · {shape} · {what}", got["fail"], len(pseeds),
                            f"{claimed}"))  # fmt: skip
    print(f"\nwall {time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"alpha": alpha, "draws": n, "pooled": pooled,
                                         "rows": rows}, indent=1))  # fmt: skip
    return 1 if tlo > alpha else 0


if __name__ == "__main__":
    sys.exit(main())
