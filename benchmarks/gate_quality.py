"""Measure the regression gate's quality on this machine (a script, not a timed test).

    .venv/bin/python benchmarks/gate_quality.py                 # ~3-5 min on 2 cores
    .venv/bin/python benchmarks/gate_quality.py --trials 40 --reps 10

It runs a small llama.cpp matrix (the ``tiny`` fixture, 1 thread) as a sequence B S B S ...: B is
the base configuration, S the same with an injected slowdown. By default S is the same runtime
with every decode made 15 % slower (``gate_quality_slow.py``: a busy wait proportional to the
decode's own time, so the effect size is known whatever the machine's load); with
``--slow-param NAME --slow-value V`` S changes a matrix parameter instead (e.g. ``threads`` 2 -> 1,
``prompt_tokens`` 16 -> 128). Then:

(a) **A/A false alarms**: consecutive B runs are paired (B0, B1), (B2, B3), ... and gated with
    the default checks; every pair that does not exit 0 is a false alarm.
(b) **detection rate**: each (B_i, S_i) is gated (with ``--slow-param``, S's cells are re-keyed
    to B's key and parameters, as if the runtime itself had become slower, so they pair). A
    trial is detected when the gate exits 1 with ``tg_tps`` flagged ``-``.

The order alternates (B first in even trials, S first in odd ones) so that slow drift of the
machine's load does not line up with the injected change. Figures go to stdout; ``--keep DIR``
keeps the result files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from rtmatrix.matrix import load_matrix
from rtmatrix.results import load_run
from rtmatrix.results.diff import Mark, diff_runs, parse_checks
from rtmatrix.results.gate import EXIT_PASS, EXIT_REGRESSION, evaluate
from rtmatrix.results.records import RunRecord
from rtmatrix.runner import run_matrix

MATRIX = """\
description = "gate quality: {label}"
[run]
repetitions = {reps}
warmup = 1
timeout_s = 120
[params]
threads = {threads}
n_ctx = 256
prompt_tokens = {prompt}
gen_tokens = {gen}
[[runtimes]]
name = "llama_cpp"
{adapter}
[[fixtures]]
model = "{model}"
dtypes = [{dtypes}]
"""
Pair = tuple[dict[str, Any], dict[str, Any]]


def _write_matrix(
    folder: Path, label: str, args: argparse.Namespace, adapter: str = "", **params: int
) -> Path:
    values = {"threads": args.threads, "prompt": args.prompt_tokens, "gen": args.gen_tokens}
    dtypes = ", ".join(f'"{d}"' for d in args.dtypes)
    text = MATRIX.format(
        label=label,
        reps=args.reps,
        model=args.model,
        dtypes=dtypes,
        adapter=f'adapter = "{adapter}"' if adapter else "",
        **(values | params),
    )
    path = folder / f"{label}.toml"
    path.write_text(text, "utf-8")
    return path


def _run(matrix: Path, results: Path) -> dict[str, Any]:
    path = run_matrix(load_matrix(matrix), results, progress=lambda _line: None)
    return dict(load_run(path))


def _rekey(slow: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """S's cells under B's keys and parameters: the same cells, only slower."""
    by_label = {(c["fixture"]["name"], c["fixture"]["dtype"]): c for c in base["cells"]}
    for cell in slow["cells"]:
        twin = by_label[(cell["fixture"]["name"], cell["fixture"]["dtype"])]
        cell["key"], cell["params"] = twin["key"], dict(twin["params"])
    return slow


def _tg_ratio(base: dict[str, Any], cand: dict[str, Any]) -> list[float]:
    out = []
    for b, c in zip(base["cells"], cand["cells"], strict=True):
        bv, cv = b["metrics"]["tg_tps"].get("value"), c["metrics"]["tg_tps"].get("value")
        if bv and cv:
            out.append(cv / bv)
    return out


def _gate(base: dict[str, Any], cand: dict[str, Any], fail: list[str]) -> tuple[int, list[str]]:
    diff = diff_runs(cast(RunRecord, base), cast(RunRecord, cand), parse_checks(fail))
    result = evaluate(diff)
    flagged = [
        f"{c.key.split('|')[1]}:{m.name}{m.mark}"
        for c in diff.cells
        for m in c.metrics
        if m.gate and m.mark in (Mark.WORSE, Mark.BETTER)
    ]
    return result.code, flagged


def _sequence(args: argparse.Namespace, folder: Path, loads: list[float]) -> list[Pair]:
    base_m = _write_matrix(folder, "base", args)
    if args.slow_param:
        slow_m = _write_matrix(folder, "slow", args, **{args.slow_param: args.slow_value})
    else:  # the same runtime, made slower: see gate_quality_slow.py
        here = str(Path(__file__).resolve().parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (here, os.environ.get("PYTHONPATH")) if p
        )
        os.environ["RTMATRIX_SLOWDOWN"] = str(args.slowdown)
        slow_m = _write_matrix(folder, "slow", args, "gate_quality_slow:SlowLlamaCppAdapter")
    results = Path(args.keep) if args.keep else folder / "results"
    pairs: list[Pair] = []
    for i in range(args.trials):
        t0 = time.monotonic()
        if i % 2 == 0:
            b, s = _run(base_m, results), _run(slow_m, results)
        else:
            s, b = _run(slow_m, results), _run(base_m, results)
        pairs.append((b, _rekey(s, b)))
        loads.append(os.getloadavg()[0])
        print(
            f"trial {i + 1}/{args.trials} ran in {time.monotonic() - t0:.1f} s, "
            f"load average {loads[-1]:.2f}",
            file=sys.stderr,
        )
    return pairs


def _report(pairs: list[Pair], fail: list[str]) -> None:
    bases = [p[0] for p in pairs]
    aa = [(bases[i], bases[i + 1]) for i in range(0, len(bases) - 1, 2)]
    alarms = 0
    print(f"(a) A/A: {len(aa)} independent pairs of the same configuration")
    for i, (x, y) in enumerate(aa):
        code, flagged = _gate(x, y, fail)
        alarms += code != EXIT_PASS
        ratio = ", ".join(f"{r:.3f}" for r in _tg_ratio(x, y))
        print(f"  pair {i}: exit {code}  TG ratio {ratio}  flagged {flagged or '-'}")
    print(f"    false alarms: {alarms}/{len(aa)}")
    detected, ratios = 0, []
    print(f"(b) injected slowdown: {len(pairs)} trials")
    for i, (b, s) in enumerate(pairs):
        code, flagged = _gate(b, s, fail)
        hit = code == EXIT_REGRESSION and any(f.endswith("tg_tps-") for f in flagged)
        detected += hit
        ratios += _tg_ratio(b, s)
        ratio = ", ".join(f"{r:.3f}" for r in _tg_ratio(b, s))
        print(f"  trial {i}: exit {code}  TG ratio {ratio}  flagged {flagged or '-'}")
    effect = statistics.median(ratios) - 1 if ratios else float("nan")
    print(f"    detected: {detected}/{len(pairs)} ({100 * detected / max(1, len(pairs)):.0f} %)")
    print(f"    median TG change of the injected slowdown: {effect * 100:+.1f} %")
    print(f"SUMMARY A/A false alarms {alarms}/{len(aa)}; detection {detected}/{len(pairs)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=20, help="B/S pairs (A/A pairs: half)")
    p.add_argument("--reps", type=int, default=8, help="repetitions per cell")
    p.add_argument("--model", default="tiny")
    p.add_argument("--dtypes", nargs="+", default=["f32"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--gen-tokens", type=int, default=24)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument(
        "--slowdown",
        type=float,
        default=0.15,
        help="S: the same runtime with decode made this fraction slower (default: %(default)s)",
    )
    p.add_argument("--slow-param", help="S: change this matrix parameter instead, e.g. threads")
    p.add_argument("--slow-value", type=int, default=1, help="the value of --slow-param in S")
    p.add_argument("--fail", action="append", default=[], help="gate checks, e.g. tg_tps:5%%")
    p.add_argument("--keep", metavar="DIR", help="keep the result files here")
    args = p.parse_args(argv)
    if args.trials < 2:
        p.error("--trials must be at least 2 (A/A pairs are made of consecutive base runs)")
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rtmatrix-gate-quality-") as tmp:
        pairs = _sequence(args, Path(tmp), loads)
    _report(pairs, args.fail)
    print(
        f"machine: {os.cpu_count()} logical cores; 1-min load average during the trials "
        f"{min(loads):.2f}..{max(loads):.2f} (median {statistics.median(loads):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
