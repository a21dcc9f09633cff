"""The llama_server row's command line and tool lookup, without starting a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.runtimes.llama_server import process


def test_the_command_line_is_a_service_of_n_slots() -> None:
    cfg = process.ServerConfig(
        model="/m.gguf",
        port=4321,
        n_ctx_per_slot=512,
        parallel=4,
        threads=2,
        n_batch=512,
        n_ubatch=512,
        extra_args=("--verbose",),
    )
    argv = process.server_argv(Path("/bin/llama-server"), cfg)
    pairs = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}
    assert argv[0] == "/bin/llama-server" and pairs["--host"] == "127.0.0.1"
    assert pairs["--ctx-size"] == "2048" and pairs["--parallel"] == "4"  # -c is split by slots
    assert {"--cont-batching", "--metrics", "--slots", "--no-webui"} <= set(argv)
    assert pairs["--flash-attn"] == "auto" and argv[-1] == "--verbose"
    assert cfg.to_dict()["n_ctx_total"] == 2048
    off = process.server_argv(Path("x"), process.ServerConfig("m", 1, 64, 1, 1, 64, 64, False))
    assert "--no-cont-batching" in off
    assert "--repack" in argv and "--no-repack" not in argv  # llama.cpp's default, explicit
    no_repack = process.ServerConfig("m", 1, 64, 1, 1, 64, 64, extra_buffer_types=False)
    assert "--no-repack" in process.server_argv(Path("x"), no_repack)


def test_a_missing_build_is_unavailable_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTMATRIX_TOOLS_DIR", str(tmp_path))
    with pytest.raises(RuntimeUnavailable, match=r"python -m rtmatrix.runtimes.llama_server"):
        process.find_tools()
