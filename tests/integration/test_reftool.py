"""llama-bench and llama-server built from the installed llama-cpp-python's sdist, run for real on
the tiny fixture GGUF.

The tools are built once per machine into the user's tool cache (about 5 min on 2 cores): the
folder is resolved when this module is imported, before the session fixture points
``RTMATRIX_CACHE_DIR`` at a throw-away folder for the fixtures. Skipped only when the tools cannot
be built here (the reason is the skip message).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from rtmatrix.fixtures import prepare_fixture
from rtmatrix.fixtures.cache import file_sha256
from rtmatrix.runtimes.llama_cpp import reftool as rt

pytestmark = pytest.mark.integration

TOOLS_DIR = rt.tools_root()  # at import: the user's cache, not the session's


@pytest.fixture(scope="module")
def tools() -> rt.ToolBuild:
    try:
        return rt.build_tools(cache_dir=TOOLS_DIR, log=print)
    except rt.ToolUnavailable as exc:
        pytest.skip(f"llama.cpp tools cannot be built here: {exc.reason}")


@pytest.fixture(scope="module")
def tiny_gguf() -> Path:
    return prepare_fixture("tiny", "tiny", "f32", None, "gguf").path


def test_the_build_is_from_the_installed_version_and_recorded(tools: rt.ToolBuild) -> None:
    from importlib.metadata import version

    m = tools.manifest
    assert tools.version == version("llama-cpp-python") == m["key"]["version"]
    assert m["cmake_options"]["GGML_NATIVE"] == "ON" and m["cmake_options"]["LLAMA_CURL"] == "OFF"
    assert m["sdist"]["file"] == f"llama_cpp_python-{tools.version}.tar.gz"
    for name in rt.BINARIES:
        rec = m["binaries"][name]
        assert file_sha256(tools.bin_dir / name) == rec["sha256"]
        assert "version:" in rec["version_output"], rec


def test_a_second_call_reuses_the_build(tools: rt.ToolBuild) -> None:
    t0 = time.perf_counter()
    again = rt.build_tools(cache_dir=TOOLS_DIR)
    assert not again.built and again.root == tools.root
    assert time.perf_counter() - t0 < 10


def test_llama_bench_on_the_tiny_fixture(tools: rt.ToolBuild, tiny_gguf: Path) -> None:
    res = rt.run_llama_bench(
        tools,
        tiny_gguf,
        threads=2,
        n_prompt=16,
        n_gen=8,
        repetitions=2,
        flash_attn="off",
        n_batch=None,
        n_ubatch=None,
        use_mmap=True,
        timeout_s=120,
    )
    assert set(res.phases) == {"pp", "tg"}
    for phase in res.phases.values():
        assert len(phase.samples_tps) == 2 and all(s > 0 for s in phase.samples_tps)
    assert res.command[:3] == [str(tools.llama_bench), "-m", str(tiny_gguf)]
    assert res.command[res.command.index("-fa") + 1] == "off"
    assert res.settings["flash_attn"] == 0 and res.settings["n_threads"] == 2
    assert res.settings["build_commit"] in res.tool_version
    ev = res.evidence()
    assert ev["tool"] == "llama-bench" and "-lm mmap" in ev["command"]


def test_llama_bench_failure_is_unavailable_with_the_tools_message(
    tools: rt.ToolBuild, tmp_path: Path
) -> None:
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(rt.ToolUnavailable, match="llama-bench exited"):
        rt.run_llama_bench(
            tools, bad, threads=1, n_prompt=8, n_gen=4, repetitions=1, flash_attn=None,
            n_batch=None, n_ubatch=None, use_mmap=None, timeout_s=60,
        )  # fmt: skip


def test_llama_server_runs_from_the_cache(tools: rt.ToolBuild) -> None:
    out = subprocess.run(
        [str(tools.llama_server), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=rt.tool_env(tools.bin_dir),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--parallel" in out.stdout + out.stderr
