"""The LiteRT row: Google's LiteRT (TensorFlow Lite) ``Interpreter`` from ``ai-edge-litert`` on
rtmatrix's own ``.tflite`` export (:mod:`rtmatrix.fixtures.tflite_export`), through its
signature runners, with an explicit KV cache the harness carries between calls.

The file has two static-shape signatures: ``prefill`` (``prefill_chunk`` tokens) and ``decode``
(one token), and a cache of ``max_ctx`` positions (``litert_config.json`` beside the file says
both). A prompt is prefilled in chunks; the last chunk is padded with its padded keys masked
(their cache slots are overwritten by later tokens before any query sees them); each call gets
the additive mask of its positions. The cells' PP/TG therefore include what a static-shape
format costs: padding, and attention over the whole cache every step.

The file is read into memory and handed over as ``model_content`` (given a path, this LiteRT
crashes the process in its constructor on a truncated file; from memory it raises "not a valid
Flatbuffer buffer"; an empty file is no content at all to its Python wrapper, which then says
that neither a path nor content was given).

Row options (``[[runtimes]] options``):

- ``xnnpack``: true (LiteRT's default: the XNNPACK delegate, its CPU accelerator) | false (the
  builtin kernels only: the control run). Which nodes the delegate took, and in how many
  partitions, is read from the interpreter's own node list after allocation (each delegate
  partition is one ``DELEGATE`` node; the Python API lists the first signature's subgraph).

Threads are the matrix's (``num_threads``). LiteRT has no per-call timing the Python API returns
and no profiler in this wheel, so ``counters()`` is empty.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import LoadParams, RuntimeUnavailable
from rtmatrix.adapters.kvloop import ExplicitKvAdapter
from rtmatrix.fixtures.tflite_export import causal_mask
from rtmatrix.numerics import StackReport
from rtmatrix.runtimes.litert.errors import ERROR_PATTERNS


def delegated(ops: list[dict[str, Any]], n_nodes: int) -> dict[str, Any]:
    """Which of the first ``n_nodes`` nodes the delegate took: each ``DELEGATE`` node past them
    is one partition; the nodes between its inputs and outputs are what it replaced."""
    orig, dels = ops[:n_nodes], ops[n_nodes:]
    producer = {int(t): o["index"] for o in orig for t in o["outputs"]}
    taken: set[int] = set()
    for d in dels:
        stop = {int(t) for t in d["inputs"]}
        todo = [producer[int(t)] for t in d["outputs"] if int(t) in producer]
        while todo:
            i = todo.pop()
            if i in taken:
                continue
            taken.add(i)
            todo += [
                producer[int(t)]
                for t in orig[i]["inputs"]
                if int(t) in producer and int(t) not in stop
            ]
    kept = [o for o in orig if o["index"] not in taken]
    return {
        "nodes": n_nodes,
        "partitions": len(dels),
        "delegated_nodes": len(taken),
        "delegated_by_type": dict(collections.Counter(orig[i]["op_name"] for i in taken)),
        "kept_by_type": dict(collections.Counter(o["op_name"] for o in kept)),
        "delegate_names": sorted({str(d["op_name"]) for d in dels}),
    }


class LiteRtAdapter(ExplicitKvAdapter):
    name: ClassVar[str] = "litert"
    distribution: ClassVar[str] = "ai-edge-litert"
    extra: ClassVar[str] = "litert"
    container: ClassVar[str] = "tflite"
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS

    def __init__(self) -> None:
        self._lite: Any = None
        self._it: Any = None
        self._prefill: Any = None
        self._decode: Any = None
        self._config: dict[str, Any] = {}
        self._chunk = 0
        self._max_ctx = 0
        self._n_ctx = 0
        self._cache: dict[str, NDArray[np.float32]] = {}
        self._empty: dict[str, NDArray[np.float32]] = {}
        self._pos = 0
        self._logits: NDArray[np.float32] | None = None
        self._xnnpack = True
        self._threads = 1
        self._partitions: dict[str, Any] = {}
        self._timing: dict[str, float] = {}

    def import_runtime(self) -> str:
        try:
            import ai_edge_litert.interpreter
        except ImportError as exc:
            msg = f"ai-edge-litert is not installed ({exc}); pip install 'rtmatrix[litert]'"
            raise RuntimeUnavailable(msg) from exc
        self._lite = ai_edge_litert.interpreter
        from importlib import metadata

        return metadata.version("ai-edge-litert")

    # -- model ---------------------------------------------------------------------------------
    def load(self, model_path: Path, params: LoadParams) -> None:
        path = model_path / "model.tflite" if model_path.is_dir() else model_path
        self._xnnpack = bool(params.options.get("xnnpack", True))
        self._threads = params.threads
        self._n_ctx = params.n_ctx
        cfg_path = path.with_name("litert_config.json")
        try:
            self._config = json.loads(cfg_path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"{cfg_path}: the row needs the exporter's config beside the file ({exc})"
            raise ValueError(msg) from exc
        self._chunk = int(self._config["prefill_chunk"])
        self._max_ctx = int(self._config["max_ctx"])
        if self._n_ctx > self._max_ctx:
            msg = (
                f"context length {self._n_ctx} exceeds this .tflite's static KV cache of "
                f"{self._max_ctx} positions (rtmatrix.fixtures.tflite_export.MAX_CTX)"
            )
            raise ValueError(msg)
        lite = self._lite
        kind = (
            lite.OpResolverType.AUTO
            if self._xnnpack
            else lite.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        )
        t0 = time.perf_counter()
        content = path.read_bytes()
        t1 = time.perf_counter()
        self._it = lite.Interpreter(
            model_content=content, num_threads=self._threads, experimental_op_resolver_type=kind
        )
        n_nodes = int(self._it._interpreter.NumNodes())
        self._it.allocate_tensors()
        t2 = time.perf_counter()
        self._partitions = delegated(self._it._get_ops_details(), n_nodes)
        self._prefill = self._it.get_signature_runner("prefill")
        self._decode = self._it.get_signature_runner("decode")
        self._timing = {
            "read_s": t1 - t0,
            "interpreter_and_allocate_s": t2 - t1,
            "signatures_s": time.perf_counter() - t2,
        }
        details = self._decode.get_input_details()
        self._empty = {
            name: np.zeros(tuple(d["shape"]), np.float32)
            for name, d in details.items()
            if name.startswith(("k_cache_", "v_cache_"))
        }
        self.reset()

    @property
    def vocab_size(self) -> int:
        return int(self._config["vocab_size"])

    @property
    def special_ids(self) -> dict[str, int]:
        return {k: int(self._config[f"{k}_token_id"]) for k in ("bos", "eos")}

    def _clear_cache(self) -> None:
        self._cache = {k: v.copy() for k, v in self._empty.items()}

    def _call(self, runner: Any, ids: list[int], n_valid: int, pos: int) -> NDArray[np.float32]:
        n = len(ids)
        out = runner(
            input_ids=np.asarray([ids], np.int32),
            input_pos=np.arange(pos, pos + n, dtype=np.int32),
            mask=causal_mask(pos, n, self._max_ctx, n_valid),
            **self._cache,
        )
        for k in self._cache:
            self._cache[k] = out[k]
        return np.asarray(out["logits"][0], dtype=np.float32)

    def _forward(self, tokens: Sequence[int], start: int, total: int, phase: str) -> Any:
        """The prompt in chunks of the prefill signature's length (the last padded); one token,
        or no room for a padded chunk, through the decode signature."""
        ids, pos, logits = [int(t) for t in tokens], start, None
        for first in range(0, len(ids), self._chunk):
            part = ids[first : first + self._chunk]
            n_valid = len(part)
            if n_valid == 1 or pos + self._chunk > self._max_ctx:
                for t in part:
                    logits = self._call(self._decode, [t], 1, pos)[-1]
                    pos += 1
                continue
            padded = part + [part[-1]] * (self._chunk - n_valid)
            logits = self._call(self._prefill, padded, n_valid, pos)[n_valid - 1]
            pos += n_valid
        return logits

    def counters(self) -> dict[str, float]:
        return {}

    # -- evidence ------------------------------------------------------------------------------
    def evidence(self) -> dict[str, Any]:
        return {
            "settings": {
                "asked": {"num_threads": self._threads, "xnnpack": self._xnnpack},
                "resolver": "AUTO (builtin kernels + the default XNNPACK delegate)"
                if self._xnnpack
                else "BUILTIN_WITHOUT_DEFAULT_DELEGATES (builtin kernels only)",
            },
            "static_shapes": {
                "prefill_chunk": self._chunk,
                "max_ctx": self._max_ctx,
                "note": "a prompt is prefilled in chunks (the last padded); every step attends "
                "over the whole cache (masked)",
            },
            "partitions": dict(self._partitions)
            | {
                "source": "Interpreter._get_ops_details() after allocate_tensors(): DELEGATE "
                "nodes of the prefill signature's subgraph"
            },
            "load_timing_s": {k: round(v, 4) for k, v in self._timing.items()},
            "debug_facilities": {
                "op_list": {"available": True, "how": "Interpreter._get_ops_details()"},
                "profiler": {
                    "available": False,
                    "why": "this wheel's Python API exposes no profiler",
                },
                "reference_tool": {
                    "available": False,
                    "why": "benchmark_model is not in the ai-edge-litert wheel",
                },
                "delegate_log": {
                    "available": False,
                    "why": "XNNPACK's per-node log is at a verbose level the wheel "
                    "does not let Python turn on; the one INFO line is kept",
                },
            },
        }

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend, kernels and effective numerics (StackReporting), from this row's evidence."""
        from rtmatrix.runtimes.litert import stack

        return stack.report(dict(evidence), dtype)

    def close(self) -> None:
        self._prefill = self._decode = None
        self._it = None
        self._cache = {}
