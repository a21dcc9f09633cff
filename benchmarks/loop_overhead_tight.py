"""The tight loop of ``loop_overhead.py``: one runtime driven by the same calls the rtmatrix
adapter makes, with nothing else around them. A plain Python process that imports no rtmatrix
module (so no supervisor, no events, no logits copy, no ``isfinite``, no argmax):

    python benchmarks/loop_overhead_tight.py JOB.json OUT.json

The job (written by ``loop_overhead.py``) names the row, the model file, threads, n_ctx, the row's
options, the prompt and the decode tokens (the numpy reference's greedy tokens, i.e. what the
harness feeds when its parity holds), warm-up and repetitions. Each repetition resets the
sequence, prefills the prompt and runs ``len(decode_tokens)`` single-token decodes; only the
runtime call is inside ``time.perf_counter``: the inputs are built before it, the KV bookkeeping
after it. The load settings are copied from ``src/rtmatrix/runtimes/<name>/adapter.py`` (session
options, providers, threads, KV layout, the calls themselves); ``settings()`` reports them so
``loop_overhead.py`` can compare them with the harness cell's evidence.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

clock = time.perf_counter


class LlamaCppLoop:
    """``runtimes/llama_cpp/adapter.py``: ``Llama(**load_settings)`` (flash attention ``auto``
    by pointing the binding's DISABLED constant at AUTO while the context is created), a
    ``llama_log_set`` callback as the adapter installs, then ``llama_decode`` +
    ``llama_synchronize`` on ``llama_batch_get_one`` batches."""

    def __init__(self, job: dict[str, Any]) -> None:
        import llama_cpp

        self.lib = llama_cpp
        self.log: list[str] = []

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
        def _cb(_level: int, text: bytes, _user: Any) -> None:
            self.log.append(text.decode("utf-8", errors="replace"))

        self._cb = _cb  # ctypes keeps no reference
        llama_cpp.llama_log_set(_cb, ctypes.c_void_p(0))
        opts = job["options"]
        fa = {"auto": "auto", "on": "on", "off": "off", True: "on", False: "off"}[
            opts.get("flash_attn", "auto")
        ]
        self.fa_mode = fa
        self.load = {
            "model_path": job["model_path"],
            "n_ctx": job["n_ctx"],
            "n_batch": job["n_ctx"],
            "n_ubatch": min(job["n_ctx"], job["n_batch"]),
            "n_threads": job["threads"],
            "n_threads_batch": job["threads"],
            "n_gpu_layers": 0,
            "use_mmap": bool(opts.get("use_mmap", True)),
            "flash_attn": fa == "on",
            "seed": 0,
            "verbose": False,
        }
        with self._fa_auto():
            self.llm = llama_cpp.Llama(**self.load)
        self.ctx = self.llm._ctx.ctx

    @contextlib.contextmanager
    def _fa_auto(self) -> Iterator[None]:
        if self.fa_mode != "auto":
            yield
            return
        import llama_cpp.llama_cpp as inner

        saved = inner.LLAMA_FLASH_ATTN_TYPE_DISABLED
        inner.LLAMA_FLASH_ATTN_TYPE_DISABLED = inner.LLAMA_FLASH_ATTN_TYPE_AUTO
        try:
            yield
        finally:
            inner.LLAMA_FLASH_ATTN_TYPE_DISABLED = saved

    def reset(self) -> None:
        lib = self.lib
        lib.llama_memory_clear(lib.llama_get_memory(self.ctx), True)
        lib.llama_perf_context_reset(self.ctx)

    def _call(self, tokens: list[int]) -> float:
        lib = self.lib
        arr = (lib.llama_token * len(tokens))(*tokens)
        batch = lib.llama_batch_get_one(arr, len(tokens))
        t0 = clock()
        rc = lib.llama_decode(self.ctx, batch)
        lib.llama_synchronize(self.ctx)
        dt = clock() - t0
        if rc != 0:
            msg = f"llama_decode returned {rc} for {len(tokens)} token(s)"
            raise RuntimeError(msg)
        return dt

    def prefill(self, tokens: list[int]) -> float:
        return self._call(tokens)

    def decode(self, token: int) -> float:
        return self._call([token])

    def counters(self) -> dict[str, float]:
        perf = self.lib.llama_perf_context(self.ctx)
        return {
            "pp_ms": float(perf.t_p_eval_ms),
            "pp_tokens": float(perf.n_p_eval),
            "tg_ms": float(perf.t_eval_ms),
            "tg_tokens": float(perf.n_eval),
        }

    def settings(self) -> dict[str, Any]:
        effective: dict[str, str] = {}
        for line in "".join(self.log).splitlines():
            if line.startswith("llama_context:") and " = " in line:
                key, _, value = line.split(":", 1)[1].partition(" = ")
                if key.strip().isidentifier():
                    effective[key.strip()] = value.strip()
            if "Flash Attention" in line and ("enabled" in line or "disabled" in line):
                effective["flash_attn_resolved"] = "enabled" if "enabled" in line else "disabled"
        requested = {k: v for k, v in self.load.items() if k not in ("model_path", "verbose")}
        return {"requested": requested | {"flash_attn": self.fa_mode}, "effective": effective}


class OrtLoop:
    """``runtimes/onnxruntime/adapter.py``: the same ``SessionOptions`` (intra-op threads,
    ORT's default inter-op threads, log level 2, ``session.record_ep_graph_assignment_info=1``
    where this ORT has the API), the same default providers (every available one, CPU last),
    past/present KV tensors fed back call to call. ORT's logger callback (the adapter's log
    capture) is not installed: it is no session setting."""

    def __init__(self, job: dict[str, Any]) -> None:
        import onnxruntime as ort

        path = Path(job["model_path"])
        path = path / "model.onnx" if path.is_dir() else path
        so = ort.SessionOptions()
        so.intra_op_num_threads = job["threads"]
        so.log_severity_level = int(job["options"].get("log_severity_level", 2))
        self.api = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")
        if self.api:
            so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        cpu = "CPUExecutionProvider"
        self.providers = [p for p in ort.get_available_providers() if p != cpu] + [cpu]
        self.threads = job["threads"]
        self.sess = ort.InferenceSession(str(path), so, providers=self.providers)
        outs = [o.name for o in self.sess.get_outputs()]
        self.outputs = ["logits", *(o for o in outs if o != "logits")]
        self.inputs = {i.name for i in self.sess.get_inputs()}
        self.past_of: dict[str, str] = {}
        self.empty: dict[str, Any] = {}
        for info in self.sess.get_inputs():
            if info.name in ("input_ids", "attention_mask", "position_ids"):
                continue
            suffix = info.name.split(".", 1)[-1]
            present = next(o for o in outs if o != info.name and o.endswith("." + suffix))
            self.past_of[present] = info.name
            shape = (1, info.shape[1], 0, info.shape[3])
            self.empty[info.name] = np.zeros(shape, dtype=np.float32)
        self.reset()

    def reset(self) -> None:
        self.past = dict(self.empty)
        self.pos = 0

    def _call(self, tokens: list[int]) -> float:
        n = len(tokens)
        total = self.pos + n
        feeds: dict[str, Any] = dict(self.past)
        feeds["input_ids"] = np.asarray(tokens, dtype=np.int64).reshape(1, n)
        if "position_ids" in self.inputs:
            feeds["position_ids"] = np.arange(self.pos, total, dtype=np.int64).reshape(1, n)
        if "attention_mask" in self.inputs:
            feeds["attention_mask"] = np.ones((1, total), dtype=np.int64)
        t0 = clock()
        outs = self.sess.run(self.outputs, feeds)
        dt = clock() - t0
        for name, value in zip(self.outputs[1:], outs[1:], strict=True):
            if name in self.past_of:
                self.past[self.past_of[name]] = value
        self.pos = total
        return dt

    def prefill(self, tokens: list[int]) -> float:
        return self._call(tokens)

    def decode(self, token: int) -> float:
        return self._call([token])

    def counters(self) -> dict[str, float]:
        return {}

    def settings(self) -> dict[str, Any]:
        return {
            "intra_op_num_threads": self.threads,
            "inter_op_num_threads": "ORT default",
            "providers_passed": self.providers,
            "record_ep_graph_assignment_info": self.api,
            "used": list(self.sess.get_providers()),
        }


class GenaiLoop:
    """``runtimes/onnxruntime_genai/adapter.py``: ``og.Config`` with providers cleared, the
    decoder's session options overlaid with ``intra_op_num_threads`` and (``placement_log``, on by
    default) ``log_severity_level = 0``; a new ``Generator`` (``max_length = n_ctx``) per
    repetition; ``append_tokens`` with int32 ids."""

    def __init__(self, job: dict[str, Any]) -> None:
        import onnxruntime_genai as og

        self.og = og
        path = Path(job["model_path"])
        folder = path if path.is_dir() else path.parent
        opts = job["options"]
        config = og.Config(str(folder))
        config.clear_providers()
        self.session: dict[str, Any] = {
            **dict(opts.get("session_options", {})),
            "intra_op_num_threads": job["threads"],
        }
        if bool(opts.get("placement_log", True)):
            self.session["log_severity_level"] = 0
        config.overlay(json.dumps({"model": {"decoder": {"session_options": self.session}}}))
        self.model = og.Model(config)
        self.n_ctx = job["n_ctx"]
        self.gen: Any = None
        self.reset()

    def reset(self) -> None:
        og = self.og
        self.gen = None
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.n_ctx)
        self.gen = og.Generator(self.model, params)

    def _call(self, tokens: list[int]) -> float:
        ids = np.asarray(tokens, dtype=np.int32)
        t0 = clock()
        self.gen.append_tokens(ids)
        return clock() - t0

    def prefill(self, tokens: list[int]) -> float:
        return self._call(tokens)

    def decode(self, token: int) -> float:
        return self._call([token])

    def counters(self) -> dict[str, float]:
        return {}

    def settings(self) -> dict[str, Any]:
        return {"session_options": self.session, "providers": [],
                "device_type": str(self.model.device_type)}  # fmt: skip


class TvmLoop:
    """``runtimes/tvm/adapter.py`` in ``aot`` mode: ``TVM_USE_RUNTIME_LIB=1`` before the import
    (``runtime_only``, default for aot), ``TVM_NUM_THREADS`` before the first kernel,
    ``load_module(model.so)``, ``VirtualMachine(..., memory_cfg=allocator)`` (naive by default),
    weights from the tensor cache, the KV cache as the adapter allocates it (keys ``(kv, d, c)``,
    values ``(kv, c, d)``, ``c`` = n_ctx rounded up to the library's tile), ``vm["prefill"]`` /
    ``vm["decode"]`` called with ``(ids, ShapeTuple([n_past]), cache, params)``."""

    def __init__(self, job: dict[str, Any]) -> None:
        opts = job["options"]
        if str(opts.get("mode", "aot")) != "aot":
            msg = "the tight loop runs the tvm row in aot mode only"
            raise ValueError(msg)
        self.runtime_only = bool(opts.get("runtime_only", True))
        if self.runtime_only and "tvm" not in sys.modules:
            os.environ["TVM_USE_RUNTIME_LIB"] = "1"
        import tvm
        import tvm_ffi
        from tvm.runtime.vm import VirtualMachine

        self.tvm = tvm
        path = Path(job["model_path"])
        folder = path.parent
        spec = json.loads((folder / "spec.json").read_text("utf-8"))
        cfg = spec["config"]
        os.environ["TVM_NUM_THREADS"] = str(job["threads"])
        self.dev = tvm.cpu(0)
        lib = tvm.runtime.load_module(str(path))
        self.allocator = str(opts.get("allocator", "naive"))
        self.vm = VirtualMachine(lib, self.dev, memory_cfg=self.allocator)
        load = tvm.get_global_func("vm.builtin.tensor_cache.load")
        by_name = tvm.get_global_func("vm.builtin.param_array_from_cache_by_name")
        clear = tvm.get_global_func("vm.builtin.tensor_cache.clear")
        load(str(folder), int(self.dev.dlpack_device_type()), 0)
        try:
            self.params = by_name(list(spec["param_names"]))
        finally:
            clear()
        n_kv, d = int(cfg["n_head_kv"]), int(cfg["head_dim"])
        tile = int(spec.get("cache", {}).get("c_multiple", 16))
        c = -(-job["n_ctx"] // tile) * tile
        layers = []
        for i in range(2 * int(cfg["n_layer"])):
            shape = (n_kv, d, c) if i % 2 == 0 else (n_kv, c, d)
            layers.append(tvm.runtime.tensor(np.zeros(shape, dtype=np.float32), self.dev))
        self.cache = tvm_ffi.Array(layers)
        self.prefill_fn = self.vm["prefill"]
        self.decode_fn = self.vm["decode"]
        num = tvm.get_global_func("runtime.NumThreads", allow_missing=True)
        self.num_threads = num() if num else None
        self.pos = 0

    def reset(self) -> None:
        self.pos = 0

    def _call(self, fn: Any, tokens: list[int]) -> float:
        tvm = self.tvm
        ids = tvm.runtime.tensor(np.asarray(tokens, dtype=np.int32), self.dev)
        n_past = tvm.runtime.ShapeTuple([self.pos])
        t0 = clock()
        fn(ids, n_past, self.cache, self.params)
        dt = clock() - t0
        self.pos += len(tokens)
        return dt

    def prefill(self, tokens: list[int]) -> float:
        return self._call(self.prefill_fn, tokens)

    def decode(self, token: int) -> float:
        return self._call(self.decode_fn, [token])

    def counters(self) -> dict[str, float]:
        return {}

    def settings(self) -> dict[str, Any]:
        return {"tvm_num_threads": self.num_threads, "allocator": self.allocator,
                "runtime_only": self.runtime_only, "mode": "aot"}  # fmt: skip


LOOPS: dict[str, Any] = {
    "llama_cpp": LlamaCppLoop,
    "onnxruntime": OrtLoop,
    "onnxruntime_genai": GenaiLoop,
    "tvm": TvmLoop,
}


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Warm-up and counted repetitions: reset, prefill, single-token decodes; per repetition the
    prefill call's seconds, each decode call's seconds and the runtime's counters (if any)."""
    t0 = time.monotonic()
    loop = LOOPS[job["adapter"]](job)
    load_s = time.monotonic() - t0
    prompt, decode_tokens = list(job["prompt"]), list(job["decode_tokens"])
    reps = []
    for i in range(job["warmup"] + job["repetitions"]):
        loop.reset()
        pp_s = loop.prefill(prompt)
        decode_s = [loop.decode(t) for t in decode_tokens]
        if i >= job["warmup"]:
            reps.append({"pp_s": pp_s, "decode_s": decode_s, "counters": loop.counters()})
    return {"reps": reps, "settings": loop.settings(), "load_s": load_s, "pid": os.getpid()}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: loop_overhead_tight.py JOB.json OUT.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text("utf-8"))
    out = run(job)
    Path(argv[1]).write_text(json.dumps(out), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
