"""onnxruntime-genai's streaming and abort paths, for the ``stream`` and ``cancel`` scenarios.

:class:`OrtGenaiBackend` is the adapter's :class:`~rtmatrix.adapters.capabilities.StreamBackend`
(the ``og.Generator`` loop is genai's stream) and its ``abort_prefill`` the ``Abortable``
capability (``Generator.set_runtime_option("terminate_session", "1")`` from another thread).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from time import perf_counter as clock
from typing import Any

import numpy as np

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.adapters.capabilities import OnPrefill, OnToken


class OrtGenaiBackend:
    """onnxruntime-genai's streaming API is the Generator loop itself: ``append_tokens`` (prefill),
    then ``generate_next_token`` + ``get_next_tokens`` per token, on the adapter's model."""

    runtime = "onnxruntime_genai"
    api = (
        "onnxruntime_genai.Generator: append_tokens(prompt), then generate_next_token() + "
        "get_next_tokens() per token; greedy search, EOS suppressed by min_length = max_length"
    )
    cancel_modes: Mapping[str, str] = {
        "stop": "the generation loop stops calling generate_next_token once the cancel is "
        "requested (checked after each token) and the Generator is dropped",
    }
    missing_modes: Mapping[str, str] = {
        "close": "onnxruntime-genai has no stream object to close: the Generator loop is the "
        "stream, so cancelling is the 'stop' mode",
    }
    state_doc = "Generator.token_count() (tokens in the sequence); genai exposes no KV byte size"

    def __init__(self, og: Any, model: Any, n_ctx: int, eos: int) -> None:
        if og is None or model is None or n_ctx <= 0:
            msg = "onnxruntime-genai: no model is loaded to stream from"
            raise RuntimeUnavailable(msg)
        self._og, self._model, self._n_ctx, self._eos = og, model, n_ctx, eos
        self._gen: Any = None
        self._last: list[int] = []
        self.version = str(getattr(og, "__version__", "?"))

    def _generator(self, max_length: int, suppress_eos: bool) -> Any:
        params = self._og.GeneratorParams(self._model)
        opts: dict[str, Any] = {"max_length": max_length}
        if suppress_eos:
            opts["min_length"] = max_length
        params.set_search_options(**opts)
        return self._og.Generator(self._model, params)

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
            msg = f"onnxruntime-genai cannot mask token ids {other} (no logit bias API)"
            raise RuntimeUnavailable(msg)
        self.release()
        max_length = min(len(prompt) + max_tokens, self._n_ctx)
        gen = self._generator(max_length, suppress_eos=self._eos in banned)
        self._gen = gen
        self._last = []
        ids = np.asarray(list(prompt), dtype=np.int32)

        def _stream() -> Iterator[Any]:
            on_prefill()
            gen.append_tokens(ids)
            while not gen.is_done():
                gen.generate_next_token()
                tok = int(gen.get_next_tokens()[0])
                self._last.append(tok)
                if on_token():
                    return
                yield tok

        return _stream()

    def chunk_text(self, chunk: Any) -> str:
        return str(chunk)

    def byte_tokens(self) -> list[int]:
        return []  # a chunk is a token id: nothing is held back

    def generated(self, n_prompt: int) -> list[int] | None:
        return list(self._last)

    def release(self) -> None:
        self._gen = None
        gc.collect()

    def state(self) -> dict[str, int | None]:
        return {"kv_tokens": int(self._gen.token_count()) if self._gen is not None else None}

    def abort_prefill(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
        """Ask for ``terminate_session`` from another thread while ``append_tokens`` runs; the
        record says when that thread actually got to run."""
        self.release()
        gen = self._generator(self._n_ctx, suppress_eos=False)
        ids = np.asarray(list(prompt), dtype=np.int32)
        res: dict[str, Any] = {"t_flag": None}
        done = threading.Event()

        def _cancel() -> None:
            assert delay_s is not None
            target = res["t_start"] + delay_s
            while clock() < target and not done.is_set():
                # each wake-up needs the GIL: this thread runs only when the runtime lets it
                time.sleep(0.0002)
            res["t_flag"] = clock()
            res["flag_after_end"] = done.is_set()
            try:
                gen.set_runtime_option("terminate_session", "1")
            except Exception as exc:  # record, do not hide
                res["set_error"] = f"{type(exc).__name__}: {exc}"

        res["t_start"] = clock()
        th = threading.Thread(target=_cancel, name="rtmatrix-cancel")
        if delay_s is not None:
            th.start()
        try:
            gen.append_tokens(ids)
            res["raised"] = None
        except Exception as exc:
            res["raised"] = f"{type(exc).__name__}: {exc}"
        res["t_end"] = clock()
        done.set()
        if delay_s is not None:
            th.join()
        t_flag = res["t_flag"]
        aborted = res["raised"] is not None and t_flag is not None and t_flag < res["t_end"]
        out: dict[str, Any] = {
            "aborted": aborted,
            "prefill_s": res["t_end"] - res["t_start"],
            "due_s": delay_s,
            "flag_s": t_flag - res["t_start"] if t_flag is not None else None,
            "flag_late_s": t_flag - res["t_start"] - delay_s
            if t_flag is not None and delay_s is not None
            else None,
            "latency_s": res["t_end"] - t_flag if aborted and t_flag is not None else None,
            "raised": res["raised"],
            "set_error": res.get("set_error"),
            "how": "Generator.set_runtime_option('terminate_session', '1') from another thread",
        }
        if delay_s is not None and not aborted and t_flag is not None:
            due, end = res["t_start"] + delay_s, res["t_end"]
            rel = f"(due {delay_s:.4f} s in, ran {t_flag - res['t_start']:.4f} s in, prefill "
            rel += f"returned {out['prefill_s']:.4f} s in)"
            if end <= due + 0.0005:
                out["why"] = f"the prefill finished before the cancel was due {rel}"
            elif t_flag - due >= 0.9 * (end - due):
                out["why"] = (
                    f"onnxruntime-genai {self.version}: the cancelling thread did not run until "
                    f"the prefill was returning {rel}: Generator.append_tokens keeps the Python "
                    "GIL, so terminate_session cannot be set from another Python thread in time"
                )
            else:
                out["why"] = (
                    f"terminate_session was set mid-prefill {rel} but the prefill completed "
                    + ("with an error" if res["raised"] else "without error")
                )
        return out
