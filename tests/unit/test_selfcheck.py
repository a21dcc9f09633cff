"""Self-checks of the harness's own measurements: the checks on typed inputs, the prompt-cache
rule calibrated on simulated TTFTs, and third-party adapters that fool the measurements, each
through the real worker and runner (no runtime needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.metrics import selfcheck
from rtmatrix.metrics.selfcheck import CheckStatus, Expected, SelfChecks
from rtmatrix.outcome import Judgement, Verdict
from rtmatrix.protocol import (
    PROTOCOL_VERSION,
    LogitGap,
    ProbeRound,
    Repetition,
    SelfCheckProbe,
    WorkerResult,
)
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

PASSED, FAILED, NA = CheckStatus.PASSED, CheckStatus.FAILED, CheckStatus.NOT_APPLICABLE


def rep(tokens: list[int], *, ttft: float = 0.05, prompt: int = 6, **counters: float) -> Repetition:
    n = len(tokens)
    return Repetition(pp_s=ttft, pp_tokens=prompt, ttft_s=ttft, decode_s=[0.01] * (n - 1),
                      step_s=[0.011] * (n - 1), tokens=tokens, counters=dict(counters),
                      nonfinite_steps=0, first_token_monotonic=1.0, t_start=0.0,
                      t_end=1.0)  # fmt: skip


# --------------------------------------------------------------------------- timed ids


def test_timed_repetitions_with_the_parity_pass_ids_pass() -> None:
    reps = [rep([5, 6, 7]), rep([5, 6, 7]), rep([5, 6, 7])]
    check = selfcheck.timed_ids(reps, [], 1e-2, "harness")
    assert check.status is PASSED and check.figures["compared"] == 2


def test_a_clear_margin_divergence_fails_and_a_near_tie_passes() -> None:
    reps = [rep([5, 6, 7]), rep([5, 6, 9])]
    clear = selfcheck.timed_ids(reps, [LogitGap(1, 2, 7, 9, 3.5)], 1e-2, "harness")
    assert clear.status is FAILED
    assert "repetition 2 left the parity pass's ids at position 2" in clear.summary
    assert clear.figures["divergences"][0]["kind"] == "clear-margin"
    tie = selfcheck.timed_ids(reps, [LogitGap(1, 2, 7, 9, 0.004)], 1e-2, "harness")
    assert tie.status is PASSED and "near-tie" in tie.summary


def test_an_engine_without_logits_gets_no_excuse_and_a_shorter_run_fails() -> None:
    engine = selfcheck.timed_ids([rep([5, 6, 7]), rep([5, 8, 7])], [], 1.0, "engine")
    assert engine.status is FAILED and "the engine shows no logits" in engine.summary
    short = selfcheck.timed_ids([rep([5, 6, 7]), rep([5, 6])], [], 1.0, "harness")
    assert short.status is FAILED and short.figures["divergences"][0]["kind"] == "length"


def test_one_counted_repetition_has_nothing_to_compare() -> None:
    assert selfcheck.timed_ids([rep([5, 6])], [], 1e-2, "harness").status is NA


# --------------------------------------------------------------------------- token counts


def test_counts_that_agree_pass_per_phase_with_the_runtimes_counters() -> None:
    reps = [rep([5, 6, 7], pp_tokens=6, tg_tokens=2)] * 2
    check = selfcheck.token_counts(reps, Expected(6, 3), "harness", [2])
    assert check.status is PASSED and "pp_tokens" in check.summary


@pytest.mark.parametrize(
    ("r", "said"),
    [
        (rep([5, 6, 7], pp_tokens=5, tg_tokens=2), "counted 5 prefill tokens for a 6-token"),
        (rep([5, 6, 7], pp_tokens=6, tg_tokens=3), "counted 3 decode tokens for 2 decode steps"),
        (rep([5, 6]), "2 ids generated, 3 asked for (stopped early)"),
        (rep([5, 2, 7]), "end-of-sequence id(s) [2] generated though the loop masks them"),
        (rep([5, 6, 7], prompt=5), "prefill counted 5 tokens, the prompt has 6"),
    ],
)
def test_counts_that_disagree_fail_naming_the_phase(r: Repetition, said: str) -> None:
    check = selfcheck.token_counts([r], Expected(6, 3), "harness", [2])
    assert check.status is FAILED and said in check.summary


def test_decode_steps_that_are_not_the_ids_less_one_fail() -> None:
    bad = Repetition(**(rep([5, 6, 7]).to_dict() | {"decode_s": [0.01]}))
    check = selfcheck.token_counts([bad], Expected(6, 3), "engine", [])
    assert check.status is FAILED and "1 timed decode calls for 3 ids" in check.summary


def test_a_one_token_prefill_counted_as_a_decode_step_and_an_engines_eos_pass() -> None:
    # llama.cpp counts a 1-token batch as eval: n_p_eval 0, n_eval = every generated id
    one = selfcheck.token_counts([rep([5, 6, 7], prompt=1, pp_tokens=0, tg_tokens=3)],
                                 Expected(1, 3), "harness", [2])  # fmt: skip
    assert one.status is PASSED
    # ... or n_p_eval 1 beside it (seen in the default run), still every id as eval
    also = selfcheck.token_counts([rep([5, 6, 7], prompt=1, pp_tokens=1, tg_tokens=3)],
                                  Expected(1, 3), "harness", [2])  # fmt: skip
    assert also.status is PASSED
    extra = selfcheck.token_counts([rep([5, 6, 7], prompt=1, pp_tokens=1, tg_tokens=4)],
                                   Expected(1, 3), "harness", [2])  # fmt: skip
    assert extra.status is FAILED and "4 decode tokens for 2 decode steps" in extra.summary
    engine = selfcheck.token_counts([rep([5, 2, 7])], Expected(6, 3), "engine", [2])
    assert engine.status is PASSED and "went on" in engine.figures["end_of_sequence"]


# --------------------------------------------------------------------------- prompt cache


def _noisy(
    rng: np.random.Generator, n: int, scale: float, sigma: float, p_out: float
) -> list[float]:
    """TTFTs as a noisy 2-core host gives them: log-normal spread, and a share of outliers
    1.3-3x slower (the default run's cells: log sd 0.02-0.26, max/min up to 3x)."""
    x = scale * np.exp(rng.normal(0.0, sigma, n))
    slow = rng.random(n) < p_out
    x[slow] *= rng.uniform(1.3, 3.0, int(slow.sum()))
    return [float(v) for v in x]


def _probe_cell(rng: np.random.Generator, speedup: float, sigma: float, p_out: float) -> bool:
    """One simulated cell through the worker's round logic and the parent's judgement:
    whether its prompt-cache check fails."""
    fast = 0.1 / speedup
    reps = [rep([5, 6], ttft=t) for t in _noisy(rng, 5, fast, sigma, p_out)]
    probe = SelfCheckProbe()
    for _ in range(selfcheck.PROBE_ROUNDS):
        fresh = _noisy(rng, selfcheck.PROBE_PAIRS, 0.1, sigma, p_out)
        repeat = _noisy(rng, selfcheck.PROBE_PAIRS, fast, sigma, p_out)
        probe.rounds.append(ProbeRound(fresh, repeat))
        ratio = selfcheck.median_ratio(fresh, repeat)
        if ratio is None or ratio <= selfcheck.RATIO_FLOOR:  # as the worker stops
            break
    return selfcheck.prompt_cache(probe, reps).status is FAILED


@pytest.mark.parametrize(
    ("sigma", "p_out", "at_most"), [(0.05, 0.05, 0), (0.15, 0.1, 1), (0.3, 0.2, 3)]
)
def test_ttfts_from_one_distribution_do_not_flag(sigma: float, p_out: float, at_most: int) -> None:
    # calibrated over 20 000 cells each: 0, 1 and 10 flagged (the last: log sd 0.3 and a fifth
    # of the samples 1.3-3x slower, worse than any cell of the default run)
    rng = np.random.default_rng(20261205)
    flagged = sum(_probe_cell(rng, 1.0, sigma, p_out) for _ in range(2000))
    assert flagged <= at_most


@pytest.mark.parametrize(("sigma", "p_out", "at_least"), [(0.05, 0.05, 0.97), (0.1, 0.1, 0.93)])
def test_repeats_three_times_faster_flag(sigma: float, p_out: float, at_least: float) -> None:
    # calibrated over 2 000 cells each: 99.2 % and 97.4 % caught
    rng = np.random.default_rng(7)
    caught = sum(_probe_cell(rng, 3.0, sigma, p_out) for _ in range(500))
    assert caught >= at_least * 500


def test_a_row_that_says_it_caches_is_not_judged_and_its_figures_say_with() -> None:
    probe = SelfCheckProbe(caches_prompts=True, cache_setting="ATTENTION_BACKEND=PA",
                           rounds=[ProbeRound([0.3, 0.3, 0.3], [0.1, 0.1, 0.1])])  # fmt: skip
    reps = [rep([5, 6], ttft=0.1)] * 2
    checks = selfcheck.run_checks(reps, probe, Expected(6, 2), "")
    cache = checks.get(selfcheck.PROMPT_CACHE)
    assert cache is not None and cache.status is NA and "caches prompts" in cache.summary
    record: dict[str, Any] = {"metrics": {"ttft_s": {"value": 0.1}, "pp_tps": {"value": 60.0}}}
    selfcheck.annotate(record, checks)
    assert "ATTENTION_BACKEND=PA" in record["metrics"]["ttft_s"]["prompt_cache"]
    assert "self_check_mark" not in record


def test_a_short_prompt_or_a_failed_probe_is_not_applicable_with_why() -> None:
    skipped = SelfCheckProbe(probe_skipped="a 1-token prompt: a cache has nothing to reuse")
    check = selfcheck.prompt_cache(skipped, [rep([5, 6])])
    assert check.status is NA and "1-token prompt" in check.summary


# --------------------------------------------------------------------------- verdict, types


def test_a_failed_check_makes_pass_warn_and_leaves_fail() -> None:
    reps = [rep([5, 6]), rep([5, 9])]
    checks = selfcheck.run_checks(reps, SelfCheckProbe(), Expected(6, 2, 1e-2), "")
    mark = checks.mark()
    assert mark is not None and mark.startswith("self-check failed: timed_ids")
    warned = selfcheck.judged(Judgement(Verdict.PASS), checks)
    assert warned.verdict is Verdict.WARN and "timed_ids" in (warned.reason or "")
    assert selfcheck.judged(Judgement(Verdict.FAIL, "x"), checks).verdict is Verdict.FAIL
    clean = selfcheck.run_checks(reps[:1], SelfCheckProbe(), Expected(6, 2), "")
    assert selfcheck.judged(Judgement(Verdict.PASS), clean) == Judgement(Verdict.PASS)


def test_checks_round_trip_and_a_cell_without_repetitions_says_why() -> None:
    checks = selfcheck.run_checks([], None, Expected(6, 2), "the stream scenario has no timed")
    assert all(c.status is NA for c in checks.checks) and len(checks.checks) == 3
    assert SelfChecks.from_dict(checks.to_dict()) == checks


def test_the_probe_travels_in_the_result() -> None:
    probe = SelfCheckProbe(loop="engine", banned=[2], rounds=[ProbeRound([0.2], [0.1])],
                           gaps=[LogitGap(1, 2, 7, 9, 0.5)])  # fmt: skip
    data = WorkerResult(status="ok", self_check=probe).to_dict()
    assert data["protocol"] == PROTOCOL_VERSION
    back = WorkerResult.parse(data, "result")
    assert back.self_check == probe


def test_fresh_prompts_share_only_the_first_id() -> None:
    prompt = [1, 300, 301, 302]
    fresh = [selfcheck.fresh_prompt(prompt, 512, i) for i in range(3)]
    assert all(len(f) == 4 and f[0] == 1 and f[1] != 300 for f in fresh)
    assert len({tuple(f) for f in fresh}) == 3


# --------------------------------------------------------------------------- real worker path

HELPERS = "tests.helpers"


def _run(tmp_path: Path, repo: Path, adapters: dict[str, str]) -> dict[str, Any]:
    rts = "".join(f"[[runtimes]]\nname = '{n}'\nadapter = '{HELPERS}.{a}'\n"
                  for n, a in adapters.items())  # fmt: skip
    text = ("[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 60\n"
            "[params]\nn_ctx = 64\nprompt_tokens = 6\ngen_tokens = 5\n"
            f"{rts}[[fixtures]]\nmodel = 'tiny'\n")  # fmt: skip
    lines: list[str] = []
    path = run_matrix(parse_matrix(text, tmp_path / "m.toml"), tmp_path / "results",
                      progress=lines.append, cwd=repo)  # fmt: skip
    rec = cast(dict[str, Any], load_run(path))
    rec["_progress"] = lines
    return rec


def _status(cell: dict[str, Any]) -> dict[str, str]:
    return {n: c["status"] for n, c in cell["self_checks"].items()}


def test_dishonest_adapters_are_caught_through_the_worker_and_an_honest_one_passes(
    tmp_path: Path, repo: Path
) -> None:
    rec = _run(tmp_path, repo, {
        "honest": "adapters:NumpyAdapter",
        "prompt_cache": "selfcheck_adapters:PromptCacheAdapter",
        "cached_ids": "selfcheck_adapters:CachedIdsEngine",
        "drifting": "selfcheck_adapters:DriftingIdsAdapter",
        "miscounting": "selfcheck_adapters:MiscountingAdapter",
    })  # fmt: skip
    cells = {c["runtime"]: c for c in rec["cells"]}
    assert all(c["outcome"]["status"] == "ok" for c in cells.values()), {
        n: c["outcome"] for n, c in cells.items()
    }
    honest = cells["honest"]
    assert _status(honest) == dict.fromkeys(selfcheck.NAMES, "passed"), honest["self_checks"]
    assert honest["verdict"] == "PASS" and "self_check_mark" not in honest
    expect = {
        "prompt_cache": selfcheck.PROMPT_CACHE,
        "cached_ids": selfcheck.PROMPT_CACHE,
        "drifting": selfcheck.TIMED_IDS,
        "miscounting": selfcheck.TOKEN_COUNTS,
    }
    for name, failed in expect.items():
        cell = cells[name]
        assert _status(cell)[failed] == "failed", (name, cell["self_checks"])
        others = {n: s for n, s in _status(cell).items() if n != failed}
        assert set(others.values()) == {"passed"}, (name, cell["self_checks"])
        assert cell["verdict"] == "WARN" and failed in cell["self_check_mark"]
        assert failed in cell["verdict_reason"]
        line = next(ln for ln in rec["_progress"] if f" {name} x " in ln and " ok " in ln)
        assert f"SELF-CHECK FAILED: {failed}" in line, line
    assert cells["drifting"]["parity"]["all_tokens_agree"]  # parity judged the honest pass
    gap = cells["drifting"]["self_checks"]["timed_ids"]["figures"]["divergences"][0]
    assert gap["kind"] == "clear-margin" and gap["position"] == 2
    cached = cells["prompt_cache"]["self_checks"]["prompt_cache"]["figures"]
    assert cached["figures_are"] == "with a prompt cache the row does not declare"
    assert "prompt_cache" in cells["prompt_cache"]["metrics"]["ttft_s"]
    _report_shows_the_marks(tmp_path, rec)


def _report_shows_the_marks(tmp_path: Path, rec: dict[str, Any]) -> None:
    from rtmatrix.report import render_report

    rec = {k: v for k, v in rec.items() if k != "_progress"}
    html = render_report([cast(Any, rec)], tmp_path / "report").read_text("utf-8")
    assert 'data-self-check="timed_ids"' in html and 'data-self-check="prompt_cache"' in html
    assert "<h4>Self-checks</h4>" in html and 'data-status="failed"' in html
