"""The ``serve`` scenario for an engine that batches requests in the worker's own process (the
``BatchEngine`` capability: OpenVINO GenAI's ``ContinuousBatchingPipeline``), where there is no
server to start and no HTTP between client and scheduler.

Phases, each bounded in time like the server's:

1. start-up: the engine's first request (building its scheduler and cache, then a 4-token
   request), timed as ``startup_s``;
2. concurrency: N requests submitted at once (default 1, 2, 4, 8; ``serve_concurrency``),
   ``serve_rounds`` rounds each, every one traced: queued (submitted) -> each id as the engine
   hands it out -> completed; TTFT, TPOT and throughput as for a server (``serve_c<N>_*``);
3. batch invariance (:mod:`rtmatrix.scenarios.invariance`): ``invariance_requests`` requests of
   different prompt and output lengths all at once, then one at a time; each pair compared, and
   later both against the numpy reference in the parent. The engine returns no top
   log-probabilities, so a divergence between its own two runs has no margin and counts as
   ``isolation``; against the reference the reference's logits give the margin. The engine masks
   no ids (it keeps generating past end-of-sequence): the reference is asked for the same.

Nothing here imports a runtime.
"""

from __future__ import annotations

from typing import Any, cast

from rtmatrix.adapters.base import Adapter
from rtmatrix.adapters.capabilities import BatchEngine
from rtmatrix.protocol import Job
from rtmatrix.scenarios import invariance
from rtmatrix.scenarios.serve_result import (
    ServeOptions,
    ServeResult,
    ServeRun,
    completed_check,
    round_record,
)
from rtmatrix.scenarios.spec import Mark
from rtmatrix.scenarios.trace import RequestTrace, clock

LEVELS = [1, 2, 4, 8]
WARMUP_TOKENS = 4
NO_PREFILL = "not observable: the engine reports ids only, after its scheduler step"
NO_MARGIN = (
    "the engine returns no top log-probabilities: a divergence between its two runs has no "
    "margin and counts as isolation"
)


def submit(
    engine: BatchEngine, requests: list[tuple[list[int], int]], names: list[str]
) -> tuple[list[RequestTrace], list[list[int]]]:
    """All ``requests`` at once, each traced; an engine error fails every one of them."""
    traces = [RequestTrace(n) for n in names]
    for tr in traces:
        tr.why_missing["prefill_start"] = NO_PREFILL
    t0 = clock()
    for tr in traces:
        tr.queued = t0

    def seen(i: int, _token: int) -> None:
        traces[i].token()

    try:
        ids = engine.batch_generate(requests, seen)
    except Exception as exc:  # recorded per request; the scenario goes on
        why = f"{type(exc).__name__}: {exc}"[:300]
        for tr in traces:
            tr.finish("failed", error=why)
            tr.released = clock()
        return traces, [[] for _ in requests]
    for tr, (_, n_gen), got in zip(traces, requests, ids, strict=True):
        if len(got) == n_gen and len(tr.tokens) == n_gen:
            tr.finish("completed")
        else:
            why = f"{len(got)} ids returned, {len(tr.tokens)} seen, {n_gen} asked"
            tr.finish("failed", error=why)
        tr.released = clock()
    return traces, ids


def levels_of(job: Job) -> list[int]:
    given = job.options.get("serve_concurrency")
    return list(given) if isinstance(given, list) else list(LEVELS)


def invariance_phase(
    engine: BatchEngine, adapter: Adapter, job: Job, opts: ServeOptions
) -> dict[str, Any]:
    p = job.params
    bos = adapter.special_ids.get("bos", -1)
    reqs = invariance.plan(
        opts.invariance_requests,
        p.prompt_tokens,
        p.gen_tokens,
        p.n_ctx,
        adapter.vocab_size,
        bos if bos >= 0 else 1,
    )
    batch = [(list(r["prompt"]), int(r["max_tokens"])) for r in reqs]
    names = [str(r["name"]) for r in reqs]
    t0 = clock()
    conc_tr, conc = submit(engine, batch, [f"{n}-concurrent" for n in names])
    t_conc = clock() - t0
    t1 = clock()
    seq_tr: list[RequestTrace] = []
    seq: list[list[int]] = []
    for one, name in zip(batch, names, strict=True):
        trs, alone = submit(engine, [one], [f"{name}-alone"])
        seq_tr += trs
        seq += alone
    t_seq = clock() - t1
    tie = opts.invariance_tie_margin
    out = []
    for req, c_tr, c_ids, s_tr, s_ids in zip(reqs, conc_tr, conc, seq_tr, seq, strict=True):
        runs = {}
        for label, tr, got in (("concurrent", c_tr, c_ids), ("sequential", s_tr, s_ids)):
            runs[label] = (
                {"tokens": got} if tr.terminal == "completed" else {"error": tr.info.get("error")}
            )
        rec: dict[str, Any] = {**req, **runs, "versus": {}}
        if all("error" not in r for r in runs.values()):
            pair = invariance.compare(c_ids, s_ids, tie)
            rec["versus"]["concurrent_sequential"] = pair.to_dict()
        out.append(rec)
    return {
        "api": engine.batch_api,
        "n_probs": 0,
        "margin_note": NO_MARGIN,
        "tie_margin": tie,
        "banned": [],
        "banned_note": "the engine masks no ids (ignore_eos only keeps it generating)",
        "concurrent_wall_s": t_conc,
        "sequential_wall_s": t_seq,
        "requests": out,
    }


def run(
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Mark,
) -> ServeResult:
    """Start-up, the concurrency levels and batch invariance in process. The registry has
    checked that ``adapter`` offers ``BatchEngine``."""
    engine = cast(BatchEngine, adapter)
    ctx = ServeRun.of(job)
    levels = levels_of(job)
    res = ctx.res = ServeResult(
        runtime=adapter.name,
        api=engine.batch_api,
        in_process=True,
        prompt_tokens=len(prompt),
        max_tokens=ctx.n_tok,
        masked_token_ids=0,
    )
    t0 = clock()
    warm, _ = submit(engine, [(list(prompt), WARMUP_TOKENS)], ["warmup"])
    res.startup_s = clock() - t0 if warm[0].terminal == "completed" else None
    res.startup_method = (
        f"first request: the engine builds its scheduler and cache, then {WARMUP_TOKENS} ids"
    )
    if warm[0].terminal != "completed":
        res.startup_error = warm[0].info.get("error")
    for n in levels:
        rounds = []
        for r in range(ctx.opts.serve_rounds):
            if not ctx.time_left(f"c{n}-round{r}"):
                break
            names = [f"c{n}-r{r}-{i}" for i in range(n)]
            trs, _ = submit(engine, [(list(prompt), ctx.n_tok)] * n, names)
            ctx.traces.extend(trs)
            rounds.append(round_record(trs))
        res.levels[str(n)] = rounds
    ctx.checks.append(completed_check(ctx.traces, "concurrent in-process requests completed"))
    if ctx.opts.serve_invariance and ctx.time_left("invariance"):
        res.invariance = invariance_phase(engine, adapter, job, ctx.opts)
        ctx.checks += invariance.checks(res.invariance)
    res.engine_state = engine.batch_state()
    return ctx.finish(findings(res))


def findings(res: ServeResult) -> list[str]:
    state = res.engine_state or {}
    out = []
    if state.get("max_cache_usage") is not None:
        out.append(
            f"the engine's KV cache peaked at {100 * float(state['max_cache_usage']):.1f} % of "
            f"{state.get('cache_size_in_bytes')} bytes (its own metrics)"
        )
    return out
