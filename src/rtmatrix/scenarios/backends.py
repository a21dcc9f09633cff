"""Per-runtime streaming backends for the stream and cancel scenarios.

A backend drives the runtime's *own* streaming path (not the harness's prefill/decode loop) and
exposes the few things the scenarios measure: open a stream with a per-token hook, release the
sequence state, read the runtime's view of its context state, and try to abort a running
prefill. Runtimes without a backend make the scenario ``unavailable`` with the reason.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from rtmatrix.adapters.base import Adapter, RuntimeUnavailable
from rtmatrix.scenarios.trace import clock

OnToken = Callable[[], bool]
OnPrefill = Callable[[], None]


class StreamBackend(Protocol):
    runtime: str
    #: the runtime API the stream goes through, in words
    api: str
    #: cancel mode -> how it cancels, for the modes this runtime has
    cancel_modes: ClassVar[dict[str, str]]
    #: cancel mode -> why this runtime does not have it
    missing_modes: ClassVar[dict[str, str]]
    #: what ``state()`` reads, and where it comes from
    state_doc: str

    def open_stream(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        on_token: OnToken,
        on_prefill: OnPrefill,
    ) -> Iterator[Any]:
        """A fresh request: ``on_prefill`` when the runtime starts on the prompt, ``on_token``
        after each sampled token (True stops the request there); the iterator yields the
        runtime's stream chunks and ``close()`` on it cancels."""
        ...

    def chunk_text(self, chunk: Any) -> str: ...

    def byte_tokens(self) -> list[int]:
        """Token ids that the stream may hold back (byte-fallback tokens); [] when none."""
        ...

    def generated(self, n_prompt: int) -> list[int] | None:
        """Token ids of the last stream after the prompt, where the runtime keeps them."""
        ...

    def release(self) -> None:
        """Give back the sequence state of the last stream."""
        ...

    def state(self) -> dict[str, int | None]:
        """The runtime's own view of its context state (``None`` where it has none)."""
        ...

    def prefill_abort(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
        """Start a prefill, ask for a stop after ``delay_s`` from another thread (None: never,
        a timed uncancelled prefill); report what happened (``aborted``, ``latency_s``,
        ``prefill_s``, ``why``)."""
        ...


class LlamaCppBackend:
    runtime = "llama_cpp"
    api = (
        "llama_cpp.Llama.create_completion(prompt=<token ids>, stream=True, temperature=0), "
        "banned ids masked by logit_bias; per-token hook: a StoppingCriteria"
    )
    cancel_modes: ClassVar[dict[str, str]] = {
        "stop": "the binding's per-token StoppingCriteria returns True once the cancel is "
        "requested (checked right after each sampled token)",
        "close": "the consumer closes the stream iterator (GeneratorExit) at the next chunk it "
        "receives after the cancel is requested",
    }
    missing_modes: ClassVar[dict[str, str]] = {}
    state_doc = (
        "llama_state_get_size (bytes a state save writes; grows with the KV cells in use), "
        "llama_memory_seq_pos_max of sequence 0 (-1 = empty), Llama.n_tokens"
    )

    def __init__(self, adapter: Any) -> None:
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
        ids: list[int] = self._a.byte_token_ids()
        return ids

    def generated(self, n_prompt: int) -> list[int] | None:
        ids: list[int] = self._a.sequence_tokens()
        return ids[n_prompt:]

    def release(self) -> None:
        self._a.release_sequence()

    def state(self) -> dict[str, int | None]:
        return dict(self._a.memory_state())

    def prefill_abort(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
        a = self._a
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


class OrtGenaiBackend:
    """onnxruntime-genai's streaming API is the Generator loop itself: ``append_tokens`` (prefill),
    then ``generate_next_token`` + ``get_next_tokens`` per token. Uses the adapter's model handle
    (``_og``, ``_model``, ``_n_ctx``): the adapter has no public accessor yet."""

    runtime = "onnxruntime_genai"
    api = (
        "onnxruntime_genai.Generator: append_tokens(prompt), then generate_next_token() + "
        "get_next_tokens() per token; greedy search, EOS suppressed by min_length = max_length"
    )
    cancel_modes: ClassVar[dict[str, str]] = {
        "stop": "the generation loop stops calling generate_next_token once the cancel is "
        "requested (checked after each token) and the Generator is dropped",
    }
    missing_modes: ClassVar[dict[str, str]] = {
        "close": "onnxruntime-genai has no stream object to close: the Generator loop is the "
        "stream, so cancelling is the 'stop' mode",
    }
    state_doc = "Generator.token_count() (tokens in the sequence); genai exposes no KV byte size"

    def __init__(self, adapter: Any) -> None:
        self._og: Any = getattr(adapter, "_og", None)
        self._model: Any = getattr(adapter, "_model", None)
        self._n_ctx = int(getattr(adapter, "_n_ctx", 0) or 0)
        self._eos = adapter.special_ids.get("eos", -1)
        if self._og is None or self._model is None or not self._n_ctx:
            msg = "the onnxruntime_genai adapter exposes no model handle (_og/_model/_n_ctx)"
            raise RuntimeUnavailable(msg)
        self._gen: Any = None
        self._last: list[int] = []
        self.version = str(getattr(self._og, "__version__", "?"))

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

    def prefill_abort(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
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


def backend_for(adapter: Adapter, scenario: str) -> StreamBackend:
    if adapter.name == "llama_cpp" and hasattr(adapter, "stream_completion"):
        return LlamaCppBackend(adapter)
    if adapter.name == "onnxruntime_genai":
        return OrtGenaiBackend(adapter)
    msg = (
        f"scenario {scenario!r}: rtmatrix has no streaming backend for runtime "
        f"{adapter.name!r} (stream/cancel: llama_cpp, onnxruntime_genai)"
    )
    raise RuntimeUnavailable(msg)
