"""Command line: thin argument parsing over the pipeline functions.

Exit codes: 0 success, 1 a run finished with FAIL verdicts (only with --strict),
2 bad input (matrix, result or model file, a bad --fail), 130 interrupted.
``rtmatrix gate`` has its own: 0 pass, 1 significant regression, 2 new failure, 3 nothing
comparable or missing data, 4 bad input (so that a typo is not read as a new failure).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rtmatrix import __version__

if TYPE_CHECKING:
    from rtmatrix.results.diff import Check, RunDiff

EXIT_OK, EXIT_NOT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_GATE_BAD_INPUT = 4


class _Parser(argparse.ArgumentParser):
    """argparse with a per-command exit code for usage errors (``gate`` uses 4, not 2)."""

    usage_exit = EXIT_BAD_INPUT

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(self.usage_exit, f"{self.prog}: error: {message}\n")


def _cmd_run(args: argparse.Namespace) -> int:
    from rtmatrix.matrix import load_matrix
    from rtmatrix.report import render_report
    from rtmatrix.results import load_run
    from rtmatrix.runner import run_matrix

    matrix = load_matrix(Path(args.matrix))
    runtimes = set(args.runtime or [])
    known = {rt.name for rt in matrix.runtimes}
    if runtimes - known:
        print(
            f"rtmatrix: --runtime {sorted(runtimes - known)} not in {args.matrix}; "
            f"valid: {', '.join(sorted(known))}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    resume = Path(args.resume) if args.resume else None
    if resume is not None:
        load_run(resume)  # a corrupt or newer file is refused before anything runs
    path = run_matrix(
        matrix,
        Path(args.results),
        only=(lambda c: c.runtime in runtimes) if runtimes else None,
        resume=resume,
    )
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


def _report_runs(paths: list[str]) -> list[dict[str, Any]]:
    """Run records from files and folders: a folder gives every ``*.json`` in it that is a run
    record (others, such as a diff or a baseline kept beside them, are skipped, saying so)."""
    from rtmatrix.results import ResultError, load_run

    runs = []
    for given in map(Path, paths):
        if not given.is_dir():
            runs.append(load_run(given))
            continue
        for path in sorted(given.glob("*.json")):
            try:
                runs.append(load_run(path))
            except ResultError as exc:
                print(f"rtmatrix: skipped {path}: {exc}", file=sys.stderr)
    if not runs:
        msg = f"no run records in {', '.join(paths)}"
        raise ResultError(msg)
    return runs


def _cmd_report(args: argparse.Namespace) -> int:
    from rtmatrix.report import render_report
    from rtmatrix.results import load_run

    runs = _report_runs(args.runs)
    baseline = load_run(Path(args.baseline)) if args.baseline else None
    print(f"rtmatrix: wrote {render_report(runs, Path(args.output), baseline=baseline)}")
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


def _checks(
    args: argparse.Namespace, base: dict[str, Any], cand: dict[str, Any]
) -> dict[str, Check]:
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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="rtmatrix",
        description="Run LLM runtimes against fixture models and record an acceptance matrix.",
        epilog="Example: rtmatrix run matrix/default.toml  (results/ + reports/index.html)",
    )
    p.add_argument("--version", action="version", version=f"rtmatrix {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    run.add_argument("--runtime", action="append", help="only this runtime row (repeatable)")
    run.add_argument("--strict", action="store_true", help="exit 1 when any cell's verdict is FAIL")
    run.add_argument(
        "--resume",
        metavar="RUN.json",
        help="finish an interrupted run: only the cells it lacks are run",
    )
    run.set_defaults(func=_cmd_run)

    rep = sub.add_parser("report", help="render result files as HTML")
    rep.add_argument(
        "runs",
        nargs="+",
        help="result JSON files or folders of them; several runs of one matrix add its history",
    )
    rep.add_argument("-o", "--output", default="reports", help="folder (default: %(default)s)")
    rep.add_argument(
        "--baseline",
        metavar="RUN.json",
        help="add an upgrade view of each run against this baseline run",
    )
    rep.set_defaults(func=_cmd_report)

    val = sub.add_parser("validate", help="check result files against the JSON Schema")
    val.add_argument("runs", nargs="*", help="result JSON files")
    val.add_argument("--schema", action="store_true", help="print the schema file's path")
    val.set_defaults(func=_cmd_validate)

    dif = sub.add_parser("diff", help="compare two runs cell by cell (asv-style marks)")
    _add_compare_args(dif)
    dif.add_argument("--json", action="store_true", help="JSON for tools instead of text")
    dif.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    dif.add_argument("-v", "--verbose", action="store_true", help="list unchanged metrics too")
    dif.set_defaults(func=_cmd_diff)

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

    fx = sub.add_parser("fixtures", help="list or build the canonical fixture models")
    fx.add_argument("action", choices=["list", "build"])
    fx.add_argument("--model", action="append", help="spec name (default: all)")
    fx.add_argument("--format", default="gguf", help="container (default: %(default)s)")
    fx.add_argument(
        "--dtype", action="append", default=None, help="dtype(s) to build (default: f32)"
    )
    fx.add_argument("--variant", default=None, help="a fixture-family variant (see list)")
    fx.set_defaults(func=_cmd_fixtures)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from rtmatrix.fixtures import FixtureError
    from rtmatrix.matrix import MatrixError
    from rtmatrix.results import ResultError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (MatrixError, ResultError, FixtureError) as exc:
        print(f"rtmatrix: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("rtmatrix: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code
