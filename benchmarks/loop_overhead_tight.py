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


class MnnLoop:
    """``runtimes/mnn/adapter.py``: the ``.mnn`` the harness's converter caches (converted here
    as the adapter's ``load`` does, outside the timed loop), a runtime manager ``{backend CPU,
    precision normal, numThread}``, the module loaded with every input and output named
    (``shape_mutable``, ``rearrange``), int32 ids, the ``present`` Vars fed back as ``past``."""

    def __init__(self, job: dict[str, Any]) -> None:
        from importlib import metadata

        import MNN.expr as F
        import MNN.nn as nn
        import onnx

        from rtmatrix.runtimes.mnn.convert import mnn_file

        self.F = F
        mnn_path, _, _ = mnn_file(Path(job["model_path"]), {}, metadata.version("mnn"))
        model = onnx.load(str(Path(job["model_path"])), load_external_data=False)
        fixed = ("input_ids", "attention_mask", "position_ids")
        ins = [i.name for i in model.graph.input]
        self.past_names = [n for n in ins if n not in fixed]
        dims = {i.name: i.type.tensor_type.shape.dim for i in model.graph.input}
        self.empty = [(dims[n][1].dim_value, dims[n][3].dim_value) for n in self.past_names]
        outs = ["logits"] + [
            next(o.name for o in model.graph.output if o.name.endswith("." + n.split(".", 1)[1]))
            for n in self.past_names
        ]
        self.asked = {"backend": "CPU", "precision": "normal", "numThread": job["threads"]}
        rt = nn.create_runtime_manager((dict(self.asked),))
        self.m = nn.load_module_from_file(
            str(mnn_path), [*fixed, *self.past_names], outs, runtime_manager=rt,
            shape_mutable=True, rearrange=True,
        )  # fmt: skip
        self.reset()

    def _var(self, a: Any) -> Any:
        F = self.F
        if a.dtype.kind in "iu":
            return F.const(a.astype(np.int32), list(a.shape), F.NCHW, F.int)
        return F.const(a.astype(np.float32), list(a.shape), F.NCHW, F.float)

    def reset(self) -> None:
        self.past = [self._var(np.zeros((1, h, 0, d), np.float32)) for h, d in self.empty]
        self.pos = 0

    def _call(self, tokens: list[int]) -> float:
        n = len(tokens)
        total = self.pos + n
        feeds = [
            self._var(np.asarray(tokens, np.int64).reshape(1, n)),
            self._var(np.ones((1, total), np.int64)),
            self._var(np.arange(self.pos, total, dtype=np.int64).reshape(1, n)),
            *self.past,
        ]
        t0 = clock()
        outs = self.m.forward(feeds)
        outs[0].read()
        dt = clock() - t0
        self.past = list(outs[1:])
        self.pos = total
        return dt

    def prefill(self, tokens: list[int]) -> float:
        return self._call(tokens)

    def decode(self, token: int) -> float:
        return self._call([token])

    def counters(self) -> dict[str, float]:
        return {}

    def settings(self) -> dict[str, Any]:
        return dict(self.asked)


class LiteRtLoop:
    """``runtimes/litert/adapter.py``: the file read into memory, ``Interpreter(model_content,
    num_threads, AUTO | BUILTIN_WITHOUT_DEFAULT_DELEGATES)``, the ``prefill``/``decode``
    signature runners, prefill in chunks of the file's ``prefill_chunk`` (the last padded, a
    1-token piece through ``decode``), the additive mask per call, the caches fed back."""

    def __init__(self, job: dict[str, Any]) -> None:
        from ai_edge_litert import interpreter as lite

        path = Path(job["model_path"])
        cfg = json.loads(path.with_name("litert_config.json").read_text("utf-8"))
        self.chunk, self.max_ctx = int(cfg["prefill_chunk"]), int(cfg["max_ctx"])
        self.xnnpack = bool(job["options"].get("xnnpack", True))
        kind = (lite.OpResolverType.AUTO if self.xnnpack
                else lite.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)  # fmt: skip
        self.threads = job["threads"]
        self.it = lite.Interpreter(model_content=path.read_bytes(), num_threads=self.threads,
                                   experimental_op_resolver_type=kind)  # fmt: skip
        self.it.allocate_tensors()
        self.pre = self.it.get_signature_runner("prefill")
        self.dec = self.it.get_signature_runner("decode")
        ins = self.dec.get_input_details()
        self.empty = {
            k: np.zeros(tuple(d["shape"]), np.float32) for k, d in ins.items() if "_cache_" in k
        }
        self.reset()

    def reset(self) -> None:
        self.cache = {k: v.copy() for k, v in self.empty.items()}
        self.pos = 0

    def _mask(self, n: int, n_valid: int) -> Any:
        key = np.arange(self.max_ctx)[None, :]
        q = self.pos + np.arange(n)[:, None]
        vis = (key <= q) & ((key < self.pos + n_valid) | (key == q))
        neg = np.float32(np.finfo(np.float32).min)
        return np.where(vis, np.float32(0), neg).reshape(1, 1, n, self.max_ctx)

    def _run(self, runner: Any, ids: list[int], n_valid: int) -> float:
        n = len(ids)
        pos = np.arange(self.pos, self.pos + n, dtype=np.int32)
        mask = self._mask(n, n_valid)
        t0 = clock()
        out = runner(input_ids=np.asarray([ids], np.int32), input_pos=pos, mask=mask,
                     **self.cache)  # fmt: skip
        dt = clock() - t0
        for k in self.cache:
            self.cache[k] = out[k]
        self.pos += n_valid
        return dt

    def prefill(self, tokens: list[int]) -> float:
        total = 0.0
        for start in range(0, len(tokens), self.chunk):
            part = tokens[start : start + self.chunk]
            if len(part) == 1 or self.pos + self.chunk > self.max_ctx:
                total += sum(self._run(self.dec, [t], 1) for t in part)
                continue
            padded = part + [part[-1]] * (self.chunk - len(part))
            total += self._run(self.pre, padded, len(part))
        return total

    def decode(self, token: int) -> float:
        return self._run(self.dec, [token], 1)

    def counters(self) -> dict[str, float]:
        return {}

    def settings(self) -> dict[str, Any]:
        return {"num_threads": self.threads, "xnnpack": self.xnnpack}


LOOPS: dict[str, Any] = {
    "llama_cpp": LlamaCppLoop,
    "onnxruntime": OrtLoop,
    "onnxruntime_genai": GenaiLoop,
    "tvm": TvmLoop,
    "mnn": MnnLoop,
    "litert": LiteRtLoop,
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
