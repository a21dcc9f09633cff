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
                              the older flow: one run per version, then diff, report and gate;
                              the flow for a converter's distribution (see below)

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

Converters (``rtmatrix runtimes --json``, ``converters``: llama-cpp-python, onnxruntime-genai,
llmexport, optimum-intel) run in the parent rtmatrix process, not in compare's workers, so two
versions of one are compared by ``upgrade_diff``: each version's venv runs ``python -m rtmatrix
run MATRIX --converter NAME`` (the rows that converter feeds; ``--distribution DIST`` too where
DIST is also a runtime's), converting anew (conversions are cached by converter version), then
diff, report and gate. Its matrix defaults to ``matrix/architectures.toml``; the venvs get PyTorch's
CPU build, the converter's extra, the extras of its rows and ``reference``. optimum-intel lives in
a venv rtmatrix builds itself: the version's venv sets ``$RTMATRIX_OPTIMUM_INTEL_VERSION`` instead
of installing it. ``upgrade`` given a distribution that only a converter has (llmexport,
optimum-intel) says so and runs this flow; given one that is a runtime's too (llama-cpp-python,
onnxruntime-genai) it compares the runtime in paired rounds, as before.
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
#: a converter's upgrade: the architecture family, each checkpoint through each row's converter
CONVERTER_MATRIX = "matrix/architectures.toml"
CPU_TORCH = "https://download.pytorch.org/whl/cpu"
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


def _registry(session: nox.Session) -> dict[str, list[dict[str, Any]]]:
    """The adapter and converter registries as the adapters and the converters' homes declare
    them (``runtimes``, ``converters``; rtmatrix itself, no runtime, needed)."""
    session.install("-e", ".")
    out = session.run("rtmatrix", "runtimes", "--json", silent=True)
    text = out if isinstance(out, str) else ""
    found: dict[str, list[dict[str, Any]]] = (
        json.loads(text[text.index("{") :]) if "{" in text else {}
    )
    return {"runtimes": found.get("runtimes", []), "converters": found.get("converters", [])}


def _extra(session: nox.Session, distribution: str) -> str:
    """The rtmatrix extra that installs ``distribution``, from the adapter registry."""
    reg = _registry(session)
    rows = reg["runtimes"]
    extras = sorted({r["extra"] for r in rows if r["distribution"] == distribution})
    if not extras:
        known = sorted({r["distribution"] for r in rows})
        convs = sorted({c["distribution"] for c in reg["converters"]})
        session.error(f"unknown distribution {distribution!r}; valid: {', '.join(known)} "
                      f"(converters, through upgrade_diff: {', '.join(convs)})")  # fmt: skip
    return str(extras[0])


def _converter(session: nox.Session, distribution: str) -> dict[str, Any] | None:
    """The converter ``distribution`` carries (its registry entry), if any."""
    found = [c for c in _registry(session)["converters"] if c["distribution"] == distribution]
    return found[0] if found else None


def _is_runtime(session: nox.Session, distribution: str) -> bool:
    return any(r["distribution"] == distribution for r in _registry(session)["runtimes"])


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


def _upgrade_args(session: nox.Session, usage: str) -> tuple[str, str, str, str | None, list[str]]:
    """DIST OLD NEW [MATRIX] [flags...] from the positional arguments (MATRIX None if not given)."""
    args = list(session.posargs)
    if len(args) < 3 or any(a.startswith("-") for a in args[:3]):
        session.error(usage)
    dist, old, new, rest = args[0], args[1], args[2], args[3:]
    matrix_file = rest.pop(0) if rest and not rest[0].startswith("-") else None
    return dist, old, new, matrix_file, rest


def _venv_python(venv: Path) -> str:
    return str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))


def _version_venv(
    session: nox.Session, dist: str, version: str, conv: dict[str, Any] | None = None
) -> str:
    """``.nox/upgrade-<dist>-<version>``: rtmatrix (editable) and ``dist==version``; its python.
    For a converter (``conv``): PyPI's CPU torch first, then rtmatrix with the converter's extra,
    its rows' extras and ``reference``; a converter with a ``version_env`` (optimum-intel, in a
    venv rtmatrix builds) is not installed here: the run sets that variable instead."""
    if conv is None:
        extras = [_extra(session, dist)]
    else:
        rows = [r for r in _registry(session)["runtimes"] if r["name"] in conv["rows"]]
        extras = sorted({e for e in [conv["extra"], *(r["extra"] for r in rows)] if e})
        extras.append("reference")
    venv = Path(session.virtualenv.location).parent / f"upgrade-{dist}-{version}"
    if not Path(_venv_python(venv)).exists():
        session.run("python", "-m", "venv", str(venv))
    py = _venv_python(venv)
    if conv is not None:
        index = os.environ.get("RTMATRIX_TORCH_INDEX_URL", CPU_TORCH)
        session.run(py, "-m", "pip", "install", "torch", "--index-url", index, external=True)
    pin = [] if conv is not None and conv["version_env"] else [f"{dist}=={version}"]
    session.run(
        py, "-m", "pip", "install", "-e", f".[{','.join(extras)}]", *pin,
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
    dist, old, new, matrix_arg, flags = _upgrade_args(
        session,
        "usage: nox -s upgrade -- DIST OLD NEW [MATRIX] [rtmatrix compare flags ...]\n"
        "  e.g. nox -s upgrade -- onnxruntime 1.31.1 1.32.0 matrix/ci.toml --rounds 12",
    )
    conv = _converter(session, dist)
    if conv is not None and not _is_runtime(session, dist):
        # compare changes only the workers' interpreter; conversions run in the parent, so
        # both sides would read one version's files: one run per version is the only honest flow
        if flags:
            session.error(
                f"{dist} is converter {conv['name']}'s distribution, compared by upgrade_diff "
                "(one run per version; conversions run in the parent, not in compare's "
                "workers); rtmatrix compare flags do not apply: "
                f"nox -s upgrade_diff -- {dist} {old} {new} [MATRIX] [--fail ...]"
            )
        session.log(
            f"{dist} carries converter {conv['name']} ({conv['tool']}), which runs in the "
            "parent rtmatrix process, not in compare's workers: running the upgrade_diff flow "
            "(one run per version, then diff, report and gate)"
        )
        _upgrade_diff(session, dist, old, new, matrix_arg, flags, conv)
        return
    if conv is not None:
        session.log(f"{dist} also carries converter {conv['name']}: compare's workers change "
                    "the runtime only (conversions run in the parent); for the converter: "
                    f"nox -s upgrade_diff -- {dist} {old} {new}")  # fmt: skip
    matrix_file = matrix_arg or DEFAULT_MATRIX
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


def _run_version(
    session: nox.Session,
    dist: str,
    version: str,
    matrix_file: str,
    conv: dict[str, Any] | None = None,
) -> str:
    """Run the matrix rows of ``dist`` (for a converter: the rows it feeds, and the rows of
    ``dist`` where a runtime's too) in its version's venv; the result file's path."""
    py = _version_venv(session, dist, version, conv)
    rows, env = _rows(dist), {}
    if conv is not None:
        rows = ["--converter", conv["name"], *(rows if _is_runtime(session, dist) else [])]
        env["RTMATRIX_TORCH_INDEX_URL"] = os.environ.get("RTMATRIX_TORCH_INDEX_URL", CPU_TORCH)
        if conv["version_env"]:
            env[conv["version_env"]] = version
    before = set(RESULTS.glob("*.json"))
    session.run(
        py, "-m", "rtmatrix", "run", matrix_file, *rows, "--results", str(RESULTS),
        "--no-report", external=True, env=env,
    )  # fmt: skip
    return _new_result(session, before)


@nox.session(python=PYTHON)
def upgrade_diff(session: nox.Session) -> None:
    """Old vs new version as two separate runs: diff, report (``--baseline``) and gate, last;
    the flow for a converter's distribution (its rows, over matrix/architectures.toml)."""
    dist, old, new, matrix_arg, flags = _upgrade_args(
        session, "usage: nox -s upgrade_diff -- DIST OLD NEW [MATRIX] [--fail METRIC:PCT ...]"
    )
    _upgrade_diff(session, dist, old, new, matrix_arg, flags, _converter(session, dist))


def _upgrade_diff(
    session: nox.Session,
    dist: str,
    old: str,
    new: str,
    matrix_arg: str | None,
    flags: list[str],
    conv: dict[str, Any] | None,
) -> None:
    matrix_file = matrix_arg or (DEFAULT_MATRIX if conv is None else CONVERTER_MATRIX)
    session.install("-e", ".")  # diff, report and gate need no runtime
    if conv is not None:
        session.log(f"{dist} {old} vs {new}: converter {conv['name']} ({conv['tool']}) on "
                    f"{matrix_file}, rows {', '.join(conv['rows'])}; each version converts anew "
                    "(conversions are cached by converter version)")  # fmt: skip
    base = _run_version(session, dist, old, matrix_file, conv)
    cand = _run_version(session, dist, new, matrix_file, conv)
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
