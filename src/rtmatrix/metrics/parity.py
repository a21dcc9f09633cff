"""Parity of a runtime's greedy output with the numpy reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rtmatrix.converters.dtypes import declared as converter_dtypes

# Max |logit error| on the first step that still counts as agreement, per stored weight type.
# Quantized runtimes also quantize activations, so their logits drift; tokens-until-divergence is
# reported rather than demanded for them.
LOGIT_TOLERANCE = {
    "f32": 1e-2,
    "f16": 5e-2,
    # an f32/f16 model the runtime computed in bf16 (8 mantissa bits: ~8x f16's rounding);
    # seen here: 0.05 on tiny, up to 0.15 on toy models (OpenVINO's bf16 default)
    "bf16": 0.25,
    # a float model whose KV cache the runtime kept at 8 / 4 bits (OpenVINO GenAI's u8 default)
    "kv-q8": 0.5,
    "kv-q4": 1.0,
    "q8_0": 0.5,
    "q4_0": 1.0,
    "int8": 1.0,
    # weight-only int8/int4 (DequantizeLinear): ONNX Runtime fuses them into kernels that
    # quantize the activations too
    "int8w": 1.0,
    "int4w": 1.0,
    # a real checkpoint's own quantized file (SmolLM2: Q4_1 blocks, Q8_0 embedding) as q4_0
    "as-shipped": 1.0,
}
#: a converter's own quantization (``genai-int4``, ``ov-int8``, ``mnn-q4``: every one its home
#: declares): weight-only, as int8w/int4w are, and most quantize the activations at run time
#: too (genai's accuracy_level 4, MNN's memory low, OpenVINO's dynamic quantization)
VENDOR_TOLERANCE = 1.0
LOGIT_TOLERANCE |= dict.fromkeys(converter_dtypes(), VENDOR_TOLERANCE)
EXACT_TOKENS = frozenset({"f32", "f16", "bf16"})
#: a real model's quantized cell is another model's output (wrong-output) above these: its mean
#: KL divergence from the f32 reference over the quality text (nats), or its same-top share
KLD_LIMIT = 0.5
SAME_TOP_LIMIT = 50.0


def agreeing_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _ids_judged(
    dtype: str,
    out: dict[str, Any],
    agree: int,
    ref_margins: Sequence[float],
    tol: float | None,
    why: str,
) -> dict[str, Any]:
    """Parity on the greedy ids alone (no logits to compare): every id, or a first divergence
    at a near-tie of the reference's own top two; a quantized dtype whose ids differ cannot be
    judged without logits (status unavailable, the ids still reported)."""
    judged: dict[str, Any] = {"max_abs_logit_err": None, "logit_reason": why,
                              "logit_tolerance": tol, "judged_on": "ids"}  # fmt: skip
    if out["all_tokens_agree"]:
        return judged | {"within_tolerance": True}
    if dtype not in EXACT_TOKENS:  # a quantized file's ids may differ; without logits, no judge
        why_not = (f"{dtype} ids may differ from the reference's and there are no logits to "
                   f"judge the difference by ({why})")  # fmt: skip
        return judged | {"status": "unavailable", "reason": why_not, "within_tolerance": None}
    margin = ref_margins[agree] if agree < len(ref_margins) else None
    near_tie = margin is not None and tol is not None and margin <= tol
    return judged | {
        "margin_at_divergence": margin,
        "divergence_kind": "near-tie" if near_tie else "clear-margin",
        "within_tolerance": near_tie,
    }


def compare(
    dtype: str,
    ref_tokens: Sequence[int],
    ref_logits: NDArray[np.float32],
    tokens: Sequence[int],
    logits: NDArray[np.float32] | None,
    ref_margins: Sequence[float] = (),
    ids_only: str | None = None,
) -> dict[str, Any]:
    """Greedy tokens and first-step logits against the reference. For dtypes that must agree
    on every token, a first divergence where the reference's own top-2 margin is within the
    dtype's logit tolerance is a near-tie flip (numerics: e.g. flash attention's summation
    order), recorded as such and accepted; a divergence at a clear margin is wrong output."""
    agree = agreeing_prefix(ref_tokens, tokens)
    out: dict[str, Any] = {
        "status": "measured",
        "reference": "numpy forward pass on the weights as stored in the file",
        "tokens_agree": agree,
        "tokens_compared": len(ref_tokens),
        "all_tokens_agree": agree == len(ref_tokens) and len(tokens) == len(ref_tokens),
        "first_divergence": None if agree == len(ref_tokens) else agree,
    }
    tol = LOGIT_TOLERANCE.get(dtype)
    if logits is None and ids_only:  # an engine's own loop: it shows ids, never logits
        return out | _ids_judged(dtype, out, agree, ref_margins, tol, ids_only)
    if logits is None or logits.shape != ref_logits.shape:
        out["max_abs_logit_err"] = None
        out["logit_reason"] = "runtime returned no first-step logits of the reference's shape"
        out["within_tolerance"] = False
        return out
    finite = bool(np.isfinite(logits).all())
    err = float(np.max(np.abs(logits.astype(np.float64) - ref_logits))) if finite else None
    out["max_abs_logit_err"] = err
    out["logits_finite"] = finite
    out["logit_tolerance"] = tol
    ok = err is not None and tol is not None and err <= tol
    if dtype in EXACT_TOKENS and not out["all_tokens_agree"]:
        margin = ref_margins[agree] if agree < len(ref_margins) else None
        out["margin_at_divergence"] = margin
        near_tie = margin is not None and tol is not None and margin <= tol
        out["divergence_kind"] = "near-tie" if near_tie else "clear-margin"
        ok = ok and near_tie
    out["within_tolerance"] = ok
    return out


def unavailable(reason: str) -> dict[str, Any]:
    return {"status": "unavailable", "reason": reason}


def judged_by_quality(
    par: dict[str, Any], dtype: str | None, figures: dict[Any, Any]
) -> dict[str, Any]:
    """A real model's parity: F32/F16 by greedy tokens (every token, or a near-tie flip; its
    logits are too large for one absolute logit tolerance across 30 layers, so the error is
    reported, not judged), quantized dtypes by the teacher-forced KL divergence from the f32
    reference (:mod:`rtmatrix.metrics.quality`), not by a token count."""
    if par.get("status") != "measured":
        return par
    out = dict(par)
    if dtype in EXACT_TOKENS:
        out["within_tolerance"] = bool(
            par.get("all_tokens_agree") or par.get("divergence_kind") == "near-tie"
        )
        out["judged_by"] = "greedy tokens against the reference (a real model)"
        return out
    kld = getattr(figures.get("kld_mean"), "value", None)
    same = getattr(figures.get("same_top_pct"), "value", None)
    if not isinstance(kld, int | float) or not isinstance(same, int | float):
        out["judged_by"] = "KLD unavailable: tokens and logits as for the seeded models"
        return out
    out["within_tolerance"] = kld <= KLD_LIMIT and same >= SAME_TOP_LIMIT
    out["judged_by"] = (
        f"KL divergence from the f32 reference: mean {kld:.4f} nats (limit {KLD_LIMIT}), "
        f"same top token {same:.1f} % (limit {SAME_TOP_LIMIT:.0f} %)"
    )
    return out


def conversion_judged(
    par: dict[str, Any], dtype: str | None, agreement: dict[str, Any], converter: str
) -> dict[str, Any]:
    """A converted checkpoint's parity, judged against transformers over the teacher-forced
    pass too: a float file whose top token differs where transformers' own top-2 margin is
    beyond the tolerance of what ran, or (computed in f32) whose logits move beyond f32's, is a
    conversion that changed the model (``conversion.changed_the_model``), whatever its greedy
    tokens did."""
    if par.get("status") != "measured" or not agreement:
        return par
    tol = LOGIT_TOLERANCE.get(dtype or "")
    flips = list(agreement.get("top1_flips") or [])
    clear = [f for f in flips if tol is None or float(f["reference_margin"]) > tol]
    worst = agreement.get("max_abs_logit_diff")
    exact = dtype in EXACT_TOKENS
    # the largest |Δlogit| over hundreds of positions is a conversion's signal at f32 only: at
    # f16/bf16 (an f16 KV cache, f16 attention products) it grows with depth on its own (seen:
    # 0.047 at 512 positions on a correct Qwen3 conversion), and only a clear flip tells
    beyond = dtype == "f32" and tol is not None and isinstance(worst, int | float) and worst > tol
    changed = (bool(clear) and exact) or beyond
    summary = (
        f"top-1 {agreement.get('top1_agree')}/{agreement.get('top1_positions')} positions agree "
        f"with transformers, max|Δlogit| {worst:.4g}" if isinstance(worst, int | float) else ""
    ) + (f"; first clear flip at position {clear[0]['position']}" if clear else "")
    out = dict(par)
    out["conversion"] = {
        "converter": converter,
        "judged_as": dtype,
        "logit_tolerance": tol,
        "changed_the_model": changed,
        "clear_flips": len(clear),
        "first_divergence_position": clear[0]["position"] if clear else None,
        "summary": summary,
    } | {k: agreement.get(k) for k in ("max_abs_logit_diff", "top1_agree", "top1_positions")}
    if changed:
        out["within_tolerance"] = False
    return out
