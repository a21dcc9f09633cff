"""nox sessions: rerun the matrix on every runtime upgrade, run the tests, lint, benchmark.

    nox -s tests              unit + integration tests (llama-cpp-python installed)
    nox -s matrix             the default matrix with every runtime extra installed
    nox -s llama_cpp          one runtime's rows in a venv with only its extra; likewise
    nox -s onnxruntime        onnxruntime, onnxruntime_genai and mlc (rows tvm_aot, tvm_jit)
    nox -s openvino_runtime   OpenVINO's runtime and GenAI engine on matrix/openvino-runtime.toml
    nox -s mobile             MNN and LiteRT beside llama.cpp on matrix/mobile.toml
    nox -s lint               ruff + mypy
    nox -s bench              rtmatrix's own costs (pytest-benchmark)
    nox -s fleet              a loopback Dask cluster (3 labelled workers, TLS) running
                              matrix/fleet.toml; ``-- --serve`` keeps it up for your own runs
    nox -s upgrade -- DIST OLD NEW [MATRIX] [rtmatrix compare flags ...]
                              the old and the new version of a runtime, each in its own venv,
                              compared in paired rounds (``rtmatrix compare``)
    nox -s upgrade_diff -- DIST OLD NEW [MATRIX] [--fail METRIC:PCT ...]
                              the older flow: one run per version, then diff, report and gate

Pass a matrix file after ``--``: ``nox -s matrix -- matrix/ci.toml``.

``upgrade``, e.g. ``nox -s upgrade -- onnxruntime 1.31.1 1.32.0``: the venvs are
``.nox/upgrade-<dist>-<version>`` (rtmatrix editable + ``dist==version``); the session's own venv
runs ``rtmatrix compare --a <old venv>/bin/python --b <new venv>/bin/python`` on the matrix rows
of that distribution, so each round starts one worker per version in a seeded random order.
Cells killed or contended are not judged on their figures (a killed cell is compared by its
outcome; a contended round is skipped and counted). ``reports/upgrade/`` gets
``comparison.json``, ``summary.md`` (a CI job summary) and ``index.html`` (the verdict first);
each side's run file lands in ``results/``. Flags after the matrix go to ``rtmatrix compare``
(``--rounds``, ``--budget-s``, ``--margin``, ``--markdown "$GITHUB_STEP_SUMMARY"`` …). The
session fails with compare's exit code: 1 regression, 2 new failure, 3 inconclusive.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True
PYTHON = "3.11"
# llama-cpp-python builds from source; libmtmd is not needed and skipping it saves ~1.5 min
BUILD_ENV = {"CMAKE_ARGS": os.environ.get("CMAKE_ARGS", "-DLLAVA_BUILD=OFF")}
DEFAULT_MATRIX = "matrix/default.toml"
# Which rows a distribution runs and which rtmatrix extra installs it are read from the adapter
# registry (``rtmatrix runtimes --json``: each adapter declares its distribution and extra), in
# the session's own venv — nothing here restates them.
#: upgrades whose matrix rows run int8 ONNX fixtures (the parent quantizes them with ORT)
QUANTIZED_WITH_ORT = (
    "onnxruntime", "onnxruntime-genai", "onnxruntime-openvino", "openvino", "openvino-genai",
)  # fmt: skip
#: what the parent itself needs to write a distribution's fixtures (beyond the ORT quantizer)
PARENT_EXTRA = {"mnn": "onnxruntime", "ai-edge-litert": "litert"}
RESULTS = Path("results")
UPGRADE_REPORT = Path("reports/upgrade")


def _matrix_args(session: nox.Session, default: str) -> list[str]:
    return session.posargs or [default]


def _registry(session: nox.Session) -> list[dict[str, Any]]:
    """The adapter registry as the adapters declare it (rtmatrix itself, no runtime, needed)."""
    session.install("-e", ".")
    out = session.run("rtmatrix", "runtimes", "--json", silent=True)
    text = out if isinstance(out, str) else ""
    rows: list[dict[str, Any]] = json.loads(text[text.index("[") :]) if "[" in text else []
    return rows


def _extra(session: nox.Session, distribution: str) -> str:
    """The rtmatrix extra that installs ``distribution``, from the adapter registry."""
    rows = _registry(session)
    extras = sorted({r["extra"] for r in rows if r["distribution"] == distribution})
    if not extras:
        known = sorted({r["distribution"] for r in rows})
        session.error(f"unknown distribution {distribution!r}; valid: {', '.join(known)}")
    return str(extras[0])


def _run_rows(session: nox.Session, distribution: str) -> None:
    """The matrix for one runtime's rows, in this session's venv with only its extra."""
    session.install("-e", f".[{_extra(session, distribution)}]", env=BUILD_ENV)
    session.run(
        "rtmatrix", "run", *_matrix_args(session, DEFAULT_MATRIX), "--distribution", distribution
    )


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    session.install("-e", ".[all,test]", env=BUILD_ENV)
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def matrix(session: nox.Session) -> None:
    session.install("-e", ".[all]", env=BUILD_ENV)
    session.run("rtmatrix", "run", *_matrix_args(session, DEFAULT_MATRIX))


@nox.session(python=PYTHON)
def architectures(session: nox.Session) -> None:
    """The architecture family through every row's own converter, judged against transformers
    (PyTorch's CPU build first: plain PyPI torch is a CUDA build of several GB; OpenVINO's
    exporter builds its own venv on first use, with the same CPU torch)."""
    cpu_torch = "https://download.pytorch.org/whl/cpu"
    session.install("torch", "--index-url", cpu_torch)
    session.install("-e", ".[all]", env=BUILD_ENV)
    session.run("rtmatrix", "run", *_matrix_args(session, "matrix/architectures.toml"),
                env={"RTMATRIX_TORCH_INDEX_URL": cpu_torch})  # fmt: skip


@nox.session(python=PYTHON)
def llama_cpp(session: nox.Session) -> None:
    _run_rows(session, "llama-cpp-python")


@nox.session(python=PYTHON)
def onnxruntime(session: nox.Session) -> None:
    _run_rows(session, "onnxruntime")


@nox.session(python=PYTHON)
def onnxruntime_genai(session: nox.Session) -> None:
    _run_rows(session, "onnxruntime-genai")


@nox.session(python=PYTHON)
def mlc(session: nox.Session) -> None:
    """Apache TVM: the ahead-of-time and the JIT row."""
    _run_rows(session, "apache-tvm")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("-e", ".[dev]", env=BUILD_ENV)
    session.run("ruff", "check", "src", "tests", "benchmarks", "noxfile.py")
    session.run("mypy")
    session.run("mypy", "--strict", "benchmarks")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    session.install("-e", ".[llama-cpp,test]", env=BUILD_ENV)
    session.run(
        "pytest", "tests/benchmarks", "--benchmark-enable", "-p", "no:randomly", *session.posargs
    )


# --------------------------------------------------------------------------- upgrade


def _upgrade_args(session: nox.Session, usage: str) -> tuple[str, str, str, str, list[str]]:
    """DIST OLD NEW [MATRIX] [flags...] from the positional arguments."""
    args = list(session.posargs)
    if len(args) < 3 or any(a.startswith("-") for a in args[:3]):
        session.error(usage)
    dist, old, new, rest = args[0], args[1], args[2], args[3:]
    matrix_file = rest.pop(0) if rest and not rest[0].startswith("-") else DEFAULT_MATRIX
    return dist, old, new, matrix_file, rest


def _venv_python(venv: Path) -> str:
    return str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))


def _version_venv(session: nox.Session, dist: str, version: str) -> str:
    """``.nox/upgrade-<dist>-<version>``: rtmatrix (editable) and ``dist==version``; its python."""
    extra = _extra(session, dist)
    venv = Path(session.virtualenv.location).parent / f"upgrade-{dist}-{version}"
    if not Path(_venv_python(venv)).exists():
        session.run("python", "-m", "venv", str(venv))
    py = _venv_python(venv)
    session.run(
        py, "-m", "pip", "install", "-e", f".[{extra}]", f"{dist}=={version}",
        external=True, env=BUILD_ENV,
    )  # fmt: skip
    return py


def _parent_install(dist: str) -> str:
    """The parent's install: rtmatrix with what its fixture exporters need for ``dist``'s rows."""
    if dist in PARENT_EXTRA:
        return f".[{PARENT_EXTRA[dist]}]"
    return ".[onnxruntime]" if dist in QUANTIZED_WITH_ORT else "."


def _rows(dist: str) -> list[str]:
    return ["--distribution", dist]


@nox.session(python=PYTHON)
def upgrade(session: nox.Session) -> None:
    """Old vs new version of one runtime: two venvs, then ``rtmatrix compare`` in paired
    rounds (the verdict leads the report; killed or contended cells cannot fail it)."""
    dist, old, new, matrix_file, flags = _upgrade_args(
        session,
        "usage: nox -s upgrade -- DIST OLD NEW [MATRIX] [rtmatrix compare flags ...]\n"
        "  e.g. nox -s upgrade -- onnxruntime 1.31.1 1.32.0 matrix/ci.toml --rounds 12",
    )
    # the parent: rounds, judging, report, fixtures; it imports no runtime, but int8 ONNX
    # fixtures are quantized (in a child of the parent) with onnxruntime's quantizer
    session.install("-e", _parent_install(dist))
    py_old, py_new = _version_venv(session, dist, old), _version_venv(session, dist, new)
    out = UPGRADE_REPORT
    session.log(f"comparing {dist} {old} ({py_old}) with {new} ({py_new}); report in {out}/")
    session.run(
        "rtmatrix", "compare", matrix_file, *_rows(dist),
        "--a", py_old, "--a-label", f"{dist} {old}", "--b", py_new, "--b-label", f"{dist} {new}",
        "--results", str(RESULTS), "-o", str(out), *flags,
    )  # fmt: skip


# The diff-based flow (one run per version at different times, then ``rtmatrix diff`` and
# ``gate``), kept for comparison with the paired design; its samples come from one process
# per side, which the diff says.


def _new_result(session: nox.Session, before: set[Path]) -> str:
    new = sorted(set(RESULTS.glob("*.json")) - before, key=lambda p: p.stat().st_mtime)
    if not new:
        session.error(f"rtmatrix run wrote no result file in {RESULTS}/")
    return str(new[-1])


def _run_version(session: nox.Session, dist: str, version: str, matrix_file: str) -> str:
    """Run the matrix rows of ``dist`` in its version's venv; the result file's path."""
    py = _version_venv(session, dist, version)
    before = set(RESULTS.glob("*.json"))
    session.run(
        py, "-m", "rtmatrix", "run", matrix_file, *_rows(dist), "--results", str(RESULTS),
        "--no-report", external=True,
    )  # fmt: skip
    return _new_result(session, before)


@nox.session(python=PYTHON)
def upgrade_diff(session: nox.Session) -> None:
    """Old vs new version as two separate runs: diff, report (``--baseline``) and gate, last."""
    dist, old, new, matrix_file, flags = _upgrade_args(
        session, "usage: nox -s upgrade_diff -- DIST OLD NEW [MATRIX] [--fail METRIC:PCT ...]"
    )
    session.install("-e", ".")  # diff, report and gate need no runtime
    base = _run_version(session, dist, old, matrix_file)
    cand = _run_version(session, dist, new, matrix_file)
    out = UPGRADE_REPORT / "diff"
    session.run("rtmatrix", "diff", base, cand, *flags, "-o", str(out / "diff.txt"))
    session.run("rtmatrix", "diff", base, cand, *flags, "--json", "-o", str(out / "diff.json"))
    session.run("rtmatrix", "report", cand, "--baseline", base, "-o", str(out))
    session.run(
        "rtmatrix", "gate", base, cand, *flags,
        "--junit", str(out / "gate.xml"), "--markdown", str(out / "gate.md"),
    )  # fmt: skip


@nox.session(python=PYTHON)
def serve(session: nox.Session) -> None:
    """Lifecycle matrix (stream, cancel, serve): llama-cpp-python with its server extras."""
    session.install("-e", ".[llama-cpp,llama-cpp-server]", env=BUILD_ENV)
    session.run("rtmatrix", "run", *_matrix_args(session, "matrix/lifecycle.toml"))


@nox.session(python=PYTHON)
def openvino(session: nox.Session) -> None:
    """ONNX Runtime + OpenVINO EP (delegate on) and its CPU-EP control in a venv of its own:
    onnxruntime-openvino installs the same `onnxruntime` module as the plain wheel."""
    session.install("-e", ".[onnxruntime-openvino,test]")
    session.run("pytest", "tests/integration/test_openvino.py", "tests/unit/test_partitions.py")
    session.run("rtmatrix", "run", *_matrix_args(session, "matrix/openvino.toml"))


@nox.session(python=PYTHON)
def openvino_runtime(session: nox.Session) -> None:
    """OpenVINO's own runtime (row ``openvino``) and OpenVINO GenAI's engine (``openvino_genai``)
    beside ONNX Runtime on the same ONNX files."""
    session.install("-e", ".[openvino,openvino-genai,onnxruntime]", env=BUILD_ENV)
    session.run("rtmatrix", "run", *_matrix_args(session, "matrix/openvino-runtime.toml"))


@nox.session(python=PYTHON)
def mobile(session: nox.Session) -> None:
    """The mobile runtimes, MNN (rows ``mnn``, ``mnn_w8``, ``mnn_w4``) and LiteRT (``litert``,
    XNNPACK on and off), beside llama.cpp on the same fixture family."""
    session.install("-e", ".[mnn,litert,llama-cpp]", env=BUILD_ENV)
    session.run("rtmatrix", "run", *_matrix_args(session, "matrix/mobile.toml"))


@nox.session(python=PYTHON)
def fleet(session: nox.Session) -> None:
    """A Dask scheduler + three labelled workers on loopback with temporary TLS certificates
    (the cluster the tests use), then matrix/fleet.toml run across it. ``-- --serve`` keeps the
    cluster up instead, printing its address and the TLS variables to connect with."""
    session.install("-e", ".[fleet,llama-cpp]", env=BUILD_ENV)
    args = ["--labels", "lab-a,lab-b,lab-c"]
    if "--serve" not in session.posargs:
        args += ["--run", *(_matrix_args(session, "matrix/fleet.toml")[:1])]
    session.run("python", "-m", "rtmatrix.fleet.local", *args)
