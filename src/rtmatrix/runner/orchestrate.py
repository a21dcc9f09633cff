"""The orchestrating loop: plan the cells, then for each one prepare its fixture, run its worker
under supervision, classify and record it, and save the run before the next cell starts."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from rtmatrix import memcap
from rtmatrix.adapters.capabilities import ReferenceBudget
from rtmatrix.converters import ConverterRefused
from rtmatrix.fixtures import FixtureError, PreparedFixture, prepare_fixture, unsupported
from rtmatrix.fixtures.sources import SOURCE_PREFIX
from rtmatrix.fixtures.spec import ExporterUnavailable
from rtmatrix.locks import sole_writer
from rtmatrix.matrix import Cell, Matrix
from rtmatrix.metrics.contention import DEFAULT_THRESHOLD_CORES, ContentionReading
from rtmatrix.metrics.quality import QualityPlan, wants_pass
from rtmatrix.metrics.quality import plan as text_plan
from rtmatrix.names import M
from rtmatrix.outcome import Status
from rtmatrix.protocol import Job, JobParams, WorkerResult, read_log_lines
from rtmatrix.results import load_run, save_run
from rtmatrix.runner import process
from rtmatrix.runner.classify import CellOutcome, classify, converter_refused, not_run
from rtmatrix.runner.control import (
    control_for,
    diagnose,
    diagnose_numerics,
    log_at_crash,
    numerics_control_for,
    wants_control,
)
from rtmatrix.runner.pool import pool
from rtmatrix.runner.record import (
    Addendum,
    Finished,
    base_record,
    cell_record,
    complete,
    new_record,
    progress_line,
    reference_metrics,
    sha256_of,
)

Progress = Callable[[str], None]


def _stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class RunContext:
    matrix: Matrix
    record: dict[str, Any]
    describe: dict[str, dict[str, Any]]
    cwd: Path | None = None
    #: the interpreter that runs workers (another environment's, for comparisons)
    python: str | None = None
    #: run the runtime's own benchmark tool after each performance cell (a comparison does
    #: not: it judges the harness's figures, and a tool run per round would double its time)
    reference_runs: bool = True
    #: give a real model's cells their teacher-forced quality pass (a comparison does not: it
    #: judges performance, and the pass would add ~10-25 s to every round of such a cell)
    quality_runs: bool = True
    #: pin this context's workers to these CPUs (a duet comparison's side), else unpinned
    cpus: tuple[int, ...] | None = None
    #: the Unix socket this context's workers take turns on (an alternate comparison's side)
    turns: str | None = None


def make_job(
    ctx: RunContext,
    cell: Cell,
    fx: PreparedFixture,
    cgroup: Any,
    task: str = "cell",
    quality: QualityPlan | None = None,
    prompt_ids: list[int] | None = None,
) -> Job:
    run, p = cell.run, cell.params
    return Job(
        adapter=cell.adapter,
        model_path=str(fx.path),
        params=JobParams(
            n_ctx=int(p["n_ctx"]),
            threads=int(p["threads"]),
            prompt_tokens=int(p["prompt_tokens"]),
            gen_tokens=int(p["gen_tokens"]),
            repetitions=int(run["repetitions"]),
            warmup=int(run["warmup"]),
        ),
        scenario=cell.fixture.scenario,
        task=task,
        options=dict(cell.options),
        power=dict(ctx.matrix.power),
        address_space_cap_mb=run["address_space_cap_mb"] or None,
        cgroup_procs=str(cgroup.procs) if cgroup else None,
        timeout_s=float(run["timeout_s"]),
        quality_ids=quality.text_ids if quality else None,
        quality_text=quality.text if quality else None,
        quality_positions=quality.positions if quality else 0,
        prompt_ids=prompt_ids,
        dtype=fx.dtype,
        turns=ctx.turns if task == "cell" else None,
    )


def _prepare(
    cell: Cell, container: str, converter: str | None = None
) -> PreparedFixture | CellOutcome:
    try:
        return prepare_fixture(
            cell.fixture.name,
            cell.fixture.model,
            cell.fixture.dtype,
            cell.fixture.path,
            container,
            cell.fixture.variant,
            converter,
        )
    except ConverterRefused as exc:  # the converter's outcome, not the runtime's
        return converter_refused(exc)
    except ExporterUnavailable as exc:
        return not_run(Status.UNAVAILABLE, "fixture", str(exc))
    except (FixtureError, ValueError, OSError) as exc:  # a user's file: their input's problem
        users = cell.fixture.path is not None or str(cell.fixture.model or "").startswith(
            SOURCE_PREFIX
        )
        return not_run(Status.ERROR, "fixture", str(exc), "input" if users else None)


def _cgroup_evidence(cgroup: memcap.MemoryCgroup) -> dict[str, Any]:
    return {
        "version": cgroup.version,
        "path": str(cgroup.path),
        "limit_bytes": cgroup.limit_bytes,
        "oom_kills": cgroup.oom_kills(),
        "peak_bytes": cgroup.peak_bytes(),
    }


def _supervise(
    ctx: RunContext,
    cell: Cell,
    fx: PreparedFixture,
    job_dir: Path,
    cgroup: memcap.MemoryCgroup | None,
    text: QualityPlan | None = None,
) -> Finished:
    """Write the job, run the worker under supervision, classify how it ended. ``text``: a
    real model's text (its prompt, and its quality pass unless the context or the row skips
    it)."""
    run = cell.run
    quality = text if text and ctx.quality_runs and wants_pass(dict(cell.options)) else None
    prompt_ids = text.prompt_ids if text else None
    job = make_job(ctx, cell, fx, cgroup, quality=quality, prompt_ids=prompt_ids)
    job.write(job_dir / "job.json")
    kills_before = (cgroup.oom_kills() or 0) if cgroup else 0
    lau = process.launch(
        [str(job_dir / "job.json")],
        job_dir,
        run["timeout_s"],
        run["sample_interval_s"],
        ctx.cwd,
        python=ctx.python,
        cgroup=cgroup,
        counted_interval_s=run.get("counted_sample_interval_s"),
        cpus=ctx.cpus,
    )
    read = process.read_result(job_dir)
    phase, marks = process.last_phase(job_dir)
    cg_oom = bool(cgroup and (cgroup.oom_kills() or 0) > kills_before)
    extra = ctx.describe[cell.runtime].get("extra")
    outcome = classify(
        lau, read.result, phase, run["address_space_cap_mb"], extra, cg_oom, read.problem
    )
    ok = read.result if read.result and read.result.status == "ok" else None
    evidence = {"memory_cgroup": _cgroup_evidence(cgroup)} if cgroup else {}
    if read.result is None or read.result.evidence is None:  # died before reporting its log
        lines = read_log_lines(job_dir / "events.jsonl")
        if lines:
            pattern = (ctx.describe[cell.runtime].get("crash_control") or {}).get("log_pattern")
            evidence["runtime_log_at_crash"] = log_at_crash(lines, str(pattern or ""))
    return Finished(
        cell=cell,
        outcome=outcome,
        fixture=fx,
        launch=lau,
        result=read.result,
        job_dir=job_dir,
        timeline=(ok.timeline if ok else None) or marks,
        evidence=evidence,
        quality=quality,
        text=text,
    )


def _text_plan(cell: Cell) -> QualityPlan | None:
    """A real-model performance cell expected to run is prompted with, and teacher-forced
    through, the model's text (once per cell: its attempts and control run share it)."""
    if cell.fixture.scenario != "generate" or str(cell.expect) != "ok" or cell.fixture.variant:
        return None
    p = cell.params
    return text_plan(
        cell.fixture.model, int(p["n_ctx"]), dict(cell.options), int(p["prompt_tokens"]),
        cell.fixture.prompt,
    )  # fmt: skip


def run_cell(ctx: RunContext, cell: Cell) -> dict[str, Any]:
    """One cell, start to record: describe -> fixture -> cgroup -> worker -> record."""
    info = ctx.describe[cell.runtime]
    base = base_record(cell, info.get("container"))
    dist = info.get("distribution")
    if "error" in info:
        fin = Finished(cell, not_run(Status.ERROR, "adapter", info["error"]))
        return cell_record(fin, base, dist)
    fx = _prepare(cell, str(info["container"]), info.get("converter"))
    if isinstance(fx, CellOutcome):
        return cell_record(Finished(cell, fx), base, dist)
    try:
        text = _text_plan(cell)
    except (ValueError, OSError) as exc:  # a text or tokenizer that cannot be used
        outcome = not_run(Status.ERROR, "fixture", f"the real model's text: {exc}")
        return cell_record(Finished(cell, outcome, fx), base, dist)
    cgroup = None
    if cell.run["memory_cgroup_mb"]:
        try:
            # the run id too: a duet comparison runs two sides' cells at once in one parent
            run_tag = str(ctx.record.get("run_id", "")).rsplit("-", 1)[-1]
            name = f"rtmatrix-{os.getpid()}-{run_tag}-{len(ctx.record['cells'])}"
            cgroup = memcap.create(cell.run["memory_cgroup_mb"] * 2**20, name)
        except memcap.CgroupUnavailable as exc:
            outcome = not_run(Status.UNAVAILABLE, "memory-cgroup", str(exc))
            return cell_record(Finished(cell, outcome, fx), base, dist)
    try:
        return _attempts(ctx, cell, fx, cgroup, base, dist, text)
    finally:
        if cgroup:
            cgroup.remove()


def _attempts(
    ctx: RunContext,
    cell: Cell,
    fx: PreparedFixture,
    cgroup: memcap.MemoryCgroup | None,
    base: dict[str, Any],
    dist: str | None,
    text: QualityPlan | None = None,
) -> dict[str, Any]:
    """Run the worker; rerun a contended cell up to ``contended_retries`` times (the last
    attempt is recorded, with how many were made and how busy the host was on each)."""
    retries = int(cell.run.get("contended_retries", 0))
    busy: list[float | None] = []
    while True:
        with tempfile.TemporaryDirectory(prefix="rtmatrix-cell-") as tmp:
            rec = cell_record(_supervise(ctx, cell, fx, Path(tmp), cgroup, text), base, dist)
        busy.append(rec["metrics"]["host_busy_cores"]["value"])
        if not rec["contended"] or len(busy) > retries:
            break
    # what the steps below add is read from rec and merged into it once, at the end
    addenda: list[Addendum] = []
    if len(busy) > 1:
        addenda.append(Addendum(fields={"attempts": {"n": len(busy), "host_busy_cores": busy}}))
    control = control_for(cell, ctx.describe[cell.runtime])
    if control is not None and wants_control(cell, rec):
        with tempfile.TemporaryDirectory(prefix="rtmatrix-control-") as tmp:
            fin = _supervise(ctx, control.cell(cell), fx, Path(tmp), cgroup, text)
            addenda.append(diagnose(rec, control, cell_record(fin, base, dist)))
    numerics = numerics_control_for(cell, rec)
    if numerics is not None:  # computed below the requested precision, or parity failed
        with tempfile.TemporaryDirectory(prefix="rtmatrix-numerics-") as tmp:
            fin = _supervise(ctx, numerics.cell(cell), fx, Path(tmp), cgroup, text)
            addenda.append(diagnose_numerics(rec, numerics, cell_record(fin, base, dist)))
    if _wants_reference(ctx, cell, rec):
        ref = _reference(ctx, cell, fx, _anchor(ctx, cell, rec, text))
        addenda.append(reference_metrics(rec, *ref))
    return complete(rec, addenda)


def _anchor(
    ctx: RunContext, cell: Cell, rec: dict[str, Any], text: QualityPlan | None
) -> tuple[QualityPlan, Path, int] | str | None:
    """What the runtime's own quality tool needs (the text, the base file: the f32 export of
    the same checkpoint, and the chunk length), the reason it cannot run, or None where there
    is nothing to anchor (a seeded model, no quality pass, no such tool)."""
    window = rec["metrics"].get(M.KLD_MEAN, {}).get("anchor_window")  # a Metric's detail
    if text is None or window is None or not ctx.describe[cell.runtime].get("reference_quality"):
        return None
    if "unavailable" in window:
        return str(window["unavailable"])
    container = str(ctx.describe[cell.runtime]["container"])
    f32 = replace(cell, fixture=replace(cell.fixture, dtype="f32"))
    base = _prepare(f32, container, ctx.describe[cell.runtime].get("converter"))
    if isinstance(base, CellOutcome):
        return f"the f32 base file could not be prepared: {base.message}"
    return text, base.path, int(window["n_ctx"])


def _wants_reference(ctx: RunContext, cell: Cell, rec: dict[str, Any]) -> bool:
    """A performance cell of a row whose runtime has its own benchmark tool, that ran ok."""
    return bool(
        ctx.reference_runs
        and ctx.describe[cell.runtime].get("reference_tool")
        and cell.fixture.scenario == "generate"
        and rec["outcome"]["status"] == "ok"
        and cell.options.get("reference_tool", True)
    )


def _reference_timeout(ctx: RunContext, cell: Cell, *, quality: bool) -> float:
    """The reference process's budget: as many cell timeouts as the runtime's tools run (its
    :class:`ReferenceBudget`, from the adapter's description), at least two minutes."""
    budget = ReferenceBudget.from_dict(ctx.describe[cell.runtime].get("reference_budget"))
    return max(budget.seconds(float(cell.run["timeout_s"]), quality=quality), 120.0)


def _reference(
    ctx: RunContext,
    cell: Cell,
    fx: PreparedFixture,
    anchor: tuple[QualityPlan, Path, int] | str | None = None,
) -> tuple[WorkerResult, ContentionReading | None]:
    """The runtime's own benchmark tool on the cell's file (and its quality tool, given an
    ``anchor``), in a worker process of its own, and how busy the host was outside it."""
    with tempfile.TemporaryDirectory(prefix="rtmatrix-ref-") as tmp:
        job_dir = Path(tmp)
        job = make_job(ctx, cell, fx, None, task="reference")
        if isinstance(anchor, tuple):
            plan, base, n_ctx = anchor
            job = replace(job, quality_text=plan.text, anchor_base_path=str(base),
                          anchor_n_ctx=n_ctx)  # fmt: skip
        job.write(job_dir / "job.json")
        timeout = _reference_timeout(ctx, cell, quality=isinstance(anchor, tuple))
        lau = process.launch([str(job_dir / "job.json")], job_dir, timeout, 0.05, ctx.cwd,
                             python=ctx.python)  # fmt: skip
        read = process.read_result(job_dir)
    threshold = float(cell.run.get("contention_threshold_cores", DEFAULT_THRESHOLD_CORES))
    busy = lau.cpu.reading(lau.spawned, lau.spawned + lau.wall_s, threshold) if lau.cpu else None
    if read.result is not None:
        if isinstance(anchor, str) and read.result.reference is not None:
            read.result.reference.quality = {"unavailable": anchor}
        return read.result, busy
    why = classify(lau, None, "reference", 0, None, problem=read.problem).message
    return WorkerResult(status="error", phase="reference", message=f"reference tool: {why}"), busy


def plan_cells(
    matrix: Matrix, describe: dict[str, dict[str, Any]], only: Callable[[Cell], bool] | None = None
) -> tuple[list[Cell], list[dict[str, str]]]:
    """The cells to run, and the combinations a runtime's format cannot express (skipped)."""
    cells, skipped = [], []
    skip = {rt.name: rt.skip_variants for rt in matrix.runtimes}
    for cell in matrix.cells():
        if only is not None and not only(cell):
            continue
        container = describe[cell.runtime].get("container")
        why = None
        if container and cell.fixture.path is None:
            converter = describe[cell.runtime].get("converter")
            why = unsupported(str(container), cell.fixture.dtype, cell.fixture.variant,
                              cell.fixture.model, converter)  # fmt: skip
        if cell.fixture.variant in skip.get(cell.runtime, ()):
            why = f"the {cell.runtime} row declares variant {cell.fixture.variant!r} not applicable"
        if why:
            skipped.append({"key": cell.key, "reason": why})
        else:
            cells.append(cell)
    return cells, skipped


def _start(
    matrix: Matrix,
    results_dir: Path,
    describe: dict[str, dict[str, Any]],
    cells: list[Cell],
    resume: Path | None,
    progress: Progress,
) -> tuple[dict[str, Any], Path, list[Cell]]:
    """A new run record, or the resumed one; and the cells still to run."""
    if resume is None:
        record = new_record(matrix, describe)
        path = results_dir / f"{record['run_id']}.json"
        progress(f"rtmatrix: {len(cells)} cell(s) from {matrix.path} -> {path}")
        return record, path, cells
    record = cast(dict[str, Any], load_run(resume))  # the runner adds to it as a plain dict
    if record["matrix"]["sha256"] != sha256_of(matrix.path):
        progress(f"rtmatrix: note: {matrix.path} changed since {resume} was started")
    done = {c["key"] for c in record["cells"]}
    todo = [c for c in cells if c.key not in done]
    progress(f"rtmatrix: resuming {resume}: {len(done)} cell(s) kept, {len(todo)} to run")
    record["status"] = "running"
    return record, resume, todo


def _prepare_rows(
    matrix: Matrix,
    describe: dict[str, dict[str, Any]],
    record: dict[str, Any],
    todo: list[Cell],
    cwd: Path | None,
    progress: Progress,
) -> None:
    """Each row's one-time preparation (e.g. building its benchmark tool), in a child, before
    cells."""
    rows = {c.runtime for c in todo}
    for rt in matrix.runtimes:
        if rt.name in rows and describe[rt.name].get("prepares"):
            progress(f"rtmatrix: preparing {rt.name} ...")
            info = process.prepare_adapter(rt.adapter, cwd)
            record["runtimes"].setdefault(rt.name, {})["prepared"] = info
            progress(f"rtmatrix: prepared {rt.name}: {json.dumps(info)[:300]}")


def _end(record: dict[str, Any], path: Path, status: str) -> None:
    record["status"] = status
    record["finished_utc"] = datetime.now(UTC).isoformat()
    save_run(record, path, skip_cells=len(record["cells"]))


def run_matrix(
    matrix: Matrix,
    results_dir: Path,
    progress: Progress = _stderr_progress,
    cwd: Path | None = None,
    only: Callable[[Cell], bool] | None = None,
    resume: Path | None = None,
    processes: int = 1,
) -> Path:
    """Run every cell, saving the record after each one; returns the result file's path.
    With ``resume``, continue that run: only the cells it does not hold yet are run. With
    ``processes`` N > 1, the whole matrix runs N rounds (each cell in a worker process of its own
    per round) and each cell's records are pooled (:mod:`rtmatrix.runner.pool`)."""
    if processes < 1:
        msg = f"processes must be >= 1, got {processes}"
        raise ValueError(msg)
    if processes > 1 and resume is not None:
        msg = "--resume finishes a run of one process per cell; run --processes afresh"
        raise ValueError(msg)
    if resume is not None:  # refused before anything runs when another process writes it
        with sole_writer(resume):
            pass
    describe = {rt.name: process.describe_adapter(rt.adapter, cwd) for rt in matrix.runtimes}
    cells, skipped = plan_cells(matrix, describe, only)
    record, path, todo = _start(matrix, results_dir, describe, cells, resume, progress)
    with sole_writer(path):
        return _run_cells(matrix, record, path, todo, cells, skipped, describe, cwd, progress,
                          processes)  # fmt: skip


def _run_cells(
    matrix: Matrix,
    record: dict[str, Any],
    path: Path,
    todo: list[Cell],
    cells: list[Cell],
    skipped: list[dict[str, Any]],
    describe: dict[str, dict[str, Any]],
    cwd: Path | None,
    progress: Progress,
    processes: int,
) -> Path:
    """run_matrix's loop, holding the results file's one-writer lock."""
    _prepare_rows(matrix, describe, record, todo, cwd, progress)
    record["skipped"] = skipped
    record["matrix"]["n_cells"] = len(cells)
    for s in skipped:
        progress(f"rtmatrix: skipped {s['key']}: {s['reason']}")
    save_run(record, path, skip_cells=len(record["cells"]))
    ctx = RunContext(matrix, record, describe, cwd)
    n0 = len(record["cells"])
    per_key: dict[str, list[dict[str, Any]]] = {}
    slot: dict[str, int] = {}
    try:
        for rnd in range(processes):
            for i, cell in enumerate(todo, n0 + 1):
                label = f"{cell.runtime} x {cell.fixture.label} {cell.key.rsplit('|', 1)[-1]}"
                tag = f" (process {rnd + 1}/{processes})" if processes > 1 else ""
                progress(f"[{i}/{len(cells)}] {label}{tag} ...")
                rec = run_cell(ctx, cell)
                per_key.setdefault(cell.key, []).append(rec)
                shown = pool(per_key[cell.key]) if processes > 1 else rec
                if cell.key in slot:
                    record["cells"][slot[cell.key]] = shown
                else:
                    slot[cell.key] = len(record["cells"])
                    record["cells"].append(shown)
                save_run(record, path, skip_cells=slot[cell.key])
                progress(progress_line(i, len(cells), cell, rec) + tag)
    except KeyboardInterrupt:
        _end(record, path, "interrupted")
        progress(
            f"rtmatrix: interrupted; {len(record['cells'])} finished cell(s) kept in {path}"
            f"; finish with: rtmatrix run {matrix.path} --resume {path}"
        )
        raise
    _end(record, path, "complete")
    return path


# ------------------------------------------------------------------ hooks for other drivers
# rtmatrix.fleet runs the same planned cells on a cluster; these give it run_matrix's start and
# end without its loop (run_matrix itself is unchanged).


@dataclass
class OpenedRun:
    ctx: RunContext
    path: Path
    #: every planned cell, and those the record does not hold yet
    cells: list[Cell]
    todo: list[Cell]


def open_run(
    matrix: Matrix,
    results_dir: Path,
    progress: Progress = _stderr_progress,
    cwd: Path | None = None,
    only: Callable[[Cell], bool] | None = None,
    resume: Path | None = None,
) -> OpenedRun:
    """What run_matrix does before its loop: describe, plan, start or resume, save."""
    describe = {rt.name: process.describe_adapter(rt.adapter, cwd) for rt in matrix.runtimes}
    cells, skipped = plan_cells(matrix, describe, only)
    record, path, todo = _start(matrix, results_dir, describe, cells, resume, progress)
    record["skipped"] = skipped
    record["matrix"]["n_cells"] = len(cells)
    for s in skipped:
        progress(f"rtmatrix: skipped {s['key']}: {s['reason']}")
    save_run(record, path, skip_cells=len(record["cells"]))
    return OpenedRun(RunContext(matrix, record, describe, cwd), path, cells, todo)


def close_run(record: dict[str, Any], path: Path, status: str) -> None:
    """Mark the run ``complete`` or ``interrupted`` and save it (as run_matrix does)."""
    _end(record, path, status)
