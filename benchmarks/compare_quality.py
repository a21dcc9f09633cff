"""Measure the paired comparison's gate quality on this machine (a script, not a timed test).

    .venv/bin/python benchmarks/compare_quality.py --quick          # smoke run, a few minutes
    .venv/bin/python benchmarks/compare_quality.py                  # the figures: hours
    .venv/bin/python benchmarks/compare_quality.py --a venv1/bin/python --b venv2/bin/python

It runs ``rtmatrix compare`` (:func:`rtmatrix.runner.compare.run_comparison`) over and over on a
llama.cpp matrix (``--model``, default ``small``; ``--dtypes``; one cell per dtype) and reports:

(a) **A/A false alarms**: side A and side B are the same wheels (``--a``/``--b``: two venvs
    with the same wheels, or by default this interpreter twice); a cell comparison is a false
    alarm when any of its judged checks (the default four: PP, TG, peak RSS, package size) is a
    regression. Goal: at most 1 % over at least 300 cell comparisons (``--aa-cells``).
(b) **power**: side B is the same environment with llama.cpp's decode made slower by a busy
    wait (``gate_quality_slow.SlowLlamaCppAdapter``, ``options.slowdown``) at each ``--levels``
    fraction (default 3 %, 5 %, 10 %); a cell is detected when its ``tg_tps`` check is a
    regression. Goals: at least 95 % at 10 %, 80 % at 5 % (``--slow-cells`` per level). The
    measured median TG ratio of each level is printed too: the busy wait can slow a loaded
    machine's decode by more than its nominal fraction.
(c) **cost**: K (``--rounds``, default the comparison's own default, 24) and the wall time per
    compared cell (goal at most 3 minutes).

Conditions are interleaved (A/A, 3 %, 5 %, 10 %, A/A, ...) so that slow drift of the machine's
load falls on all of them alike.

``--pool R`` (the mode the 2-core figures come from: 300 real comparisons at K = 24 would take
~14 000 worker processes): each condition gets R paired rounds, run as interleaved chunks of
``--chunk`` rounds (A/A, 3 %, 5 %, 10 %, A/A, ...; each chunk one ``rtmatrix compare`` with its
own seeded AB/BA order), pooled per condition. Two estimates from the pool, both judged by the
comparison's own decision function (``paired.decide``, Holm over every check of the cells
judged together): **disjoint** — the pool cut into floor(R/K) blocks of K rounds, each a
comparison that shares no process with another (few, independent); **resampled** —
``--resamples`` draws of K of the R rounds without replacement (many, overlapping: they measure
the decision rule on this machine's real between-process spread, not hours of drift). The
script prints both; quote the disjoint one with its interval, the resampled one as the rule's
rate at that spread. Contended rounds are skipped by the comparison, as in use; the
share of skipped rounds is printed (``--contention-threshold`` changes the matrix's threshold).
``--json FILE`` keeps every cell's verdicts for a note.

``--ledger FILE`` (independent mode) appends one CSV row per check of every comparison as it
ends (time, condition, cell, metric, verdict, ratio, raw and Holm p-values, K, load, the two
pythons, the rtmatrix commit, the comparison's ``--mode``), so comparisons made in separate
sessions add up to the 300 the A/A goal needs; an interrupted run keeps what it finished.
``--summarize FILE`` reads a ledger and prints, per mode and condition, the flagged cell
comparisons with a Clopper–Pearson interval and the regressions per metric, and for A/A a
calibration check that needs far fewer comparisons than the flag count: under identical sides
each throughput check's raw one-sided p-value is uniform on [0, 1], so the share at or below
0.05 / 0.10 and a Kolmogorov–Smirnov test (``scipy.stats.kstest``) show a side offset or
dependence between rounds long before a 1 % flag rate can be resolved.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from rtmatrix.matrix import parse_matrix
from rtmatrix.results.comparison import DEFAULT_METRICS, Comparison
from rtmatrix.results.diff import Mark
from rtmatrix.results.paired import DEFAULT_ROUNDS, PairedVerdict, decide
from rtmatrix.runner.compare import (
    DEFAULT_MODE,
    MODES,
    Settings,
    SideSpec,
    balanced_turns,
    run_comparison,
)
from rtmatrix.turns import DEFAULT_PATTERN, PATTERNS

HERE = Path(__file__).resolve().parent
SLOW = "gate_quality_slow:SlowLlamaCppAdapter"
MATRIX = """\
description = "compare quality"
[run]
repetitions = {reps}
warmup = {warmup}
timeout_s = 120
contention_threshold_cores = {threshold}
[params]
threads = {threads}
n_ctx = {ctx}
prompt_tokens = {prompt}
gen_tokens = {gen}
[[runtimes]]
name = "llama_cpp"
[[fixtures]]
model = "{model}"
dtypes = [{dtypes}]
"""
AA = "A/A"
#: a prefill slowdown's condition name: ``pp10%`` (a decode slowdown's is ``10%``)
PP = "pp"


def judged_metric(condition: str) -> str:
    """The check a slowdown condition must flag: pp_tps for a prefill slowdown, else tg_tps."""
    return "pp_tps" if condition.startswith(PP) else "tg_tps"


def slowdown_options(condition: str) -> dict[str, Any]:
    """Side B's options for a slowdown condition (``10%``: decode, ``pp10%``: prefill)."""
    fraction = float(condition.removeprefix(PP).rstrip("%")) / 100
    phase = "prefill" if condition.startswith(PP) else "decode"
    return {"slowdown": fraction, "slowdown_phase": phase}


def conditions(args: argparse.Namespace) -> list[str]:
    """A/A, then the decode slowdowns (``--levels``), then the prefill ones (``--pp-levels``)."""
    return [AA, *(f"{lvl:g}%" for lvl in args.levels),
            *(f"{PP}{lvl:g}%" for lvl in args.pp_levels)]  # fmt: skip


def flags(condition: str, metric: str, verdict: str) -> bool:
    """Whether one check flags its cell: A/A, any regression; a slowdown, a regression of the
    phase it slowed (tg_tps, or pp_tps for a prefill slowdown)."""
    return verdict == PairedVerdict.REGRESSION and (
        condition == AA or metric == judged_metric(condition)
    )


@dataclass
class Tally:
    """Per condition: cell comparisons, their outcome, the TG ratios and the time spent."""

    cells: int = 0
    flagged: int = 0  # A/A: any regression; slowdown: tg_tps regression
    checks: int = 0
    regressions: int = 0
    equivalent: int = 0
    inconclusive: int = 0
    not_judged: int = 0
    rounds_used: int = 0
    rounds_contended: int = 0
    wall_s: float = 0.0
    ratios: list[float] = field(default_factory=list)
    ks: list[int] = field(default_factory=list)


def _matrix(folder: Path, args: argparse.Namespace) -> Path:
    text = MATRIX.format(
        reps=args.reps,
        warmup=args.warmup,
        ctx=max(256, 1 << (args.prompt_tokens + args.gen_tokens - 1).bit_length()),
        threshold=args.contention_threshold,
        threads=args.threads,
        prompt=args.prompt_tokens,
        gen=args.gen_tokens,
        model=args.model,
        dtypes=", ".join(f'"{d}"' for d in args.dtypes),
    )
    path = folder / "compare-quality.toml"
    path.write_text(text, "utf-8")
    return path


def _tally(t: Tally, c: Comparison, condition: str, wall: float) -> list[dict[str, Any]]:
    rows = []
    by_cell: dict[str, list[Any]] = {}
    for ch in c.paired.checks:
        by_cell.setdefault(ch.cell, []).append(ch)
    for cell in c.cells:
        checks = by_cell.get(cell.key, [])
        t.cells += 1
        t.rounds_used += cell.used_rounds
        t.rounds_contended += cell.contended_rounds
        if not checks:
            t.not_judged += 1
        tg = next((ch for ch in checks if ch.metric == judged_metric(condition)), None)
        hit = any(flags(condition, ch.metric, ch.verdict) for ch in checks)
        t.flagged += hit
        t.checks += len(checks)
        t.regressions += sum(ch.verdict is PairedVerdict.REGRESSION for ch in checks)
        t.equivalent += sum(ch.verdict is PairedVerdict.EQUIVALENT for ch in checks)
        t.inconclusive += sum(ch.verdict is PairedVerdict.INCONCLUSIVE for ch in checks)
        if tg is not None and tg.ratio is not None:
            t.ratios.append(tg.ratio)
        rows.append(
            {
                "condition": condition,
                "cell": cell.key,
                "flagged": hit,
                "checks": {ch.metric: [str(ch.verdict), ch.ratio, ch.k] for ch in checks},
            }
        )
    t.ks.append(int(c.settings["k"]))
    t.wall_s += wall
    return rows


def _one(
    args: argparse.Namespace,
    matrix_path: Path,
    condition: str,
    seed: int,
    results: Path,
    rounds: int | None = None,
) -> tuple[Comparison, float]:
    a = SideSpec("a", args.a)
    if condition == AA:
        b = SideSpec("b", args.b)
    else:
        b = SideSpec("b", args.b, slowdown_options(condition), SLOW)
    settings = Settings(rounds=rounds or args.rounds, seed=seed, mode=args.mode, turns=args.turns)
    t0 = time.monotonic()
    matrix = parse_matrix(matrix_path.read_text("utf-8"), matrix_path)
    c, _ = run_comparison(matrix, a, b, settings, results, progress=lambda _line: None)
    return c, time.monotonic() - t0


def _plan(args: argparse.Namespace, cells_per: int) -> list[str]:
    """Interleaved conditions until each has its cell comparisons."""
    need = {AA: math.ceil(args.aa_cells / cells_per)} | {
        cond: math.ceil(args.slow_cells / cells_per) for cond in conditions(args)[1:]
    }
    order: list[str] = []
    while any(need.values()):
        for cond in list(need):
            if need[cond]:
                order.append(cond)
                need[cond] -= 1
    return order


def _report(tallies: dict[str, Tally], loads: Sequence[float]) -> None:
    print("condition  cells  flagged   rate  equiv  inconcl  not-judged  ratio     K  s/cell")
    for cond, t in tallies.items():
        rate = t.flagged / t.cells if t.cells else math.nan
        ratio = statistics.median(t.ratios) if t.ratios else math.nan
        k = statistics.median(t.ks) if t.ks else math.nan
        per = t.wall_s / t.cells if t.cells else math.nan
        print(
            f"{cond:9s} {t.cells:6d} {t.flagged:8d} {rate * 100:6.1f}% {t.equivalent:6d} "
            f"{t.inconclusive:8d} {t.not_judged:11d} {ratio:9.3f} {k:3.0f} {per:7.1f}"
        )
    used = sum(t.rounds_used for t in tallies.values())
    busy = sum(t.rounds_contended for t in tallies.values())
    share = busy / (used + busy) if used + busy else math.nan
    print(f"contended rounds skipped: {busy} of {used + busy} ({share * 100:.1f} %)")
    aa = tallies.get(AA)
    if aa and aa.cells:
        print(
            f"SUMMARY A/A false alarms {aa.flagged}/{aa.cells} "
            f"({100 * aa.flagged / aa.cells:.2f} %, goal <= 1 %)"
        )
    for cond, t in tallies.items():
        if cond != AA and t.cells:
            print(
                f"SUMMARY detection at {cond}: {t.flagged}/{t.cells} "
                f"({100 * t.flagged / t.cells:.0f} %)"
            )
    if loads:
        print(
            f"machine: {os.cpu_count()} logical cores; 1-min load average "
            f"{min(loads):.2f}..{max(loads):.2f} (median {statistics.median(loads):.2f})"
        )


# --------------------------------------------------------------------------- pooled mode
def _flags(
    block: pd.DataFrame, condition: str, by_metric: dict[str, int] | None = None
) -> dict[str, bool]:
    """Per cell of one K-round block: flagged (A/A: any regression; slowdown: tg_tps).
    ``by_metric`` counts the regressions per metric."""
    paired = decide(block, Settings().criteria())
    out: dict[str, bool] = {}
    for ch in paired.checks:
        reg = ch.verdict is PairedVerdict.REGRESSION
        if reg and by_metric is not None:
            by_metric[ch.metric] = by_metric.get(ch.metric, 0) + 1
        hit = flags(condition, ch.metric, ch.verdict)
        out[ch.cell] = out.get(ch.cell, False) or hit
    return out


def _rate(hits: int, n: int) -> str:
    """hits/n with a 95 % Clopper-Pearson interval (scipy.stats.binomtest)."""
    if n == 0:
        return "-"
    ci = stats.binomtest(hits, n).proportion_ci(confidence_level=0.95)
    return f"{hits}/{n} = {100 * hits / n:.1f} % [{100 * ci.low:.1f}, {100 * ci.high:.1f}]"


def pooled_estimates(
    pool: pd.DataFrame, condition: str, k: int, resamples: int, seed: int
) -> dict[str, Any]:
    """Disjoint-block and resampled flag rates of one condition's pooled rounds."""
    judged = pool[pool["used"] & pool["metric"].isin(list(DEFAULT_METRICS))]
    ids = sorted(judged["round"].unique())
    out: dict[str, Any] = {"rounds": len(ids), "k": k}
    per: dict[str, dict[str, int]] = {"disjoint": {}, "resampled": {}}
    disjoint = [_flags(judged[judged["round"].isin(ids[i : i + k])], condition, per["disjoint"])
                for i in range(0, len(ids) - k + 1, k)]  # fmt: skip
    rng = np.random.default_rng(seed)
    drawn = [
        _flags(
            judged[judged["round"].isin(rng.choice(ids, size=k, replace=False))],
            condition,
            per["resampled"],
        )
        for _ in range(resamples if len(ids) >= k else 0)
    ]
    for name, blocks in (("disjoint", disjoint), ("resampled", drawn)):
        flags = [v for b in blocks for v in b.values()]
        out[name] = {"cells": len(flags), "flagged": sum(flags), "blocks": len(blocks),
                     "regressions_by_metric": per[name]}  # fmt: skip
    d = pd.Series(np.log(judged["b"] / judged["a"]), index=judged.index)
    out["mean_log_ratio_by_metric"] = {
        str(m): float(v) for m, v in d.groupby(judged["metric"]).mean().items()
    }
    out["b_second_share"] = None
    if "position" in judged.columns:
        out["b_second_share"] = float(judged["position"].mean())
    tg = judged[judged["metric"] == "tg_tps"]
    ratios = (tg["b"] / tg["a"]).dropna()
    out["tg_ratio_median"] = float(ratios.median()) if len(ratios) else None
    out["tg_log_ratio_sd"] = float(np.log(ratios).std(ddof=1)) if len(ratios) > 1 else None
    return out


def run_pool(args: argparse.Namespace, matrix_path: Path, tmp: Path) -> dict[str, Any]:
    conds = conditions(args)
    frames: dict[str, list[pd.DataFrame]] = {c: [] for c in conds}
    done = dict.fromkeys(conds, 0)
    walls = dict.fromkeys(conds, 0.0)
    loads: list[float] = []
    step = 0
    while any(done[c] < args.pool for c in conds):
        for cond in conds:
            n = min(args.chunk, args.pool - done[cond])
            if n <= 0:
                continue
            c, wall = _one(args, matrix_path, cond, step, tmp / "results", rounds=n)
            frame = c.rounds.copy()
            frame["round"] = frame["round"] + done[cond]
            frames[cond].append(frame)
            done[cond] += n
            walls[cond] += wall
            loads.append(os.getloadavg()[0])
            step += 1
            print(
                f"[pool] {cond}: {done[cond]}/{args.pool} rounds ({wall:.0f} s, load "
                f"{loads[-1]:.2f})",
                file=sys.stderr,
                flush=True,
            )
    k = args.rounds or DEFAULT_ROUNDS
    result: dict[str, Any] = {"k": k, "pool": args.pool, "loads": loads, "conditions": {}}
    n_cells = len(args.dtypes)
    print(f"pooled: {args.pool} rounds per condition, K = {k}, {n_cells} cell(s) per round")
    print("condition  estimate   flagged (95 % CI)                 TG ratio  sd(log)  s/round")
    for cond in conds:
        pool = pd.concat(frames[cond], ignore_index=True)
        est = pooled_estimates(pool, cond, k, args.resamples, args.seed)
        est["wall_s"] = walls[cond]
        est["s_per_round"] = walls[cond] / max(done[cond], 1)
        est["s_per_cell_comparison"] = est["s_per_round"] * k / max(n_cells, 1)
        if args.json:
            pool.to_csv(Path(args.json).with_suffix(f".{cond.replace('/', '')}.csv"), index=False)
        result["conditions"][cond] = est
        for name in ("disjoint", "resampled"):
            e = est[name]
            print(
                f"{cond:9s}  {name:9s}  {_rate(e['flagged'], e['cells']):32s}  "
                f"{est['tg_ratio_median'] or float('nan'):7.3f}  "
                f"{est['tg_log_ratio_sd'] or float('nan'):7.3f}  {est['s_per_round']:7.1f}  "
                f"{e['regressions_by_metric']}"
            )
    per = statistics.median(e["s_per_cell_comparison"] for e in result["conditions"].values())
    print(f"wall time per compared cell at K = {k}: {per:.0f} s (goal <= 180 s)")
    if loads:
        print(
            f"machine: {os.cpu_count()} logical cores; 1-min load average "
            f"{min(loads):.2f}..{max(loads):.2f} (median {statistics.median(loads):.2f})"
        )
    return result


# --------------------------------------------------------------------------- ledger
LEDGER_COLUMNS = (
    "utc", "comparison", "condition", "cell", "metric", "verdict", "ratio", "sd_log", "k",
    "p_worse", "p_better", "p_worse_holm", "min_effect", "alpha", "checks_in_family",
    "wall_s", "load_1min", "python_a", "python_b", "commit", "host", "mode",
)  # fmt: skip
THROUGHPUT = ("pp_tps", "tg_tps")
#: the ledger verdict of a cell comparison that had no judged check
NOT_JUDGED = "not-judged"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=False, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def ledger_rows(
    c: Comparison, condition: str, wall: float, load: float, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One row per check of one finished comparison (``LEDGER_COLUMNS``); missing: empty. A
    cell with no judged check (killed, contended in too many rounds) gets one row with verdict
    ``NOT_JUDGED``, so the ledger still counts the comparison."""
    utc = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ident = f"{utc}-{os.getpid()}-{condition}"
    checks = c.paired.checks
    common = {
        "utc": utc, "comparison": ident, "condition": condition,
        "checks_in_family": len(checks), "wall_s": round(wall, 1), "load_1min": round(load, 2),
        "python_a": args.a, "python_b": args.b, "commit": args.commit,
        "host": os.uname().nodename,
        "mode": mode_label(
            str(c.settings.get("mode_used", "sequential")),
            args,
            bool(c.settings.get("turns_balanced")),
        ),
    }  # fmt: skip
    rows = [
        common | {
            "cell": ch.cell, "metric": ch.metric, "verdict": str(ch.verdict), "ratio": ch.ratio,
            "sd_log": ch.sd_log, "k": ch.k, "p_worse": ch.p_worse, "p_better": ch.p_better,
            "p_worse_holm": ch.p_worse_holm, "min_effect": ch.min_effect, "alpha": ch.alpha,
        }
        for ch in checks
    ]  # fmt: skip
    judged = {ch.cell for ch in checks}
    rows += [
        common | {"cell": cell.key, "verdict": NOT_JUDGED}
        for cell in c.cells
        if cell.key not in judged
    ]
    return rows


def append_ledger(path: Path, rows: Sequence[dict[str, Any]], c: Comparison) -> None:
    """Append the checks to ``path`` and the judged metrics' paired rounds (a, b, order, used)
    to ``<path stem>.rounds.csv``, so a later rule can be judged on the same rounds."""
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        _upgrade_header(path)
    with path.open("a", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=LEDGER_COLUMNS)
        if new:
            w.writeheader()
        w.writerows(rows)
    if not rows:
        return
    rounds = c.rounds[c.rounds["metric"].isin(list(DEFAULT_METRICS))]
    keep = [col for col in ("cell", "metric", "round", "a", "b", "order", "used") if col in rounds]
    out = rounds[keep].assign(comparison=rows[0]["comparison"])
    side = path.with_suffix(".rounds.csv")
    out.to_csv(side, mode="a", header=not side.exists() or side.stat().st_size == 0, index=False)


def mode_label(mode: str, args: argparse.Namespace, balanced: bool = False) -> str:
    """The ledger's ``mode``: the comparison's mode, with the turn pattern, repetitions and
    warm-ups where they are not the defaults (``alternate-abab-r4``) and ``even`` where the
    comparison made the counted repetitions even (``rtmatrix.runner.compare.balanced_turns``),
    so rows of another design are summarized apart."""
    parts = [mode] + (["even"] if balanced else [])
    if mode == "alternate" and getattr(args, "turns", DEFAULT_PATTERN) != DEFAULT_PATTERN:
        parts.append(str(args.turns))
    if getattr(args, "reps", 5) != 5:
        parts.append(f"r{args.reps}")
    if getattr(args, "warmup", 1) != 1:
        parts.append(f"w{args.warmup}")
    return "-".join(parts)


def append_samples(path: Path, c: Comparison, ident: str, args: argparse.Namespace) -> None:
    """Append a comparison's counted repetitions (:func:`samples_table`) with its id, turn
    pattern, repetitions and warm-ups (as the comparison ran them)."""
    warmup, reps = args.warmup, args.reps
    if c.settings.get("turns_balanced"):  # the turns the comparison ran, not the ones asked
        warmup, reps = balanced_turns(warmup, reps)
    out = c.samples.assign(comparison=ident, turns=args.turns, reps=reps, warmup=warmup)
    out.to_csv(path, mode="a", header=not path.exists() or path.stat().st_size == 0, index=False)


def _upgrade_header(path: Path) -> None:
    """Rewrite a ledger written before a column was added: the old rows get the column empty,
    except ``mode``, which is ``sequential`` (the only mode before duet comparisons existed)."""
    with path.open(newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh), [])
    if tuple(header) == LEDGER_COLUMNS:
        return
    old = pd.read_csv(path, dtype=str, keep_default_na=False)
    if "mode" not in old:
        old["mode"] = "sequential"
    old.reindex(columns=list(LEDGER_COLUMNS), fill_value="").to_csv(path, index=False)


def _modes(df: pd.DataFrame) -> pd.Series:
    """Each row's comparison mode (rows from before the column: sequential)."""
    if "mode" not in df:
        return pd.Series("sequential", index=df.index)
    return df["mode"].fillna("sequential").replace("", "sequential")


def summarize_ledger(path: Path, resamples: int = 0, seed: int = 0) -> str:
    """Flag rates per condition and the A/A p-value calibration, from a ledger CSV; with
    ``resamples``, also the rule on K-round draws from all the ledger's A/A rounds."""
    df = pd.read_csv(path)
    n_checks = int((df["verdict"] != NOT_JUDGED).sum())
    lines = [f"ledger {path}: {df['comparison'].nunique()} comparisons, {n_checks} checks, "
             f"{df['utc'].min()} .. {df['utc'].max()}"]  # fmt: skip
    lines.append(
        f"K {sorted(df['k'].dropna().astype(int).unique().tolist())}; load 1-min "
        f"{df['load_1min'].min():.2f}..{df['load_1min'].max():.2f} "
        f"(median {df['load_1min'].median():.2f}); wall per cell comparison median "
        f"{df.groupby(['comparison', 'cell'])['wall_s'].first().median():.0f} s"
    )
    df["mode"] = _modes(df)
    for (mode, cond), whole in df.groupby(["mode", "condition"], sort=False):
        part = whole[whole["verdict"] != NOT_JUDGED]
        unjudged = whole.loc[whole["verdict"] == NOT_JUDGED, ["comparison", "cell"]]
        reg = part["verdict"] == str(PairedVerdict.REGRESSION)
        hit = [flags(str(cond), m, v) for m, v in zip(part["metric"], part["verdict"], strict=True)]
        flagged = pd.Series(hit, index=part.index).groupby([part["comparison"], part["cell"]]).any()
        by_metric = part[reg].groupby("metric").size().to_dict()
        ratio = part.loc[part["metric"] == judged_metric(str(cond)), "ratio"].median()
        shape = ", ".join(sorted({c.rsplit("|", 1)[-1] for c in part["cell"]}))
        lines.append(
            f"{mode} {cond:6s} flagged {_rate(int(flagged.sum()), len(flagged))}; regressions "
            f"by metric {by_metric}; median TG ratio {ratio:.3f}; median K "
            f"{part['k'].median():.0f}; wall per cell comparison median "
            f"{part.groupby(['comparison', 'cell'])['wall_s'].first().median():.0f} s; "
            f"shape {shape}; not judged {len(unjudged.drop_duplicates())} (not in the rate)"
        )
    aa = df[(df["condition"] == AA) & df["metric"].isin(THROUGHPUT)].dropna(subset=["p_worse"])
    if len(aa):
        lines.append("A/A calibration (raw one-sided p of the worse direction; uniform if sides "
                     "are identical and rounds independent):")  # fmt: skip
        for (mode, metric), part in aa.groupby(["mode", "metric"]):
            p = part["p_worse"].to_numpy(dtype=float)
            ks = stats.kstest(p, "uniform")
            lines.append(
                f"  {mode} {metric}: n={len(p)}; p<=0.05 {_rate(int((p <= 0.05).sum()), len(p))} "
                f"(expect 5 %); p<=0.10 {_rate(int((p <= 0.10).sum()), len(p))} (expect 10 %); "
                f"KS vs uniform D={ks.statistic:.3f} p={ks.pvalue:.3g}; "
                f"mean log-ratio {np.log(part['ratio']).mean():+.4f}"
            )
    side = path.with_suffix(".rounds.csv")
    if resamples and side.exists():
        rounds = pd.read_csv(side)
        mode_of = df.groupby("comparison")["mode"].first()
        rounds["mode"] = rounds["comparison"].map(mode_of).fillna("sequential")
        rounds["shape"] = rounds["cell"].astype(str).str.rsplit("|", n=1).str[-1]
        for group, part in rounds.groupby(["mode", "shape"]):
            found = _ledger_resampled(part.drop(columns=["mode", "shape"]), resamples, seed)
            tag = ", ".join(str(g) for g in group)
            lines += [f"[{tag}] {ln}" if i == 0 else ln for i, ln in enumerate(found)]
    return "\n".join(lines)


def _ledger_resampled(rounds: pd.DataFrame, resamples: int, seed: int) -> list[str]:
    """The decision rule on K-round draws from every A/A round of the ledger (rounds from many
    independent comparisons, so a draw mixes hours of drift and many process pairs), and the
    assumptions behind the paired t-test checked on the same rounds."""
    lines: list[str] = []
    aa = rounds[rounds["comparison"].str.endswith(AA)].copy()
    if aa.empty:
        return lines
    aa["used"] = aa["used"].astype(str) == "True"
    ids = aa[["comparison", "round"]].drop_duplicates().reset_index(drop=True)
    ids["pooled_round"] = ids.index + 1
    pool = aa.merge(ids, on=["comparison", "round"]).drop(columns="round")
    pool = pool.rename(columns={"pooled_round": "round"})
    k = DEFAULT_ROUNDS
    est = pooled_estimates(pool, AA, k, resamples, seed)
    res = est["resampled"]
    lines.append(
        f"A/A resampled: {resamples} draws of K = {k} from {est['rounds']} rounds of "
        f"{aa['comparison'].nunique()} comparisons: flagged {_rate(res['flagged'], res['cells'])}"
        f"; regressions by metric {res['regressions_by_metric']}"
    )
    used = aa[aa["used"]]
    for metric, part in used.groupby("metric"):
        if metric not in THROUGHPUT and metric != "peak_rss_os_bytes":
            continue
        d = pd.Series(np.log(part["b"] / part["a"]), index=part.index)
        means = d.groupby(part["comparison"]).agg(["mean", "std", "count"])
        expected = np.sqrt((means["std"] ** 2).mean() / means["count"].median())
        order = part["order"].astype(str)
        second = (d[order == "ab"].mean() - d[order == "ba"].mean()) / 2  # B second minus first
        lines.append(
            f"  {metric!s}: {len(d)} rounds, mean log-ratio {d.mean():+.4f} "
            f"(t = {d.mean() / (d.std(ddof=1) / math.sqrt(len(d))):.1f}); sd {d.std(ddof=1):.4f}; "
            f"sd of comparison means / expected from within {means['mean'].std() / expected:.2f}"
            f"; B-second effect {second:+.4f}; excess kurtosis {stats.kurtosis(d):+.2f}"
        )
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--a", default=sys.executable, help="side A's python (default: this one)")
    p.add_argument("--b", default=sys.executable, help="side B's python (same wheels as A)")
    p.add_argument("--rounds", type=int, default=None, help=f"K (default {DEFAULT_ROUNDS})")
    p.add_argument("--aa-cells", type=int, default=300, help="A/A cell comparisons")
    p.add_argument("--slow-cells", type=int, default=100, help="cell comparisons per level")
    p.add_argument(
        "--levels", type=float, nargs="*", default=[3.0, 5.0, 10.0], help="percent (none: A/A only)"
    )
    p.add_argument(
        "--pp-levels", type=float, nargs="*", default=[],
        help="prefill slowdowns, percent (conditions pp5%%, pp10%%; found by their pp_tps check)",
    )  # fmt: skip
    # small, not tiny: tiny decodes a token in ~0.2 ms, where timer and scheduler noise give a
    # 27 % between-process spread (measured); small's is ~10 % on this 2-core VM
    p.add_argument("--model", default="small")
    p.add_argument("--dtypes", nargs="+", default=["f32", "f16", "q8_0", "q4_0"])
    p.add_argument("--reps", type=int, default=5, help="repetitions per process")
    p.add_argument("--warmup", type=int, default=1, help="warm-up repetitions per process")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--gen-tokens", type=int, default=32)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument(
        "--contention-threshold",
        type=float,
        default=0.25,
        help="cores busy outside a cell above which its round is skipped (default: %(default)s)",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default=DEFAULT_MODE,
        help="the comparison's mode (rtmatrix compare --mode; default: %(default)s)",
    )
    p.add_argument(
        "--turns",
        choices=PATTERNS,
        default=DEFAULT_PATTERN,
        help="alternate mode's turn pattern (rtmatrix compare --turns; default: %(default)s)",
    )
    p.add_argument(
        "--samples",
        metavar="FILE",
        type=Path,
        help="independent mode: append every counted repetition's PP/TG (cell, round, side, "
        "position, repetition) of each comparison to this CSV, for spread studies",
    )
    p.add_argument("--json", metavar="FILE", help="write every cell comparison here")
    p.add_argument(
        "--ledger",
        metavar="FILE",
        type=Path,
        help="independent mode: append every check of each finished comparison to this CSV",
    )
    p.add_argument(
        "--summarize", metavar="FILE", type=Path, help="print a ledger's figures and exit"
    )
    p.add_argument(
        "--budget-min",
        type=float,
        default=None,
        help="independent mode: start no comparison after this many minutes",
    )
    p.add_argument(
        "--pool", type=int, metavar="R", help="pooled mode: R paired rounds per condition"
    )
    p.add_argument("--chunk", type=int, default=12, help="pooled mode: rounds per compare run")
    p.add_argument("--resamples", type=int, default=400, help="pooled mode: K-round draws")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="pooled mode: the draws' seed; independent mode: shifts every comparison's AB/BA "
        "seed (give each session its own, so ledger rows do not repeat an order sequence)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: K=3, one f32 cell, 2 cell comparisons per condition, no contention skip",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.summarize:
        print(summarize_ledger(args.summarize, args.resamples, args.seed))
        return 0
    args.commit = _commit()
    if args.quick:
        args.rounds, args.dtypes, args.aa_cells, args.slow_cells = 3, ["f32"], 2, 1
        args.levels, args.contention_threshold = [10.0], 1000.0
        args.pp_levels = args.pp_levels or [10.0]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p
    )  # the workers import gate_quality_slow from here
    if args.pool:
        with tempfile.TemporaryDirectory(prefix="rtmatrix-compare-quality-") as tmp:
            matrix_path = _matrix(Path(tmp), args)
            result = run_pool(args, matrix_path, Path(tmp))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1), "utf-8")
        return 0
    order = _plan(args, len(args.dtypes))
    tallies = {cond: Tally() for cond in dict.fromkeys(order)}
    rows: list[dict[str, Any]] = []
    loads: list[float] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rtmatrix-compare-quality-") as tmp:
        matrix_path = _matrix(Path(tmp), args)
        for i, cond in enumerate(order):
            if args.budget_min and time.monotonic() - t_start > 60 * args.budget_min:
                print(f"budget of {args.budget_min:g} min spent", file=sys.stderr)
                break
            seed = args.seed * 100_000 + i
            c, wall = _one(args, matrix_path, cond, seed, Path(tmp) / "results")
            rows += _tally(tallies[cond], c, cond, wall)
            loads.append(os.getloadavg()[0])
            rows_now = ledger_rows(c, cond, wall, loads[-1], args)
            if args.ledger:
                append_ledger(args.ledger, rows_now, c)
            if args.samples and rows_now:
                append_samples(args.samples, c, str(rows_now[0]["comparison"]), args)
            print(
                f"[{i + 1}/{len(order)}] {cond}: exit {c.code} ({c.outcome.headline}) "
                f"in {wall:.0f} s, load {loads[-1]:.2f}",
                file=sys.stderr,
                flush=True,
            )
            for cell in c.cells:  # an outcome mark: say why (which side, which rounds)
                if cell.mark is not Mark.SAME:
                    why = "; ".join(cell.reasons)
                    print(f"    {cell.key} [{cell.mark.value}] {why}", file=sys.stderr)
    _report(tallies, loads)
    print(f"total wall time {time.monotonic() - t_start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
