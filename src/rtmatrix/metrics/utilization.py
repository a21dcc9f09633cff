"""How close a cell came to this host's limits: ``tg_bandwidth_util`` and ``pp_compute_util``.

Batch-1 decode reads every weight once per token plus the KV cache so far, so its limit is the
memory bandwidth ÷ the bytes read per token (model bandwidth utilization, MBU); prefill is
bounded by the matmul throughput instead (FLOPs per token ÷ the host's peak, MFU-like):

- **bytes per decode token** = the weights a step reads (the model file's tensors as stored,
  less lookup-only tables: :mod:`rtmatrix.metrics.weights`; where the format layer has no
  tensor sizes, the model file's size, an upper bound) + the KV cache at the decode's mean depth:
  ``2 (K, V) × n_layer × n_head_kv × head_dim × bytes per element × (P + (G + 1) / 2)`` for a
  prompt of P tokens and G generated ones, at the KV-cache precision the cell's numerics report
  (else the precision of the graph's KV-cache inputs).
- **FLOPs per prompt token** (the useful work, as MFU counts it) = ``2 × layer matmul params +
  2 × head params / P + 2 × n_layer × n_head × head_dim × (P + 1)``: two FLOPs per weight of
  every layer's projections, the output head once per prompt (a prefill needs the last
  position's logits only; a runtime that computes every position's logits does more work than
  counted, so its utilization reads high), the input embedding a lookup, and QKᵀ plus A·V over
  the causal mean of (P + 1) / 2 keys per query. Norms, rotary, softmax and activations are left
  out (≪ 1 %).
- ``tg_bandwidth_util`` = TG tok/s × bytes per token ÷ the measured read bandwidth;
  ``pp_compute_util`` = PP tok/s × FLOPs per token ÷ the measured matmul peak of the dtype the
  cell's matmuls ran in (int8 where the activations were quantized or the weights are integer,
  bf16 where the matmuls ran in bf16, else f32).

Both are ``derived`` (:class:`rtmatrix.outcome.Source`), their inputs in the metric's detail, or
``unavailable`` saying which input is missing. The host limits are the ones the run measured at
its start (:func:`rtmatrix.metrics.hostlimits.cached_or_reason`): nothing is probed per cell.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rtmatrix.converters.dtypes import declared as converter_dtypes
from rtmatrix.metrics.hostlimits import HostLimits, cached_or_reason
from rtmatrix.names import M
from rtmatrix.numerics import precision
from rtmatrix.outcome import Metric, Source

UNIT = "ratio"
#: bytes per element of a KV-cache precision (rtmatrix's names, :mod:`rtmatrix.numerics`)
ELEMENT_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "u8": 1.0, "i8": 1.0, "u4": 0.5, "i4": 0.5}
#: the fixture dtypes whose matmuls run on integer kernels (when the numerics say nothing):
#: rtmatrix's own and every converter's own quantization (``genai-int4``, ``ov-int8``, ...)
_INTEGER_DTYPES = frozenset({"q8_0", "q4_0", "int8", "int8w", "int4w", *converter_dtypes()})
BYTES_FORMULA = ("weights read per step + 2 × n_layer × n_head_kv × head_dim × KV element bytes "
                 "× (P + (G + 1) / 2)")  # fmt: skip
FLOPS_FORMULA = ("2 × layer matmul params + 2 × head params / P + 2 × n_layer × n_head × "
                 "head_dim × (P + 1)")

Limits = Callable[[int], HostLimits | str]


@dataclass(frozen=True)
class Shape:
    """What the formulas need of a model: its attention shape and its matmul parameters."""

    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    matmul_params: int
    #: the output head's parameters (vocabulary × width), within ``matmul_params``
    head_params: int = 0

    def kv_bytes_per_position(self, element_bytes: float) -> float:
        return 2.0 * self.n_layer * self.n_head_kv * self.head_dim * element_bytes


def kv_bytes(shape: Shape, element_bytes: float, prompt: int, gen: int) -> float:
    """The KV cache a decode step reads, at the decode's mean depth P + (G + 1) / 2."""
    return shape.kv_bytes_per_position(element_bytes) * mean_depth(prompt, gen)


def mean_depth(prompt: int, gen: int) -> float:
    """Positions in the cache when a decode step reads it, averaged over the G steps."""
    return prompt + (gen + 1) / 2.0


def flops_per_prompt_token(shape: Shape, prompt: int) -> float:
    attention = 2.0 * shape.n_layer * shape.n_head * shape.head_dim * (prompt + 1)
    layers = shape.matmul_params - shape.head_params
    return 2.0 * layers + 2.0 * shape.head_params / max(prompt, 1) + attention


def utilization(tps: float, per_token: float, limit: float) -> float:
    """Achieved (tokens/s × bytes or FLOPs per token) ÷ the host's measured limit."""
    return tps * per_token / limit


# -- the cell's inputs -----------------------------------------------------------------------
def _config_head_dim(source: str) -> int | None:
    """An explicit ``head_dim`` in a converted checkpoint's config.json (Qwen3 has one)."""
    try:
        cfg = json.loads((Path(source) / "config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    value = cfg.get("head_dim") if isinstance(cfg, dict) else None
    return int(value) if isinstance(value, int) and value > 0 else None


def shape_of(model: str | None) -> Shape | str:
    """The cell's model shape from its spec, or why there is none."""
    if not model:
        return "a user's model file: no spec gives its layers and heads"
    from rtmatrix.fixtures.spec import get_spec

    try:
        spec = get_spec(model)
    except (ValueError, ImportError, OSError) as exc:
        return f"the model spec of {model!r}: {exc}"
    head_dim = (_config_head_dim(spec.source) if spec.converted else None) or spec.head_dim
    embedding = 0 if spec.tied_embeddings else spec.vocab_size * spec.n_embd  # a lookup
    return Shape(spec.n_layer, spec.n_head, spec.n_head_kv, head_dim, spec.n_params - embedding,
                 spec.vocab_size * spec.n_embd)


def _stack(rec: Mapping[str, Any]) -> dict[str, Any]:
    stack = (rec.get("evidence") or {}).get("stack")
    return stack if isinstance(stack, dict) else {}


def _fact(numerics: Mapping[str, Any], name: str) -> str | None:
    fact = numerics.get(name)
    return precision(fact.get("value")) if isinstance(fact, dict) else None


def kv_precision(rec: Mapping[str, Any]) -> tuple[str, str] | str:
    """(precision, where it was read) of the cell's KV cache, or why it is unknown."""
    stack = _stack(rec)
    found = _fact(stack.get("numerics") or {}, "kv_cache")
    if found in ELEMENT_BYTES:
        return str(found), "the cell's numerics (kv_cache)"
    kinds = (stack.get("format") or {}).get("kv_cache_inputs") or {}
    words = {precision(k) for k in kinds} if isinstance(kinds, dict) else set()
    if len(words) == 1 and (word := words.pop()) in ELEMENT_BYTES:
        return str(word), f"the model graph's KV-cache inputs ({', '.join(kinds)})"
    return "the cell's numerics report no KV-cache precision and the file has no KV inputs"


def weight_bytes(rec: Mapping[str, Any]) -> tuple[float, str] | str:
    """(bytes a decode step reads of the weights, how they were counted), or why unknown."""
    found = (_stack(rec).get("format") or {}).get("weights") or {}
    if isinstance(found.get("read_per_token_bytes"), int | float):
        return float(found["read_per_token_bytes"]), str(found.get("how", "tensors as stored"))
    path = (rec.get("fixture") or {}).get("path")
    target = Path(str(path)) if path else None
    if target is None or not target.exists():
        return f"no tensor sizes ({found.get('unavailable', 'format layer')}) and no model file"
    size = (sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
            if target.is_dir() else target.stat().st_size)  # fmt: skip
    return float(size), "the model file's size (approximation: headers and lookup tables in)"


def peak_dtype(rec: Mapping[str, Any]) -> tuple[str, str]:
    """The dtype whose matmul peak bounds the cell's prefill, and why that one."""
    numerics = _stack(rec).get("numerics") or {}
    act, mm = _fact(numerics, "activation_quantization"), _fact(numerics, "matmul")
    if act in ("i8", "u8"):
        return "int8", f"activations quantized to {act} (numerics)"
    if mm in ("i8", "u8", "i4", "u4"):
        return "int8", f"{mm} weights on integer kernels (numerics)"
    if mm in ("bf16", "f32", "f16"):
        return ("bf16" if mm == "bf16" else "f32"), f"matmuls in {mm} (numerics)"
    dtype = str((rec.get("fixture") or {}).get("dtype") or "")
    if dtype in _INTEGER_DTYPES:
        return "int8", f"the numerics name no matmul precision; the file's dtype is {dtype}"
    return "f32", f"the numerics name no matmul precision; the file's dtype is {dtype or '?'}"


# -- the two metrics -------------------------------------------------------------------------
def _tps(rec: Mapping[str, Any], key: M) -> float | str:
    value = ((rec.get("metrics") or {}).get(str(key)) or {}).get("value")
    if isinstance(value, int | float) and value > 0:
        return float(value)
    return f"no {key} figure in this cell"


def _limits(rec: Mapping[str, Any], limits: Limits) -> HostLimits | str:
    threads = (rec.get("params") or {}).get("threads")
    if not isinstance(threads, int):
        return "the cell records no thread count"
    return limits(threads)


def _host(limits: HostLimits) -> dict[str, Any]:
    return {"threads": limits.threads, "host_limits_measured_utc": limits.measured_utc,
            "host_limits_command": limits.command,
            "host_limits_busy_cores": limits.host_busy_cores,
            "host_limits_contended": limits.contended}  # fmt: skip


def bandwidth_util(rec: Mapping[str, Any], limits: Limits = cached_or_reason) -> Metric:
    """``tg_bandwidth_util`` of a cell record, or unavailable naming the missing input."""
    tps, host, shape = _tps(rec, M.TG_TPS), _limits(rec, limits), shape_of(_model(rec))
    kv, weights = kv_precision(rec), weight_bytes(rec)
    if isinstance(tps, str) or isinstance(host, str) or isinstance(shape, str):
        return Metric.unavailable(UNIT, next(x for x in (tps, host, shape) if isinstance(x, str)))
    if isinstance(kv, str) or isinstance(weights, str):
        return Metric.unavailable(UNIT, kv if isinstance(kv, str) else str(weights))
    bw = host.bandwidth
    if bw.value is None:
        return Metric.unavailable(UNIT, f"this host's read bandwidth: {bw.reason}")
    p = rec.get("params") or {}
    prompt, gen = int(p.get("prompt_tokens", 0)), int(p.get("gen_tokens", 0))
    kv_read = kv_bytes(shape, ELEMENT_BYTES[kv[0]], prompt, gen)
    per_token = weights[0] + kv_read
    detail = _host(host) | {
        "method": "TG tok/s × bytes read per decode token ÷ this host's measured read bandwidth",
        "versus": "this host's measured bandwidth", "formula": BYTES_FORMULA,
        "tg_tps": tps, "bytes_per_token": per_token, "weights_bytes": weights[0],
        "weights_how": weights[1], "kv_bytes_per_token": kv_read, "kv_precision": kv[0],
        "kv_precision_from": kv[1], "kv_mean_depth": mean_depth(prompt, gen),
        "shape": asdict(shape), "bandwidth_bytes_s": bw.value, "bandwidth_spread": bw.spread,
        "bandwidth_method": bw.method, "limit_tps": bw.value / per_token,
    }  # fmt: skip
    return Metric(utilization(tps, per_token, bw.value), UNIT, Source.DERIVED, detail=detail)


def compute_util(rec: Mapping[str, Any], limits: Limits = cached_or_reason) -> Metric:
    """``pp_compute_util`` of a cell record, or unavailable naming the missing input."""
    tps, host, shape = _tps(rec, M.PP_TPS), _limits(rec, limits), shape_of(_model(rec))
    if isinstance(tps, str) or isinstance(host, str) or isinstance(shape, str):
        return Metric.unavailable(UNIT, next(x for x in (tps, host, shape) if isinstance(x, str)))
    dtype, why = peak_dtype(rec)
    peak = host.peak(dtype)
    if peak.value is None:
        return Metric.unavailable(UNIT, f"this host's {dtype} matmul peak ({why}): {peak.reason}")
    prompt = int((rec.get("params") or {}).get("prompt_tokens", 0))
    flops = flops_per_prompt_token(shape, prompt)
    detail = _host(host) | {
        "method": f"PP tok/s × FLOPs per prompt token ÷ this host's measured {dtype} matmul peak",
        "versus": f"this host's measured {dtype} matmul peak", "formula": FLOPS_FORMULA,
        "pp_tps": tps, "flops_per_token": flops, "peak_dtype": dtype, "peak_dtype_why": why,
        "shape": asdict(shape), "peak_flops_s": peak.value, "peak_spread": peak.spread,
        "peak_method": peak.method, "limit_tps": peak.value / flops,
    }  # fmt: skip
    return Metric(utilization(tps, flops, peak.value), UNIT, Source.DERIVED, detail=detail)


def _model(rec: Mapping[str, Any]) -> str | None:
    model = (rec.get("fixture") or {}).get("model")
    return str(model) if model else None


def metrics_for(rec: Mapping[str, Any], limits: Limits = cached_or_reason) -> dict[str, Any]:
    """The hook :func:`rtmatrix.runner.record.cell_record` calls: both metrics, as dicts."""
    if (rec.get("outcome") or {}).get("status") != "ok":
        why = f"cell outcome is {(rec.get('outcome') or {}).get('status')}"
        return {str(k): Metric.unavailable(UNIT, why).to_dict()
                for k in (M.TG_BANDWIDTH_UTIL, M.PP_COMPUTE_UTIL)}  # fmt: skip
    return {str(M.TG_BANDWIDTH_UTIL): bandwidth_util(rec, limits).to_dict(),
            str(M.PP_COMPUTE_UTIL): compute_util(rec, limits).to_dict()}  # fmt: skip
