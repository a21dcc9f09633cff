"""llama.cpp's streaming and abort paths, for the ``stream`` and ``cancel`` scenarios.

:class:`LlamaCppBackend` is the adapter's :class:`~rtmatrix.adapters.capabilities.StreamBackend`:
llama-cpp-python's own ``create_completion(stream=True)`` over token ids, with its per-token
``StoppingCriteria`` as the hook. :func:`abort_prefill` stops a running ``llama_decode`` through
llama.cpp's abort callback (the adapter's ``Abortable`` capability).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from time import perf_counter as clock
from typing import TYPE_CHECKING, Any

from rtmatrix.adapters.capabilities import OnPrefill, OnToken

if TYPE_CHECKING:
    from rtmatrix.runtimes.llama_cpp.adapter import LlamaCppAdapter


class LlamaCppBackend:
    runtime = "llama_cpp"
    api = (
        "llama_cpp.Llama.create_completion(prompt=<token ids>, stream=True, temperature=0), "
        "banned ids masked by logit_bias; per-token hook: a StoppingCriteria"
    )
    cancel_modes: Mapping[str, str] = {
        "stop": "the binding's per-token StoppingCriteria returns True once the cancel is "
        "requested (checked right after each sampled token)",
        "close": "the consumer closes the stream iterator (GeneratorExit) at the next chunk it "
        "receives after the cancel is requested",
    }
    missing_modes: Mapping[str, str] = {}
    state_doc = (
        "llama_state_get_size (bytes a state save writes; grows with the KV cells in use), "
        "llama_memory_seq_pos_max of sequence 0 (-1 = empty), Llama.n_tokens"
    )

    def __init__(self, adapter: LlamaCppAdapter) -> None:
        self._a = adapter

    def open_stream(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        on_token: OnToken,
        on_prefill: OnPrefill,
    ) -> Iterator[Any]:
        chunks = self._a.stream_completion(prompt, max_tokens, banned, on_token)

        def _stream() -> Iterator[Any]:
            # the binding's generator does its prefill inside the first pull
            on_prefill()
            yield from chunks

        return _stream()

    def chunk_text(self, chunk: Any) -> str:
        try:
            return str(chunk["choices"][0]["text"])
        except (KeyError, IndexError, TypeError):
            return ""

    def byte_tokens(self) -> list[int]:
        return self._a.byte_token_ids()

    def generated(self, n_prompt: int) -> list[int] | None:
        return self._a.sequence_tokens()[n_prompt:]

    def release(self) -> None:
        self._a.release_sequence()

    def state(self) -> dict[str, int | None]:
        return dict(self._a.memory_state())


def abort_prefill(
    a: LlamaCppAdapter, prompt: Sequence[int], delay_s: float | None
) -> dict[str, Any]:
    """Run ``llama_decode`` on ``prompt`` in a thread; after ``delay_s`` set the flag the abort
    callback polls between graph nodes (``llama_decode`` then returns 2)."""
    flag = threading.Event()
    res: dict[str, Any] = {}
    a.release_sequence()
    a.set_abort(flag.is_set)
    t_flag: float | None = None
    try:

        def _run() -> None:
            res["t_start"] = clock()
            res["rc"] = a.decode_status(list(prompt))
            res["t_end"] = clock()

        th = threading.Thread(target=_run, name="rtmatrix-prefill")
        th.start()
        if delay_s is not None:
            while "t_start" not in res and th.is_alive():
                th.join(0.0002)  # until the decode is under way
            target = res.get("t_start", clock()) + delay_s
            while th.is_alive() and clock() < target:
                th.join(min(0.0005, max(0.0, target - clock())))
            if th.is_alive():
                t_flag = clock()
                flag.set()
        th.join()
    finally:
        a.set_abort(None)
    state_after = a.memory_state()
    a.release_sequence()
    rc = int(res.get("rc", -999))
    out: dict[str, Any] = {
        "rc": rc,
        "aborted": rc == 2,
        "prefill_s": res["t_end"] - res["t_start"],
        "due_s": delay_s,
        "flag_s": t_flag - res["t_start"] if t_flag is not None else None,
        "flag_late_s": t_flag - res["t_start"] - delay_s
        if t_flag is not None and delay_s is not None
        else None,
        "latency_s": res["t_end"] - t_flag if rc == 2 and t_flag is not None else None,
        "state_after_abort": state_after,
        "how": "llama_set_abort_callback: polled between graph nodes of llama_decode",
    }
    if delay_s is not None and rc == 0:
        out["why"] = "the prefill finished before the cancel was requested"
    elif rc not in (0, 2):
        out["why"] = f"llama_decode returned {rc}"
    return out
