"""Fixture work in a child process: every way the child can end becomes a named error."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rtmatrix.fixtures.child import how_it_ended, require_file, run_child
from rtmatrix.fixtures.spec import ExporterUnavailable, FixtureError

CHILD = "tests.helpers.child_misbehaves"


@pytest.fixture(autouse=True)
def _in_repo(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)  # `python -m tests.helpers...` finds the test helpers from here


def test_how_it_ended_names_the_signal() -> None:
    assert how_it_ended(0) == "exit 0" and how_it_ended(1) == "exit 1"
    assert how_it_ended(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert how_it_ended(-200) == "killed by signal 200"


def test_a_clean_child_returns_its_output() -> None:
    assert run_child(CHILD, ["ok"], "work", 60).strip() == "done"


@pytest.mark.parametrize(
    ("mode", "how"),
    [("segv", "killed by SIGSEGV"), ("abort", "killed by SIGABRT"), ("raise", "exit 1")],
)
def test_a_dying_child_is_a_fixture_error_naming_the_work(mode: str, how: str) -> None:
    with pytest.raises(FixtureError) as info:
        run_child(CHILD, [mode], "int8 quantization of ONNX fixture tiny/int8", 60)
    msg = str(info.value)
    assert msg.startswith("int8 quantization of ONNX fixture tiny/int8 failed in its child")
    assert f"({how})" in msg
    if mode == "raise":
        assert "RuntimeError: quantizer exploded" in msg  # the child's traceback tail


def test_a_missing_runtime_in_the_child_is_unavailable() -> None:
    with pytest.raises(ExporterUnavailable, match=r"^work: needs onnxruntime; pip install"):
        run_child(CHILD, ["unavailable"], "work", 60)


def test_a_hanging_child_is_killed_at_the_timeout() -> None:
    with pytest.raises(FixtureError, match=r"work: the child process ran past 1 s and was killed"):
        run_child(CHILD, ["hang"], "work", 1)


def test_exit_0_without_the_output_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match=r"exited 0 but wrote no model\.onnx"):
        require_file(tmp_path / "model.onnx", "work")
