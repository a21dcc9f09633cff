"""The sampler's statistical verdicts checked by simulation (issue 39, item 5): draws from the
documented distribution itself, many seeds, at the shapes that failed correct samplers (400
draws over ~140-300 ids at temperature 2 / top-p 0.5; top-k 3; repetition penalty 3). The
documented order must be rejected in at most ``alpha`` of the trials (plus a binomial margin,
computed), the parameters that cannot tell the orders apart must give ``undecided`` (a check
that holds), wrong samplers must still be caught with the power the judge claims, and a
quantized cell is judged on its runtime's own logits or said ``unavailable``.
``benchmarks/sampler_calibration.py`` runs the larger simulation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from rtmatrix.metrics import sampler as sm
from rtmatrix.protocol import Job, JobParams
from rtmatrix.scenarios import sample, scenario_metrics

ALPHA = 0.01
DRAWS = 400
SEEDS = range(200)
#: a failed assertion on a calibrated test is an event of at most this probability
TAIL = 1e-3
TT = "truncate-then-temperature"
TF = "temperature-then-truncate"
#: 'small'-like logits (vocabulary 1000, spread ~1 logit, as the seeded model's)
_RNG = np.random.default_rng(39)
LOGITS = _RNG.normal(0.0, 1.0, 1000)
_TOP = np.argsort(-LOGITS)
#: a prompt whose ids include some of the most probable, so the penalty changes the nucleus
HISTORY = [int(t) for t in np.concatenate([_TOP[:40:5], _RNG.choice(_TOP[40:], 8, replace=False)])]
SHAPES: dict[str, tuple[sm.Params, Sequence[int]]] = {
    "top-p 0.5 at temperature 2": (sm.Params(temperature=2.0, top_p=0.5), ()),
    "top-k 3 at temperature 2": (sm.Params(temperature=2.0, top_k=3, top_p=0.5), ()),
    "repetition penalty 3": (sm.Params(temperature=2.0, top_p=0.5, repeat_penalty=3.0), HISTORY),
}


def at_most(trials: int, rate: float) -> int:
    """The count that Binomial(trials, rate) exceeds with probability <= TAIL."""
    return int(stats.binom.isf(TAIL, trials, rate))


def at_least(trials: int, rate: float) -> int:
    """The count that Binomial(trials, rate) falls below with probability <= TAIL."""
    return int(stats.binom.ppf(TAIL, trials, rate))


def prob_of(p: sm.Params, order: str, history: Sequence[int]) -> NDArray[np.float64]:
    return sm.distribution(LOGITS, p, sm.ORDERS[order], history)


@pytest.mark.parametrize(
    ("shape", "documented"),
    [
        ("top-p 0.5 at temperature 2", TT),
        ("top-p 0.5 at temperature 2", TF),
        ("top-k 3 at temperature 2", TT),
        ("repetition penalty 3", TF),
    ],
)
def test_the_documented_distribution_is_rejected_in_at_most_alpha_of_trials(
    shape: str, documented: str
) -> None:
    p, history = SHAPES[shape]
    prob = prob_of(p, documented, history)
    if shape.startswith("top-p"):
        assert 140 <= (prob > 0).sum() <= 320  # the spread of draws over ids
    got = sm.simulate_verdicts(LOGITS, p, documented, prob, SEEDS, DRAWS, ALPHA, history)
    assert got["fail"] <= at_most(len(SEEDS), ALPHA), got
    if shape.startswith("top-k"):  # the orders give the same distribution: no power
        assert got["pass"] == 0 and got["undecided"] == len(SEEDS) - got["fail"], got
    else:
        assert got["undecided"] == 0, got


def test_the_orders_that_cannot_be_told_apart_are_undecided_and_say_why() -> None:
    p, _ = SHAPES["top-k 3 at temperature 2"]
    counts = np.bincount(
        np.random.default_rng(5).choice(1000, DRAWS, p=prob_of(p, TT, ())), minlength=1000
    ).astype(np.int64)
    got = sm.judge_order(counts, LOGITS, p, TT, ALPHA)
    assert got["found"] == "undecided" and got["verdict"] == "undecided", got
    assert not got["decidable"] and got["power_against"][TF] < sm.POWER_TO_DECIDE
    assert got["distance_tv"][TF] == 0.0


@pytest.mark.parametrize(
    ("shape", "wrong", "claimed"),
    [
        ("top-p 0.5 at temperature 2", "the other order", "power_against"),
        ("top-k 3 at temperature 2", "top_k", "power_against_ignored"),
        ("repetition penalty 3", "repeat_penalty", "power_against_ignored"),
    ],
)
def test_a_wrong_sampler_is_caught_with_the_power_the_judge_claims(
    shape: str, wrong: str, claimed: str
) -> None:
    p, history = SHAPES[shape]
    if wrong == "the other order":
        draw, key = prob_of(p, TF, history), TF
    else:
        draw, key = prob_of(sm.Params.from_options(p.to_dict() | {wrong: sm.NEUTRAL[wrong]}), TT,
                            history), wrong  # fmt: skip
    empty = np.zeros(len(LOGITS), dtype=np.int64)
    empty[int(_TOP[0])] = DRAWS
    power = sm.judge_order(empty, LOGITS, p, TT, ALPHA, history)[claimed][key]
    assert power >= 0.95, power
    trials = range(1000, 1060)
    got = sm.simulate_verdicts(LOGITS, p, TT, draw, trials, DRAWS, ALPHA, history)
    assert got["fail"] >= at_least(len(trials), 0.95), got


def test_the_claimed_power_matches_the_catch_rate_where_it_is_low() -> None:
    """Repetition penalty 3 without truncation, temperature 2: the binned test can hardly see a
    sampler that ignores the penalty, and the judge says so (its claimed power agrees with the
    simulated catch rate within a binomial interval)."""
    p = sm.Params(temperature=1.0, repeat_penalty=3.0)
    empty = np.zeros(len(LOGITS), dtype=np.int64)
    empty[int(_TOP[0])] = DRAWS
    claimed = sm.judge_order(empty, LOGITS, p, TT, ALPHA, HISTORY)["power_against_ignored"]
    assert set(claimed) == {"repeat_penalty"} and claimed["repeat_penalty"] < 0.5, claimed
    draw = prob_of(sm.Params(temperature=1.0), TT, ())
    trials = range(2000, 2150)
    got = sm.simulate_verdicts(LOGITS, p, TT, draw, trials, DRAWS, ALPHA, HISTORY)
    lo, hi = stats.binom.interval(1 - 2 * TAIL, len(trials), claimed["repeat_penalty"])
    assert lo <= got["fail"] <= hi, (got, claimed)


def test_a_monte_carlo_p_value_holds_where_few_draws_make_the_approximation_fail() -> None:
    """20 draws over 11 ids, bins of >= 1 expected draw: the chi-square approximation rejects
    the true distribution too often there; the simulated p-value keeps to alpha."""
    prob = np.array([0.02] * 10 + [0.8])
    trials = 2000
    mc = asymptotic = 0
    for s in range(trials):
        ids = np.random.default_rng(s).choice(len(prob), 20, p=prob)
        f = sm.fit(np.bincount(ids, minlength=len(prob)).astype(np.int64), prob, "x", 1.0)
        mc += f.p_value < 0.05
        asymptotic += f.p_asymptotic is not None and f.p_asymptotic < 0.05
    assert mc <= at_most(trials, 0.05) < asymptotic, (mc, asymptotic)


# -- the check dicts the scenario reports -------------------------------------------------------
def judged(
    counts: NDArray[np.int64],
    p: sm.Params,
    documented: str,
    history: Sequence[int] = (),
    dtype: str | None = None,
    own: NDArray[np.float64] | None = None,
    why: str | None = None,
) -> dict[str, Any]:
    """A worker's result with these draws, through the parent's judgement against LOGITS."""
    res = sample.SampleResult(
        api="fake",
        order_documented=documented,
        params=p.to_dict(),
        seed=1,
        prompt=list(history) or [1, 2, 3],
        sequence=[int(_TOP[0])] * 4,
        first_token_counts={str(i): int(c) for i, c in enumerate(counts) if c},
        alpha=ALPHA,
        dtype=dtype,
        runtime_logits=None if own is None else [float(x) for x in own],
        runtime_logits_unavailable=why,
    ).to_dict()
    res["checks"] += sample.with_reference(res, lambda _ids: LOGITS)
    return res


def checks(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in res["checks"]}


def draws(prob: NDArray[np.float64], seed: int = 11) -> NDArray[np.int64]:
    ids = np.random.default_rng(seed).choice(len(prob), DRAWS, p=prob / prob.sum())
    return np.bincount(ids, minlength=len(prob)).astype(np.int64)


def test_an_undecided_order_is_a_check_that_holds_and_says_so() -> None:
    p, _ = SHAPES["top-k 3 at temperature 2"]
    res = judged(draws(prob_of(p, TT, ())), p, TT)
    got = checks(res)["sample_order"]
    assert got["ok"] and got["status"] == "undecided", got
    assert got["detail"].startswith("undecided: the draws fit the documented order and "), got
    assert "too alike to tell apart" in got["detail"]
    assert checks(res)["sample_support"]["status"] == "pass"
    m = scenario_metrics("sample", res)
    assert m["sample_order"].value == "undecided"
    assert m["sample_order_found"].value == "undecided"


def test_a_rejected_documented_order_fails() -> None:
    p, _ = SHAPES["top-p 0.5 at temperature 2"]
    got = checks(judged(draws(prob_of(p, TF, ())), p, TT))["sample_order"]
    assert not got["ok"] and got["status"] == "fail", got
    assert "found temperature-then-truncate" in got["detail"]


def quantized_logits() -> NDArray[np.float64]:
    """An int8 model's logits: the reference's moved by its quantized arithmetic."""
    return np.asarray(LOGITS + np.random.default_rng(8).normal(0.0, 0.3, len(LOGITS)))


def test_a_quantized_cell_without_its_own_logits_is_unavailable_not_failed() -> None:
    p, _ = SHAPES["top-p 0.5 at temperature 2"]
    res = judged(draws(prob_of(p, TT, ())), p, TT, dtype="int8", why="no per-step logits API")
    got = checks(res)
    for name in ("sample_support", "sample_order"):
        assert got[name]["ok"] and got[name]["status"] == "unavailable", got[name]
        assert got[name]["detail"].startswith("unavailable: the reference's logits are not the")
        assert "no per-step logits API" in got[name]["detail"]
    assert "order" not in res and res["order_unavailable"] == got["sample_order"]["detail"]
    m = scenario_metrics("sample", res)
    assert m["sample_order"].value is None and "int8" in str(m["sample_order"].reason)
    assert m["sample_order_found"].value is None


def test_a_quantized_cell_is_judged_on_its_runtimes_own_logits() -> None:
    p, _ = SHAPES["top-p 0.5 at temperature 2"]
    own = quantized_logits()
    counts = draws(sm.distribution(own, p, sm.ORDERS[TT]))
    as_f32 = checks(judged(counts, p, TT))  # the failure: the f32 reference's set
    assert not as_f32["sample_support"]["ok"]
    res = judged(counts, p, TT, dtype="int8", own=own)
    got = checks(res)
    assert got["sample_support"]["ok"] and got["sample_order"]["ok"], got
    assert got["sample_order"]["status"] == "pass"
    assert res["order"]["logits_judged"].startswith("the runtime's own (int8 model)")
    assert "runtime_logits" not in res  # read, then dropped from the record
    sample.SampleResult.from_dict(res)  # still the typed result


def test_an_exact_dtype_is_judged_on_the_reference_whatever_the_worker_sent() -> None:
    p, _ = SHAPES["top-p 0.5 at temperature 2"]
    res = judged(draws(prob_of(p, TT, ())), p, TT, dtype="f32")
    assert res["order"]["logits_judged"] == "the numpy reference's, after the prompt"
    assert checks(res)["sample_order"]["ok"]


class LogitsSampler:
    """A fake Sampling adapter that also runs the model's forward pass (or refuses it)."""

    name = "fake"
    vocab_size = 1000
    special_ids: dict[str, int] = {}  # noqa: RUF012
    sampler_api = "fake"
    sampler_order = TT
    sampler_order_source = "here"

    def __init__(self, logits: bool) -> None:
        self.logits, self.fed = logits, 0

    def sample_generate(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        prob = sm.distribution(quantized_logits(), sm.Params.from_options(params), sm.ORDERS[TT])
        rng = np.random.default_rng(seed)
        return [int(rng.choice(len(prob), p=prob)) for _ in range(n_gen)]

    def reset(self) -> None:
        self.fed = 0

    def prefill(self, tokens: Sequence[int]) -> None:
        if not self.logits:
            msg = "an engine's own loop: ids, no logits"
            raise RuntimeError(msg)
        self.fed += len(tokens)

    def last_logits(self) -> NDArray[np.float32]:
        return quantized_logits().astype(np.float32)


@pytest.mark.parametrize("dtype", ["int8", "f32"])
@pytest.mark.parametrize("logits", [True, False])
def test_the_worker_records_the_dtype_and_a_quantized_runtimes_own_logits(
    dtype: str, logits: bool
) -> None:
    params = JobParams(n_ctx=64, threads=1, prompt_tokens=3, gen_tokens=8, repetitions=1, warmup=0)
    opts = {"sample_processes": False, "draws": 50, "sample_tokens": 4}
    job = Job(adapter="t", model_path="m", params=params, options=opts, timeout_s=60, dtype=dtype)
    fake = LogitsSampler(logits)
    res = sample.run(fake, job, [1, 2, 3], [], lambda _n, _t: None).to_dict()  # type: ignore[arg-type]
    assert res["dtype"] == dtype
    if dtype == "f32":  # the reference's logits are this model's: nothing more to record
        assert "runtime_logits" not in res and "runtime_logits_unavailable" not in res
    elif logits:
        assert len(res["runtime_logits"]) == 1000 and fake.fed == 0  # reset after
        res["checks"] += sample.with_reference(res, lambda _ids: LOGITS)
        assert all(c["ok"] for c in res["checks"]), res["checks"]
    else:
        assert "runtime_logits" not in res
        why = res["runtime_logits_unavailable"]
        assert why == "RuntimeError: an engine's own loop: ids, no logits"
