"""llama-cpp-python's OpenAI-compatible server, as the ``serve`` scenario starts it.

:class:`LlamaCppServer` is the adapter's :class:`~rtmatrix.adapters.capabilities.ServerDriver`:
``python -m llama_cpp.server --config_file <json>`` serving the loaded model with the adapter's
own load settings (:func:`rtmatrix.runtimes.llama_cpp.adapter.load_settings`, ``model_path``
renamed ``model`` as the server's model settings call it); everything else is the server's
default (e.g. ``logits_all = true``) except ``interrupt_requests`` where the scenario sets it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.adapters.capabilities import ServerLaunch

if TYPE_CHECKING:
    from rtmatrix.runtimes.llama_cpp.adapter import LlamaCppAdapter

#: what ``llama-cpp-python[server]`` adds (checked before the server is started)
SERVER_DEPS = ("fastapi", "uvicorn", "sse_starlette", "pydantic_settings", "starlette_context")


def missing_deps() -> list[str]:
    return [m for m in SERVER_DEPS if importlib.util.find_spec(m) is None]


def server_model(settings: dict[str, Any]) -> dict[str, Any]:
    """The server's model entry from the adapter's ``Llama(...)`` settings."""
    model = {k: v for k, v in settings.items() if k != "model_path"}
    return {"model": settings["model_path"], **model}


class LlamaCppServer:
    program = "llama_cpp.server"
    api = "llama_cpp.server (OpenAI-compatible /v1/completions, server-sent events)"

    def __init__(
        self, adapter: LlamaCppAdapter, settings: dict[str, Any], *, extra_bufts: bool = True
    ) -> None:
        missing = missing_deps()
        if missing:
            msg = (
                "llama-cpp-python's server extras are not installed (missing "
                f"{', '.join(missing)}); pip install 'llama-cpp-python[server]'"
            )
            raise RuntimeUnavailable(msg)
        if not settings:
            msg = "llama_cpp.server: the adapter has loaded no model to serve"
            raise RuntimeError(msg)
        self._a = adapter
        self._model = server_model(settings)
        self._extra_bufts = extra_bufts

    def prompt_text(self, tokens: Sequence[int]) -> str:
        return self._a.text_of(tokens)

    def byte_tokens(self) -> list[int]:
        return self._a.byte_token_ids()

    def launch(self, workdir: Path, name: str, port: int, interrupt: bool | None) -> ServerLaunch:
        cfg: dict[str, Any] = {"host": "127.0.0.1", "port": port, "models": [self._model]}
        if interrupt is not None:
            cfg["interrupt_requests"] = interrupt
        path = workdir / f"{name}.json"
        path.write_text(json.dumps(cfg), "utf-8")
        cmd = ["-m", "llama_cpp.server"]
        if not self._extra_bufts:  # the server's settings cannot say it: a launcher does
            cmd = ["-m", "rtmatrix.runtimes.llama_cpp.server_main", "--no-extra-bufts"]
        return ServerLaunch([sys.executable, *cmd, "--config_file", str(path)], cfg)

    def logged_disconnect(self, log: str) -> bool:
        return "Disconnected from client" in log
