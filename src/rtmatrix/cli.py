"""Command line: thin argument parsing over the pipeline functions.

Exit codes: 0 success, 1 a run finished with FAIL verdicts (only with --strict),
2 bad input (matrix, result or model file), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rtmatrix import __version__

EXIT_OK, EXIT_NOT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


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
    print(f"rtmatrix: wrote {path}")
    if not args.no_report:
        print(f"rtmatrix: wrote {render_report([record], Path(args.report))}")
    outcomes: dict[str, int] = {}
    verdicts: dict[str, int] = {}
    for c in record["cells"]:
        outcomes[c["outcome"]["status"]] = outcomes.get(c["outcome"]["status"], 0) + 1
        verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
    print("rtmatrix: outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print("rtmatrix: verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    failed = verdicts.get("FAIL", 0)
    return EXIT_NOT_OK if (failed and args.strict) else EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from rtmatrix.report import render_report
    from rtmatrix.results import load_run

    runs = [load_run(Path(p)) for p in args.runs]
    print(f"rtmatrix: wrote {render_report(runs, Path(args.output))}")
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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
    rep.add_argument("runs", nargs="+", help="result JSON files")
    rep.add_argument("-o", "--output", default="reports", help="folder (default: %(default)s)")
    rep.set_defaults(func=_cmd_report)

    val = sub.add_parser("validate", help="check result files against the JSON Schema")
    val.add_argument("runs", nargs="*", help="result JSON files")
    val.add_argument("--schema", action="store_true", help="print the schema file's path")
    val.set_defaults(func=_cmd_validate)

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
