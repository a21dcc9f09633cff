"""One llama-server process: the tool build it comes from, its exact command line, and its life
(spawned as a child of the worker, in the worker's process group, so a killed cell takes it
down; stopped with SIGTERM, then SIGKILL).

The command line follows the llama_cpp row's load rule (:func:`rtmatrix.runtimes.llama_cpp.
adapter.load_settings`): the same threads, a physical batch of ``min(n_ctx, n_batch)`` and a
logical batch of ``n_ctx``, CPU only; plus what makes it a service: ``--parallel N`` slots of
``n_ctx`` tokens each (``-c`` is the total, split between the slots), continuous batching,
``--metrics`` and ``/slots``; flash attention as the row's ``flash_attn`` says (``auto`` unless
set, as the llama_cpp row).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.runtimes.llama_cpp import reftool
from rtmatrix.runtimes.llama_server.client import request

BUILD_HINT = "python -m rtmatrix.runtimes.llama_server (builds llama-server into the tool cache)"
STOP_WAIT_S = 15.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def find_tools() -> reftool.ToolBuild:
    """The shared llama.cpp tool build of the installed binding's version, from the cache (the
    row's ``prepare`` builds it before the run's cells; a cell never builds it)."""
    try:
        return reftool.find_tools()
    except reftool.ToolUnavailable as exc:
        msg = f"llama-server is not available: {exc.reason}; or: `{BUILD_HINT}`"
        raise RuntimeUnavailable(msg) from exc


@dataclass(frozen=True)
class ServerConfig:
    """What one server is started with (recorded in the result beside the command line)."""

    model: str
    port: int
    n_ctx_per_slot: int
    parallel: int
    threads: int
    n_batch: int
    n_ubatch: int
    cont_batching: bool = True
    flash_attn: str = "auto"
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["extra_args"] = list(self.extra_args)
        out["n_ctx_total"] = self.n_ctx_per_slot * self.parallel
        return out


def server_argv(binary: Path, cfg: ServerConfig) -> list[str]:
    return [
        str(binary),
        "--model",
        cfg.model,
        "--host",
        "127.0.0.1",
        "--port",
        str(cfg.port),
        "--ctx-size",
        str(cfg.n_ctx_per_slot * cfg.parallel),
        "--parallel",
        str(cfg.parallel),
        "--cont-batching" if cfg.cont_batching else "--no-cont-batching",
        "--threads",
        str(cfg.threads),
        "--threads-batch",
        str(cfg.threads),
        "--batch-size",
        str(cfg.n_batch),
        "--ubatch-size",
        str(cfg.n_ubatch),
        "--flash-attn",
        cfg.flash_attn,
        "--n-gpu-layers",
        "0",
        "--metrics",
        "--slots",
        "--no-webui",
        *cfg.extra_args,
    ]


class ServerProcess:
    """A llama-server child of this process, logging to ``log_path``."""

    def __init__(self, argv: list[str], bin_dir: Path, log_path: Path, port: int) -> None:
        self.argv = argv
        self.port = port
        self.log_path = log_path
        self._env = reftool.tool_env(bin_dir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    def start(self, timeout_s: float) -> float:
        """Spawn and wait until ``/health`` answers 200 (503 while the model loads); the seconds
        it took. A server that exits or never answers is a RuntimeError carrying its log."""
        t0 = time.perf_counter()
        with self.log_path.open("wb") as log:
            # no new session: the server stays in the worker's process group
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env,
            )
        while time.perf_counter() - t0 < timeout_s:
            if self.proc.poll() is not None:
                msg = (
                    f"llama-server exited with code {self.proc.returncode} before it answered: "
                    f"{self.errors() or self.log_tail(600)}"
                )
                raise RuntimeError(msg)
            status, _ = request(self.port, "GET", "/health", timeout=2.0)
            if status == 200:
                self.startup_s = time.perf_counter() - t0
                return self.startup_s
            time.sleep(0.05)
        msg = f"llama-server did not answer /health within {timeout_s:.0f} s: {self.log_tail(600)}"
        raise RuntimeError(msg)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss(self) -> int | None:
        if self.proc is None or not self.alive():
            return None
        try:
            return int(psutil.Process(self.proc.pid).memory_info().rss)
        except psutil.Error:
            return None

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", errors="replace")
        except OSError:
            return ""

    def errors(self) -> str:
        """The log's error lines (llama.cpp's ``E`` level and ``error`` messages), joined."""
        lines = self.log_tail(20000).splitlines()
        found = [ln.strip() for ln in lines if " E " in ln or "error" in ln.lower()]
        return " | ".join(found[-4:])

    def stop(self) -> dict[str, Any]:
        if self.proc is None:
            return {"stopped": "never started"}
        if self.proc.poll() is not None:
            return {"stopped": "had already exited", "exit_code": self.proc.returncode}
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        how = "SIGTERM"
        try:
            self.proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_WAIT_S)
            how = f"SIGKILL after SIGTERM was ignored for {STOP_WAIT_S:.0f} s"
        return {
            "stopped": how,
            "exit_code": self.proc.returncode,
            "stop_s": time.perf_counter() - t0,
        }
