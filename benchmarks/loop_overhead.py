"""The harness loop against a minimal tight loop, per runtime row (a script, not a timed test).

    .venv/bin/python benchmarks/loop_overhead.py --json overhead.json      # 6 rounds per row
    .venv/bin/python benchmarks/loop_overhead.py --quick                   # 1 round: smoke test

Issue 14 item 5. For each row (``llama_cpp``, ``onnxruntime``, ``onnxruntime_genai``, ``tvm_aot``,
``mnn``, ``litert``)
on the same model file (``small`` fixture, f32 by default; 2 threads, n_ctx 512, prompt 128,
64 generated tokens, 1 warm-up + 5 counted repetitions), each round runs A and B in a seeded
random order:

A  **tight loop**: ``loop_overhead_tight.py`` in a plain Python process of its own (no rtmatrix
   import, no supervisor) loads the file with the adapter's settings and times only the runtime
   calls with ``time.perf_counter``: PP = prompt tokens / prefill call, TG = decode calls / their
   summed time, median over the counted repetitions.
B  **harness loop**: a one-row matrix through ``rtmatrix.runner.run_matrix``, as ``rtmatrix run``
   runs it (a supervised worker process per cell), ``pp_tps`` / ``tg_tps`` medians of the record.

The ratio harness ÷ tight is taken per round (goal >= 0.95); the table quotes the median of the
rounds and the min–max. What the ratio measures is everything around the runtime calls: the
adapter's input building, the worker's logits copy / ``isfinite`` / argmax between calls, events,
the supervisor sampling the worker beside it. For llama.cpp the record's ``llama-bench``
reference (``*_tps_reference``, run by the harness after the worker) splits the gap to
llama.cpp's own tool into *binding* overhead (tight ÷ llama-bench) and *harness* overhead
(harness ÷ tight); llama.cpp's own counters (``llama_perf_context``) are compared too (harness
counter ÷ tight counter: does the runtime itself run slower inside the harness?).

The 1-minute load average is printed before and after every round and kept in the JSON; each
harness round also carries the cell's ``host_busy_cores`` / ``contended``. The tight loop's
settings are compared with the harness cell's evidence; a difference is listed under the table
(the tight loop copies the adapters' code: a changed adapter shows up there).

Wall time: on a quiet 2-core machine with warm fixture and tool caches an estimated 10-20 s per
round (llama.cpp the longest: its harness round also runs llama-bench; ``--no-reference``
skips it), so ~5-8 min for the default 6 rounds and ~1-2 min for ``--quick`` (scaled from the
per-call times; one ``--quick`` on a 2-core machine at load average 5-7 took 6.6 min, 5.7 of
them llama.cpp's). Output: a Markdown table on stdout, progress on stderr, ``--json FILE`` every
round (samples, load averages, host_busy_cores, settings) and the summary. Exit 1 when a round
failed (the error is in the table's notes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from rtmatrix.adapters.base import LoadParams, load_adapter_class
from rtmatrix.fixtures import prepare_fixture, reference_for
from rtmatrix.fixtures.spec import get_spec
from rtmatrix.matrix import load_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

TIGHT = Path(__file__).resolve().with_name("loop_overhead_tight.py")
GOAL = 0.95


@dataclass(frozen=True)
class Row:
    name: str
    adapter: str
    options: str = ""  # the [[runtimes]] options, TOML inline table body

    @property
    def container(self) -> str:
        """The model container the row's adapter reads, as its registry entry declares it."""
        return load_adapter_class(self.adapter).container

    def options_dict(self) -> dict[str, Any]:
        import tomllib

        return tomllib.loads(f"o = {{ {self.options} }}")["o"] if self.options else {}


ROWS = {
    r.name: r
    for r in (
        Row("llama_cpp", "llama_cpp"),
        Row("onnxruntime", "onnxruntime"),
        Row("onnxruntime_genai", "onnxruntime_genai"),
        Row("tvm_aot", "tvm", 'mode = "aot"'),
        Row("mnn", "mnn"),
        Row("litert", "litert"),
    )
}

MATRIX = """\
description = "loop overhead: the harness loop of {name}"
[run]
repetitions = {reps}
warmup = {warmup}
timeout_s = 300
[params]
threads = {threads}
n_ctx = {n_ctx}
prompt_tokens = {prompt}
gen_tokens = {gen}
[[runtimes]]
name = "{name}"
adapter = "{adapter}"
options = {{ {options} }}
[[fixtures]]
model = "{model}"
dtypes = ["{dtype}"]
"""


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _load() -> float:
    return round(os.getloadavg()[0], 2)


# -- the two loops --------------------------------------------------------------------------
@dataclass
class Setup:
    """One row's fixture and the job both loops run."""

    row: Row
    matrix: Path
    job: dict[str, Any]


def _setup(row: Row, args: argparse.Namespace, tmp: Path) -> Setup:
    fx = prepare_fixture(args.model, args.model, args.dtype, None, row.container)
    ref = reference_for(args.model, args.dtype, args.prompt_tokens, args.gen_tokens, row.container)
    skip_ref = "reference_tool = false" if args.no_reference and row.adapter == "llama_cpp" else ""
    text = MATRIX.format(
        name=row.name,
        adapter=row.adapter,
        options=", ".join(o for o in (row.options, skip_ref) if o),
        reps=args.repetitions,
        warmup=args.warmup,
        threads=args.threads,
        n_ctx=args.n_ctx,
        prompt=args.prompt_tokens,
        gen=args.gen_tokens,
        model=args.model,
        dtype=args.dtype,
    )
    matrix = tmp / f"{row.name}.toml"
    matrix.write_text(text, "utf-8")
    from rtmatrix.fixtures.model import make_prompt

    job = {
        "adapter": row.adapter,
        "model_path": str(fx.path),
        "threads": args.threads,
        "n_ctx": args.n_ctx,
        "n_batch": LoadParams(n_ctx=args.n_ctx, threads=args.threads).n_batch,
        "options": row.options_dict(),
        "prompt": make_prompt(args.prompt_tokens, get_spec(args.model).vocab_size),
        "decode_tokens": ref.tokens[: args.gen_tokens - 1],
        "warmup": args.warmup,
        "repetitions": args.repetitions,
    }
    return Setup(row, matrix, job)


def _tps(reps: list[dict[str, Any]], n_prompt: int) -> tuple[list[float], list[float]]:
    """Per repetition, as the record's ``pp_tps`` / ``tg_tps`` (``rtmatrix.metrics.cell``)."""
    pp = [n_prompt / r["pp_s"] for r in reps if r["pp_s"] > 0]
    tg = [len(r["decode_s"]) / sum(r["decode_s"]) for r in reps if sum(r["decode_s"]) > 0]
    return pp, tg


def _counter_tg(reps: list[dict[str, Any]]) -> float | None:
    vals = [
        c["tg_tokens"] / (c["tg_ms"] / 1e3)
        for r in reps
        if (c := r.get("counters") or {}).get("tg_tokens") and c.get("tg_ms")
    ]
    return _median(vals)


def tight_round(setup: Setup, tmp: Path) -> dict[str, Any]:
    job_path, out_path = tmp / "tight-job.json", tmp / "tight-out.json"
    job_path.write_text(json.dumps(setup.job), "utf-8")
    out_path.unlink(missing_ok=True)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(TIGHT), str(job_path), str(out_path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    wall = round(time.monotonic() - t0, 2)
    if proc.returncode != 0 or not out_path.is_file():
        return {
            "error": f"tight loop exit {proc.returncode}: {proc.stderr[-2000:]}",
            "wall_s": wall,
        }
    out = json.loads(out_path.read_text("utf-8"))
    pp, tg = _tps(out["reps"], len(setup.job["prompt"]))
    return {
        "pp_tps": _median(pp),
        "tg_tps": _median(tg),
        "pp_samples": pp,
        "tg_samples": tg,
        "tg_tps_counter": _counter_tg(out["reps"]),
        "settings": out["settings"],
        "load_s": round(out["load_s"], 3),
        "wall_s": wall,
    }


def _value(metrics: dict[str, Any], name: str) -> Any:
    return (metrics.get(name) or {}).get("value")


def harness_round(setup: Setup, tmp: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    path = run_matrix(load_matrix(setup.matrix), tmp / "results", progress=lambda _line: None)
    wall = round(time.monotonic() - t0, 2)
    cells = load_run(path)["cells"]
    path.unlink()
    if len(cells) != 1:
        return {"error": f"expected one cell, the run has {len(cells)}", "wall_s": wall}
    cell = cells[0]
    m, status = cell["metrics"], cell["outcome"]["status"]
    if status != "ok":
        return {"error": f"cell {status}: {cell['outcome'].get('message')}", "wall_s": wall}
    names = (
        "pp_tps",
        "tg_tps",
        "tg_tps_counter",
        "pp_tps_reference",
        "tg_tps_reference",
        "host_busy_cores",
    )
    out: dict[str, Any] = {n: _value(m, n) for n in names}
    out |= {
        "pp_samples": m["pp_tps"].get("samples"),
        "tg_samples": m["tg_tps"].get("samples"),
        "contended": cell.get("contended"),
        # the harness feeds its own greedy tokens, the tight loop the reference's (equal: n/n)
        "tokens_agree": _agreement(cell.get("parity") or {}),
        "evidence": _settings_evidence(cell["evidence"]),
        "wall_s": wall,
    }
    return out


def _agreement(parity: Mapping[str, Any]) -> str | None:
    if parity.get("tokens_compared") is None:
        return None
    return f"{parity.get('tokens_agree')}/{parity['tokens_compared']}"


def _settings_evidence(ev: dict[str, Any]) -> dict[str, Any]:
    """The parts of a harness cell's evidence that say how the runtime was set up."""
    keep = ("settings", "session", "threads", "load_breakdown", "runtime_import", "mode")
    return {k: ev[k] for k in keep if k in ev}


# -- settings check -------------------------------------------------------------------------
#: per adapter: (label, path in the tight loop's settings, path in the harness cell's evidence)
SETTINGS_PAIRS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "onnxruntime": (
        ("intra_op_num_threads", "intra_op_num_threads", "session.intra_op_num_threads"),
        ("providers", "providers_passed", "session.providers_passed"),
    ),
    "onnxruntime_genai": (
        ("intra_op_num_threads", "session_options.intra_op_num_threads",
         "session.intra_op_num_threads"),
        ("providers", "providers", "session.providers"),
    ),
    "tvm": (
        ("tvm_num_threads", "tvm_num_threads", "threads.tvm_num_threads"),
        ("allocator", "allocator", "load_breakdown.allocator"),
        ("runtime_only", "runtime_only", "runtime_import.runtime_only_requested"),
        ("mode", "mode", "mode"),
    ),
}  # fmt: skip


def _at(doc: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        doc = doc.get(part, {}) if isinstance(doc, dict) else {}
    return None if doc == {} else doc


def settings_differences(adapter: str, tight: dict[str, Any], ev: dict[str, Any]) -> list[str]:
    """Where the tight loop's settings differ from what the harness cell's evidence says (for
    llama.cpp: every key of the requested settings and of llama.cpp's own context log)."""
    pairs = [(k, _at(tight, t), _at(ev, h)) for k, t, h in SETTINGS_PAIRS.get(adapter, ())]
    if adapter == "llama_cpp":
        for part in ("requested", "effective"):
            mine, theirs = tight[part], _at(ev, f"settings.{part}") or {}
            pairs += [(f"{part}.{k}", mine.get(k), theirs.get(k)) for k in {**mine, **theirs}]
    return [f"{k}: tight {t!r} vs harness {h!r}" for k, t, h in pairs if t != h]


# -- rounds ---------------------------------------------------------------------------------
def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _fmt(v: Any, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def _describe(res: dict[str, Any]) -> str:
    load = f"load {res['load_before']:.2f} -> {res['load_after']:.2f}; "
    if "error" in res:
        return load + str(res["error"])
    pp, tg = _fmt(res["pp_tps"]), _fmt(res["tg_tps"])
    return load + f"PP {pp} TG {tg} tok/s ({res['wall_s']} s)"


def run_row(row: Row, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    _say(f"{row.name}: preparing the {args.model}/{args.dtype} {row.container} fixture ...")
    setup = _setup(row, args, tmp)
    rounds = []
    rng = random.Random(f"{args.seed}:{row.name}")
    for i in range(args.rounds):
        rnd: dict[str, Any] = {}
        # a seeded random order per round: neither loop always follows the other (the one that
        # runs after llama-bench or after a cold start would otherwise always be the same)
        order = [("tight", tight_round), ("harness", harness_round)]
        rng.shuffle(order)
        rnd["order"] = [kind for kind, _ in order]
        for kind, fn in order:
            before = _load()
            res = fn(setup, tmp)
            res["load_before"], res["load_after"] = before, _load()
            rnd[kind] = res
            _say(f"{row.name} round {i + 1}/{args.rounds} {kind:7s}: {_describe(res)}")
        rnd |= _round_ratios(rnd["tight"], rnd["harness"])
        if "error" not in rnd["tight"] and "error" not in rnd["harness"]:
            rnd["settings_differences"] = settings_differences(
                row.adapter, rnd["tight"]["settings"], rnd["harness"]["evidence"]
            )
        rounds.append(rnd)
    return {
        "row": row.name,
        "adapter": row.adapter,
        "model_path": setup.job["model_path"],
        "rounds": rounds,
        "summary": summarize(rounds),
    }


def _ratio(num: Any, den: Any) -> float | None:
    return (
        num / den if isinstance(num, int | float) and isinstance(den, int | float) and den else None
    )


def _round_ratios(tight: dict[str, Any], harness: dict[str, Any]) -> dict[str, Any]:
    out = {
        f"{p}_ratio": _ratio(harness.get(f"{p}_tps"), tight.get(f"{p}_tps")) for p in ("pp", "tg")
    }
    out["tg_counter_ratio"] = _ratio(harness.get("tg_tps_counter"), tight.get("tg_tps_counter"))
    for p in ("pp", "tg"):  # llama.cpp: against its own tool's figure from the same harness round
        ref = harness.get(f"{p}_tps_reference")
        out[f"{p}_tight_vs_reference"] = _ratio(tight.get(f"{p}_tps"), ref)
        out[f"{p}_harness_vs_reference"] = _ratio(harness.get(f"{p}_tps"), ref)
    return out


def _spread(values: list[Any]) -> dict[str, Any]:
    """Median, min, max and a 95 % bootstrap interval of the median (scipy.stats.bootstrap,
    percentile; None with fewer than 3 values)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "ci95": None}
    ci = None
    if len(vals) >= 3 and len(set(vals)) > 1:
        boot = stats.bootstrap(
            (np.asarray(vals),), np.median, confidence_level=0.95, n_resamples=4000,
            method="percentile", random_state=0,
        )  # fmt: skip
        ci = [float(boot.confidence_interval.low), float(boot.confidence_interval.high)]
    return {
        "median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals),
        "ci95": ci,
    }  # fmt: skip


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    keys = (
        "pp_ratio",
        "tg_ratio",
        "tg_counter_ratio",
        "pp_tight_vs_reference",
        "tg_tight_vs_reference",
        "pp_harness_vs_reference",
        "tg_harness_vs_reference",
    )
    out: dict[str, Any] = {k: _spread([r.get(k) for r in rounds]) for k in keys}
    for kind in ("tight", "harness"):
        for p in ("pp", "tg"):
            out[f"{kind}_{p}_tps"] = _spread([r[kind].get(f"{p}_tps") for r in rounds])
    for p in ("pp", "tg"):
        out[f"reference_{p}_tps"] = _spread(
            [r["harness"].get(f"{p}_tps_reference") for r in rounds]
        )
    loads = [
        r[k][w] for r in rounds for k in ("tight", "harness") for w in ("load_before", "load_after")
    ]
    out["load_average"] = _spread(loads)
    out["contended_rounds"] = sum(bool(r["harness"].get("contended")) for r in rounds)
    out["host_busy_cores"] = _spread([r["harness"].get("host_busy_cores") for r in rounds])
    out["errors"] = [r[k]["error"] for r in rounds for k in ("tight", "harness") if "error" in r[k]]
    out["settings_differences"] = sorted(
        {d for r in rounds for d in r.get("settings_differences", [])}
    )
    return out


# -- report ---------------------------------------------------------------------------------
def _range(s: dict[str, Any], nd: int = 3) -> str:
    """``median [95 % CI] (min–max)``; against the goal: **below goal** when the whole interval
    is under it, *undecided* when the interval spans it (more rounds would tell)."""
    if s["median"] is None:
        return "-"
    ci, mark = s.get("ci95"), ""
    if nd == 3 and ci is not None:
        mark = " **below goal**" if ci[1] < GOAL else (" *undecided*" if ci[0] < GOAL else "")
    elif nd == 3 and s["median"] < GOAL:
        mark = " **below goal**"
    interval = f" [{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]" if ci is not None and nd == 3 else ""
    return f"{s['median']:.{nd}f}{interval} ({s['min']:.{nd}f}–{s['max']:.{nd}f}){mark}"


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"Harness loop ÷ tight loop, `{args.model}` {args.dtype}, {args.threads} threads, prompt "
        f"{args.prompt_tokens}, gen {args.gen_tokens}, {args.warmup} warm-up + {args.repetitions} "
        f"reps, {args.rounds} round(s), the two loops in a seeded random order each round; median "
        f"of per-round ratios [95 % bootstrap interval] (min–max); goal ≥ {GOAL}.",
        "",
        "| row | PP tight | PP harness | PP ratio | TG tight | TG harness | TG ratio "
        "| load avg (min–max) | contended rounds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["summary"]
        lines.append(
            f"| {r['row']} | {_fmt(s['tight_pp_tps']['median'])} | "
            f"{_fmt(s['harness_pp_tps']['median'])} | {_range(s['pp_ratio'])} | "
            f"{_fmt(s['tight_tg_tps']['median'])} | {_fmt(s['harness_tg_tps']['median'])} | "
            f"{_range(s['tg_ratio'])} | {_range(s['load_average'], 2)} | "
            f"{s['contended_rounds']}/{len(r['rounds'])} |"
        )
    llama = [r for r in rows if r["adapter"] == "llama_cpp"]
    for r in llama:
        s = r["summary"]
        lines += [
            "",
            f"llama.cpp (`{r['row']}`): binding overhead (tight ÷ llama-bench) vs harness overhead "
            "(harness ÷ tight); llama-bench from the same harness round (`*_tps_reference`).",
            "",
            "| phase | llama-bench | tight ÷ llama-bench | harness ÷ llama-bench | harness ÷ tight "
            "| harness counter ÷ tight counter |",
            "|---|---|---|---|---|---|",
        ]
        for p in ("pp", "tg"):
            counter = _range(s["tg_counter_ratio"]) if p == "tg" else "-"
            lines.append(
                f"| {p.upper()} | {_fmt(s[f'reference_{p}_tps']['median'])} | "
                f"{_range(s[f'{p}_tight_vs_reference'])} | "
                f"{_range(s[f'{p}_harness_vs_reference'])} | {_range(s[f'{p}_ratio'])} | "
                f"{counter} |"
            )
    notes = [f"- {r['row']}: {d}" for r in rows for d in r["summary"]["settings_differences"]]
    notes += [f"- {r['row']}: error: {e[:300]}" for r in rows for e in r["summary"]["errors"]]
    if notes:
        lines += ["", "Settings differences and errors:", *notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    p.add_argument("--rounds", type=int, default=6, help="A B pairs per row (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="one round per row (a smoke test)")
    p.add_argument("--json", metavar="FILE", help="write every round and the summary here")
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="llama.cpp: skip the llama-bench reference the harness runs after each cell",
    )
    p.add_argument("--seed", type=int, default=0, help="the rounds' A/B order (default 0)")
    p.add_argument("--model", default="small")
    p.add_argument("--dtype", default="f32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-ctx", type=int, default=512)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds = 1
    if args.rounds < 1 or args.gen_tokens < 2:
        p.error("--rounds must be >= 1 and --gen-tokens >= 2 (TG needs a decode call)")
    t0, rows = time.monotonic(), []
    with tempfile.TemporaryDirectory(prefix="rtmatrix-loop-overhead-") as tmp:
        for name in args.rows:
            rows.append(run_row(ROWS[name], args, Path(tmp)))
    wall = round(time.monotonic() - t0, 1)
    print(markdown(rows, args))
    print(
        f"\nmachine: {os.cpu_count()} logical cores; wall {wall} s; load average now "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    if args.json:
        doc = {"config": vars(args), "cpu_count": os.cpu_count(), "wall_s": wall, "rows": rows}
        Path(args.json).write_text(json.dumps(doc, indent=1), "utf-8")
    return 1 if any(r["summary"]["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
