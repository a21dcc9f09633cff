"""The llama_server row's :class:`~rtmatrix.adapters.capabilities.ServerDriver`: how the ``serve``
scenario starts a llama-server of its own (the adapter's settings, a port of the scenario's
choosing) and what it can ask it beyond the OpenAI-compatible endpoints: the Prometheus
``/metrics`` and ``/slots`` (``ServerCounters``) and a greedy ``/completion`` over token ids with
the top log-probabilities of every position (``TokenServer``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from rtmatrix.adapters.capabilities import CounterReading, ServerLaunch
from rtmatrix.runtimes.llama_server import client
from rtmatrix.runtimes.llama_server.process import server_argv

if TYPE_CHECKING:
    from rtmatrix.runtimes.llama_server.adapter import LlamaServerAdapter

NO_INTERRUPT = (
    "llama-server has no interrupt setting: every request gets a slot of its own (--parallel), "
    "requests beyond the slots wait for one"
)


class LlamaServerDriver:
    program = "llama-server"
    api = "llama-server /v1/completions (OpenAI-compatible, server-sent events)"
    counters_doc = "llama-server GET /metrics (Prometheus text, --metrics) and GET /slots"
    counter_labels: Mapping[str, str] = MappingProxyType({"decode_calls": "llama_decode calls"})
    token_api = (
        "llama-server POST /completion (prompt = token ids, greedy top_k 1, n_probs: top "
        "log-probabilities before sampling)"
    )

    def __init__(self, adapter: LlamaServerAdapter) -> None:
        self._a = adapter

    def prompt_text(self, tokens: Sequence[int]) -> str:
        return self._a.text_of(tokens)

    def byte_tokens(self) -> list[int]:
        return self._a.byte_token_ids()

    def launch(self, workdir: Path, name: str, port: int, interrupt: bool | None) -> ServerLaunch:
        cfg = dataclasses.replace(self._a.server_config(), port=port)
        settings = self._a.build_settings() | cfg.to_dict()
        settings["interrupt_requests"] = NO_INTERRUPT
        settings["cache_prompt"] = "server default (on) for /v1/completions"
        return ServerLaunch(server_argv(self._a.binary, cfg), settings, self._a.server_env())

    def logged_disconnect(self, log: str) -> bool:
        return "cancel task" in log

    # -- ServerCounters ------------------------------------------------------------------------
    def counters(self, port: int) -> CounterReading:
        """``/metrics`` with the Prometheus names translated (``client.PROMETHEUS_NAMES``)."""
        return client.counter_reading(
            client.parse_prometheus(client.get_text(port, "/metrics", 5.0))
        )

    def slots(self, port: int) -> list[dict[str, Any]]:
        return [s.to_dict() for s in client.parse_slots(client.get_json(port, "/slots", 5.0))]

    # -- TokenServer ---------------------------------------------------------------------------
    def complete_tokens(
        self,
        port: int,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        n_probs: int,
    ) -> dict[str, Any]:
        return client.complete(port, prompt, max_tokens, banned, n_probs).to_dict()
