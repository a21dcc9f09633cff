"""OpenVINO GenAI's streaming path, for the ``stream`` and ``cancel`` scenarios.

:class:`OvGenaiBackend` is the adapter's :class:`~rtmatrix.adapters.capabilities.StreamBackend`:
``LLMPipeline.generate`` runs in a thread of its own with a streamer (``StreamerBase``) that hands
each id to the iterator the scenario reads, and answers the engine ``RUNNING``, ``STOP`` (the
scenario's ``on_token`` asked to stop: mode ``stop``) or ``CANCEL`` (the iterator was closed:
mode ``close``) — the engine's own way to end a generation early.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.adapters.capabilities import OnPrefill, OnToken

_DONE = object()
#: how long closing a stream waits for the engine's thread to return, in seconds
JOIN_S = 60.0


class OvGenaiBackend:
    """``LLMPipeline.generate(ids, config, streamer)`` in a thread; ids arrive through a queue."""

    runtime = "openvino_genai"
    api = (
        "openvino_genai.LLMPipeline.generate(ids, GenerationConfig, streamer) in a thread; the "
        "StreamerBase.write callback hands each id over and returns RUNNING / STOP / CANCEL"
    )
    cancel_modes: Mapping[str, str] = {
        "stop": "the streamer returns StreamingStatus.STOP for the id after which the scenario "
        "asked to stop; the engine ends the generation there",
        "close": "closing the stream makes the streamer return StreamingStatus.CANCEL at the "
        "next id; the engine ends the generation and drops it",
    }
    missing_modes: Mapping[str, str] = {}
    state_doc = "none: LLMPipeline exposes no KV-cache size or token count between calls"
    #: the non-streamed path the stream scenario compares the streamed ids with (UnstreamedRun)
    reference_api = "LLMPipeline.generate(ids, GenerationConfig) without a streamer"

    def __init__(self, og: Any, ov: Any, pipe: Any, eos: int) -> None:
        if pipe is None:
            msg = "openvino_genai: no pipeline is loaded to stream from"
            raise RuntimeUnavailable(msg)
        self._og, self._ov, self._pipe, self._eos = og, ov, pipe, eos
        self._last: list[int] = []
        self._thread: threading.Thread | None = None

    def _config(self, max_tokens: int) -> Any:
        cfg = self._og.GenerationConfig()
        cfg.max_new_tokens = max_tokens
        cfg.min_new_tokens = max_tokens
        cfg.do_sample = False
        cfg.ignore_eos = True
        cfg.set_eos_token_id(max(self._eos, 0))
        return cfg

    def open_stream(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        on_token: OnToken,
        on_prefill: OnPrefill,
    ) -> Iterator[Any]:
        other = [b for b in banned if b != self._eos]
        if other:
            msg = f"OpenVINO GenAI cannot mask token ids {other} (no logit mask in its config)"
            raise RuntimeUnavailable(msg)
        self.release()
        og = self._og
        ids: queue.Queue[Any] = queue.Queue()
        wanted = threading.Semaphore(0)  # the reader asked for the next id (or closed)
        cancel = threading.Event()
        last: list[int] = []
        self._last = last

        class _Streamer(og.StreamerBase):  # type: ignore[misc,name-defined]
            """Hands each id over and waits until the reader wants the next one, so the engine
            never runs ahead of the stream (as a generator would not)."""

            def write(self, token: Any) -> Any:
                for t in token if isinstance(token, list) else [token]:
                    last.append(int(t))
                    stop = bool(on_token())
                    ids.put(int(t))
                    wanted.acquire()
                    if cancel.is_set():
                        return og.StreamingStatus.CANCEL
                    if stop:
                        return og.StreamingStatus.STOP
                return og.StreamingStatus.RUNNING

            def end(self) -> None:
                return None

        errors: list[BaseException] = []
        tensor = self._ov.Tensor(np.asarray([list(prompt)], dtype=np.int64))
        cfg = self._config(max_tokens)

        def _run() -> None:
            try:
                self._pipe.generate(tensor, cfg, _Streamer())
            except BaseException as exc:  # handed to the reading thread
                errors.append(exc)
            finally:
                ids.put(_DONE)

        def _stream() -> Iterator[Any]:
            on_prefill()
            thread = threading.Thread(target=_run, name="rtmatrix-ov-genai", daemon=True)
            self._thread = thread
            thread.start()
            try:
                while (item := ids.get()) is not _DONE:
                    yield item
                    wanted.release()
            finally:
                cancel.set()
                wanted.release()
                thread.join(JOIN_S)
            if errors:
                raise errors[0]

        return _stream()

    def complete(self, prompt: Sequence[int], max_tokens: int, banned: Sequence[int]) -> list[int]:
        """The engine's greedy ids for ``prompt`` in one piece (no streamer)."""
        self.release()
        tensor = self._ov.Tensor(np.asarray([list(prompt)], dtype=np.int64))
        res = self._pipe.generate(tensor, self._config(max_tokens))
        return [int(t) for t in res.tokens[0]]

    def chunk_text(self, chunk: Any) -> str:
        return str(chunk)

    def byte_tokens(self) -> list[int]:
        return []  # a chunk is a token id: nothing is held back

    def generated(self, n_prompt: int) -> list[int] | None:
        return list(self._last)

    def release(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(JOIN_S)

    def state(self) -> dict[str, int | None]:
        return {"kv_tokens": None}
