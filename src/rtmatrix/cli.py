"""Command line: thin argument parsing over the pipeline functions.

Exit codes: 0 success, 1 a run finished with FAIL verdicts (only with --strict),
4 bad input (matrix, result or model file, a bad option or --fail: every problem is listed and
nothing runs), 130 interrupted. ``rtmatrix fixtures`` also exits 4 when another process held a
fixture's build lock for 30 min (in ``run`` and ``compare`` that is the cell's own fixture
error).
``rtmatrix gate`` has its own: 0 pass, 1 significant regression, 2 new failure, 3 nothing
comparable or missing data, 4 bad input (so that a typo is not read as a new failure);
``rtmatrix compare`` likewise: 0 pass, 1 regression, 2 new failure, 3 inconclusive, 4 bad input.
``rtmatrix select``: 0 a candidate is eligible, 1 none is, 4 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rtmatrix import __version__

if TYPE_CHECKING:
    from rtmatrix.matrix import Cell, Matrix
    from rtmatrix.results.diff import Check, RunDiff
    from rtmatrix.results.records import RunRecord

EXIT_OK, EXIT_NOT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 4, 130
EXIT_GATE_BAD_INPUT = 4


class _Parser(argparse.ArgumentParser):
    """argparse with a per-command exit code for usage errors (``gate`` uses 4, not 2)."""

    usage_exit = EXIT_BAD_INPUT

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(self.usage_exit, f"{self.prog}: error: {message}\n")


RUNTIME_HELP = "only this runtime row, or every row a sweep made of it (repeatable)"
DIST_HELP = (
    "only the rows whose runtime is this PyPI distribution, as each adapter declares it "
    "(e.g. onnxruntime; repeatable; `rtmatrix runtimes --json` lists them)"
)
CONVERTER_HELP = (
    "only the rows whose adapter's converter is NAME, i.e. the rows that converter feeds "
    "(e.g. optimum_intel; repeatable; `rtmatrix runtimes --json` lists them under converters)"
)


def _cmd_run(args: argparse.Namespace) -> int:
    from rtmatrix.matrix import load_matrix
    from rtmatrix.report import render_report
    from rtmatrix.results import load_run

    matrix = load_matrix(Path(args.matrix))
    runtimes, dists = set(args.runtime or []), set(args.distribution or [])
    known = matrix.row_names()
    if runtimes - known:
        print(
            f"rtmatrix: --runtime {sorted(runtimes - known)} not in {args.matrix}; "
            f"valid: {', '.join(sorted(known))}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if dists - matrix.distributions():
        print(
            f"rtmatrix: --distribution {sorted(dists - matrix.distributions())}: no row of "
            f"{args.matrix} runs it; valid: {', '.join(sorted(matrix.distributions()))}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    converters = set(args.converter or [])
    if converters - matrix.converters():
        print(
            f"rtmatrix: --converter {sorted(converters - matrix.converters())}: no row of "
            f"{args.matrix} is fed by it; valid: {', '.join(sorted(matrix.converters()))}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    resume = Path(args.resume) if args.resume else None
    if resume is not None:
        load_run(resume)  # a corrupt or newer file is refused before anything runs
    rows = matrix.rows_selected(runtimes, dists, converters)
    chosen = runtimes or dists or converters
    path = _run(args, matrix, (lambda c: c.runtime in rows) if chosen else None, resume)
    record = load_run(path)
    outcomes: dict[str, int] = {}
    verdicts: dict[str, int] = {}
    for c in record["cells"]:
        outcomes[c["outcome"]["status"]] = outcomes.get(c["outcome"]["status"], 0) + 1
        verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
    print("rtmatrix: outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print("rtmatrix: verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    print(f"rtmatrix: wrote {path}")
    if not args.no_report:  # the report's path is the last line, for people and scripts
        print(f"rtmatrix: wrote {render_report([record], Path(args.report)).resolve()}")
    failed = verdicts.get("FAIL", 0)
    return EXIT_NOT_OK if (failed and args.strict) else EXIT_OK


def _comparison_doc(path: Path) -> dict[str, Any] | None:
    """A ``rtmatrix compare`` result (``comparison.json``), or None for any other file."""
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == "rtmatrix-compare" else None


def _report_runs(
    paths: list[str], found: list[tuple[Path, dict[str, Any]]] | None = None
) -> list[RunRecord]:
    """Run records from files and folders: a folder gives every ``*.json`` in it that is a run
    record (others, such as a diff or a baseline kept beside them, are skipped, saying so).
    Paired comparisons (``comparison.json``) among them go to ``found`` when given."""
    from rtmatrix.results import ResultError, load_run

    runs = []
    for given in map(Path, paths):
        files = sorted(given.glob("*.json")) if given.is_dir() else [given]
        for path in files:
            try:
                runs.append(load_run(path))
            except ResultError as exc:
                doc = _comparison_doc(path) if found is not None else None
                if doc is not None and found is not None:
                    found.append((path, doc))
                elif given.is_dir():
                    print(f"rtmatrix: skipped {path}: {exc}", file=sys.stderr)
                else:
                    raise
    if not runs:
        msg = f"no run records in {', '.join(paths)}"
        raise ResultError(msg)
    return runs


def _run(
    args: argparse.Namespace,
    matrix: Matrix,
    only: Callable[[Cell], bool] | None,
    resume: Path | None,
) -> Path:
    """Here, or on the cluster (``--cluster`` / ``[cluster] address``): rtmatrix.fleet."""
    from rtmatrix.fleet import plan_run
    from rtmatrix.fleet.select import combine
    from rtmatrix.runner import run_matrix

    plan = plan_run(matrix, args.cluster, args.target)
    only = combine(only, plan.only if plan.targets else None)  # --runtime and --target
    processes = int(getattr(args, "processes", 1) or 1)
    if plan.address is None:
        return run_matrix(matrix, Path(args.results), only=only, resume=resume, processes=processes)
    if processes > 1:
        msg = "--processes runs here; a fleet run gives each cell one process per host"
        raise ValueError(msg)
    from rtmatrix.fleet.dispatch import run_on_cluster

    return run_on_cluster(matrix, Path(args.results), plan.address, only=only, resume=resume)


def _cmd_merge(args: argparse.Namespace) -> int:
    from rtmatrix.fleet.merge import merge_runs, parse_part
    from rtmatrix.results import save_run

    record = merge_runs([parse_part(a) for a in args.runs])
    save_run(record, Path(args.output))
    n = len(record["cells"])
    print(f"rtmatrix: wrote {args.output} ({n} cells from {len(args.runs)} runs)")
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from rtmatrix.report import history, render_report
    from rtmatrix.results import load_run

    comparisons: list[tuple[Path, dict[str, Any]]] = []
    runs = _report_runs(args.runs, comparisons)
    baseline = load_run(Path(args.baseline)) if args.baseline else None
    out = Path(args.output)
    paired = []
    shown = {r["run_id"] for r in runs}
    for path, doc in comparisons:
        link = os.path.relpath(path.parent / "index.html", out)
        marks = history.paired_marks(doc, link)
        paired += marks
        missing = {m.run_id for m in marks} - shown
        if missing:  # its regressions have no run here to be marked at
            print(f"rtmatrix: {path}: candidate run {sorted(missing)} not among the runs shown",
                  file=sys.stderr)  # fmt: skip
    print(f"rtmatrix: wrote {render_report(runs, out, baseline=baseline, paired=paired)}")
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from rtmatrix.results import load_run
    from rtmatrix.results.store import schema_path

    if args.schema:
        print(schema_path())
        return EXIT_OK
    for p in args.runs:
        rec = load_run(Path(p))
        print(
            f"{p}: valid (schema v{rec['schema_version']}, {len(rec['cells'])} cells, "
            f"{rec['status']})"
        )
    return EXIT_OK


def _checks(args: argparse.Namespace, base: RunRecord, cand: RunRecord) -> dict[str, Check]:
    """The default checks, then the candidate matrix's ``[gate] fail`` list, then ``--fail``."""
    from rtmatrix.results.diff import CheckError, parse_checks, run_metric_names

    from_matrix = (cand["matrix"].get("gate") or {}).get("fail", [])
    if not isinstance(from_matrix, list) or not all(isinstance(s, str) for s in from_matrix):
        msg = f"{args.candidate}: matrix.gate.fail must be a list of 'METRIC:PCT' strings"
        raise CheckError(msg)
    return parse_checks([*from_matrix, *(args.fail or [])], run_metric_names(base, cand))


def _diff(args: argparse.Namespace) -> RunDiff:
    from rtmatrix.results import load_run
    from rtmatrix.results.diff import CheckError, diff_runs

    if not 0.0 < args.alpha < 1.0:
        msg = f"--alpha {args.alpha}: expected a significance level between 0 and 1, e.g. 0.01"
        raise CheckError(msg)
    base, cand = load_run(Path(args.base)), load_run(Path(args.candidate))
    checks = _checks(args, base, cand)
    return diff_runs(base, cand, checks, args.alpha, (args.base, args.candidate))


def _write(path: str, text: str) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, "utf-8")


def _cmd_diff(args: argparse.Namespace) -> int:
    from rtmatrix.results.diff import CheckError, render_text

    try:
        diff = _diff(args)
    except CheckError as exc:
        print(f"rtmatrix: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = (
        json.dumps(diff.to_dict(), indent=1, allow_nan=False) + "\n"
        if args.json
        else render_text(diff, args.verbose)
    )
    if args.output:
        try:
            _write(args.output, text)
        except OSError as exc:
            print(f"rtmatrix: error: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"rtmatrix: wrote {args.output}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _cmd_gate(args: argparse.Namespace) -> int:
    from rtmatrix.results import ResultError
    from rtmatrix.results import gate as g
    from rtmatrix.results.diff import CheckError, render_text

    try:
        diff = _diff(args)
    except (ResultError, CheckError) as exc:
        print(f"rtmatrix: error: {exc}", file=sys.stderr)
        return EXIT_GATE_BAD_INPUT
    result = g.evaluate(diff)
    if not args.quiet:
        sys.stdout.write(render_text(diff) + "\n")
    outputs: list[tuple[str | None, Callable[[], str]]] = [
        (args.junit, lambda: g.junit_xml(diff, result)),
        (args.markdown, lambda: g.markdown(diff, result)),
        (args.json, lambda: json.dumps(diff.to_dict(), indent=1, allow_nan=False) + "\n"),
    ]
    try:
        for path, render in outputs:
            if path:
                _write(path, render())
                print(f"rtmatrix: wrote {path}")
    except OSError as exc:
        print(f"rtmatrix: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_GATE_BAD_INPUT
    sys.stdout.write(g.render_text(result))
    return result.code


def _cmd_export(args: argparse.Namespace) -> int:
    from rtmatrix.results import load_run
    from rtmatrix.results.export import render, tidy

    text = render(tidy(load_run(Path(args.run))), args.format)
    if not args.output:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        _write(args.output, text)
    except OSError as exc:
        print(f"rtmatrix: error: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"rtmatrix: wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def _cmd_fixtures(args: argparse.Namespace) -> int:
    from rtmatrix.fixtures import build_fixture
    from rtmatrix.fixtures.spec import builtin_specs
    from rtmatrix.fixtures.variants import VARIANTS

    specs = builtin_specs()
    if args.action == "list":
        for name, spec in specs.items():
            print(f"{name:8s} {spec.n_params / 1e6:6.2f} M params  {spec.description}")
        from rtmatrix.fixtures.sources import REAL_MODELS

        for name, real in REAL_MODELS.items():  # listed without locating or downloading them
            print(f"{name:8s} real model from {real.distribution}=={real.version} "
                  f"({real.license}): {real.description}")  # fmt: skip
        print("variants:")
        for v in VARIANTS.values():
            print(f"  {v.name:15s} expect {v.expect:5s}  {v.description}")
        return EXIT_OK
    names = args.model or list(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        print(
            f"rtmatrix: unknown fixture model(s) {unknown}; valid: {', '.join(specs)}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    for name in names:
        for dtype in args.dtype or ["f32"]:
            art = build_fixture(specs[name], args.format, dtype, args.variant)
            state = f"built in {art.manifest['build_s']:.2f} s" if art.built else "cached"
            print(f"{name} {args.format}/{dtype}: {art.path} ({state})")
    return EXIT_OK


def _add_compare_args(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("base", help="baseline result JSON")
    cmd.add_argument("candidate", help="candidate result JSON")
    cmd.add_argument(
        "--fail",
        action="append",
        metavar="METRIC:PCT",
        help="check METRIC with a threshold, e.g. tg_tps:5%% (repeatable; METRIC:off unchecks)",
    )
    cmd.add_argument(
        "--alpha",
        type=float,
        default=0.01,
        help="significance level of the sample tests (default: %(default)s)",
    )


# --------------------------------------------------------------------------- compare

COMPARE_DESCRIPTION = """\
Compare two sides cell by cell in K paired rounds of worker processes.

Sides: --a and --b each name a Python executable that has rtmatrix and that side's runtime
versions installed (e.g. two venvs for an upgrade, or the same python twice); --a-option /
--b-option KEY=VALUE (a TOML value, else a string; repeatable) are merged over every cell's
runtime options on that side, --a-adapter / --b-adapter module:Class replace the adapter of
every selected runtime row on that side. So one command compares an upgrade, a setting
(--b-option flash_attn=on) or an injected slowdown.

Rounds: each round runs every cell once per side, the two processes in a seeded random order
(AB or BA, --seed); a side's value for a round is the median of that process's counted
repetitions (single values such as peak RSS or cold start: one per process). A cell not ok on a
side in round 1 is not repeated. Rounds where a side was contended (host busy outside the cell)
are skipped for figures and counted.

Modes (--mode): alternate (the default) starts a round's two processes at once, unpinned; each
loads its model, then its repetitions (warm-up and counted) take turns with the other side's (A
B B A ...), one at a time, so both sides are measured within the same second or two and never at
the same time; a round is used only where every repetition of both took its turn
(evidence.alternate). On a 2-core VM this halved the per-round spread of the TG ratio (7.0 %% ->
3.6 %% at 1 thread, 7.1 %% -> 3.9 %% at 2). sequential runs one process after the other. duet
runs both at once, each pinned to its own CPUs (needs twice the cells' threads in CPUs); a duet
round is used only where the two counted windows overlapped for at least 80%% of the shorter one
(evidence.duet).

K: --rounds, else %(k)d (found 10%% slowdowns in every check and 5%% in 94%% at 3%%
between-process spread in the paired module's simulation); with --budget-s, K from round 1's
wall time (at most --rounds when given).

Decision per cell x judged metric, from the K paired log-ratios, only for cells ok on both
sides (judged metrics: --metric, default %(metrics)s):
regression when a one-sided t-test rejects at
--alpha after Holm over all checks and the change exceeds the min effect (--min-effect);
equivalent when the 90%% interval of the ratio lies inside +-margin (--margin, TOST);
otherwise inconclusive, with the minimum detectable effect and the K it would need. Defaults
per metric: min effect a fifth, margin half of the diff threshold (throughput 2%% / 5%%).
Outcome and verdict changes are marked as rtmatrix diff marks them (! new failure, * fixed,
x not comparable); flagged cells are explained (packages, settings, placement, phases, logs).

Writes OUTPUT/comparison.json (rounds as a tidy table, decisions, explanations),
OUTPUT/summary.md, OUTPUT/index.html (the comparison first, then the matrix) and each side's
run file in --results.

Exit codes: 0 pass (every check equivalent or improved, no outcome worse), 1 regression,
2 new failure, 3 inconclusive (or nothing compared), 4 bad input, 130 interrupted."""


def _compare_pct(spec: str, flag: str, *, positive: bool) -> tuple[str, float]:
    """``[METRIC:]PCT`` (``5``, ``5%``, ``tg_tps:3%``) -> (metric or "", fraction)."""
    from rtmatrix.results.diff import CheckError

    metric, _, pct = spec.rpartition(":")
    try:
        value = float(pct.strip().removesuffix("%")) / 100.0
    except ValueError:
        value = float("nan")
    if not (value > 0 if positive else value >= 0) or value != value or value >= 10:
        msg = f"{flag} {spec!r}: expected [METRIC:]PERCENT, e.g. 5% or tg_tps:3%"
        raise CheckError(msg)
    return metric.strip(), value


def _compare_option(spec: str, flag: str) -> tuple[str, Any]:
    """``KEY=VALUE``: VALUE as a TOML value (true, 3, "x", [..]) or else a plain string."""
    import tomllib

    from rtmatrix.results.diff import CheckError

    key, sep, raw = spec.partition("=")
    if not sep or not key.strip():
        msg = f"{flag} {spec!r}: expected KEY=VALUE, e.g. use_mmap=false"
        raise CheckError(msg)
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip(), value


def _compare_settings(args: argparse.Namespace) -> Any:
    from rtmatrix.metrics import registry
    from rtmatrix.results.diff import CheckError
    from rtmatrix.runner.compare import Settings

    metrics = tuple(dict.fromkeys(args.metric)) if args.metric else Settings().metrics
    bad = [m for m in metrics if registry.direction_of(m) is None]
    if bad:
        msg = f"--metric {bad}: no known direction; valid: {', '.join(registry.compared())}"
        raise CheckError(msg)
    if not 0.0 < args.alpha < 1.0:
        msg = f"--alpha {args.alpha}: expected a significance level between 0 and 1, e.g. 0.01"
        raise CheckError(msg)
    if args.rounds is not None and args.rounds < 2:
        msg = f"--rounds {args.rounds}: a paired test needs at least 2 rounds"
        raise CheckError(msg)
    if args.budget_s is not None and not args.budget_s > 0:
        msg = f"--budget-s {args.budget_s}: expected a positive number of seconds"
        raise CheckError(msg)
    return Settings(
        rounds=args.rounds,
        budget_s=args.budget_s,
        alpha=args.alpha,
        seed=args.seed,
        metrics=metrics,
        margin=dict(_compare_pct(m, "--margin", positive=True) for m in args.margin or []),
        min_effect=dict(
            _compare_pct(m, "--min-effect", positive=False) for m in args.min_effect or []
        ),
        mode=args.mode,
        turns=args.turns,
    )


def _side_spec(args: argparse.Namespace, name: str) -> Any:
    from rtmatrix.runner.compare import SideSpec

    flag = f"--{name}-option"
    options = dict(_compare_option(s, flag) for s in getattr(args, f"{name}_option") or [])
    return SideSpec(
        name,
        getattr(args, name),
        options,
        getattr(args, f"{name}_adapter"),
        getattr(args, f"{name}_label") or "",
    )


def _compare_filter(args: argparse.Namespace, matrix: Any) -> Any:
    import fnmatch

    from rtmatrix.results.diff import CheckError

    runtimes, globs = set(args.runtime or []), list(args.cell or [])
    dists = set(args.distribution or [])
    known = matrix.row_names()
    if runtimes - known:
        msg = f"--runtime {sorted(runtimes - known)} not in the matrix; valid: {sorted(known)}"
        raise CheckError(msg)
    if dists - matrix.distributions():
        msg = (f"--distribution {sorted(dists - matrix.distributions())}: no row runs it; "
               f"valid: {sorted(matrix.distributions())}")  # fmt: skip
        raise CheckError(msg)
    rows = matrix.rows_selected(runtimes, dists)

    def only(cell: Any) -> bool:
        if (runtimes or dists) and cell.runtime not in rows:
            return False
        return not globs or any(fnmatch.fnmatchcase(cell.key, g) for g in globs)

    return only


def _cmd_compare(args: argparse.Namespace) -> int:
    from rtmatrix.fixtures import FixtureError
    from rtmatrix.fixtures.spec import ExporterUnavailable
    from rtmatrix.matrix import MatrixError, load_matrix
    from rtmatrix.report.render import render_comparison
    from rtmatrix.report.upgrade import markdown
    from rtmatrix.results import ResultError, load_run
    from rtmatrix.results.comparison import EXIT_BAD_INPUT as BAD
    from rtmatrix.results.diff import CheckError
    from rtmatrix.runner.compare import CompareError, run_comparison

    try:
        settings = _compare_settings(args)
        a, b = _side_spec(args, "a"), _side_spec(args, "b")
        matrix = load_matrix(Path(args.matrix))
        only = _compare_filter(args, matrix)
        comparison, paths = run_comparison(matrix, a, b, settings, Path(args.results), only=only)
    except (CheckError, CompareError, MatrixError, ResultError, FixtureError) as exc:
        print(f"rtmatrix: error: {exc}", file=sys.stderr)
        return BAD
    except ExporterUnavailable as exc:  # the parent writes the fixtures: it needs the exporters
        print(f"rtmatrix: error: cannot prepare the fixtures here: {exc}", file=sys.stderr)
        return BAD
    doc = comparison.to_dict()
    summary = markdown(doc)
    out = Path(args.output)
    try:
        _write(str(out / "comparison.json"), comparison.to_json())
        _write(str(out / "summary.md"), summary)
        if args.markdown:
            _write(args.markdown, summary)
        runs = [load_run(paths["a"]), load_run(paths["b"])]
        html = render_comparison(doc, runs, out)
    except OSError as exc:
        print(f"rtmatrix: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return BAD
    if not args.quiet:
        sys.stdout.write(summary)
    for path in (out / "comparison.json", out / "summary.md", html, paths["a"], paths["b"]):
        print(f"rtmatrix: wrote {path}", file=sys.stderr)
    print(comparison.outcome.headline)
    return comparison.code


def _add_side_args(cmd: argparse.ArgumentParser, name: str, role: str) -> None:
    up = name.upper()
    cmd.add_argument(
        f"--{name}",
        required=True,
        metavar="PYTHON",
        help=f"side {up} ({role}): a Python executable with rtmatrix and {up}'s runtime versions",
    )
    cmd.add_argument(
        f"--{name}-option",
        action="append",
        metavar="KEY=VALUE",
        help=f"a runtime option for every cell on side {up} (repeatable)",
    )
    cmd.add_argument(
        f"--{name}-adapter",
        metavar="module:Class",
        help=f"side {up}'s adapter for every selected runtime row",
    )
    cmd.add_argument(f"--{name}-label", metavar="TEXT", help=f"a name for side {up} in reports")


def _add_compare_cmd(sub: Any) -> None:
    from rtmatrix.results.comparison import DEFAULT_METRICS, EXIT_BAD_INPUT
    from rtmatrix.results.paired import DEFAULT_ALPHA, DEFAULT_ROUNDS
    from rtmatrix.runner.compare import DEFAULT_MODE, MODES
    from rtmatrix.turns import DEFAULT_PATTERN, PATTERNS

    cmp = sub.add_parser(
        "compare",
        help="two environments or settings, K paired rounds -> regression / equivalent "
        "(exit 0 pass, 1 regression, 2 new failure, 3 inconclusive, 4 bad input)",
        description=COMPARE_DESCRIPTION
        % {"k": DEFAULT_ROUNDS, "metrics": ", ".join(DEFAULT_METRICS)},
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    assert isinstance(cmp, _Parser)
    cmp.usage_exit = EXIT_BAD_INPUT
    cmp.add_argument(
        "matrix",
        nargs="?",
        default="matrix/default.toml",
        help="matrix TOML (default: %(default)s)",
    )
    _add_side_args(cmp, "a", "base")
    _add_side_args(cmp, "b", "candidate")
    cmp.add_argument("--runtime", action="append", help=RUNTIME_HELP)
    cmp.add_argument("--distribution", action="append", metavar="DIST", help=DIST_HELP)
    cmp.add_argument(
        "--cell", action="append", metavar="GLOB", help="only cells whose key matches (repeatable)"
    )
    cmp.add_argument(
        "--metric", action="append", help="judge this metric (repeatable; default: see above)"
    )
    cmp.add_argument(
        "--rounds", type=int, metavar="K", help=f"rounds (default: {DEFAULT_ROUNDS}; see above)"
    )
    cmp.add_argument(
        "--budget-s", type=float, metavar="SECONDS", help="choose K from this time budget"
    )
    cmp.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help="family-wise significance level (Holm; default: %(default)s)",
    )
    cmp.add_argument(
        "--margin",
        action="append",
        metavar="[METRIC:]PCT",
        help="equivalence margin, e.g. 5%% or tg_tps:3%% (default: half the diff threshold)",
    )
    cmp.add_argument(
        "--min-effect",
        action="append",
        metavar="[METRIC:]PCT",
        help="smallest change that counts (default: a fifth of the diff threshold)",
    )
    cmp.add_argument("--seed", type=int, default=0, help="seed of the AB/BA order (default: 0)")
    cmp.add_argument(
        "--mode",
        choices=MODES,
        default=DEFAULT_MODE,
        help="alternate: both processes loaded at once, their counted repetitions taking "
        "turns A B B A; sequential: one process after the other; duet: both at once, each "
        "pinned to its own CPUs (default: %(default)s; see above)",
    )
    cmp.add_argument(
        "--turns",
        choices=PATTERNS,
        default=DEFAULT_PATTERN,
        help="alternate mode's turn pattern: abba (the round's order, then reversed) or abab "
        "(strict alternation) (default: %(default)s)",
    )
    cmp.add_argument("--results", default="results", help="side run files (default: %(default)s)")
    cmp.add_argument(
        "-o", "--output", default="reports/compare", help="report folder (default: %(default)s)"
    )
    cmp.add_argument("--markdown", metavar="FILE", help="also write the summary here")
    cmp.add_argument("-q", "--quiet", action="store_true", help="print the verdict only")
    cmp.set_defaults(func=_cmd_compare)


SELECT_DESCRIPTION = """\
The selection verdict: per model (real checkpoints first), each candidate (runtime row x dtype x
the settings it needed) is eligible or excluded, with every failed constraint and its figure;
the eligible ones are ordered by the Pareto front over quality (KLD) x speed (TG) x memory,
then the priorities, candidates within noise of each other tied (the report's ranking test).
Given several runs (a folder: history, upgrades), consistency is a criterion: TG spread across
runs, the place each candidate held, and whether each regression was explained by a recorded
change -- a consistent second place whose regressions remain explainable beats a one-time
winner that cannot be diagnosed.

Constraints: the newest run's matrix [selection] table over the defaults, then each
--constraint KEY=VALUE (a TOML value, else a string), e.g. max_kld=0.01,
max_package_size_mib=100, min_tg_tps=20@small-long-context, licenses=MIT,Apache-2.0,
priorities=tg,memory, max_peak_memory_mib=off. Every constraint is listed in the output with
where it came from and why its default is what it is.

Exit codes: 0 a candidate is eligible for the first model, 1 none is, 4 bad input."""


def _cmd_select(args: argparse.Namespace) -> int:
    from rtmatrix.results import ResultError
    from rtmatrix.selection import SelectionError, constraints_for, select

    try:
        runs = _report_runs(args.runs)
        selection = select(runs, constraints_for(runs, args.constraint or []))
    except (ResultError, SelectionError) as exc:
        print(f"rtmatrix: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = selection.to_markdown()
    outputs: list[tuple[str | None, Callable[[], str]]] = [
        (args.markdown, lambda: text),
        (args.json, lambda: json.dumps(selection.to_dict(), indent=1, allow_nan=False) + "\n"),
    ]
    try:
        for path, render in outputs:
            if path:
                _write(path, render())
                print(f"rtmatrix: wrote {path}", file=sys.stderr)
    except OSError as exc:
        print(f"rtmatrix: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not args.quiet:
        sys.stdout.write(text)
    return selection.exit_code


def _add_select_cmd(sub: Any) -> None:
    sel = sub.add_parser(
        "select",
        help="which runtime to pick under your constraints, and why the others are out "
        "(exit 0 a candidate is eligible, 1 none is, 4 bad input)",
        description=SELECT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    assert isinstance(sel, _Parser)
    sel.usage_exit = EXIT_BAD_INPUT
    sel.add_argument(
        "runs", nargs="+", metavar="RUN.json|FOLDER",
        help="result JSON files or folders of them; the newest run decides, the others add "
        "each candidate's history",
    )  # fmt: skip
    sel.add_argument(
        "-c", "--constraint", action="append", metavar="KEY=VALUE",
        help="a constraint over the matrix's [selection] table (repeatable; see above)",
    )  # fmt: skip
    sel.add_argument("--markdown", metavar="FILE", help="write the verdict as Markdown (CI)")
    sel.add_argument("--json", metavar="FILE", help="write the verdict as JSON")
    sel.add_argument("-q", "--quiet", action="store_true", help="do not print the verdict")
    sel.set_defaults(func=_cmd_select)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="rtmatrix",
        description="Run LLM runtimes against fixture models and record an acceptance matrix.",
        epilog="Example: rtmatrix run matrix/default.toml  (results/ + reports/index.html)",
    )
    p.add_argument("--version", action="version", version=f"rtmatrix {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_run_cmd, _add_merge_cmd, _add_report_cmd, _add_validate_cmd, _add_diff_cmd,
                _add_gate_cmd, _add_export_cmd, _add_fixtures_cmd, _add_compare_cmd,
                _add_runtimes_cmd, _add_select_cmd):  # fmt: skip
        add(sub)
    return p


def _add_run_cmd(sub: Any) -> None:
    run = sub.add_parser("run", help="run a matrix file; write results/<run>.json and a report")
    run.add_argument(
        "matrix",
        nargs="?",
        default="matrix/default.toml",
        help="matrix TOML file (default: %(default)s)",
    )
    run.add_argument("--results", default="results", help="results folder (default: %(default)s)")
    run.add_argument("--report", default="reports", help="report folder (default: %(default)s)")
    run.add_argument("--no-report", action="store_true", help="do not render the HTML report")
    run.add_argument("--runtime", action="append", help=RUNTIME_HELP)
    run.add_argument("--distribution", action="append", metavar="DIST", help=DIST_HELP)
    run.add_argument("--converter", action="append", metavar="NAME", help=CONVERTER_HELP)
    run.add_argument("--strict", action="store_true", help="exit 1 when any cell's verdict is FAIL")
    run.add_argument(
        "--resume",
        metavar="RUN.json",
        help="finish an interrupted run: only the cells it lacks are run",
    )
    run.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="run the matrix N rounds, each cell in a new worker process per round, and pool "
        "them (process medians: what `rtmatrix gate` needs, N >= 5, to judge performance)",
    )
    run.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the cells on a Dask cluster (tls://HOST:PORT; overrides [cluster] address)",
    )
    run.add_argument(
        "--target",
        action="append",
        metavar="LABEL",
        help="only the cells of this [[targets]] label (repeatable); without --cluster: this host",
    )
    run.set_defaults(func=_cmd_run)


def _add_merge_cmd(sub: Any) -> None:
    mrg = sub.add_parser("merge", help="merge runs made on different machines into one run file")
    mrg.add_argument("runs", nargs="+", metavar="[LABEL=]RUN.json", help="result JSON files")
    mrg.add_argument("-o", "--output", required=True, metavar="OUT.json", help="merged file")
    mrg.set_defaults(func=_cmd_merge)


def _add_report_cmd(sub: Any) -> None:
    rep = sub.add_parser("report", help="render result files as HTML")
    rep.add_argument(
        "runs",
        nargs="+",
        help="result JSON files or folders of them; several runs of one matrix add its history; "
        "a paired comparison's comparison.json (or its folder, e.g. reports/upgrade) marks its "
        "regressions on the history, linked to its page",
    )
    rep.add_argument("-o", "--output", default="reports", help="folder (default: %(default)s)")
    rep.add_argument(
        "--baseline",
        metavar="RUN.json",
        help="add an upgrade view of each run against this baseline run",
    )
    rep.set_defaults(func=_cmd_report)


def _add_validate_cmd(sub: Any) -> None:
    val = sub.add_parser("validate", help="check result files against the JSON Schema")
    val.add_argument("runs", nargs="*", help="result JSON files")
    val.add_argument("--schema", action="store_true", help="print the schema file's path")
    val.set_defaults(func=_cmd_validate)


def _add_diff_cmd(sub: Any) -> None:
    dif = sub.add_parser("diff", help="compare two runs cell by cell (asv-style marks)")
    _add_compare_args(dif)
    dif.add_argument("--json", action="store_true", help="JSON for tools instead of text")
    dif.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    dif.add_argument("-v", "--verbose", action="store_true", help="list unchanged metrics too")
    dif.set_defaults(func=_cmd_diff)


def _add_gate_cmd(sub: Any) -> None:
    gat = sub.add_parser(
        "gate",
        help="diff + thresholds -> exit 0 pass, 1 regression, 2 new failure, 3 nothing comparable",
        description="Exit codes: 0 pass, 1 significant regression, 2 new failure, "
        "3 nothing comparable or missing data, 4 bad input.",
    )
    assert isinstance(gat, _Parser)
    gat.usage_exit = EXIT_GATE_BAD_INPUT
    _add_compare_args(gat)
    gat.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    gat.add_argument("--markdown", metavar="FILE", help="write a Markdown summary")
    gat.add_argument("--json", metavar="FILE", help="write the diff as JSON")
    gat.add_argument("-q", "--quiet", action="store_true", help="print the verdict only")
    gat.set_defaults(func=_cmd_gate)


def _add_export_cmd(sub: Any) -> None:
    exp = sub.add_parser(
        "export",
        help="a run as a tidy table: one row per cell × metric × sample (CSV or JSON)",
        description="Columns: run_id, the cell's key fields, one per parameter, status, verdict, "
        "metric, sample, value, text, unit, source, reason (see rtmatrix.results.export).",
    )
    exp.add_argument("run", help="result JSON file")
    exp.add_argument("--format", choices=["csv", "json"], default="csv", help="(default: csv)")
    exp.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    exp.set_defaults(func=_cmd_export)


def _add_fixtures_cmd(sub: Any) -> None:
    fx = sub.add_parser("fixtures", help="list or build the canonical fixture models")
    fx.add_argument("action", choices=["list", "build"])
    fx.add_argument("--model", action="append", help="spec name (default: all)")
    fx.add_argument("--format", default="gguf", help="container (default: %(default)s)")
    fx.add_argument(
        "--dtype", action="append", default=None, help="dtype(s) to build (default: f32)"
    )
    fx.add_argument("--variant", default=None, help="a fixture-family variant (see list)")
    fx.set_defaults(func=_cmd_fixtures)


def _add_runtimes_cmd(sub: Any) -> None:
    rts = sub.add_parser(
        "runtimes",
        help="list the runtime rows and the [[runtimes]] options each takes (name, type, "
        "default, the runtime's own name and default)",
    )
    rts.add_argument("name", nargs="*", help="rows to show (default: all)")
    rts.add_argument(
        "--json", action="store_true",
        help="the registry as JSON: {runtimes: per row its adapter, PyPI distribution, rtmatrix "
        "extra, model container, converter and option names; converters: per converter its "
        "tool, PyPI distribution, rtmatrix extra and the rows it feeds} (what noxfile.py reads)",
    )  # fmt: skip
    rts.set_defaults(func=_cmd_runtimes)


def _runtimes_json(names: list[str]) -> int:
    """The adapter registry as each adapter declares itself, and the converter registry as each
    converter's home declares itself (imports adapters and homes, no runtime, no converter)."""
    import json

    from rtmatrix import converters
    from rtmatrix.adapters.base import BUILTIN_ADAPTERS, load_adapter_class
    from rtmatrix.options import declared

    rows: list[dict[str, Any]] = []
    for name, target in BUILTIN_ADAPTERS.items():
        if names and name not in names:
            continue
        cls, decl = load_adapter_class(target), declared(target)
        rows.append({
            "name": name, "adapter": target, "distribution": cls.distribution,
            "extra": cls.extra, "container": cls.container, "converter": cls.converter,
            "options": [o.name for o in decl.options] if decl else [],
        })  # fmt: skip
    convs = []
    for name in converters.HOMES:
        fed = [r["name"] for r in rows if r["converter"] == name]
        if names and not fed:
            continue
        mod = converters.home(name)
        convs.append({
            "name": name, "tool": mod.TOOL, "distribution": mod.DISTRIBUTION, "extra": mod.EXTRA,
            "container": mod.CONTAINER, "dtypes": sorted(mod.DTYPES),
            # where its version is chosen other than by installing the distribution
            "version_env": getattr(mod, "VERSION_ENV", None), "rows": fed,
            # its own quantizations, as the home declares them (converters.dtypes)
            "quantized": [{"dtype": d.name, "option": d.option, "bits": d.bits, "doc": d.doc}
                          for d in getattr(mod, "VENDOR_DTYPES", ())],
        })  # fmt: skip
    print(json.dumps({"runtimes": rows, "converters": convs}, indent=1))
    return 0


def _cmd_runtimes(args: argparse.Namespace) -> int:
    from rtmatrix.adapters.base import BUILTIN_ADAPTERS
    from rtmatrix.options import HARNESS, SCENARIO_OPTIONS, Option, declared

    unknown = sorted(set(args.name) - set(BUILTIN_ADAPTERS))
    if unknown:
        print(f"rtmatrix: error: unknown row(s) {', '.join(unknown)}; valid: "
              f"{', '.join(BUILTIN_ADAPTERS)}", file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    if args.json:
        return _runtimes_json(args.name)

    def line(o: Option) -> str:
        kinds = "|".join(o.kinds)
        choices = f" {{{', '.join(map(str, o.choices))}}}" if o.choices else ""
        own = f"; runtime: {o.runtime_name}" if o.runtime_name else ""
        own += f" (default {o.runtime_default})" if o.runtime_default else ""
        return f"  {o.name:26s} {kinds:9s} default {o.default!r:10s} {o.doc}{choices}{own}"

    for name, target in BUILTIN_ADAPTERS.items():
        if args.name and name not in args.name:
            continue
        decl = declared(target)
        print(f"{name}  ({target})")
        for o in decl.options if decl else ():
            print(line(o))
        if decl is not None and not decl.options:
            print("  (no options of its own)")
    print("every row also takes:")
    for o in HARNESS:
        print(line(o))
    print(f"  and the scenarios' own options: {', '.join(SCENARIO_OPTIONS)}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    from rtmatrix.fixtures import FixtureError
    from rtmatrix.fleet import FleetError
    from rtmatrix.locks import LockTimeout
    from rtmatrix.matrix import MatrixError
    from rtmatrix.results import ResultError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (MatrixError, ResultError, FixtureError, FleetError, LockTimeout) as exc:
        print(f"rtmatrix: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("rtmatrix: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code
