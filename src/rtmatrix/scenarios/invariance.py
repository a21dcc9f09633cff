"""Batch invariance and session isolation through a server (a phase of the ``serve`` scenario).

N greedy requests with different prompts and lengths go to the server all at once (the server
batches them as it likes: slots, continuous batching, requests beyond the slots deferred), then
the same requests one at a time; later the parent compares both with the numpy reference
(:func:`with_reference`, called where the runner computes parity). Per request and pair of runs:
tokens agreeing, the first divergence and, at a divergence, the margin between the two tokens the
runs chose there: each run's log-probability gap between its own token and the other run's (the
server's ``n_probs`` top log-probabilities, computed before sampling; a log-probability gap is a
logit gap), the larger of the two. A flip whose margin is within ``invariance_tie_margin`` is a
near-tie that another batch composition's rounding can flip (``numerics``); a larger one means the
request saw something other than its own prompt (``isolation``, a failed check). Against the
reference the reference's own logits give the margin; a large one is a ``mismatch`` (a failed
check for the dtypes whose tokens parity demands exactly, recorded for the others).

The driver offers it through the ``TokenServer`` capability
(:class:`rtmatrix.adapters.capabilities.TokenServer`). Nothing here imports a runtime.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.capabilities import TokenServer
from rtmatrix.fixtures.model import make_prompt
from rtmatrix.outcome import Metric, Source
from rtmatrix.scenarios.trace import check, clock

DEFAULTS: dict[str, Any] = {
    "invariance_requests": 8,
    "invariance_tie_margin": 0.05,
    "invariance_n_probs": 4,
}
PAIRS = ("concurrent_sequential", "concurrent_reference", "sequential_reference")
KINDS = ("agree", "numerics", "isolation", "mismatch", "length")
Top = list[list[float]]  # [[id, logprob], ...] at one position


@dataclass(frozen=True)
class Divergence:
    """How two token sequences of one request compare."""

    compared: int
    agree: int
    position: int | None  # first differing position; None when they agree
    tokens: tuple[int, int] | None  # what each run chose there
    margin: float | None  # logit gap at the divergence (None: no margin known)
    margin_detail: str
    kind: str  # agree | numerics | isolation | mismatch | length

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tokens"] = list(self.tokens) if self.tokens else None
        return out


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where ``a`` and ``b`` differ (a length difference counts at the end
    of the shorter); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def gap(top: Top | None, mine: int, other: int) -> tuple[float | None, bool]:
    """Log-probability of ``mine`` minus that of ``other`` in one run's top list at one
    position: (gap, exact). ``other`` outside the list: the gap to the list's last entry, a lower
    bound (exact False). No list, or ``mine`` not in it: (None, False)."""
    if not top:
        return None, False
    lp = {int(i): float(v) for i, v in top}
    if mine not in lp:
        return None, False
    if other in lp:
        return lp[mine] - lp[other], True
    return lp[mine] - min(lp.values()), False


def classify(margin: float | None, tie: float, large: str) -> str:
    """``numerics`` for a flip at a near-tie (margin within ``tie``), else ``large``."""
    return "numerics" if margin is not None and margin <= tie else large


def compare(
    a: Sequence[int],
    b: Sequence[int],
    tie: float,
    *,
    top_a: Sequence[Top] | None = None,
    top_b: Sequence[Top] | None = None,
    large: str = "isolation",
) -> Divergence:
    """Compare run ``a`` with run ``b``; the margin comes from the runs' top lists at the
    divergence (the larger of the two gaps; a lower bound when a run's list lacks the other
    token). Without any margin a divergence is classified ``large``."""
    n = min(len(a), len(b))
    pos = first_divergence(a, b)
    if pos is None:
        return Divergence(n, n, None, None, None, "", "agree")
    if pos >= n:
        why = f"one run returned {len(a)} tokens, the other {len(b)}"
        return Divergence(n, n, pos, None, None, why, "length")
    ta, tb = int(a[pos]), int(b[pos])
    ga, exact_a = gap(top_a[pos] if top_a and pos < len(top_a) else None, ta, tb)
    gb, exact_b = gap(top_b[pos] if top_b and pos < len(top_b) else None, tb, ta)
    known = [g for g in (ga, gb) if g is not None]
    margin = max(known) if known else None
    words = []
    for label, g, exact in (("first", ga, exact_a), ("second", gb, exact_b)):
        if g is None:
            words.append(f"{label} run: no top log-probabilities for its token")
        else:
            words.append(f"{label} run: {g:.4g}" + ("" if exact else " (at least)"))
    return Divergence(n, pos, pos, (ta, tb), margin, "; ".join(words), classify(margin, tie, large))


# -- the requests ----------------------------------------------------------------------------
def plan(
    n: int, prompt_tokens: int, gen_tokens: int, n_ctx: int, vocab: int, bos: int
) -> list[dict[str, Any]]:
    """``n`` requests of different prompt lengths (spread over prompt_tokens/4 .. prompt_tokens,
    each a different seeded prompt) and different lengths to generate (gen_tokens/2 ..
    gen_tokens), every one within ``n_ctx``."""
    lo_p = max(2, prompt_tokens // 4)
    lengths = sorted({round(float(x)) for x in np.linspace(lo_p, prompt_tokens, n)})
    while len(lengths) < n:  # too narrow a range for n distinct lengths: extend above
        lengths.append(lengths[-1] + 1)
    gens = [round(float(x)) for x in np.linspace(max(2, gen_tokens // 2), gen_tokens, n)]
    out = []
    for i, (p_len, g) in enumerate(zip(lengths, gens[::-1], strict=True)):
        p_len = min(p_len, n_ctx - 2)
        g = max(1, min(g, n_ctx - p_len - 1))
        out.append({"name": f"inv-{i}", "prompt": make_prompt(p_len, vocab, bos), "max_tokens": g})
    return out


def _ask(
    driver: TokenServer, port: int, req: dict[str, Any], banned: list[int], n_probs: int
) -> dict[str, Any]:
    t0 = clock()
    try:
        got = driver.complete_tokens(port, req["prompt"], req["max_tokens"], banned, n_probs)
    except Exception as exc:  # recorded, the other requests go on
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "wall_s": clock() - t0}
    return {**got, "wall_s": clock() - t0}


def run_phase(
    driver: TokenServer,
    port: int,
    requests: list[dict[str, Any]],
    banned: list[int],
    opts: dict[str, Any],
) -> dict[str, Any]:
    """The requests all at once, then one at a time; each pair compared."""
    n_probs = int(opts["invariance_n_probs"])
    tie = float(opts["invariance_tie_margin"])
    conc: list[dict[str, Any]] = [{} for _ in requests]
    barrier = threading.Barrier(len(requests))

    def go(i: int) -> None:
        barrier.wait()
        conc[i] = _ask(driver, port, requests[i], banned, n_probs)

    t0 = clock()
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(requests))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t_conc = clock() - t0
    t1 = clock()
    seq = [_ask(driver, port, r, banned, n_probs) for r in requests]
    t_seq = clock() - t1
    out = []
    for req, c, s in zip(requests, conc, seq, strict=True):
        rec: dict[str, Any] = {**req, "concurrent": c, "sequential": s, "versus": {}}
        if "error" not in c and "error" not in s:
            rec["versus"]["concurrent_sequential"] = compare(
                c["tokens"], s["tokens"], tie, top_a=c.get("top"), top_b=s.get("top")
            ).to_dict()
        out.append(rec)
    return {
        "api": driver.token_api,
        "n_probs": n_probs,
        "tie_margin": tie,
        "banned": list(banned),
        "concurrent_wall_s": t_conc,
        "sequential_wall_s": t_seq,
        "requests": out,
    }


def checks(inv: dict[str, Any]) -> list[dict[str, Any]]:
    """The worker's check: no request diverged from its one-at-a-time run beyond a near-tie."""
    reqs = inv.get("requests") or []
    errors = [r["name"] for r in reqs if "error" in r["concurrent"] or "error" in r["sequential"]]
    pairs = [(r["name"], r["versus"].get("concurrent_sequential")) for r in reqs]
    bad = [(n, v) for n, v in pairs if v and v["kind"] in ("isolation", "length")]
    flips = [(n, v) for n, v in pairs if v and v["kind"] == "numerics"]
    detail = (
        f"{sum(1 for _, v in pairs if v and v['kind'] == 'agree')}/{len(reqs)} concurrent "
        f"requests returned the tokens of their one-at-a-time run; {len(flips)} near-tie "
        f"flip(s) (numerics, margin <= {inv.get('tie_margin')})"
    )
    if bad:
        detail += "; " + "; ".join(
            f"{n}: {v['kind']} at token {v['position']} "
            f"(margin {v['margin']}, {v['margin_detail']})"
            for n, v in bad[:4]
        )
    if errors:
        detail += f"; failed requests: {', '.join(errors[:4])}"
    return [check("serve_invariance_isolation", not bad and not errors and bool(reqs), detail)]


# -- against the numpy reference (in the parent) ---------------------------------------------
#: ``generate(prompt, n)`` -> the reference's greedy ids and the logits of each step
RefGenerate = Callable[[Sequence[int], int], tuple[list[int], list[NDArray[np.float32]]]]


def ref_margin(logits: NDArray[np.float32], mine: int, other: int) -> float:
    return float(logits[mine]) - float(logits[other])


def with_reference(
    inv: dict[str, Any],
    generate: RefGenerate,
    exact: bool,
    how: str,
) -> list[dict[str, Any]]:
    """Compare each request's runs with the reference: ``generate(prompt, n)`` returns its
    greedy ids (``inv['banned']`` masked, as the server masks them) and the logits of each
    step. At a divergence the reference's own logit gap between its token and the run's is the
    margin. Adds ``versus.*_reference`` to each request, drops the per-position top lists (kept
    only at divergences) and returns the check (``exact``: a large-margin mismatch fails it;
    else the comparison is recorded without a check)."""
    tie = float(inv.get("tie_margin") or DEFAULTS["invariance_tie_margin"])
    mismatched = []
    for req in inv.get("requests") or []:
        ref_ids, ref_logits = generate(req["prompt"], int(req["max_tokens"]))
        req["reference"] = {"tokens": ref_ids}
        for run in ("concurrent", "sequential"):
            got = req[run]
            if "error" in got:
                continue
            d = compare(got["tokens"], ref_ids, tie, large="mismatch")
            if d.position is not None and d.tokens is not None and d.position < len(ref_logits):
                m = ref_margin(ref_logits[d.position], d.tokens[1], d.tokens[0])
                d = Divergence(
                    d.compared,
                    d.agree,
                    d.position,
                    d.tokens,
                    m,
                    f"the reference's logit gap between its token and the run's: {m:.4g}",
                    classify(m, tie, "mismatch"),
                )
            req["versus"][f"{run}_reference"] = d.to_dict()
            if d.kind in ("mismatch", "length"):
                mismatched.append(f"{req['name']} ({run}) at token {d.position}, margin {d.margin}")
        _keep_divergent_tops(req)
    inv["reference_how"] = how
    if not exact:
        inv["reference_check"] = "recorded only: this dtype's tokens are not demanded exactly"
        return []
    n = len(inv.get("requests") or [])
    return [
        check(
            "serve_invariance_reference",
            not mismatched and n > 0,
            f"{n - len({m.split(' ')[0] for m in mismatched})}/{n} requests agree with the numpy "
            "reference up to near-ties" + (f"; {'; '.join(mismatched[:4])}" if mismatched else ""),
        )
    ]


def _keep_divergent_tops(req: dict[str, Any]) -> None:
    spots = {v["position"] for v in req["versus"].values() if v.get("position") is not None}
    for run in ("concurrent", "sequential"):
        top = req[run].pop("top", None)
        if top:
            req[run]["top_at_divergence"] = {str(p): top[p] for p in sorted(spots) if p < len(top)}


# -- metrics ---------------------------------------------------------------------------------
def summary(inv: dict[str, Any]) -> dict[str, Any]:
    """Per request: lengths, per-pair agreement and classification (no token lists)."""
    rows = []
    for r in inv.get("requests") or []:
        rows.append(
            {
                "name": r["name"],
                "prompt_tokens": len(r["prompt"]),
                "max_tokens": r["max_tokens"],
                "errors": {
                    k: r[k]["error"] for k in ("concurrent", "sequential") if "error" in r[k]
                },
                "versus": r.get("versus") or {},
            }
        )
    return {
        "api": inv.get("api"),
        "tie_margin": inv.get("tie_margin"),
        "n_probs": inv.get("n_probs"),
        "reference_how": inv.get("reference_how"),
        "reference_check": inv.get("reference_check"),
        "notes": [str(inv[k]) for k in ("margin_note", "banned_note") if inv.get(k)],
        "concurrent_wall_s": inv.get("concurrent_wall_s"),
        "sequential_wall_s": inv.get("sequential_wall_s"),
        "requests": rows,
    }


def metrics(inv: dict[str, Any] | None, why_none: str) -> dict[str, Metric]:
    """``serve_invariance_*``: per pair of runs, requests agreeing and divergences by kind; the
    smallest and largest margin at a divergence."""
    if not inv:
        return {"serve_invariance": Metric.unavailable("requests", why_none)}
    s = summary(inv)
    out: dict[str, Metric] = {}
    for pair in PAIRS:
        found = [r["versus"][pair] for r in s["requests"] if pair in r["versus"]]
        if not found:
            continue
        kinds = [v["kind"] for v in found]
        detail = {"pair": pair, "requests": len(found), "tie_margin": s["tie_margin"]}
        out[f"serve_invariance_{pair}_agree"] = Metric(
            kinds.count("agree"),
            "requests",
            Source.HARNESS_CLOCK,
            detail={**detail, "method": "requests whose token ids are equal in both runs"},
        )
        out[f"serve_invariance_{pair}_numerics"] = Metric(
            kinds.count("numerics"),
            "requests",
            Source.HARNESS_CLOCK,
            detail={**detail, "method": "divergences at a near-tie (margin <= tie_margin)"},
        )
        out[f"serve_invariance_{pair}_isolation_or_mismatch"] = Metric(
            sum(1 for k in kinds if k in ("isolation", "mismatch", "length")),
            "requests",
            Source.HARNESS_CLOCK,
            detail={**detail, "method": "divergences with a larger margin (or another length)"},
        )
        margins = [v["margin"] for v in found if v.get("margin") is not None]
        positions = [v["position"] for v in found if v.get("position") is not None]
        out[f"serve_invariance_{pair}_margin_min"] = (
            Metric(
                min(margins),
                "logit",
                Source.RUNTIME_COUNTER if pair == PAIRS[0] else Source.MODELLED,
                detail={
                    **detail,
                    "margins": margins,
                    "first_divergence_positions": positions,
                    "method": "smallest margin at a divergence: the server's top log-probability "
                    "gaps (n_probs)"
                    if pair == PAIRS[0]
                    else "smallest margin at a divergence: the numpy reference's logit gap",
                },
            )
            if margins
            else Metric.unavailable("logit", "no divergence with a known margin")
        )
    agreeing = sum(
        1 for r in s["requests"] if (r["versus"].get(PAIRS[0]) or {}).get("kind") == "agree"
    )
    out["serve_invariance"] = Metric(
        f"{agreeing}/{len(s['requests'])}",
        "requests",
        Source.HARNESS_CLOCK,
        detail=s,
    )
    return out
