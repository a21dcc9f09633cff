"""Self-checks of the harness's own measurements on every ok cell, after MLPerf's compliance
tests (TEST01: outputs of the timed runs equal the accuracy run's; TEST04: a repeated sample is
not much faster than new ones; TEST06: token counts and end of sequence are consistent).

``timed_ids``
    Every counted repetition's ids equal the parity pass's — the first counted repetition, the
    one :func:`rtmatrix.metrics.parity.compare` judges. Generation here is always greedy with
    the same settings, so ids that differ are either a near tie flipped by run-to-run numerics
    or output the parity judgement never saw. As parity does, a first divergence where the two
    ids' logits lie within the dtype's logit tolerance is a near tie (passed, listed); the gap
    is the runtime's own, read by replaying the parity pass's ids to that position in the
    worker. An engine that shows no logits gives no gap: its divergence is not excused.
``token_counts``
    Per phase, what was counted equals what was produced: prefill tokens (the harness's count
    and the runtime's own counter) against the prompt the job sent; decode steps (timed calls,
    the runtime's counter) against the ids generated less the first; ids generated against the
    ``gen_tokens`` asked for (generation stopped where told: not early at end of sequence, not
    late); and no end-of-sequence id where the harness's loop masks it.
``prompt_cache``
    After the counted repetitions the worker times, :data:`PROBE_PAIRS` times a round, a fresh
    prompt of the same length (other ids), then the timed prompt twice: the second is the
    repeat, right after itself as the counted repetitions run (a cache that holds one prompt, as
    OpenVINO GenAI's paged attention here, loses it to the fresh one: alternating alone would
    hide it; the first is kept as ``rewarm``). A round flags when the fresh prompts' median TTFT
    exceeds the repeats' by more than :data:`RATIO_FLOOR` and a one-sided Mann-Whitney U test
    (fresh slower than the probe's repeats and the counted repetitions' TTFTs) gives p <=
    :data:`ALPHA`; a flagged round is confirmed by a second (:data:`PROBE_ROUNDS`), and the
    check fails only when both flag. A row whose runtime home says it caches prompts (capability
    PromptCaching) is not judged: its TTFT and PP figures are marked as measured with the cache,
    and the ratio is given.

A failed check is a visible mark on the cell (``self_check_mark``, the verdict reason, the
progress line, the report), never silent; it turns a PASS into WARN and leaves the outcome as it
is: the figures were measured, the check questions what they measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from rtmatrix.names import M
from rtmatrix.outcome import Judgement, Verdict
from rtmatrix.protocol import LogitGap, ProbeRound, Repetition, SelfCheckProbe

#: fresh/repeat pairs per probe round; rounds when the first flags (the second confirms)
PROBE_PAIRS = 3
PROBE_ROUNDS = 2
#: a round flags when median fresh TTFT / median repeat TTFT exceeds this ...
RATIO_FLOOR = 1.75
#: ... and the one-sided Mann-Whitney U p-value is at most this
ALPHA = 0.05
#: the loosest logit tolerance of :data:`rtmatrix.metrics.parity.LOGIT_TOLERANCE`, for a cell
#: whose dtype has none (a user's file)
LOOSEST_TOLERANCE = 1.0
LOOSEST_WHY = "the loosest of rtmatrix's logit tolerances (no tolerance for this cell's dtype)"
#: divergences and count problems listed per check (the first ones)
LISTED = 8

TIMED_IDS, TOKEN_COUNTS, PROMPT_CACHE = "timed_ids", "token_counts", "prompt_cache"
NAMES = (TIMED_IDS, TOKEN_COUNTS, PROMPT_CACHE)


class CheckStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_APPLICABLE = "not-applicable"


@dataclass(frozen=True)
class SelfCheck:
    """One check of one cell: passed, failed with the figures, or not applicable with why."""

    name: str
    status: CheckStatus
    #: one line in words (the figures that decided it, or why it does not apply)
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"status": str(self.status), "summary": self.summary, "figures": self.figures}

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any]) -> SelfCheck:
        return cls(name, CheckStatus(str(data["status"])), str(data.get("summary", "")),
                   dict(data.get("figures") or {}))  # fmt: skip


def _na(name: str, why: str) -> SelfCheck:
    return SelfCheck(name, CheckStatus.NOT_APPLICABLE, why)


@dataclass(frozen=True)
class SelfChecks:
    """A cell's self-checks, in :data:`NAMES` order (the record's ``self_checks``)."""

    checks: tuple[SelfCheck, ...]

    def failed(self) -> tuple[SelfCheck, ...]:
        return tuple(c for c in self.checks if c.status is CheckStatus.FAILED)

    def get(self, name: str) -> SelfCheck | None:
        return next((c for c in self.checks if c.name == name), None)

    def mark(self) -> str | None:
        """The cell's visible mark when a check failed (None when none did)."""
        bad = self.failed()
        if not bad:
            return None
        return "self-check failed: " + "; ".join(f"{c.name} ({c.summary})" for c in bad)

    def figures_cached(self) -> str | None:
        """How the cell's TTFT and PP figures met a prompt cache ("with: ..."), or None."""
        check = self.get(PROMPT_CACHE)
        if check is None:
            return None
        return check.figures.get("figures_are")

    def to_dict(self) -> dict[str, Any]:
        return {c.name: c.to_dict() for c in self.checks}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SelfChecks:
        return cls(tuple(SelfCheck.from_dict(n, data[n]) for n in NAMES if n in data))


@dataclass(frozen=True)
class Expected:
    """What the job asked of the cell, as the parent knows it (never the worker's own say)."""

    #: the prompt's length in ids (the seeded prompt's ``prompt_tokens``, or a text's ids)
    prompt_tokens: int
    gen_tokens: int
    #: the logit tolerance the cell's parity is judged at (None: the dtype has none)
    logit_tolerance: float | None = None


def judged(j: Judgement, checks: SelfChecks | None) -> Judgement:
    """A PASS with a failed self-check is WARN; the mark joins the verdict's reason."""
    mark = checks.mark() if checks is not None else None
    if mark is None:
        return j
    verdict = Verdict.WARN if j.verdict is Verdict.PASS else j.verdict
    return Judgement(verdict, "; ".join(r for r in (j.reason, mark) if r))


def run_checks(
    reps: Sequence[Repetition], probe: SelfCheckProbe | None, expected: Expected, why_none: str
) -> SelfChecks:
    """The three checks of an ok cell; ``why_none`` says why a cell has no counted
    repetitions (a lifecycle scenario), making each check not applicable."""
    if not reps:
        return SelfChecks(tuple(_na(n, why_none) for n in NAMES))
    if probe is None:
        no_probe = "the worker sent no self-check probe"
        return SelfChecks((timed_ids(reps, [], expected.logit_tolerance, "harness"),
                           token_counts(reps, expected, "harness", []),
                           _na(PROMPT_CACHE, no_probe)))  # fmt: skip
    return SelfChecks(
        (
            timed_ids(reps, probe.gaps, expected.logit_tolerance, probe.loop),
            token_counts(reps, expected, probe.loop, probe.banned),
            prompt_cache(probe, reps),
        )
    )


# --------------------------------------------------------------------------- timed ids


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where ``a`` and ``b`` differ (the shorter's length when one is the
    other's prefix), None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _divergence(
    i: int, parity: Sequence[int], ids: Sequence[int], gaps: Mapping[tuple[int, int], LogitGap],
    tol: float, loop: str,
) -> dict[str, Any] | None:  # fmt: skip
    k = first_divergence(parity, ids)
    if k is None:
        return None
    out: dict[str, Any] = {"rep": i, "position": k}
    if k >= len(parity) or k >= len(ids):
        why = f"one stops where the other goes on ({len(ids)} ids against {len(parity)})"
        return out | {"kind": "length", "why_no_gap": why}
    out |= {"parity_id": int(parity[k]), "rep_id": int(ids[k])}
    found = gaps.get((i, k))
    gap = found.logit_gap if found is not None else None
    if gap is None:
        no_replay = "the engine shows no logits" if loop == "engine" else "no replay was recorded"
        why = (found.why_not if found is not None else None) or no_replay
        return out | {"logit_gap": None, "kind": "unknown-margin", "why_no_gap": why}
    kind = "near-tie" if abs(gap) <= tol else "clear-margin"
    return out | {"logit_gap": round(float(gap), 6), "kind": kind}


def _said(d: Mapping[str, Any], tol: float) -> str:
    head = f"repetition {d['rep'] + 1} left the parity pass's ids at position {d['position']}"
    if d["kind"] == "length":
        return f"{head}: {d['why_no_gap']}"
    ids = f"id {d['rep_id']} for {d['parity_id']}"
    if d["kind"] == "unknown-margin":
        return f"{head} ({ids}; margin unknown: {d['why_no_gap']})"
    return f"{head} ({ids}, logit gap {abs(d['logit_gap']):.3g} > tolerance {tol:g})"


def timed_ids(
    reps: Sequence[Repetition], gaps: Sequence[LogitGap], tolerance: float | None, loop: str
) -> SelfCheck:
    """Each counted repetition's ids against the parity pass's (the first counted one)."""
    if len(reps) < 2:
        why = "one counted repetition: it is the parity pass, there is no other to compare"
        return _na(TIMED_IDS, why)
    tol = LOOSEST_TOLERANCE if tolerance is None else float(tolerance)
    by_place = {(g.rep, g.position): g for g in gaps}
    parity = reps[0].tokens
    seen = (_divergence(i, parity, r.tokens, by_place, tol, loop) for i, r in enumerate(reps))
    found = [d for d in seen if d is not None]
    figures: dict[str, Any] = {
        "parity_pass": "the first counted repetition (the one parity judges)",
        "compared": len(reps) - 1,
        "differing": len(found),
        "logit_tolerance": tol,
        "tolerance_from": "the cell's parity" if tolerance is not None else LOOSEST_WHY,
        "divergences": found[:LISTED],
    }
    bad = [d for d in found if d["kind"] != "near-tie"]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return SelfCheck(TIMED_IDS, CheckStatus.FAILED, _said(bad[0], tol) + more, figures)
    n = len(reps) - 1
    said = f"the {n} other counted repetition(s) gave the parity pass's ids"
    if found:
        said += f" but for {len(found)} near-tie flip(s) (logit gap <= {tol:g})"
    return SelfCheck(TIMED_IDS, CheckStatus.PASSED, said, figures)


# --------------------------------------------------------------------------- token counts


def _counter_problem(rep: Repetition, prompt: int) -> str | None:
    """The runtime's own prefill / decode counters against the prompt and the decode steps (a
    runtime that counts a 1-token prefill as a decode step is taken as it counts: llama.cpp's
    perf counters read 0 or 1 prefill tokens and steps + 1 decode tokens for it, run to run)."""
    c = rep.counters or {}
    pp, tg = c.get("pp_tokens"), c.get("tg_tokens")
    steps = len(rep.tokens) - 1
    if pp is not None and tg is not None and prompt == 1 and int(pp) in (0, 1) \
            and int(tg) == steps + 1:  # fmt: skip
        return None
    if pp is not None and int(pp) != prompt:
        return f"the runtime counted {pp:g} prefill tokens for a {prompt}-token prompt"
    if tg is not None and int(tg) != steps:
        return f"the runtime counted {tg:g} decode tokens for {steps} decode steps"
    return None


def _rep_problems(
    rep: Repetition, expected: Expected, loop: str, banned: Sequence[int]
) -> list[str]:
    n = len(rep.tokens)
    out = []
    if rep.pp_tokens != expected.prompt_tokens:
        out.append(f"prefill counted {rep.pp_tokens} tokens, the prompt has "
                   f"{expected.prompt_tokens}")  # fmt: skip
    if n != expected.gen_tokens:
        end = "early" if n < expected.gen_tokens else "late"
        out.append(f"{n} ids generated, {expected.gen_tokens} asked for (stopped {end})")
    for what, steps in (("timed decode calls", rep.decode_s), ("token intervals", rep.step_s)):
        if len(steps) != max(n - 1, 0):
            out.append(f"{len(steps)} {what} for {n} ids")
    if (said := _counter_problem(rep, expected.prompt_tokens)) is not None:
        out.append(said)
    seen = sorted({t for t in rep.tokens if t in set(banned)})
    if seen and loop == "harness":
        out.append(f"end-of-sequence id(s) {seen} generated though the loop masks them")
    return out


def token_counts(
    reps: Sequence[Repetition], expected: Expected, loop: str, banned: Sequence[int]
) -> SelfCheck:
    """Per phase, the counted tokens against the ids produced, and where generation stopped."""
    problems = [f"repetition {i + 1}: {p}" for i, r in enumerate(reps)
                for p in _rep_problems(r, expected, loop, banned)]  # fmt: skip
    counters = sorted({k for r in reps for k in (r.counters or {}) if k.endswith("_tokens")})
    figures: dict[str, Any] = {
        "prompt_tokens": expected.prompt_tokens,
        "gen_tokens": expected.gen_tokens,
        "ids_generated": sorted({len(r.tokens) for r in reps}),
        "runtime_counters": counters,
        "loop": loop,
        "problems": problems[:LISTED],
    }
    eos = sorted({t for r in reps for t in r.tokens if t in set(banned)})
    if eos and loop == "engine":  # the engine cannot mask them: it must generate past them
        figures["end_of_sequence"] = (f"id(s) {eos} generated and generation went on (the "
                                      "engine cannot mask them)")  # fmt: skip
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return SelfCheck(TOKEN_COUNTS, CheckStatus.FAILED, problems[0] + more, figures)
    steps = max(expected.gen_tokens - 1, 0)
    said = (f"{len(reps)} repetition(s): {expected.prompt_tokens} prefill tokens, "
            f"{expected.gen_tokens} ids and {steps} decode steps each")  # fmt: skip
    if counters:
        said += f"; the runtime's counters ({', '.join(counters)}) agree"
    return SelfCheck(TOKEN_COUNTS, CheckStatus.PASSED, said, figures)


# --------------------------------------------------------------------------- prompt cache


def fresh_prompt(prompt: Sequence[int], vocab_size: int, index: int) -> list[int]:
    """A prompt of ``prompt``'s length sharing only its first id (BOS): ordinary pieces drawn
    with seed ``index``, its second id never the prompt's (no prefix longer than one id)."""
    from rtmatrix.fixtures.vocab import FIRST_PIECE_ID

    low = FIRST_PIECE_ID if vocab_size > FIRST_PIECE_ID + 1 else 0
    rng = np.random.default_rng(10_007 + index)
    body = [int(t) for t in rng.integers(low, vocab_size, size=len(prompt) - 1)]
    if body and len(prompt) > 1 and body[0] == prompt[1]:
        body[0] = low + (body[0] - low + 1) % (vocab_size - low)
    return [int(prompt[0]), *body]


def median_ratio(fresh: Sequence[float], repeat: Sequence[float]) -> float | None:
    """Median fresh TTFT / median repeat TTFT (None without both)."""
    if not fresh or not repeat or float(np.median(repeat)) <= 0:
        return None
    return float(np.median(fresh) / np.median(repeat))


@dataclass(frozen=True)
class RoundReading:
    """One probe round judged: the ratio of medians, the Mann-Whitney p-value, flagged."""

    ratio: float | None
    p_value: float | None
    flagged: bool

    def to_dict(self) -> dict[str, Any]:
        r = None if self.ratio is None else round(self.ratio, 4)
        p = None if self.p_value is None else round(self.p_value, 5)
        return {"ratio": r, "p_value": p, "flagged": self.flagged}


def read_round(rnd: ProbeRound, counted: Sequence[float]) -> RoundReading:
    """Whether the fresh prompts were slower than the repeated one beyond the noise: the ratio
    of medians above :data:`RATIO_FLOOR` and the fresh TTFTs above the repeats' (the round's
    and the counted repetitions') by a one-sided Mann-Whitney U test at :data:`ALPHA`."""
    from scipy import stats

    ratio = median_ratio(rnd.fresh_ttft_s, rnd.repeat_ttft_s)
    if ratio is None:
        return RoundReading(None, None, False)
    repeats = [*rnd.repeat_ttft_s, *counted]
    p = float(stats.mannwhitneyu(rnd.fresh_ttft_s, repeats, alternative="greater").pvalue)
    return RoundReading(ratio, p, ratio > RATIO_FLOOR and p <= ALPHA)


def prompt_cache(probe: SelfCheckProbe, reps: Sequence[Repetition]) -> SelfCheck:
    """A repeated prompt against fresh ones of the same length (see the module's docstring)."""
    counted = [r.ttft_s for r in reps]
    declared = ("the runtime's home says nothing (no PromptCaching capability)"
                if probe.caches_prompts is None
                else f"{'caches' if probe.caches_prompts else 'does not cache'}: "
                f"{probe.cache_setting}")  # fmt: skip
    if probe.probe_skipped and not probe.rounds:
        return _na(PROMPT_CACHE, probe.probe_skipped)
    readings = [read_round(r, counted) for r in probe.rounds]
    figures: dict[str, Any] = {
        "declared": declared,
        "rounds": [
            r.to_dict()
            | {
                "fresh_ttft_s": x.fresh_ttft_s,
                "repeat_ttft_s": x.repeat_ttft_s,
                "rewarm_ttft_s": x.rewarm_ttft_s,
            }
            for r, x in zip(readings, probe.rounds, strict=True)
        ],
        "counted_ttft_s": counted,
        "probe_gen_tokens": probe.probe_gen_tokens,
        "rule": f"a round flags at median fresh/repeat > {RATIO_FLOOR} and one-sided "
        f"Mann-Whitney p <= {ALPHA} (fresh against the round's repeats and the counted "
        f"repetitions); fails when {PROBE_ROUNDS} rounds flag",
    }
    if probe.probe_skipped:
        figures["stopped"] = probe.probe_skipped
    ratios = [f"{r.ratio:.2f}x" for r in readings if r.ratio is not None]
    said = f"fresh/repeat TTFT {', '.join(ratios) or 'n/a'}"
    if probe.caches_prompts:
        figures["figures_are"] = f"with the row's prompt cache ({probe.cache_setting})"
        why = (f"the row caches prompts ({probe.cache_setting}): its TTFT and PP figures are "
               f"with the cache; {said}")  # fmt: skip
        return SelfCheck(PROMPT_CACHE, CheckStatus.NOT_APPLICABLE, why, figures)
    flagged = len(readings) >= PROBE_ROUNDS and all(r.flagged for r in readings)
    if flagged:
        figures["figures_are"] = "with a prompt cache the row does not declare"
        p = max(r.p_value or 0.0 for r in readings)
        why = (f"a repeated prompt's TTFT is faster than a fresh one's of the same length "
               f"({said}, p <= {p:.3g}, {len(readings)} rounds); {declared}")  # fmt: skip
        return SelfCheck(PROMPT_CACHE, CheckStatus.FAILED, why, figures)
    if readings and all(r.flagged for r in readings):  # no confirming round: undecided
        why = f"{said}: a round flagged and no round confirmed it ({probe.probe_skipped})"
        return SelfCheck(PROMPT_CACHE, CheckStatus.NOT_APPLICABLE, why, figures)
    return SelfCheck(PROMPT_CACHE, CheckStatus.PASSED, f"{said}: within the noise", figures)


def annotate(record: dict[str, Any], checks: SelfChecks) -> None:
    """Put a cell's self-checks into its record: ``self_checks`` (each check), the visible
    ``self_check_mark`` where one failed, and on the TTFT and PP figures the prompt cache they
    were measured with, where there was one."""
    record["self_checks"] = checks.to_dict()
    mark = checks.mark()
    if mark:
        record["self_check_mark"] = mark
    cached = checks.figures_cached()
    for name in (M.TTFT, M.PP_TPS) if cached else ():
        metric = record.get("metrics", {}).get(str(name))
        if isinstance(metric, dict) and metric.get("value") is not None:
            metric["prompt_cache"] = cached
