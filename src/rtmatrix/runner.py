"""The parent side: spawn one worker per cell, cap and watch it, classify how it ended, assemble
the metrics and store each finished cell before the next starts. Never imports an adapter."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from rtmatrix import memcap
from rtmatrix.fixtures import (
    FixtureError,
    PreparedFixture,
    prepare_fixture,
    reference_for,
    unsupported,
)
from rtmatrix.fixtures.spec import ExporterUnavailable
from rtmatrix.matrix import Cell, Matrix
from rtmatrix.metrics import cell as cell_metrics
from rtmatrix.metrics import host, package, parity
from rtmatrix.outcome import Metric, Status, verdict
from rtmatrix.results import load_run, save_run

TAIL_CHARS = 4000
_OOM_HINTS = (
    "bad_alloc",
    "out of memory",
    "cannot allocate memory",
    "failed to allocate",
    "unable to allocate",
    "memoryerror",
    "failed to mmap",
    "mmap failed",
)

Progress = Callable[[str], None]


def _stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Launch:
    """How the worker process ended, as the parent saw it."""

    returncode: int
    signal: str | None
    timed_out: bool
    wall_s: float
    spawned: float
    peak_tree_rss: int | None
    maxrss: int | None
    stdout_tail: str
    stderr_tail: str
    maxrss_method: str = "ru_maxrss of the reaped worker (wait4)"


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    with contextlib.suppress(psutil.Error):
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
    return total


def _vm_hwm(pid: int) -> int:
    """The kernel's peak-RSS mark of a live process (VmHWM), 0 if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def os_peak(ru_maxrss: int | None, parent_peak: int, hwm: int) -> tuple[int | None, str]:
    """The worker's peak RSS as the OS accounts it.

    Linux carries the parent's high-water mark across fork + exec, so a child's ``ru_maxrss``
    that does not exceed the parent's own peak at spawn time may be the parent's figure, not
    the worker's; then the worker's own VmHWM (last sample before it exited) is used instead.
    """
    if ru_maxrss and ru_maxrss > parent_peak:
        return ru_maxrss, "ru_maxrss of the reaped worker (wait4)"
    if hwm:
        return hwm, (
            "VmHWM of the worker, last sample before exit (its ru_maxrss "
            f"{ru_maxrss} did not exceed the parent's own peak {parent_peak}, which Linux "
            "carries across fork+exec)"
        )
    return None, "no usable OS peak: ru_maxrss inherited from the parent, no VmHWM sample"


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - TAIL_CHARS))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GGML_NO_BACKTRACE"] = "1"  # no gdb attach, no core file on abort
    env["PYTHONFAULTHANDLER"] = "1"  # a Python traceback on SIGSEGV/SIGABRT in stderr
    return env


def launch(
    args: list[str], job_dir: Path, timeout_s: float, interval_s: float, cwd: Path | None = None
) -> Launch:
    """Run ``python -m rtmatrix.worker ARGS`` in a new process group; sample the tree's RSS;
    kill the whole group at the deadline (or when the parent is interrupted); reap with wait4
    for the OS's own peak RSS."""
    out_path, err_path = job_dir / "stdout.txt", job_dir / "stderr.txt"
    parent_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with out_path.open("wb") as out, err_path.open("wb") as err:
        spawned = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtmatrix.worker", *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=worker_env(),
            start_new_session=True,
        )
    peak, hwm, timed_out, status, usage = 0, 0, False, 0, None
    deadline = spawned + timeout_s
    try:
        ps = psutil.Process(proc.pid)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, _tree_rss(ps))
            hwm = max(hwm, _vm_hwm(proc.pid))
            if time.monotonic() > deadline:
                timed_out = True
                _kill_group(proc.pid)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(interval_s)
    except BaseException:  # Ctrl-C or anything else: never leave a worker group behind
        _kill_group(proc.pid)
        with contextlib.suppress(ChildProcessError):
            os.wait4(proc.pid, 0)
        proc.returncode = -9
        raise
    wall = time.monotonic() - spawned
    _kill_group(proc.pid)  # leftover grandchildren
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    sig = signal.Signals(-code).name if code < 0 else None
    ru = usage.ru_maxrss * 1024 if usage and usage.ru_maxrss else None
    maxrss, method = os_peak(ru, parent_peak, hwm)
    return Launch(
        code,
        sig,
        timed_out,
        wall,
        spawned,
        peak or None,
        maxrss,
        _tail(out_path),
        _tail(err_path),
        method,
    )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def read_events(job_dir: Path) -> tuple[str | None, dict[str, float]]:
    """The last phase the worker entered and the timeline marks it wrote, even if it died."""
    phase: str | None = None
    marks: dict[str, float] = {}
    try:
        lines = (job_dir / "events.jsonl").read_text("utf-8").splitlines()
    except OSError:
        return None, {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by the crash
        if "phase" in event:
            phase = str(event["phase"])
        elif "mark" in event:
            marks[str(event["mark"])] = float(event["t"])
    return phase, marks


def classify(
    lau: Launch,
    result: dict[str, Any] | None,
    phase: str | None,
    cap_mb: int,
    extra: str | None,
    cgroup_oom: bool = False,
) -> dict[str, Any]:
    """The outcome as the process evidence shows it: hang > the worker's own report > signal >
    bare exit code. ``refine`` later turns ok into wrong-output or fallback."""
    if lau.timed_out:
        return {
            "status": Status.HANG,
            "phase": phase,
            "exit_code": lau.returncode,
            "signal": lau.signal,
            "message": f"no result within {lau.wall_s:.1f} s; process group killed "
            f"during phase '{phase}'",
        }
    if result is not None and result.get("status") in ("ok", "error", "unavailable"):
        status = Status(result["status"])
        msg = str(result.get("message") or ("completed" if status is Status.OK else status))
        out: dict[str, Any] = {
            "status": status,
            "phase": result.get("phase"),
            "exit_code": lau.returncode,
            "signal": None,
            "message": msg,
        }
        if status is Status.ERROR:
            out["error_type"] = result.get("error_type")
            blob = " ".join(
                [
                    msg,
                    str(result.get("error_type")),
                    str(result.get("evidence", {}).get("log_tail", "")),
                ]
            ).lower()
            if any(h in blob for h in _OOM_HINTS):
                out["error_kind"] = "out-of-memory"
        if status is Status.UNAVAILABLE and extra:
            out["fix"] = f"pip install 'rtmatrix[{extra}]'"
        return out
    stderr_last = lau.stderr_tail.strip().splitlines()[-1:] or [""]
    detail = f": {stderr_last[0][:300]}" if stderr_last[0] else ""
    if lau.signal:
        oom = lau.signal == "SIGKILL" and (cap_mb or cgroup_oom)
        why = " (the kernel OOM killer, memory cgroup limit)" if cgroup_oom else ""
        return {
            "status": Status.OOM_KILLED if oom else Status.CRASH,
            "phase": phase,
            "exit_code": lau.returncode,
            "signal": lau.signal,
            "message": f"worker killed by {lau.signal}{why} during phase '{phase}'{detail}",
        }
    what = "an unreadable result" if result is not None else "no result"
    return {
        "status": Status.CRASH,
        "phase": phase,
        "exit_code": lau.returncode,
        "signal": None,
        "message": f"worker exited with code {lau.returncode} and {what} during phase "
        f"'{phase}'{detail}",
    }


def refine(
    outcome: dict[str, Any], par: dict[str, Any], result: dict[str, Any] | None
) -> dict[str, Any]:
    """An ok run whose output is wrong, or that did not run where it was asked, is not ok."""
    if outcome["status"] != Status.OK:
        return outcome
    reps = (result or {}).get("reps") or []
    failed = [c for c in ((result or {}).get("scenario") or {}).get("checks", []) if not c["ok"]]
    if failed:
        detail = "; ".join(f"{c['name']}: {c.get('detail', '')}" for c in failed)
        return outcome | {
            "status": Status.WRONG_OUTPUT,
            "message": f"lifecycle check failed: {detail}",
        }
    nonfinite = sum(r.get("nonfinite_steps", 0) for r in reps)
    placement = ((result or {}).get("evidence") or {}).get("placement") or {}
    if nonfinite:
        return outcome | {
            "status": Status.WRONG_OUTPUT,
            "message": f"non-finite logits on {nonfinite} step(s)",
        }
    if par.get("status") == "measured" and not par.get("within_tolerance"):
        where = par.get("first_divergence")
        return outcome | {
            "status": Status.WRONG_OUTPUT,
            "message": f"parity broken: {par['tokens_agree']}/"
            f"{par['tokens_compared']} tokens agree (first divergence "
            f"at {where}), max|Δlogit| {par.get('max_abs_logit_err')}",
        }
    if placement.get("fallback"):
        return outcome | {
            "status": Status.FALLBACK,
            "message": "ran, but not where asked: requested "
            f"{placement.get('requested')}, used {placement.get('used')}"
            + (f" ({placement['detail']})" if placement.get("detail") else ""),
        }
    return outcome


@dataclass
class RunContext:
    matrix: Matrix
    record: dict[str, Any]
    describe: dict[str, dict[str, Any]]
    cwd: Path | None = None


def describe_adapter(target: str, cwd: Path | None = None) -> dict[str, Any]:
    """Ask a child for the adapter's metadata (the parent never imports adapters)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rtmatrix.worker", "--describe", target],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=worker_env(),
        check=False,
    )
    try:
        info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        info = {"error": f"describe failed (exit {proc.returncode}): {proc.stderr[-500:]}"}
    return info


def _metrics_for(
    ctx: RunContext,
    cell: Cell,
    lau: Launch | None,
    result: dict[str, Any] | None,
    timeline: dict[str, float],
) -> dict[str, dict[str, Any]]:
    dist = ctx.describe[cell.runtime].get("distribution")
    reps = (result or {}).get("reps", [])
    if dist:
        m = {"package_size_bytes": package.package_size(dist), "license": package.license_of(dist)}
    else:
        why = "the adapter declares no distribution"
        m = {
            "package_size_bytes": Metric.unavailable("bytes", why),
            "license": Metric.unavailable("spdx", why),
        }
    m |= cell_metrics.cold_start(timeline, lau.spawned if lau else float("nan"))
    m |= cell_metrics.memory(
        lau.peak_tree_rss if lau else None,
        cell.run["sample_interval_s"],
        lau.maxrss if lau else None,
        lau.maxrss_method if lau else "the worker never started",
    )
    m |= cell_metrics.throughput(reps)
    m |= cell_metrics.latency(reps)
    m |= cell_metrics.power(result)
    scenario = (result or {}).get("scenario")
    if scenario is not None:
        from rtmatrix.scenarios import scenario_metrics

        m |= scenario_metrics(cell.fixture.scenario, scenario)
    return {k: v.to_dict() for k, v in m.items()}


def _parity(
    cell: Cell, fx: PreparedFixture | None, result: dict[str, Any] | None, job_dir: Path
) -> dict[str, Any]:
    if fx is None or fx.model is None or fx.dtype is None:
        return parity.unavailable("user-supplied model file: no numpy reference for it")
    reps = (result or {}).get("reps") or []
    if not reps:
        return parity.unavailable("the cell produced no counted generation to compare")
    ref = reference_for(
        fx.model, fx.dtype, cell.params["prompt_tokens"], cell.params["gen_tokens"], fx.container
    )
    logits_path = job_dir / "first_logits.npy"
    logits = np.load(logits_path) if logits_path.exists() else None
    out = parity.compare(fx.dtype, ref.tokens, ref.first_logits, reps[0]["tokens"], logits)
    out["deterministic_across_reps"] = all(r["tokens"] == reps[0]["tokens"] for r in reps)
    return out


def _evidence(lau: Launch | None, result: dict[str, Any] | None) -> dict[str, Any]:
    ev: dict[str, Any] = dict((result or {}).get("evidence") or {})
    if lau:
        ev["stderr_tail"] = lau.stderr_tail[-TAIL_CHARS:]
        ev["stdout_tail"] = lau.stdout_tail[-TAIL_CHARS:]
    if result and result.get("traceback_tail"):
        ev["traceback_tail"] = result["traceback_tail"]
    return ev


def _read_result(job_dir: Path) -> dict[str, Any] | None:
    path = job_dir / "result.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {"status": "unreadable"}
    return data if isinstance(data, dict) else {"status": "unreadable"}


def run_cell(ctx: RunContext, cell: Cell) -> dict[str, Any]:
    info = ctx.describe[cell.runtime]
    fx_dict: dict[str, Any] = {
        "name": cell.fixture.name,
        "dtype": cell.fixture.dtype,
        "model": cell.fixture.model,
        "variant": cell.fixture.variant,
        "scenario": cell.fixture.scenario,
        "container": info.get("container"),
        "path": None,
        "sha256": None,
    }
    base: dict[str, Any] = {
        "key": cell.key,
        "runtime": cell.runtime,
        "adapter": cell.adapter,
        "fixture": fx_dict,
        "params": dict(cell.params),
        "expect": str(cell.expect),
    }
    if "error" in info:
        outcome = {"status": Status.ERROR, "phase": "adapter", "message": info["error"]}
        return base | _not_run(cell, ctx, outcome, None)
    try:
        fx = prepare_fixture(
            cell.fixture.name,
            cell.fixture.model,
            cell.fixture.dtype,
            cell.fixture.path,
            str(info["container"]),
            cell.fixture.variant,
        )
    except ExporterUnavailable as exc:
        outcome = {"status": Status.UNAVAILABLE, "phase": "fixture", "message": str(exc)}
        return base | _not_run(cell, ctx, outcome, None)
    except (FixtureError, ValueError, OSError) as exc:
        outcome = {"status": Status.ERROR, "phase": "fixture", "message": str(exc)}
        return base | _not_run(cell, ctx, outcome, None)
    base["fixture"] = fx.to_dict() | {"scenario": cell.fixture.scenario}
    cgroup = None
    if cell.run["memory_cgroup_mb"]:
        try:
            name = f"rtmatrix-{os.getpid()}-{len(ctx.record['cells'])}"
            cgroup = memcap.create(cell.run["memory_cgroup_mb"] * 2**20, name)
        except memcap.CgroupUnavailable as exc:
            outcome = {"status": Status.UNAVAILABLE, "phase": "memory-cgroup", "message": str(exc)}
            return base | _not_run(cell, ctx, outcome, fx)
    try:
        with tempfile.TemporaryDirectory(prefix="rtmatrix-cell-") as tmp:
            return base | _run_worker(ctx, cell, fx, Path(tmp), cgroup)
    finally:
        if cgroup:
            cgroup.remove()


def _not_run(
    cell: Cell, ctx: RunContext, outcome: dict[str, Any], fx: PreparedFixture | None
) -> dict[str, Any]:
    """The record of a cell that ended before a worker was started (no process evidence)."""
    return _finish(cell, ctx, None, None, outcome, fx, Path(), {})


def _run_worker(
    ctx: RunContext,
    cell: Cell,
    fx: PreparedFixture,
    job_dir: Path,
    cgroup: memcap.MemoryCgroup | None,
) -> dict[str, Any]:
    run = cell.run
    job = {
        "adapter": cell.adapter,
        "model_path": str(fx.path),
        "options": cell.options,
        "power": ctx.matrix.power,
        "params": {**cell.params, "repetitions": run["repetitions"], "warmup": run["warmup"]},
        "address_space_cap_mb": run["address_space_cap_mb"] or None,
        "cgroup_procs": str(cgroup.procs) if cgroup else None,
        "scenario": cell.fixture.scenario,
        "timeout_s": run["timeout_s"],
    }
    (job_dir / "job.json").write_text(json.dumps(job), "utf-8")
    kills_before = (cgroup.oom_kills() or 0) if cgroup else 0
    lau = launch(
        [str(job_dir / "job.json")], job_dir, run["timeout_s"], run["sample_interval_s"], ctx.cwd
    )
    result = _read_result(job_dir)
    phase, marks = read_events(job_dir)
    cg_oom = bool(cgroup and (cgroup.oom_kills() or 0) > kills_before)
    extra = ctx.describe[cell.runtime].get("extra")
    outcome = classify(lau, result, phase, run["address_space_cap_mb"], extra, cg_oom)
    ok_result = result if result and result.get("status") == "ok" else None
    timeline = (ok_result or {}).get("timeline") or marks
    rec = _finish(cell, ctx, lau, result, outcome, fx, job_dir, timeline)
    if cgroup:
        rec["evidence"]["memory_cgroup"] = {
            "version": cgroup.version,
            "path": str(cgroup.path),
            "limit_bytes": cgroup.limit_bytes,
            "oom_kills": cgroup.oom_kills(),
            "peak_bytes": cgroup.peak_bytes(),
        }
    return rec


def _finish(
    cell: Cell,
    ctx: RunContext,
    lau: Launch | None,
    result: dict[str, Any] | None,
    outcome: dict[str, Any],
    fx: PreparedFixture | None,
    job_dir: Path,
    timeline: dict[str, float],
) -> dict[str, Any]:
    if result and result.get("status") == "unreadable":
        result = None
    par = (
        _parity(cell, fx, result, job_dir)
        if outcome["status"] == Status.OK
        else parity.unavailable(f"cell outcome is {outcome['status']}")
    )
    outcome = refine(outcome, par, result)
    status = Status(outcome["status"])
    outcome = {k: (str(v) if isinstance(v, Status) else v) for k, v in outcome.items()}
    if result and result.get("runtime_version"):
        outcome["runtime_version"] = result["runtime_version"]
    return {
        "outcome": outcome,
        "verdict": str(verdict(cell.expect, status, cell.verdicts)),
        "metrics": _metrics_for(ctx, cell, lau, result, timeline),
        "parity": par,
        "evidence": _evidence(lau, result),
        "wall_s": lau.wall_s if lau else 0.0,
    }


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
        if "error" in info:
            entry["error"] = info["error"]
        runtimes[rt.name] = entry
    return {
        "schema_version": 1,
        "run_id": now.strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex(),
        "created_utc": now.isoformat(),
        "finished_utc": None,
        "status": "running",
        "matrix": {
            "path": str(matrix.path),
            "sha256": _sha256(matrix.path),
            "n_cells": 0,
            "description": matrix.description,
            "run": matrix.run,
            "power": matrix.power,
            "gate": matrix.raw.get("gate", {}),
        },
        "machine": host.machine_info(),
        "project": host.project_info(),
        "runtimes": runtimes,
        "skipped": [],
        "cells": [],
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes() if path.is_file() else b"").hexdigest()


def _progress_line(i: int, n: int, cell: Cell, rec: dict[str, Any]) -> str:
    out = rec["outcome"]
    m = rec["metrics"]
    figs = ""
    if out["status"] == "ok":
        pp, tg = m["pp_tps"]["value"], m["tg_tps"]["value"]
        figs = (f"  PP {pp:.0f} tok/s" if pp else "") + (f"  TG {tg:.0f} tok/s" if tg else "")
        par = rec["parity"]
        if par["status"] == "measured":
            figs += f"  parity {par['tokens_agree']}/{par['tokens_compared']}"
    else:
        figs = f"  {out['message'][:120]}"
    tag = cell.key.rsplit("|", 1)[-1]
    head = (
        f"[{i}/{n}] {cell.runtime} x {cell.fixture.label} {tag}: {out['status']} {rec['verdict']}"
    )
    return f"{head} ({rec['wall_s']:.1f} s){figs}"


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
            why = unsupported(str(container), cell.fixture.dtype, cell.fixture.variant)
        if cell.fixture.variant in skip.get(cell.runtime, ()):
            why = f"the {cell.runtime} row declares variant {cell.fixture.variant!r} not applicable"
        if why:
            skipped.append({"key": cell.key, "reason": why})
        else:
            cells.append(cell)
    return cells, skipped


def run_matrix(
    matrix: Matrix,
    results_dir: Path,
    progress: Progress = _stderr_progress,
    cwd: Path | None = None,
    only: Callable[[Cell], bool] | None = None,
    resume: Path | None = None,
) -> Path:
    """Run every cell, saving the record after each one; returns the result file's path.
    With ``resume``, continue that run: only the cells it does not hold yet are run."""
    describe = {rt.name: describe_adapter(rt.adapter, cwd) for rt in matrix.runtimes}
    cells, skipped = plan_cells(matrix, describe, only)
    if resume is not None:
        record = load_run(resume)
        path = resume
        if record["matrix"]["sha256"] != _sha256(matrix.path):
            progress(f"rtmatrix: note: {matrix.path} changed since {path} was started")
        done = {c["key"] for c in record["cells"]}
        todo = [c for c in cells if c.key not in done]
        progress(f"rtmatrix: resuming {path}: {len(done)} cell(s) kept, {len(todo)} to run")
        record["status"] = "running"
    else:
        record = new_record(matrix, describe)
        path = results_dir / f"{record['run_id']}.json"
        todo = cells
        progress(f"rtmatrix: {len(cells)} cell(s) from {matrix.path} -> {path}")
    record["skipped"] = skipped
    record["matrix"]["n_cells"] = len(cells)
    for s in skipped:
        progress(f"rtmatrix: skipped {s['key']}: {s['reason']}")
    save_run(record, path, skip_cells=len(record["cells"]))
    ctx = RunContext(matrix, record, describe, cwd)
    n0 = len(record["cells"])
    try:
        for i, cell in enumerate(todo, n0 + 1):
            progress(
                f"[{i}/{len(cells)}] {cell.runtime} x {cell.fixture.label} "
                f"{cell.key.rsplit('|', 1)[-1]} ..."
            )
            rec = run_cell(ctx, cell)
            record["cells"].append(rec)
            save_run(record, path, skip_cells=len(record["cells"]) - 1)
            progress(_progress_line(i, len(cells), cell, rec))
    except KeyboardInterrupt:
        record["status"] = "interrupted"
        record["finished_utc"] = datetime.now(UTC).isoformat()
        save_run(record, path, skip_cells=len(record["cells"]))
        progress(
            f"rtmatrix: interrupted; {len(record['cells'])} finished cell(s) kept in {path}"
            f"; finish with: rtmatrix run {matrix.path} --resume {path}"
        )
        raise
    record["status"] = "complete"
    record["finished_utc"] = datetime.now(UTC).isoformat()
    save_run(record, path, skip_cells=len(record["cells"]))
    return path
