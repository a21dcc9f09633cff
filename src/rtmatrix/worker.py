"""The child process that runs one cell: the only place an adapter (and so a runtime) is imported
and the only place a model file is opened.

``python -m rtmatrix.worker JOB.json`` reads the job, runs warm-up and counted repetitions of the
generation loop and writes ``result.json`` beside the job. Phases are appended to ``events.jsonl``
as they start, so a parent whose child died knows where it died. Exit codes: 0 ok, 3 error
recorded, 4 runtime unavailable, 2 bad job file (unreadable, or another protocol version: the
message names both versions). The job, result and events are the typed documents of
:mod:`rtmatrix.protocol`.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rtmatrix.protocol import (
    QUALITY_LOGITS,
    Job,
    LogitGap,
    PhaseEvent,
    PowerRecord,
    ProbeRound,
    ProtocolError,
    QualityPass,
    ReferenceFigures,
    Repetition,
    SelfCheckProbe,
    WorkerResult,
)

T_ENTRY = time.monotonic()

EXIT_OK, EXIT_BAD_JOB, EXIT_ERROR, EXIT_UNAVAILABLE = 0, 2, 3, 4


class Events:
    """Append-only phase log, flushed line by line so it survives a crash."""

    def __init__(self, path: Path) -> None:
        self._fh = path.open("a", encoding="utf-8", buffering=1)

    def _write(self, event: PhaseEvent) -> None:
        self._fh.write(event.to_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def phase(self, name: str, **info: Any) -> None:
        self._write(PhaseEvent(t=time.monotonic(), phase=name, info=info))

    def log(self, level: str, text: str) -> None:
        """One line the runtime logged. Flushed, not fsynced: the kernel keeps what a killed
        process wrote, and an fsync per line would slow every load (llama.cpp logs ~440)."""
        self._fh.write(PhaseEvent(t=time.monotonic(), log=[level, text]).to_json() + "\n")
        self._fh.flush()

    def mark(self, name: str, t: float) -> None:
        """A cold-start timeline mark, kept even if the process dies later."""
        self._write(PhaseEvent(t=t, mark=name))

    def close(self) -> None:
        self._fh.close()


def _cap_address_space(cap_mb: int | None) -> None:
    if cap_mb:
        limit = int(cap_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _run_engine_repetition(
    adapter: Any, prompt: list[int], n_gen: int, banned: list[int], meter: Any = None
) -> tuple[Repetition, None]:
    """One generation by the runtime's own loop (EngineGeneration): the harness clock reads
    each id as the engine hands it over; the prefill is the time to the first id (it includes
    that id's sampling), each decode step the gap to the next. No logits: (rep, None)."""
    from rtmatrix.metrics.power import NULL_METER

    meter = meter or NULL_METER
    clock = time.perf_counter
    t_start = time.monotonic()
    seen: list[tuple[int, float, float]] = []  # (id, perf_counter, monotonic)

    def on_token(token: int) -> None:
        seen.append((token, clock(), time.monotonic()))

    with meter.phase("generate"):  # one call: prefill and decode cannot be metered apart
        t0 = clock()
        tokens = adapter.engine_generate(prompt, n_gen, banned, on_token)
    if not seen:
        msg = f"the engine streamed no ids (it returned {len(tokens)})"
        raise RuntimeError(msg)
    times = [t for _, t, _ in seen]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    rep = Repetition(
        pp_s=times[0] - t0,
        pp_tokens=len(prompt),
        ttft_s=times[0] - t0,
        decode_s=gaps,
        step_s=gaps,
        tokens=[int(t) for t in tokens],
        counters=adapter.counters(),
        nonfinite_steps=0,  # the engine shows no logits: parity on the ids judges the output
        first_token_monotonic=seen[0][2],
        t_start=t_start,
        t_end=time.monotonic(),
        energy=meter.take(),
    )
    return rep, None


def _run_repetition(
    adapter: Any, prompt: list[int], n_gen: int, banned: list[int], meter: Any = None
) -> tuple[Repetition, Any]:
    """One generation: prefill the prompt, then greedy-decode; every runtime call is timed.
    ``meter`` (counted repetitions) meters the prefill (to the first token id) and the decode.
    Returns the repetition and the first step's logits."""
    import numpy as np

    from rtmatrix.fixtures.model import greedy_pick
    from rtmatrix.metrics.power import NULL_METER

    meter = meter or NULL_METER

    clock = time.perf_counter
    t_start = time.monotonic()
    adapter.reset()
    with meter.phase("prefill"):
        t0 = clock()
        adapter.prefill(prompt)
        t_pp = clock()
        logits = adapter.last_logits()
        first_logits = logits
        nonfinite = 0 if np.isfinite(logits).all() else 1
        tokens = [greedy_pick(logits, banned)]
        t_first = clock()
        mono_first = time.monotonic()
    decode_s: list[float] = []
    step_s: list[float] = []
    with meter.phase("decode"):
        t_prev = clock()  # t_first, less the meter's read
        for _ in range(n_gen - 1):
            d0 = clock()
            adapter.decode(tokens[-1])
            decode_s.append(clock() - d0)
            logits = adapter.last_logits()
            if not np.isfinite(logits).all():
                nonfinite += 1
            tokens.append(greedy_pick(logits, banned))
            now = clock()
            step_s.append(now - t_prev)
            t_prev = now
    rep = Repetition(
        pp_s=t_pp - t0,
        pp_tokens=len(prompt),
        ttft_s=t_first - t0,
        decode_s=decode_s,
        step_s=step_s,
        tokens=[int(t) for t in tokens],
        counters=adapter.counters(),
        nonfinite_steps=nonfinite,
        first_token_monotonic=mono_first,
        t_start=t_start,
        t_end=time.monotonic(),
        energy=meter.take(),
    )
    return rep, first_logits


def _generate(
    adapter: Any,
    job: Job,
    job_dir: Path,
    result: WorkerResult,
    events: Events,
    mark: Any,
    prompt: list[int],
    banned: list[int],
) -> Any:
    """Warm-up and counted repetitions of the timed loop; returns the meter (or None)."""
    import numpy as np

    from rtmatrix.adapters.capabilities import EngineGeneration
    from rtmatrix.metrics import power
    from rtmatrix.turns import TurnGate

    p = job.params
    meter: power.PhaseMeter | None = None
    gate = TurnGate(job.turns)
    try:
        for i in range(p.warmup + p.repetitions):
            counted = i >= p.warmup
            if counted and meter is None:
                result.phase = "power"
                events.phase("power")
                meter = power.open_meter(job.power)
            result.phase = "generate"
            gate.wait()  # a compare --mode alternate turn, warm-up too (no-op otherwise)
            events.phase("generate", repetition=i, counted=counted)
            run = (
                _run_engine_repetition if isinstance(adapter, EngineGeneration) else _run_repetition
            )
            rep, first_logits = run(
                adapter, prompt, p.gen_tokens, banned, meter if counted else None
            )
            if i == 0:
                mark("first_token", rep.first_token_monotonic)
            if counted and not result.reps and first_logits is not None:
                np.save(job_dir / "first_logits.npy", first_logits)
            (result.reps if counted else result.warmup).append(rep)
            gate.done()
        gate.hold()  # the other side's last turn runs before this worker tears down
    finally:
        gate.close()
        if job.turns:
            result.turns = gate.evidence()
        if meter is not None:
            result.power = PowerRecord.from_dict(meter.info(), "the power meter")
            meter.close()
    return meter


def _self_check(
    adapter: Any, job: Job, result: WorkerResult, prompt: list[int], banned: list[int]
) -> None:
    """What the parent's self-checks need beyond the counted repetitions
    (:mod:`rtmatrix.metrics.selfcheck`), after them and outside the meter: the prompt-cache
    probe, and the runtime's logit gap where a repetition's ids left the parity pass's. A
    failure here is said in the probe; the timed figures stand."""
    from rtmatrix.adapters.capabilities import EngineGeneration, PromptCaching

    engine = isinstance(adapter, EngineGeneration)
    probe = SelfCheckProbe(loop="engine" if engine else "harness", banned=list(banned))
    result.self_check = probe
    try:
        if isinstance(adapter, PromptCaching):
            said = adapter.prompt_cache()
            probe.caches_prompts, probe.cache_setting = bool(said.caches), str(said.setting)
        _prompt_probe(adapter, job, result, probe, prompt, banned)
    except Exception as exc:  # the probe is evidence: its failure is said, the cell stands
        probe.probe_skipped = f"the probe failed: {type(exc).__name__}: {exc}"[:400]
    if not engine:
        probe.gaps = _logit_gaps(adapter, result.reps, prompt)


def _prompt_probe(
    adapter: Any,
    job: Job,
    result: WorkerResult,
    probe: SelfCheckProbe,
    prompt: list[int],
    banned: list[int],
) -> None:
    """Per pair, a fresh prompt of the timed prompt's length (other ids), then the timed
    prompt twice (the second is the repeat: right after itself, as the counted repetitions
    run), each timed as a counted repetition is (on the harness's loop only to the first id);
    a second round where the first looks like a cache (the parent judges both)."""
    from rtmatrix.metrics import selfcheck

    if len(prompt) < 2:
        probe.probe_skipped = ("a 1-token prompt: a cache has nothing to reuse (the last "
                               "prompt id is always computed)")  # fmt: skip
        return
    engine = probe.loop == "engine"
    run = _run_engine_repetition if engine else _run_repetition
    n_gen = job.params.gen_tokens if engine else 1
    probe.probe_gen_tokens = n_gen
    rounds = 1 if probe.caches_prompts else selfcheck.PROBE_ROUNDS
    for r in range(rounds):
        fresh: list[float] = []
        rewarm: list[float] = []
        repeat: list[float] = []
        for i in range(selfcheck.PROBE_PAIRS):
            other = selfcheck.fresh_prompt(prompt, adapter.vocab_size, r * 100 + i)
            fresh.append(run(adapter, other, n_gen, banned)[0].ttft_s)
            rewarm.append(run(adapter, prompt, n_gen, banned)[0].ttft_s)
            repeat.append(run(adapter, prompt, n_gen, banned)[0].ttft_s)
        probe.rounds.append(ProbeRound(fresh, repeat, rewarm))
        ratio = selfcheck.median_ratio(fresh, repeat)
        if ratio is None or ratio <= selfcheck.RATIO_FLOOR:
            return


def _logit_gaps(adapter: Any, reps: list[Repetition], prompt: list[int]) -> list[LogitGap]:
    """Where a counted repetition's ids left the parity pass's (the first counted one): the
    parity pass's ids replayed to that position and the runtime's own logits read there."""
    from rtmatrix.metrics.selfcheck import first_divergence

    out: list[LogitGap] = []
    parity = reps[0].tokens if reps else []
    rows: dict[int, Any] = {}
    for i, rep in enumerate(reps[1:], start=1):
        k = first_divergence(parity, rep.tokens)
        if k is None or k >= min(len(parity), len(rep.tokens)):
            continue
        a, b = parity[k], rep.tokens[k]
        try:
            if k not in rows:
                adapter.reset()
                adapter.prefill(prompt)
                for token in parity[:k]:
                    adapter.decode(token)
                rows[k] = adapter.last_logits()
            gap = float(rows[k][a] - rows[k][b])
        except Exception as exc:  # the replay is evidence: say why there is no gap
            why = f"the replay failed: {type(exc).__name__}: {exc}"[:300]
            out.append(LogitGap(i, k, a, b, None, why))
            continue
        out.append(LogitGap(i, k, a, b, gap))
    return out


def _quality(adapter: Any, job: Job, job_dir: Path, result: WorkerResult) -> None:
    """Teacher-forced pass over the quality text's ids through the adapter's own prefill /
    decode / last_logits: the logits predicting each next id go to ``quality_logits.npy``
    (the parent judges them against the f32 reference); where the runtime tokenizes, its ids
    for the text are checked against the harness's."""
    import numpy as np

    from rtmatrix.adapters.base import RuntimeUnavailable
    from rtmatrix.adapters.capabilities import Tokenizing, missing

    text_ids = list(job.quality_ids or [])
    ids = text_ids[: job.quality_positions + 1]
    info = QualityPass(positions=len(ids) - 1)
    if job.quality_text is not None:
        own: list[int] | None = None
        if isinstance(adapter, Tokenizing):
            try:
                own = adapter.tokenize_text(job.quality_text)
            except RuntimeUnavailable as exc:  # no tokenizer for this model: said, not fatal
                info.tokenizer = {"unavailable": str(exc)}
        if own is not None:
            pairs = enumerate(zip(own, text_ids, strict=False))
            shorter = None if len(own) == len(text_ids) else min(len(own), len(text_ids))
            first = next((i for i, (a, b) in pairs if a != b), shorter)
            info.tokenizer = {
                "agree": first is None,
                "runtime_tokens": len(own),
                "harness_tokens": len(text_ids),
                "first_mismatch": first,
                "runtime_ids_at_mismatch": own[first : first + 5] if first is not None else [],
                "harness_ids_at_mismatch": text_ids[first : first + 5] if first is not None else [],
            }
        elif info.tokenizer is None:
            info.tokenizer = {"unavailable": missing(adapter, Tokenizing, "tokenizer check")}
    t0 = time.perf_counter()
    adapter.reset()
    adapter.prefill(ids[:1])
    rows = [adapter.last_logits()]
    for token in ids[1:-1]:
        adapter.decode(token)
        rows.append(adapter.last_logits())
    info.wall_s = time.perf_counter() - t0
    np.save(job_dir / QUALITY_LOGITS, np.stack(rows).astype(np.float32))
    result.quality = info


def launch_evidence() -> dict[str, Any]:
    """How this worker process was placed: address-space randomization and CPU affinity (as
    the parent's ``RTMATRIX_WORKER_NO_ASLR`` / ``RTMATRIX_WORKER_CPUS`` set them, else the
    defaults)."""
    import ctypes
    import os

    out: dict[str, Any] = {}
    try:
        persona = int(ctypes.CDLL(None).personality(0xFFFFFFFF))
        out["aslr"] = "off (ADDR_NO_RANDOMIZE)" if persona & 0x0040000 else "on"
    except (OSError, AttributeError) as exc:
        out["aslr"] = f"unknown: {exc}"
    try:
        out["cpus"] = sorted(os.sched_getaffinity(0))
    except (OSError, AttributeError) as exc:
        out["cpus"] = f"unknown: {exc}"
    return out


def _error_kind(adapter: Any, result: WorkerResult) -> str:
    """Classify the failure with the runtime's own patterns first, then the generic ones."""
    from rtmatrix.errorkinds import classify_error

    patterns = adapter.error_patterns if adapter is not None else ()
    log_tail = str((result.evidence or {}).get("log_tail", ""))
    return str(classify_error(result.error_type, result.message or "", log_tail, patterns))


def _reference_quality(cls: Any, job: Job) -> dict[str, Any]:
    """The runtime's own quality figures (ReferenceQuality), or ``{"unavailable": why}``: a
    quality tool that cannot run leaves the benchmark figures standing."""
    from rtmatrix.adapters.base import RuntimeUnavailable
    from rtmatrix.adapters.capabilities import ReferenceQuality, missing

    if not isinstance(cls, ReferenceQuality):
        return {"unavailable": missing(cls, ReferenceQuality, "reference quality tool")}
    try:
        return cls.reference_quality(
            Path(job.model_path), Path(str(job.anchor_base_path)), str(job.quality_text),
            job.anchor_n_ctx, job.params, job.options,
        )  # fmt: skip
    except KeyboardInterrupt:
        raise
    except RuntimeUnavailable as exc:
        return {"unavailable": str(exc)}
    except Exception as exc:  # the tool's failure is this figure's outcome
        return {"unavailable": f"{type(exc).__name__}: {exc}"}


def run_reference(job: Job, events: Events) -> tuple[int, WorkerResult]:
    """The runtime's own benchmark tool on the cell's file (no model loaded in this process)."""
    from rtmatrix.adapters.base import RuntimeUnavailable, load_adapter_class
    from rtmatrix.adapters.capabilities import ReferenceBenchmark

    result = WorkerResult(phase="reference")
    events.phase("reference")
    try:
        cls = load_adapter_class(job.adapter)
        if not isinstance(cls, ReferenceBenchmark):
            msg = f"{job.adapter} offers no reference benchmark tool (ReferenceBenchmark)"
            raise RuntimeUnavailable(msg)
        figures = cls.reference_benchmark(Path(job.model_path), job.params, job.options)
        result.reference = ReferenceFigures.from_dict(figures, f"{job.adapter}.reference_benchmark")
        if job.anchor_base_path and job.quality_text is not None:
            result.reference.quality = _reference_quality(cls, job)
        result.status = "ok"
        return EXIT_OK, result
    except KeyboardInterrupt:
        raise
    except RuntimeUnavailable as exc:
        result.status, result.message = "unavailable", str(exc)
        return EXIT_UNAVAILABLE, result
    except Exception as exc:  # the tool's failure is the reference's outcome, not the cell's
        result.status, result.error_type = "error", type(exc).__name__
        result.message = str(exc) or type(exc).__name__
        result.traceback_tail = traceback.format_exc()[-4000:]
        return EXIT_ERROR, result


def run_job(job: Job, job_dir: Path, events: Events) -> tuple[int, WorkerResult]:
    from rtmatrix.adapters.base import LoadParams, RuntimeUnavailable, load_adapter_class
    from rtmatrix.adapters.capabilities import collect_evidence
    from rtmatrix.fixtures.model import make_prompt

    result = WorkerResult()

    def mark(name: str, t: float) -> None:
        result.timeline[name] = t
        events.mark(name, t)

    def enter(name: str) -> None:
        result.phase = name
        events.phase(name)

    mark("worker_start", T_ENTRY)
    adapter = None
    try:
        enter("adapter")
        adapter = load_adapter_class(job.adapter)()
        adapter.log_sink = events.log
        adapter.configure(job.options)
        enter("import")
        result.runtime_version = adapter.import_runtime()
        mark("imported", time.monotonic())
        if job.scenario != "generate":
            from rtmatrix.scenarios import require_capability

            require_capability(job.scenario, adapter)  # before the load it would waste
        enter("load")
        p = job.params
        params = LoadParams(n_ctx=p.n_ctx, threads=p.threads, options=job.options)
        adapter.load(Path(job.model_path), params)
        mark("loaded", time.monotonic())
        ids = adapter.special_ids
        result.vocab_size = adapter.vocab_size
        result.special_ids = dict(ids)
        bos = ids.get("bos", -1)
        prompt = list(job.prompt_ids or []) or make_prompt(
            p.prompt_tokens, adapter.vocab_size, bos if bos >= 0 else 1
        )
        banned = [ids["eos"]] if ids.get("eos", -1) >= 0 else []
        if job.scenario != "generate":
            from rtmatrix.scenarios import run_scenario

            enter(f"scenario:{job.scenario}")
            result.scenario = run_scenario(job.scenario, adapter, job, prompt, banned, mark)
        else:
            _generate(adapter, job, job_dir, result, events, mark, prompt, banned)
            enter("self-check")
            _self_check(adapter, job, result, prompt, banned)
            if job.quality_ids:
                enter("quality")
                try:
                    _quality(adapter, job, job_dir, result)
                except Exception as exc:  # the timed figures stand; the pass says why it failed
                    why = f"{type(exc).__name__}: {exc}"
                    result.quality = QualityPass(
                        error=why, traceback_tail=traceback.format_exc()[-2000:]
                    )
        enter("evidence")
        result.evidence = collect_evidence(adapter) | {"launch": launch_evidence()}
        _stack(adapter, job, result)
        enter("close")
        adapter.close()
        result.status = "ok"
        return EXIT_OK, result
    except KeyboardInterrupt:
        raise
    except RuntimeUnavailable as exc:
        result.status, result.message = "unavailable", str(exc)
        return EXIT_UNAVAILABLE, result
    except Exception as exc:  # every failure becomes a recorded outcome
        result.status = "error"
        result.error_type = type(exc).__name__
        result.message = str(exc) or type(exc).__name__
        result.traceback_tail = traceback.format_exc()[-4000:]
        if adapter is not None:
            try:
                result.evidence = collect_evidence(adapter)
            except Exception as ev_exc:  # evidence is best effort after a failure
                result.evidence = {"error": f"evidence unavailable: {ev_exc}"}
        result.error_kind = _error_kind(adapter, result)
        return EXIT_ERROR, result


def _stack(adapter: Any, job: Job, result: WorkerResult) -> None:
    """The runtime home's report of what ran (StackReporting), or why there is none."""
    from rtmatrix.adapters.capabilities import StackReporting, missing

    if not isinstance(adapter, StackReporting):
        result.stack_unavailable = missing(adapter, StackReporting, "the stack report")
        return
    try:
        result.stack = adapter.stack_report(job.dtype, result.evidence or {})
    except Exception as exc:  # the report is evidence: its failure is said, the cell stands
        result.stack_unavailable = f"stack_report failed: {type(exc).__name__}: {exc}"[:400]


def describe(target: str) -> dict[str, Any]:
    """The adapter's declared metadata, without importing its runtime."""
    from rtmatrix.adapters.base import Adapter, load_adapter_class
    from rtmatrix.adapters.capabilities import (
        ReferenceBenchmark,
        ReferenceQuality,
        reference_budget,
    )

    cls = load_adapter_class(target)
    keys = ("name", "distribution", "extra", "container", "converter")
    info = {k: getattr(cls, k, None) for k in keys}
    if cls.prepare.__func__ is not Adapter.prepare.__func__:  # type: ignore[attr-defined]
        info["prepares"] = True
    if isinstance(cls, ReferenceBenchmark):
        info["reference_tool"] = True
        info["reference_budget"] = reference_budget(cls).to_dict()
    if isinstance(cls, ReferenceQuality):
        info["reference_quality"] = True
    if cls.crash_control is not None:
        info["crash_control"] = cls.crash_control.to_dict()
    return info


def prepare(target: str) -> dict[str, Any]:
    """The adapter's one-time preparation (e.g. building its benchmark tool), progress on
    stderr."""
    from rtmatrix.adapters.base import load_adapter_class

    def log(line: str) -> None:
        print(f"rtmatrix: {line}", file=sys.stderr, flush=True)

    return load_adapter_class(target).prepare(log)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] in ("--describe", "--prepare"):
        what = describe if args[0] == "--describe" else prepare
        try:
            print(json.dumps(what(args[1])))
        except Exception as exc:
            print(json.dumps({"error": str(exc) or type(exc).__name__}))
            return EXIT_ERROR
        return EXIT_OK
    if len(args) != 1:
        usage = "usage: python -m rtmatrix.worker JOB.json | --describe|--prepare module:Class"
        print(usage, file=sys.stderr)
        return EXIT_BAD_JOB
    job_path = Path(args[0])
    try:
        job = Job.read(job_path)
    except ProtocolError as exc:
        print(f"rtmatrix.worker: bad job: {exc}", file=sys.stderr)
        return EXIT_BAD_JOB
    if job.cgroup_procs:
        from rtmatrix.memcap import join

        join(job.cgroup_procs)  # before anything big is allocated
    _cap_address_space(job.address_space_cap_mb)
    events = Events(job_path.parent / "events.jsonl")
    try:
        if job.task == "reference":
            code, result = run_reference(job, events)
        else:
            code, result = run_job(job, job_path.parent, events)
    finally:
        events.close()
    result.write(job_path.parent / "result.json")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
