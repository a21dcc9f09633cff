"""The OpenVINO GenAI row: Intel's own LLM engine (``openvino_genai.LLMPipeline``) running its
own generation loop on the fixture, converted to the stateful IR it loads
(:mod:`rtmatrix.runtimes.openvino_genai.convert`, cached; the conversion is in the first load).

A Hugging Face checkpoint reaches it through OpenVINO's own exporter (the adapter's
``converter``, :mod:`rtmatrix.converters.optimum_intel`), whose folder the engine loads as it is:
``load`` is then given its ``openvino_model.xml`` (the special ids from the checkpoint's
``generation_config.json``/``config.json`` copied beside it, the vocabulary from its config).

The engine takes token ids and returns token ids: it decodes greedily itself
(``do_sample = False``, ``ignore_eos`` so every run makes the same count), and the harness
times it through its streamer (each id as it is produced: TTFT to the first, then the gaps) —
the :class:`~rtmatrix.adapters.capabilities.EngineGeneration` capability. Its own
``perf_metrics`` (TTFT, TPOT, throughput, generate duration) are the runtime counters. There is
no per-step logits API, so ``prefill``/``decode``/``last_logits`` are unavailable: parity is
judged on the greedy ids (a first divergence at a near-tie is accepted, as for every row), the
real model's teacher-forced quality figures are ``unavailable`` with that reason, and banned ids
(the end-of-sequence token the other rows mask) cannot be masked (recorded).

Settings (``[[runtimes]] options``): ``device`` (``CPU``), ``attention_backend`` (``SDPA``
here; GenAI's CPU default with an SDPA graph is ``PA``, paged attention), ``kv_cache_precision``
(``f32`` here; the CPU plugin's default is ``u8``, which changes greedy ids from the first token
on this fixture), ``performance_hint`` (``LATENCY``), ``inference_precision`` (not set: the CPU
plugin's default, bf16 on a CPU with AVX512_BF16 or AMX; ``f32`` is the numerics control),
``properties`` (any other). Threads are the
matrix's (``INFERENCE_NUM_THREADS``). The device's own defaults are read back and recorded beside
what this row asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, LoadParams, RuntimeUnavailable
from rtmatrix.adapters.capabilities import PromptCache
from rtmatrix.fixtures.genai_config import special_ids_beside
from rtmatrix.numerics import StackReport
from rtmatrix.runtimes.openvino.errors import ERROR_PATTERNS
from rtmatrix.runtimes.openvino_genai.stream import OvGenaiBackend

NO_LOOP = (
    "OpenVINO GenAI's engine runs its own generation loop and returns ids, not logits: no "
    "prefill/decode/last_logits (rtmatrix.adapters.capabilities.EngineGeneration instead)"
)
#: CPU properties whose device defaults are read back (``Core.get_property``)
DEVICE_DEFAULTS = ("KV_CACHE_PRECISION", "INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT",
                   "INFERENCE_NUM_THREADS")  # fmt: skip
#: ``[[runtimes]] options`` for the ContinuousBatchingPipeline (the ``serve`` scenario); every
#: other SchedulerConfig field keeps GenAI's default (recorded)
CB_OPTIONS = {"cb_cache_size_gb": 1, "cb_max_num_seqs": 16}
ROW_DEFAULTS = {"attention_backend": "SDPA", "kv_cache_precision": "f32",
                "performance_hint": "LATENCY"}  # fmt: skip


class OvGenaiAdapter(Adapter):
    name: ClassVar[str] = "openvino_genai"
    distribution: ClassVar[str] = "openvino-genai"
    extra: ClassVar[str] = "openvino-genai"
    container: ClassVar[str] = "onnx"
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS
    #: OpenVINO's exporter (optimum-intel), whose folder the engine loads as it is
    converter: ClassVar[str | None] = "optimum_intel"

    def __init__(self) -> None:
        self._og: Any = None
        self._ov: Any = None
        self._pipe: Any = None
        self._device = "CPU"
        self._props: dict[str, Any] = {}
        self._special: dict[str, int] = {}
        self._n_vocab = 0
        self._convert: dict[str, Any] = {}
        self._last_perf: dict[str, Any] = {}
        self._backend: OvGenaiBackend | None = None
        self._folder: Path | None = None
        self._cb: Any = None
        self._cb_settings: dict[str, Any] = {}
        self._cb_options: dict[str, Any] = {}
        self._kv_asked = False

    def import_runtime(self) -> str:
        try:
            import openvino
            import openvino_genai
        except ImportError as exc:
            msg = f"openvino-genai is not installed ({exc}); pip install 'rtmatrix[openvino-genai]'"
            raise RuntimeUnavailable(msg) from exc
        self._og, self._ov = openvino_genai, openvino
        return str(openvino_genai.__version__).split("-", 1)[0]

    # -- model ---------------------------------------------------------------------------------
    def _properties(self, params: LoadParams) -> dict[str, Any]:
        opts = ROW_DEFAULTS | dict(params.options)
        props: dict[str, Any] = {
            "ATTENTION_BACKEND": str(opts["attention_backend"]),
            "KV_CACHE_PRECISION": str(opts["kv_cache_precision"]),
            "PERFORMANCE_HINT": str(opts["performance_hint"]),
            "INFERENCE_NUM_THREADS": params.threads,
        }
        if "inference_precision" in opts:
            props["INFERENCE_PRECISION_HINT"] = str(opts["inference_precision"])
        return props | {str(k): v for k, v in dict(opts.get("properties", {})).items()}

    def load(self, model_path: Path, params: LoadParams) -> None:
        self._device = str(params.options.get("device", "CPU"))
        if model_path.suffix == ".xml":  # OpenVINO's exporter's folder: the engine's own input
            folder = self._exported_folder(model_path)
        else:
            folder = self._engine_folder(model_path)
        self._props = self._properties(params)
        self._folder = folder
        self._cb_options = {k: params.options[k] for k in CB_OPTIONS if k in params.options}
        self._kv_asked = "kv_cache_precision" in params.options
        self._pipe = self._og.LLMPipeline(str(folder), self._device, **self._props)

    def _engine_folder(self, model_path: Path) -> Path:
        """rtmatrix's ONNX fixture, converted once to the stateful IR the engine loads."""
        from rtmatrix.runtimes.openvino_genai.convert import engine_folder

        onnx = model_path / "model.onnx" if model_path.is_dir() else model_path
        self._special = special_ids_beside(onnx)
        t0 = time.perf_counter()
        folder, manifest, built = engine_folder(onnx, self._special)
        self._convert = dict(manifest) | {"converted_now": built,
                                          "wall_s": round(time.perf_counter() - t0, 3)}  # fmt: skip
        self._n_vocab = int(manifest["vocab"])
        return folder

    def _exported_folder(self, xml: Path) -> Path:
        """The exporter's folder as it is (its conversion is the fixture's record); the
        vocabulary from the IR's logits output."""
        self._special = special_ids_beside(xml)
        logits = self._ov.Core().read_model(str(xml)).output("logits").get_partial_shape()[-1]
        if logits.is_dynamic:
            msg = f"{xml}: the logits output has no static vocabulary dimension"
            raise ValueError(msg)
        self._n_vocab = int(logits.get_length())
        self._convert = {"source": str(xml.parent), "by": "OpenVINO's exporter (optimum-cli "
                         "export openvino): see the fixture's conversion record", "vocab":
                         self._n_vocab, "converted_now": False}  # fmt: skip
        return xml.parent

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def special_ids(self) -> dict[str, int]:
        return dict(self._special)

    def reset(self) -> None:
        """Each ``generate`` call starts a new sequence: nothing to forget between calls."""

    def prefill(self, tokens: Sequence[int]) -> None:
        raise RuntimeUnavailable(NO_LOOP)

    def decode(self, token: int) -> None:
        raise RuntimeUnavailable(NO_LOOP)

    def last_logits(self) -> NDArray[np.float32]:
        raise RuntimeUnavailable(NO_LOOP)

    def counters(self) -> dict[str, float]:
        """The last generate call's ``perf_metrics``: TTFT as the prefill (it includes the
        first id's sampling), TPOT x the later ids as the decode."""
        pm = self._last_perf
        if not pm:
            return {}
        later = max(0, int(pm["generated_tokens"]) - 1)
        return {
            "pp_ms": float(pm["ttft_ms"]),
            "pp_tokens": float(pm["input_tokens"]),
            "tg_ms": float(pm["tpot_ms"]) * later,
            "tg_tokens": float(later),
        }

    # -- EngineGeneration ----------------------------------------------------------------------
    def engine_generate(
        self,
        prompt: Sequence[int],
        n_gen: int,
        banned: Sequence[int],
        on_token: Callable[[int], None],
    ) -> list[int]:
        """Greedy ids from the engine's own loop; ``on_token`` is called as each id arrives."""
        og = self._og
        cfg = self._greedy_config(n_gen)

        class _Ids(og.StreamerBase):  # type: ignore[misc,name-defined]
            def write(self, token: Any) -> Any:
                for t in token if isinstance(token, list) else [token]:
                    on_token(int(t))
                return og.StreamingStatus.RUNNING

            def end(self) -> None:
                return None

        ids = self._ov.Tensor(np.asarray([list(prompt)], dtype=np.int64))
        res = self._pipe.generate(ids, cfg, _Ids())
        pm = res.perf_metrics
        self._last_perf = {
            "ttft_ms": float(pm.get_ttft().mean),
            "tpot_ms": float(pm.get_tpot().mean),
            "throughput_tps": float(pm.get_throughput().mean),
            "generate_duration_ms": float(pm.get_generate_duration().mean),
            "inference_duration_ms": float(pm.get_inference_duration().mean),
            "load_time_ms": float(pm.get_load_time()),
            "input_tokens": int(pm.get_num_input_tokens()),
            "generated_tokens": int(pm.get_num_generated_tokens()),
        }
        return [int(t) for t in res.tokens[0]]

    # -- Sampling --------------------------------------------------------------------------------
    sampler_api: ClassVar[str] = (
        "openvino_genai.LLMPipeline.generate(ids, GenerationConfig(do_sample=True, temperature, "
        "top_k, top_p, min_p, repetition_penalty, rng_seed))"
    )
    sampler_order: ClassVar[str] = "temperature-then-truncate"
    sampler_order_source: ClassVar[str] = (
        "openvino.genai src/cpp/src/sampling/logit_processor.hpp LogitProcessor: penalties, "
        "top-k, temperature, min-p, top-p"
    )

    def sample_generate(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        """``n_gen`` ids from the engine's own sampler (``ignore_eos``: the count is fixed)."""
        cfg = self._greedy_config(n_gen)
        cfg.do_sample = True
        cfg.temperature = float(params.get("temperature", 1.0))
        cfg.top_p = float(params.get("top_p", 1.0))
        k = int(params.get("top_k", 0) or 0)
        if k > 0:
            cfg.top_k = k
        if float(params.get("min_p", 0.0)) > 0:
            cfg.min_p = float(params["min_p"])
        cfg.repetition_penalty = float(params.get("repeat_penalty", 1.0))
        cfg.rng_seed = int(seed)
        ids = self._ov.Tensor(np.asarray([list(prompt)], dtype=np.int64))
        res = self._pipe.generate(ids, cfg)
        return [int(t) for t in res.tokens[0]]

    # -- BatchEngine ---------------------------------------------------------------------------
    batch_api: ClassVar[str] = (
        "openvino_genai.ContinuousBatchingPipeline: add_request(ids, GenerationConfig) per "
        "request, step() until none is unfinished, GenerationHandle.read() after each step"
    )

    def _batch_pipeline(self) -> Any:
        if self._cb is None:
            if self._folder is None:
                msg = "no model is loaded"
                raise RuntimeUnavailable(msg)
            og = self._og
            opts = CB_OPTIONS | self._cb_options
            sc = og.SchedulerConfig()
            sc.cache_size = int(opts["cb_cache_size_gb"])
            sc.max_num_seqs = int(opts["cb_max_num_seqs"])
            props = {k: v for k, v in self._props.items() if k != "ATTENTION_BACKEND"}
            note = self._cb_kv_cache(props)
            self._cb = og.ContinuousBatchingPipeline(str(self._folder), sc, self._device, props)
            fields = ("cache_size", "num_kv_blocks", "max_num_batched_tokens", "max_num_seqs",
                      "dynamic_split_fuse", "enable_prefix_caching")  # fmt: skip
            self._cb_settings = {
                "scheduler_config": {f: getattr(sc, f, None) for f in fields},
                "properties": props,
                "attention": "paged attention (the pipeline's only backend)",
                **({"kv_cache_precision_note": note} if note else {}),
            }
        return self._cb

    def _cb_kv_cache(self, props: dict[str, Any]) -> str | None:
        """The paged-attention pipeline refuses a KV cache of another precision than the
        inference's ("key_cache_type == bf16" check): where the device computes in bf16 by
        default and the row's f32 KV cache is its own default (not asked for), the batch
        pipeline keeps its KV cache in bf16 — said, and reported as what ran."""
        if "INFERENCE_PRECISION_HINT" in props or self._kv_asked:
            return None
        try:
            default = str(self._ov.Core().get_property(self._device, "INFERENCE_PRECISION_HINT"))
        except Exception:  # a device without the property: leave the row's setting
            return None
        if "bf16" not in default and "bfloat16" not in default:
            return None
        props["KV_CACHE_PRECISION"] = "bf16"
        return (
            f"bf16: the device computes in {default} by default and "
            "ContinuousBatchingPipeline requires the KV cache in the inference precision "
            "(the row's f32 KV cache applies to LLMPipeline)"
        )

    def _greedy_config(self, n_gen: int) -> Any:
        cfg = self._og.GenerationConfig()
        cfg.max_new_tokens = n_gen
        cfg.min_new_tokens = n_gen
        cfg.do_sample = False
        cfg.ignore_eos = True
        eos = self._special.get("eos", -1)
        cfg.set_eos_token_id(eos if eos >= 0 else self._n_vocab - 1)
        return cfg

    def batch_generate(
        self,
        requests: Sequence[tuple[Sequence[int], int]],
        on_token: Callable[[int, int], None],
    ) -> list[list[int]]:
        """Every request added at once, then ``step()`` until all are finished; the ids each
        handle has after a step are handed out in request order."""
        pipe = self._batch_pipeline()
        tensor = self._ov.Tensor
        handles = [
            pipe.add_request(i, tensor(np.asarray([list(p)], np.int64)), self._greedy_config(n))
            for i, (p, n) in enumerate(requests)
        ]
        got: list[list[int]] = [[] for _ in requests]
        while pipe.has_non_finished_requests():
            pipe.step()
            for i, h in enumerate(handles):
                if h.can_read():
                    for out in h.read().values():
                        for t in out.generated_ids:
                            got[i].append(int(t))
                            on_token(i, int(t))
        return got

    def batch_state(self) -> dict[str, Any]:
        if self._cb is None:
            return {"built": False}
        m = self._cb.get_metrics()
        keys = ("cache_size_in_bytes", "kv_cache_size_in_bytes", "cache_usage",
                "avg_cache_usage", "max_cache_usage", "requests", "scheduled_requests")  # fmt: skip
        return {"built": True, **self._cb_settings, **{k: getattr(m, k, None) for k in keys}}

    # -- PromptCaching --------------------------------------------------------------------------
    def prompt_cache(self) -> PromptCache:
        """Paged attention (``ATTENTION_BACKEND=PA``, GenAI's CPU default) runs LLMPipeline
        through its continuous-batching adapter, whose latency-oriented scheduler config turns
        prefix caching on: a repeated prompt reuses its KV blocks. This row's SDPA default is
        the stateful pipeline, which starts each generate() outside a chat from an empty KV
        state."""
        backend = str(self._props.get("ATTENTION_BACKEND", "PA"))
        if backend.upper() == "PA":
            return PromptCache(True, "ATTENTION_BACKEND=PA: LLMPipeline's continuous-batching "
                               "adapter with get_latency_oriented_scheduler_config(), "
                               "enable_prefix_caching = true (openvino.genai "
                               "src/cpp/src/utils.cpp)")  # fmt: skip
        return PromptCache(False, f"ATTENTION_BACKEND={backend}: the stateful pipeline; each "
                           "generate() outside a chat starts from an empty KV state")  # fmt: skip

    # -- Streaming ---------------------------------------------------------------------------
    def stream_backend(self) -> OvGenaiBackend:
        if self._backend is None:
            eos = self._special.get("eos", -1)
            self._backend = OvGenaiBackend(self._og, self._ov, self._pipe, eos)
        return self._backend

    # -- evidence ------------------------------------------------------------------------------
    def evidence(self) -> dict[str, Any]:
        core = self._ov.Core() if self._ov is not None else None
        defaults: dict[str, Any] = {}
        for key in DEVICE_DEFAULTS:
            try:
                defaults[key] = str(core.get_property(self._device, key)) if core else None
            except Exception as exc:  # a property this device lacks
                defaults[key] = f"unavailable: {type(exc).__name__}"
        return {
            "device": self._device,
            "engine_loop": {
                "api": "openvino_genai.LLMPipeline.generate(ids, GenerationConfig, streamer)",
                "greedy": "do_sample=False, ignore_eos=True, min/max_new_tokens = gen_tokens",
                "banned_ids": "not masked: the engine has no logit mask (ignore_eos only keeps "
                "it generating past end-of-sequence)",
                "logits": "none: parity on ids, quality figures unavailable",
            },
            "settings": {
                "asked": dict(self._props),
                "device_defaults": defaults,
                "row_defaults_differ": "attention_backend SDPA (GenAI's default with an SDPA "
                "graph: PA) and kv_cache_precision f32 (the CPU default u8 changes greedy ids)",
            },
            "conversion": self._convert,
            **({"batch_pipeline": dict(self._cb_settings)} if self._cb_settings else {}),
            "perf_metrics": dict(self._last_perf),
            "debug_facilities": {
                "perf_metrics": {
                    "available": True,
                    "how": "result.perf_metrics (raw_metrics: per-token durations)",
                },
                "log_level": {"available": True, "how": "OPENVINO_LOG_LEVEL / LOG_LEVEL"},
            },
        }

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Devices and effective numerics (StackReporting): what the pipeline was asked for,
        else the device's default (GenAI exposes no compiled-model properties)."""
        from rtmatrix.runtimes.openvino_genai import stack

        return stack.report(dict(evidence), dtype)

    def close(self) -> None:
        if self._backend is not None:
            self._backend.release()
        self._backend = None
        self._pipe = None
        self._cb = None
