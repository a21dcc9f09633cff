"""What a runtime's weights and kernels cost in quality on a real model, on real text.

A real-model cell (its fixture has a ``source`` checkpoint) gets a teacher-forced pass over one of
rtmatrix's own texts after its timed generation: the worker feeds the text's ids through the
adapter's own ``prefill``/``decode``/``last_logits`` and keeps the logits predicting each next
id; here they are judged against the numpy reference on the *f32 canonical weights* (the
checkpoint's values as shipped), as llama.cpp's ``llama-perplexity --kl-divergence`` judges a
quantized file against its base:

- ``kld_mean`` / ``kld_p99``: KL(P_reference || P_runtime) of the next-token distributions, nats;
- ``same_top_pct``: how often both put the same token first;
- ``ppl`` / ``ppl_reference``: perplexity of the text under the runtime and under the reference.

Every figure names the text, the number of positions and the reference it is against.
Row options: ``quality = false`` skips the pass; ``quality_text`` (a shipped text's name);
``quality_tokens`` (positions to score, default 512, at most ``n_ctx - 1``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rtmatrix.metrics import registry
from rtmatrix.names import M
from rtmatrix.outcome import Metric, Source

DEFAULT_POSITIONS = 512
NUMPY_REFERENCE = (
    "numpy forward pass on the f32 canonical weights (the checkpoint's values as shipped), "
    "teacher-forced over the same ids"
)
TRANSFORMERS_REFERENCE = (
    "transformers' fp32 eager forward pass on the checkpoint as given, teacher-forced over the "
    "same ids"
)
QUALITY_METRICS = (M.KLD_MEAN, M.KLD_P99, M.SAME_TOP, M.PPL, M.PPL_REFERENCE)
_UNITS = {m: registry.unit_of(m) for m in QUALITY_METRICS}


@dataclass(frozen=True)
class QualityPlan:
    """The ids a cell is teacher-forced through, and what they are."""

    model: str
    text_name: str
    text: str
    text_ids: list[int]  # the whole text, as the harness tokenizes it
    positions: int  # the first positions + 1 ids are fed: each but the last predicts the next
    #: the timed generation's prompt: the first ``prompt_tokens`` ids of the fixture's
    #: ``prompt``/``prompt_file`` text, else of the quality text (None: seeded ids)
    prompt_ids: list[int] | None = None
    prompt_name: str = ""  # what the prompt's text is

    @property
    def ids(self) -> list[int]:
        return self.text_ids[: self.positions + 1]

    #: what judges the pass: rtmatrix's numpy reference, or transformers (a converted model)
    reference: str = NUMPY_REFERENCE

    def detail(self) -> dict[str, Any]:
        return {
            "text": self.text_name,
            "positions": self.positions,
            "reference": self.reference,
            "method": "KL(P_reference || P_runtime) of the next-token distributions; same top "
            "token; perplexity exp(mean NLL of the text's next ids)",
        }


def plan(
    model: str | None,
    n_ctx: int,
    options: dict[str, Any],
    prompt_tokens: int = 0,
    prompt: tuple[str, str] | None = None,
) -> QualityPlan | None:
    """A real-model cell's text, or None (a seeded model): its timed generation is prompted with
    the first ``prompt_tokens`` ids of ``prompt`` (``(what, text)``: the fixture's ``prompt``
    or ``prompt_file``), else of the quality text, so what it generates reads as a
    continuation (``text_prompt = false``: seeded ids, as before); its quality pass feeds the
    quality text (unless :func:`wants_pass` says no). Raises ``ValueError`` naming the text or
    the checkpoint when a text cannot be tokenized, or a prompt is shorter than
    ``prompt_tokens``."""
    if model is None:
        return None
    from rtmatrix.fixtures.spec import get_spec
    from rtmatrix.fixtures.tokenizer import TEXTS, encode, shipped_text

    spec = get_spec(model)
    if not spec.source:
        return None
    reference = TRANSFORMERS_REFERENCE if spec.converted else NUMPY_REFERENCE
    name = str(options.get("quality_text", TEXTS[0]))
    text = shipped_text(name)
    ids = encode(spec.source, text)
    positions = min(int(options.get("quality_tokens", DEFAULT_POSITIONS)), n_ctx - 1, len(ids) - 1)
    if prompt is not None:
        what, prompt_text = prompt
        prompt_ids = encode(spec.source, prompt_text)
        if len(prompt_ids) < prompt_tokens:
            msg = (f"{what} is {len(prompt_ids)} tokens, fewer than prompt_tokens = "
                   f"{prompt_tokens}: give a longer text, or set the fixture's params."
                   f"prompt_tokens = {len(prompt_ids)} or fewer")  # fmt: skip
            raise ValueError(msg)
        return QualityPlan(
            model,
            name,
            text,
            ids,
            positions,
            prompt_ids[:prompt_tokens],
            f"the first {prompt_tokens} of {len(prompt_ids)} tokens of {what}",
            reference,
        )
    if options.get("text_prompt", True) is not False and 0 < prompt_tokens <= len(ids):
        return QualityPlan(model, name, text, ids, positions, ids[:prompt_tokens],
                           f"the first {prompt_tokens} tokens of {name}", reference)  # fmt: skip
    return QualityPlan(model, name, text, ids, positions, reference=reference)


def anchor_n_ctx(plan: QualityPlan) -> int:
    """The chunk the runtime's own quality tool judges (llama-perplexity: one chunk of this many
    ids of the text, which must hold twice as many; it scores positions ``n // 2 .. n - 2``),
    chosen so the harness's pass covers the same positions."""
    return min(plan.positions + 1, len(plan.text_ids) // 2)


def wants_pass(options: dict[str, Any]) -> bool:
    """The row option ``quality = false`` skips the teacher-forced pass (the text prompt stays)."""
    return options.get("quality", True) is not False


def reference_logits(plan: QualityPlan) -> NDArray[np.float32]:
    """The f32 reference's logits predicting each next id (cached by model and ids)."""
    from rtmatrix.fixtures.cache import cached_build, load_arrays, save_arrays
    from rtmatrix.fixtures.model import Reference, make_weights
    from rtmatrix.fixtures.spec import get_spec

    spec = get_spec(plan.model)
    if spec.converted:  # transformers' fp32 eager pass over the same ids (cached there)
        from rtmatrix.fixtures.hf_reference import hf_reference

        ref = hf_reference(Path(spec.source), plan.ids[:1], 1, (spec.eos_id,), plan.ids)
        if ref.logits is None:
            msg = "transformers' reference returned no teacher-forced logits"
            raise ValueError(msg)
        return np.asarray(ref.logits, dtype=np.float32)
    ids_hash = hashlib.sha256(json.dumps(plan.ids).encode()).hexdigest()
    key = {"quality_reference_version": "1", "spec": spec.content(), "ids": ids_hash}

    def build(path: Path) -> dict[str, Any]:
        ref = Reference(spec, make_weights(spec))
        save_arrays(path, {"logits": ref.forward(plan.ids[:-1], ref.new_cache())})
        return {"positions": plan.positions, "text": plan.text_name}

    art = cached_build(f"{plan.model}-quality-ref", key, "logits.npz", build)
    return np.asarray(load_arrays(art.path)["logits"], dtype=np.float32)


def _log_softmax(x: NDArray[Any]) -> NDArray[np.float64]:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return np.asarray(x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def window(kld: NDArray[Any], same: NDArray[Any], n_ctx: int) -> dict[str, Any]:
    """Mean KLD and same-top % over the positions the runtime's own tool scores in one chunk of
    ``n_ctx`` ids (``n_ctx // 2 .. n_ctx - 2``, :func:`anchor_n_ctx`)."""
    lo, hi = n_ctx // 2, n_ctx - 1
    if hi > len(kld) or hi <= lo:
        return {"n_ctx": n_ctx, "unavailable": f"the pass scored {len(kld)} positions, the "
                f"tool's chunk needs positions {lo}..{hi - 1}"}  # fmt: skip
    return {
        "n_ctx": n_ctx,
        "positions": [lo, hi - 1],
        "kld_mean": float(kld[lo:hi].mean()),
        "same_top_pct": float(same[lo:hi].mean() * 100.0),
    }


def figures(
    runtime: NDArray[Any],
    reference: NDArray[Any],
    next_ids: list[int],
    detail: dict[str, Any],
    anchor: int | None = None,
) -> dict[str, Metric]:
    """The quality figures of one teacher-forced pass (``runtime`` and ``reference`` are the
    logits predicting ``next_ids``, one row each); ``anchor``: the chunk length of the
    runtime's own quality tool, whose positions also get their own mean KLD and same-top %
    (``kld_mean``'s ``detail.anchor_window``)."""
    if runtime.shape != reference.shape or runtime.shape[0] != len(next_ids):
        why = f"runtime logits {runtime.shape} do not match the reference's {reference.shape}"
        return unavailable(why)
    if not np.isfinite(runtime).all():
        return unavailable("the runtime's logits hold non-finite values")
    lp_rt, lp_ref = _log_softmax(runtime), _log_softmax(reference)
    kld = (np.exp(lp_ref) * (lp_ref - lp_rt)).sum(axis=-1)
    rows = np.arange(len(next_ids))
    target = np.asarray(next_ids)
    nll_rt, nll_ref = -lp_rt[rows, target], -lp_ref[rows, target]
    same_rows = runtime.argmax(-1) == reference.argmax(-1)
    same = float(np.mean(same_rows) * 100.0)
    src = Source.HARNESS_COMPARISON
    kld_detail = detail | {"sd": float(kld.std())} | agreement(runtime, reference)
    if anchor:
        kld_detail["anchor_window"] = window(kld, same_rows, anchor)
    return {
        M.KLD_MEAN: Metric(float(kld.mean()), _UNITS[M.KLD_MEAN], src, detail=kld_detail),
        M.KLD_P99: Metric(float(np.percentile(kld, 99)), _UNITS[M.KLD_P99], src, detail=detail),
        M.SAME_TOP: Metric(same, "%", src, detail=detail),
        M.PPL: Metric(float(np.exp(nll_rt.mean())), "ppl", src, detail=detail),
        M.PPL_REFERENCE: Metric(float(np.exp(nll_ref.mean())), "ppl", src, detail=detail),
    }


def unavailable(reason: str) -> dict[str, Metric]:
    return {m: Metric.unavailable(_UNITS[m], reason) for m in QUALITY_METRICS}


def agreement(runtime: NDArray[Any], reference: NDArray[Any]) -> dict[str, Any]:
    """How closely one teacher-forced pass agrees with the reference, position by position:
    the largest |Δlogit|, top-1 agreement, and each position where the top tokens differ with
    the reference's own top-1 minus top-2 margin there (a flip at a margin within the
    tolerance of what ran is numerics; at a clear margin, a different model)."""
    diff = np.abs(runtime.astype(np.float64) - reference.astype(np.float64))
    worst = diff.max(axis=-1)
    top_rt, top_ref = runtime.argmax(-1), reference.argmax(-1)
    part = np.partition(reference.astype(np.float64), -2, axis=-1)[:, -2:]
    margins = part[:, 1] - part[:, 0]
    flips = [{"position": int(i), "reference_margin": round(float(margins[i]), 5)}
             for i in np.flatnonzero(top_rt != top_ref)]  # fmt: skip
    return {
        "max_abs_logit_diff": float(worst.max()) if worst.size else None,
        "max_abs_logit_diff_position": int(worst.argmax()) if worst.size else None,
        "top1_agree": int((top_rt == top_ref).sum()),
        "top1_positions": len(top_ref),
        "top1_flips": flips[:50],
    }
