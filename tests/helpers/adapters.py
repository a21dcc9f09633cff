"""Adapters for unit tests of the core only: a numpy 'runtime' and adapters that misbehave.

They are loaded by the worker through ``module:Class`` strings, exactly as third-party adapters.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, CrashControl, LoadParams, RuntimeUnavailable
from rtmatrix.adapters.capabilities import OnPrefill, OnToken
from rtmatrix.fixtures.model import KVCache, Reference, greedy_pick
from rtmatrix.fixtures.spec import ModelSpec
from rtmatrix.numerics import Fact, Numerics, StackReport


class NumpyAdapter(Adapter):
    """Reads a GGUF with gguf.GGUFReader and runs the numpy reference: a slow, exact runtime."""

    name: ClassVar[str] = "numpy"
    distribution: ClassVar[str] = "numpy"
    extra: ClassVar[str] = "test"
    container: ClassVar[str] = "gguf"

    def __init__(self) -> None:
        self._ref: Reference | None = None
        self._cache = KVCache()
        self._logits: NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        self._spec: ModelSpec | None = None

    def import_runtime(self) -> str:
        return str(np.__version__)

    def load(self, model_path: Path, params: LoadParams) -> None:
        import gguf

        reader = gguf.GGUFReader(str(model_path))

        def field(key: str) -> Any:
            return reader.fields[key].contents()

        self._spec = ModelSpec(
            name="from-file",
            vocab_size=len(field("tokenizer.ggml.tokens")),
            n_embd=int(field("llama.embedding_length")),
            n_layer=int(field("llama.block_count")),
            n_head=int(field("llama.attention.head_count")),
            n_head_kv=int(field("llama.attention.head_count_kv")),
            n_ff=int(field("llama.feed_forward_length")),
            n_ctx_train=int(field("llama.context_length")),
            rope_theta=float(field("llama.rope.freq_base")),
            rms_eps=float(field("llama.attention.layer_norm_rms_epsilon")),
            seed=0,
        )
        weights = {
            t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            for t in reader.tensors
        }
        self._ref = Reference(self._spec, weights)

    @property
    def vocab_size(self) -> int:
        assert self._spec is not None
        return self._spec.vocab_size

    @property
    def special_ids(self) -> dict[str, int]:
        return {"bos": 1, "eos": 2}

    def reset(self) -> None:
        self._cache = KVCache()

    def prefill(self, tokens: Sequence[int]) -> None:
        assert self._ref is not None
        self._logits = self._ref.forward(tokens, self._cache)[-1]

    def decode(self, token: int) -> None:
        self.prefill([token])

    def last_logits(self) -> NDArray[np.float32]:
        return self._logits.copy()

    def counters(self) -> dict[str, float]:
        return {}

    def evidence(self) -> dict[str, Any]:
        return {"note": "numpy reference adapter (tests only)"}

    def close(self) -> None:
        self._ref = None


class SegfaultAdapter(NumpyAdapter):
    """Dies with SIGSEGV while loading, as a native runtime can."""

    def load(self, model_path: Path, params: LoadParams) -> None:
        ctypes.string_at(0)


class FastPathAdapter(NumpyAdapter):
    """A third-party adapter whose optional 'fast path' (option ``fast_path``, default on) dies
    with SIGSEGV at the first decode step, after logging that it chose that path, as llama.cpp's
    AMX buffer type does on some hosts; it declares the option off as its crash control."""

    crash_control: ClassVar[CrashControl | None] = CrashControl(
        options={"fast_path": False},
        explains="the adapter's fast path",
        log_pattern=r"fast path",
    )

    def load(self, model_path: Path, params: LoadParams) -> None:
        self._fast = bool(params.options.get("fast_path", True))
        for i in range(100):  # enough lines that the one that matters is far from the tail
            self.log_line("info", f"load: tensor {i} read")
        self.log_line(
            "info", f"load: fast path {'on' if self._fast else 'off'}: 3 tensors repacked"
        )
        super().load(model_path, params)

    def decode(self, token: int) -> None:
        if self._fast:
            ctypes.string_at(0)
        super().decode(token)


class AbortAdapter(NumpyAdapter):
    """Dies with SIGABRT during the first decode step (a GGML_ASSERT, say)."""

    def decode(self, token: int) -> None:
        os.abort()


class HangAdapter(NumpyAdapter):
    """Never finishes loading."""

    def load(self, model_path: Path, params: LoadParams) -> None:
        time.sleep(3600)


class RaisingAdapter(NumpyAdapter):
    """Refuses the model with a clean error, as a well-behaved runtime does."""

    def load(self, model_path: Path, params: LoadParams) -> None:
        msg = "unsupported model architecture 'test'"
        raise ValueError(msg)


class MissingRuntimeAdapter(NumpyAdapter):
    extra: ClassVar[str] = "imaginary"

    def import_runtime(self) -> str:
        msg = "imaginary_runtime is not installed; pip install 'rtmatrix[imaginary]'"
        raise RuntimeUnavailable(msg)


class HogAdapter(NumpyAdapter):
    """Allocates far more than an address-space cap allows."""

    def load(self, model_path: Path, params: LoadParams) -> None:
        self.block = np.ones(8 * 2**30 // 8)  # 8 GiB


class GarbageResultAdapter(NumpyAdapter):
    """Overwrites the worker's result file with garbage and exits 0 (a broken worker)."""

    def load(self, model_path: Path, params: LoadParams) -> None:
        job = Path(sys.argv[1])
        (job.parent / "result.json").write_bytes(b"\x00not json{{{")
        os._exit(0)


class FloodAdapter(NumpyAdapter):
    """Writes ~20 MB to stdout and stderr before loading normally."""

    def load(self, model_path: Path, params: LoadParams) -> None:
        line = "flood " * 170 + "\n"
        for _ in range(20_000):
            sys.stdout.write(line)
            sys.stderr.write(line)
        sys.stdout.write("LAST-STDOUT-LINE\n")
        sys.stdout.flush()
        super().load(model_path, params)


class GreedyAdapter(NumpyAdapter):
    """Touches memory until something stops it (a memory cgroup's OOM killer)."""

    def load(self, model_path: Path, params: LoadParams) -> None:
        self.blocks = []
        for _ in range(64):  # up to 16 GiB in 256 MiB blocks
            self.blocks.append(np.ones(256 * 2**20 // 8))


class NaNAdapter(NumpyAdapter):
    """Runs, but returns non-finite logits (what NaN weights do in many runtimes)."""

    def last_logits(self) -> NDArray[np.float32]:
        return np.full_like(super().last_logits(), np.nan)


class DetachedChildAdapter(NumpyAdapter):
    """Starts a helper process in a session of its own (as a server or daemon would) and
    never stops it: the harness must find and kill it when the cell ends."""

    MARK: ClassVar[str] = "rtmatrix-detached-child-test"

    def load(self, model_path: Path, params: LoadParams) -> None:
        import subprocess

        code = f"import time  # {self.MARK}\ntime.sleep(600)"
        subprocess.Popen(
            [sys.executable, "-c", code],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        super().load(model_path, params)


class NumpyStreamBackend:
    """The numpy reference's greedy loop as a stream: one chunk per token."""

    runtime = "numpy"
    api = "tests.helpers.adapters: the numpy reference's greedy loop, one chunk per token"
    cancel_modes: Mapping[str, str] = {
        "stop": "the loop asks the per-token hook after each token",
        "close": "the consumer closes the generator",
    }
    missing_modes: Mapping[str, str] = {}
    state_doc = "tokens in the numpy KV cache"

    def __init__(self, adapter: StreamingNumpyAdapter) -> None:
        self._a = adapter
        self._last: list[int] = []

    def open_stream(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        on_token: OnToken,
        on_prefill: OnPrefill,
    ) -> Iterator[Any]:
        a = self._a

        def _stream() -> Iterator[Any]:
            a.reset()
            self._last = []
            on_prefill()
            a.prefill(prompt)
            for i in range(max_tokens):
                if i:
                    a.decode(self._last[-1])
                self._last.append(greedy_pick(a.last_logits(), banned))
                if on_token():
                    return
                yield self._last[-1]

        return _stream()

    def chunk_text(self, chunk: Any) -> str:
        return str(chunk)

    def byte_tokens(self) -> list[int]:
        return []

    def generated(self, n_prompt: int) -> list[int] | None:
        return list(self._last)

    def release(self) -> None:
        self._a.reset()

    def state(self) -> dict[str, int | None]:
        return {"kv_tokens": self._a.cached_tokens()}


class StreamingNumpyAdapter(NumpyAdapter):
    """A third-party adapter that offers the ``Streaming`` capability (and nothing else)."""

    name: ClassVar[str] = "numpy_streaming"

    def __init__(self) -> None:
        super().__init__()
        self._backend = NumpyStreamBackend(self)

    def stream_backend(self) -> NumpyStreamBackend:
        return self._backend

    def cached_tokens(self) -> int:
        return self._cache.length


class SlowDecodeAdapter(NumpyAdapter):
    """The numpy runtime with each single-token decode made slower by a known fraction: after
    the decode, a busy wait until ``elapsed / (1 - slowdown)`` has passed, so the decode
    throughput drops by ``slowdown`` whatever the machine's speed and load (the slowdown meets
    the same noise as the decode itself). ``options.slowdown``: a fraction in [0, 1), default 0.
    Prefill is untouched."""

    name: ClassVar[str] = "numpy"

    def __init__(self) -> None:
        super().__init__()
        self._slowdown = 0.0

    def configure(self, options: dict[str, Any]) -> None:
        slowdown = float(options.get("slowdown", 0.0))
        if not 0.0 <= slowdown < 1.0:
            msg = f"options.slowdown {slowdown}: expected a fraction in [0, 1), e.g. 0.1"
            raise ValueError(msg)
        self._slowdown = slowdown

    def decode(self, token: int) -> None:
        t0 = time.perf_counter()
        super().decode(token)
        until = t0 + (time.perf_counter() - t0) / (1.0 - self._slowdown)
        while time.perf_counter() < until:
            pass

    def evidence(self) -> dict[str, Any]:
        return super().evidence() | {"slowdown": self._slowdown}


def _to_bf16(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """Round to bfloat16 (nearest, ties to even) and back: 8 significant bits."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


class Bf16Adapter(NumpyAdapter):
    """A runtime that, like OpenVINO on an AVX512_BF16 host, computes an f32 model in bf16 by
    default (weights and logits rounded to bf16) and says so through StackReporting; option
    ``precision = "f32"`` computes in f32 (the numerics control)."""

    name: ClassVar[str] = "bf16"
    #: what this adapter tells the harness it computed in (None: its own precision)
    claims: ClassVar[str | None] = None

    def __init__(self) -> None:
        super().__init__()
        self._precision = "bf16"

    def load(self, model_path: Path, params: LoadParams) -> None:
        super().load(model_path, params)
        self._precision = str(params.options.get("precision", "bf16"))
        if self._precision == "bf16":
            assert self._ref is not None
            self._ref.w = {k: _to_bf16(v) for k, v in self._ref.w.items()}

    def last_logits(self) -> NDArray[np.float32]:
        out = super().last_logits()
        return _to_bf16(out) if self._precision == "bf16" else out

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        said = self.claims or self._precision
        asked = self._precision != "bf16"
        matmul = Fact(said, f"PRECISION = {said}", "the fake runtime's property",
                      default=not asked, host_dependent=not asked)  # fmt: skip
        control = {"precision": "f32"} if said != "f32" else {}
        explains = "the fake runtime's PRECISION" if control else ""
        num = Numerics(devices=["cpu"], matmul=matmul, control=control, control_explains=explains)
        return StackReport(backend={"device": "fake CPU"}, kernels={}, numerics=num)


class SilentBf16Adapter(Bf16Adapter):
    """Computes in bf16 and claims f32: the harness must not loosen its verdict for it."""

    claims: ClassVar[str | None] = "f32"
