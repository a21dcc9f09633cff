"""The OpenVINO row: OpenVINO's own runtime on the ONNX fixture, driven by rtmatrix's KV-cache
loop as the ONNX Runtime row is.

``load`` reads the fixture's ``model.onnx`` with OpenVINO's ONNX frontend (``Core.read_model``:
the conversion happens here, in the cell, and its time is part of the load) and compiles it for
the device (``CPU``). ``prefill``/``decode`` run one synchronous inference each on numpy inputs
and keep the ``present.*`` outputs as the next call's ``past_key_values.*``. The infer request's
own ``latency`` (ms) of each call is the runtime counter (source ``runtime-counter``).

A Hugging Face checkpoint reaches this row through OpenVINO's own exporter (the adapter's
``converter``, :mod:`rtmatrix.converters.optimum_intel`): its ``openvino_model.xml`` is a
*stateful* decoder — the KV cache is the infer request's state, fed nothing but ``input_ids``,
``attention_mask``, ``position_ids`` and ``beam_idx`` (zeros: one sequence) — so the same loop
runs it with the state reset between sequences, and the compiled model's
``KV_CACHE_PRECISION`` (the CPU plugin's default: u8) is then the cache's precision (option
``kv_cache_precision``).

Settings evidence is read back from the compiled model (``get_property``): threads, performance
hint, streams, inference precision, KV-cache precision (which a model with explicit past/present
tensors does not use: recorded, and said), with OpenVINO's own defaults named where this row
sets another value. Row options (``[[runtimes]] options``):

- ``device``: OpenVINO device (default ``CPU``);
- ``performance_hint``: ``LATENCY`` (default here and for OpenVINO's CPU plugin) | ``THROUGHPUT``
  | ``CUMULATIVE_THROUGHPUT``;
- ``inference_precision``: ``f32`` | ``bf16`` | ``f16`` (OpenVINO's default: the CPU's best:
  f32 without AVX512_BF16/AMX; what the compiled model reports is recorded);
- ``num_streams``: an integer or ``AUTO``;
- ``kv_cache_precision``: a stateful model's KV cache (``f32``, ``f16``, ``bf16``, ``u8``, ``u4``;
  the CPU plugin's default is u8; the explicit-cache ONNX fixture has no internal cache);
- ``properties``: any other compile properties, e.g. ``{ ENABLE_CPU_PINNING = false }``.

Threads are the matrix's ``threads`` (``INFERENCE_NUM_THREADS``; OpenVINO's default, 0, is its
own choice: one per physical core).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import LoadParams, RuntimeUnavailable
from rtmatrix.adapters.kvloop import ExplicitKvAdapter
from rtmatrix.fixtures.genai_config import special_ids_beside
from rtmatrix.numerics import StackReport
from rtmatrix.protocol import JobParams
from rtmatrix.runtimes.openvino.errors import ERROR_PATTERNS

#: compiled-model properties read back into the settings evidence
READ_BACK = (
    "INFERENCE_NUM_THREADS",
    "PERFORMANCE_HINT",
    "NUM_STREAMS",
    "INFERENCE_PRECISION_HINT",
    "KV_CACHE_PRECISION",
    "EXECUTION_MODE_HINT",
    "ENABLE_HYPER_THREADING",
    "ENABLE_CPU_PINNING",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE",
    "EXECUTION_DEVICES",
)
#: where this row's settings differ from OpenVINO's own (and benchmark_app's) defaults
OPENVINO_DEFAULTS = {
    "INFERENCE_NUM_THREADS": "OpenVINO default 0 (its own choice: one per physical core); this "
    "row uses the matrix's threads, as every row does",
    "PERFORMANCE_HINT": "OpenVINO's CPU default is LATENCY (benchmark_app's is THROUGHPUT); this "
    "row asks for LATENCY: one sequence at a time",
    "KV_CACHE_PRECISION": "applies to stateful models (the IR OpenVINO's exporter writes); a "
    "model that passes its cache as explicit past/present tensors does not use it",
}
_OPTION_PROPS = {
    "performance_hint": "PERFORMANCE_HINT",
    "inference_precision": "INFERENCE_PRECISION_HINT",
    "num_streams": "NUM_STREAMS",
    "kv_cache_precision": "KV_CACHE_PRECISION",
}
#: the inputs of a stateful decoder the loop feeds itself (its KV cache is the request's state)
STATEFUL_INPUTS = ("input_ids", "attention_mask", "position_ids", "beam_idx")
NP_TYPES = {"i64": np.int64, "i32": np.int32, "f32": np.float32, "f16": np.float16}


def _plain(value: Any) -> Any:
    """A property value as JSON (enums and OpenVINO types by their text)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def runtime_layers(compiled: Any) -> dict[str, Any]:
    """What the CPU plugin compiled: per layer type of its runtime model, how many layers ran at
    which runtime precision (a FullyConnected at ``i8``/``i4`` keeps its weights compressed and
    dequantizes them in the kernel; at ``f32`` they were decompressed at load)."""
    counts: dict[str, dict[str, int]] = {}
    prims: dict[str, dict[str, int]] = {}

    def text(info: Any, key: str) -> str:
        return str(info[key].astype(str)) if key in info else "?"

    try:
        for op in compiled.get_runtime_model().get_ops():
            info = op.get_rt_info()
            kind = text(info, "layerType") if "layerType" in info else op.get_type_name()
            prec = text(info, "runtimePrecision")
            counts.setdefault(kind, {})
            counts[kind][prec] = counts[kind].get(prec, 0) + 1
            prim = text(info, "primitiveType")
            prims.setdefault(kind, {})
            prims[kind][prim] = prims[kind].get(prim, 0) + 1
    except Exception as exc:  # a plugin without a runtime model: say so
        return {"unavailable": f"{type(exc).__name__}: {exc}"[:200]}
    return {
        "source": "CompiledModel.get_runtime_model(): rt_info layerType / runtimePrecision / "
        "primitiveType",
        "layers": counts,
        "primitives": prims,
    }


class OpenVinoAdapter(ExplicitKvAdapter):
    name: ClassVar[str] = "openvino"
    distribution: ClassVar[str] = "openvino"
    extra: ClassVar[str] = "openvino"
    container: ClassVar[str] = "onnx"
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS
    #: OpenVINO's exporter (optimum-intel): its stateful IR, the one OpenVINO GenAI reads too
    converter: ClassVar[str | None] = "optimum_intel"

    def __init__(self) -> None:
        self._ov: Any = None
        self._core: Any = None
        self._stateful = False
        self._compiled: Any = None
        self._req: Any = None
        self._model_path: Path | None = None
        self._device = "CPU"
        self._asked: dict[str, Any] = {}
        self._n_ctx = 0
        self._n_vocab = 0
        self._special: dict[str, int] = {}
        self._inputs: dict[str, str] = {}  # name -> element type ("i64", "f32", ...)
        self._past_of: dict[str, str] = {}  # present output -> past input
        self._empty_past: dict[str, NDArray[Any]] = {}
        self._past: dict[str, NDArray[Any]] = {}
        self._pos = 0
        self._logits: NDArray[np.float32] | None = None
        self._counts: dict[str, float] = {}
        self._timing: dict[str, float] = {}

    # -- runtime -------------------------------------------------------------------------------
    def import_runtime(self) -> str:
        try:
            import openvino
        except ImportError as exc:
            msg = f"openvino is not installed ({exc}); pip install 'rtmatrix[openvino]'"
            raise RuntimeUnavailable(msg) from exc
        self._ov = openvino
        self._core = openvino.Core()
        return str(openvino.__version__).split("-", 1)[0]

    # -- the runtime's own benchmark tool (ReferenceBenchmark) ----------------------------------
    @classmethod
    def reference_benchmark(
        cls, model_path: Path, params: JobParams, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """OpenVINO's ``benchmark_app`` (it ships with the wheel) on the cell's file at the
        harness's shapes: a prefill of ``prompt_tokens`` ids on an empty cache (PP = ids ÷ its
        median latency) and one decode step on a cache of ``prompt_tokens`` (TG = 1 ÷ median
        latency: one fixed-shape step; the harness's decode grows the cache as it goes), each
        with the row's threads, one stream, one request, synchronous, for ``repetitions`` s."""
        from rtmatrix.runtimes.openvino import benchmark

        try:
            return benchmark.run(model_path, params, dict(options))
        except benchmark.BenchmarkUnavailable as exc:
            raise RuntimeUnavailable(str(exc)) from exc

    # -- model ---------------------------------------------------------------------------------
    def _config(self, params: LoadParams) -> dict[str, Any]:
        opts = dict(params.options)
        config: dict[str, Any] = {"INFERENCE_NUM_THREADS": params.threads,
                                  "PERFORMANCE_HINT": "LATENCY"}  # fmt: skip
        for option, prop in _OPTION_PROPS.items():
            if option in opts:
                config[prop] = str(opts[option])
        config |= {str(k): v for k, v in dict(opts.get("properties", {})).items()}
        return config

    def load(self, model_path: Path, params: LoadParams) -> None:
        self._n_ctx = params.n_ctx
        self._device = str(params.options.get("device", "CPU"))
        self._model_path = model_path / "model.onnx" if model_path.is_dir() else model_path
        self._asked = self._config(params)
        t0 = time.perf_counter()
        model = self._core.read_model(str(self._model_path))  # the ONNX frontend converts here
        t1 = time.perf_counter()
        self._compiled = self._core.compile_model(model, self._device, self._asked)
        t2 = time.perf_counter()
        self._req = self._compiled.create_infer_request()
        self._timing = {"read_model_s": t1 - t0, "compile_model_s": t2 - t1}
        self._describe_io(model)

    def _describe_io(self, model: Any) -> None:
        self._inputs = {
            p.get_any_name(): p.get_element_type().get_type_name() for p in model.inputs
        }
        outs = {p.get_any_name(): p for p in model.outputs}
        self._stateful = bool(model.get_sinks())  # Assign ops: the KV cache is the state
        logits = outs.get("logits") or next(iter(outs.values()))
        last = logits.get_partial_shape()[-1]
        if last.is_dynamic:
            msg = f"output {logits.get_any_name()!r} has no static vocabulary dimension"
            raise ValueError(msg)
        self._n_vocab = int(last.get_length())
        self._past_of, self._empty_past = {}, {}
        for p in model.inputs:
            name = p.get_any_name()
            if name in STATEFUL_INPUTS[:3] or (self._stateful and name == "beam_idx"):
                continue
            shape = p.get_partial_shape()
            suffix = name.split(".", 1)[-1]
            present = next((o for o in outs if o != name and o.endswith("." + suffix)), None)
            if present is None or len(shape) != 4 or shape[1].is_dynamic or shape[3].is_dynamic:
                msg = (f"input {name!r} {shape} is not a KV-cache input this adapter can feed "
                       "(expected past_*.N.key|value [batch, heads, past, head_dim] with a "
                       "matching present output)")  # fmt: skip
                raise ValueError(msg)
            self._past_of[present] = name
            dtype = NP_TYPES.get(self._inputs[name], np.float32)
            dims = (1, shape[1].get_length(), 0, shape[3].get_length())
            self._empty_past[name] = np.zeros(dims, dtype=dtype)
        if "input_ids" not in self._inputs:
            msg = f"the model has no 'input_ids' input (inputs: {', '.join(self._inputs)})"
            raise ValueError(msg)
        self._special = self._read_special_ids()
        self.reset()

    def _read_special_ids(self) -> dict[str, int]:
        assert self._model_path is not None
        return special_ids_beside(self._model_path)

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def special_ids(self) -> dict[str, int]:
        return dict(self._special)

    def reset(self) -> None:
        super().reset()
        self._counts = {}

    def _clear_cache(self) -> None:
        self._past = dict(self._empty_past)
        if self._stateful and self._req is not None:
            self._req.reset_state()

    def _forward(self, tokens: Sequence[int], start: int, total: int, phase: str) -> Any:
        n = len(tokens)
        feeds: dict[str, Any] = dict(self._past)
        feeds["input_ids"] = np.asarray(tokens, dtype=np.int64).reshape(1, n)
        if "position_ids" in self._inputs:
            feeds["position_ids"] = np.arange(start, total, dtype=np.int64).reshape(1, n)
        if "attention_mask" in self._inputs:
            feeds["attention_mask"] = np.ones((1, total), dtype=np.int64)
        if self._stateful and "beam_idx" in self._inputs:  # one sequence: keep its cache row
            feeds["beam_idx"] = np.zeros(1, dtype=np.int32)
        outs = {k.get_any_name(): v for k, v in self._req.infer(feeds).items()}
        for name, value in outs.items():
            past = self._past_of.get(name)
            if past is not None:
                self._past[past] = value
        key = "pp" if phase == "prefill" else "tg"
        self._counts[f"{key}_ms"] = self._counts.get(f"{key}_ms", 0.0) + float(self._req.latency)
        self._counts[f"{key}_tokens"] = self._counts.get(f"{key}_tokens", 0.0) + n
        return outs["logits"][0, -1]

    def counters(self) -> dict[str, float]:
        """The infer request's own ``latency`` (ms) summed over the prefill and decode calls."""
        return dict(self._counts)

    # -- evidence ------------------------------------------------------------------------------
    def _read_back(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in READ_BACK:
            try:
                out[key] = _plain(self._compiled.get_property(key))
            except Exception as exc:  # a property this device or version lacks
                out[key] = f"unavailable: {type(exc).__name__}: {str(exc).strip()[-160:]}"
        return out

    def evidence(self) -> dict[str, Any]:
        ev: dict[str, Any] = {"device": self._device, "stateful": self._stateful}
        if self._compiled is not None:
            ev["settings"] = {
                "asked": {k: _plain(v) for k, v in self._asked.items()},
                "compiled_model": self._read_back(),
                "openvino_defaults": OPENVINO_DEFAULTS,
            }
            ev["load_timing_s"] = {k: round(v, 4) for k, v in self._timing.items()}
            ev["runtime_model"] = runtime_layers(self._compiled)
        with contextlib.suppress(Exception):
            ev["device_name"] = str(self._core.get_property(self._device, "FULL_DEVICE_NAME"))
            caps = self._core.get_property(self._device, "OPTIMIZATION_CAPABILITIES")
            ev["device_capabilities"] = _plain(caps)
        ev["available_devices"] = _plain(self._core.available_devices)
        ev["debug_facilities"] = {
            "perf_count": {"available": True,
                           "how": "compile with PERF_COUNT=True; request.get_profiling_info()"},
            "log_level": {"available": True, "how": "compile property LOG_LEVEL"},
            "benchmark_app": {"available": shutil.which("benchmark_app") is not None,
                              "how": "benchmark_app -m model.onnx -shape ... (in the wheel)"},
            "model_serialization": {"available": True, "how": "openvino.save_model(model, path)"},
        }  # fmt: skip
        return ev

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend, kernels and effective numerics (StackReporting), from this row's evidence."""
        from rtmatrix.runtimes.openvino import stack

        return stack.report(dict(evidence), dtype)

    def close(self) -> None:
        self._req = None
        self._compiled = None
        self._past = {}
