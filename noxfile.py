"""nox sessions: rerun the matrix on every runtime upgrade, run the tests, lint, benchmark.

    nox -s tests        unit + integration tests (llama-cpp-python installed)
    nox -s matrix       the default matrix with every runtime extra installed
    nox -s llama_cpp    the default matrix for the llama.cpp row only
    nox -s lint         ruff + mypy
    nox -s bench        rtmatrix's own costs (pytest-benchmark)

Pass a matrix file after ``--``: ``nox -s matrix -- matrix/ci.toml``.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True
PYTHON = "3.11"
# llama-cpp-python builds from source; libmtmd is not needed and skipping it saves ~1.5 min
BUILD_ENV = {"CMAKE_ARGS": os.environ.get("CMAKE_ARGS", "-DLLAVA_BUILD=OFF")}


def _matrix_args(session: nox.Session, default: str) -> list[str]:
    return session.posargs or [default]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    session.install("-e", ".[llama-cpp,test]", env=BUILD_ENV)
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def matrix(session: nox.Session) -> None:
    session.install("-e", ".[all]", env=BUILD_ENV)
    session.run("rtmatrix", "run", *_matrix_args(session, "matrix/default.toml"))


@nox.session(python=PYTHON)
def llama_cpp(session: nox.Session) -> None:
    session.install("-e", ".[llama-cpp]", env=BUILD_ENV)
    session.run(
        "rtmatrix", "run", *_matrix_args(session, "matrix/default.toml"), "--runtime", "llama_cpp"
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("-e", ".[dev]", env=BUILD_ENV)
    session.run("ruff", "check", "src", "tests", "noxfile.py")
    session.run("mypy")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    session.install("-e", ".[llama-cpp,test]", env=BUILD_ENV)
    session.run(
        "pytest", "tests/benchmarks", "--benchmark-enable", "-p", "no:randomly", *session.posargs
    )
