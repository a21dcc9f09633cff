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

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.runtimes.llama_cpp import reftool
from rtmatrix.serverproc import ChildServer

BUILD_HINT = "python -m rtmatrix.runtimes.llama_server (builds llama-server into the tool cache)"


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
    #: llama.cpp's extra buffer types (weight repacking): ``--repack`` / ``--no-repack``
    extra_buffer_types: bool = True
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
        "--repack" if cfg.extra_buffer_types else "--no-repack",
        "--n-gpu-layers",
        "0",
        "--metrics",
        "--slots",
        "--no-webui",
        *cfg.extra_args,
    ]


class ServerProcess(ChildServer):
    """A llama-server child of this process, logging to ``log_path``; ready when ``/health``
    answers 200 (503 while the model loads)."""

    def __init__(self, argv: list[str], bin_dir: Path, log_path: Path, port: int) -> None:
        env = reftool.tool_env(bin_dir)
        super().__init__(argv, env, log_path, port, program="llama-server", ready_path="/health")

    def exit_detail(self) -> str:
        return self.errors() or self.log_tail(600)

    def errors(self) -> str:
        """The log's error lines (llama.cpp's ``E`` level and ``error`` messages), joined."""
        lines = self.log_tail(20000).splitlines()
        found = [ln.strip() for ln in lines if " E " in ln or "error" in ln.lower()]
        return " | ".join(found[-4:])
