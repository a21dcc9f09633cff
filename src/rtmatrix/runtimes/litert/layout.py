"""The two ``.tflite`` layouts the LiteRT row runs, told apart by their signatures.

- **rtmatrix's own export** (:mod:`rtmatrix.fixtures.tflite_export`): signatures ``prefill`` and
  ``decode``; inputs ``input_ids``, ``input_pos``, ``mask``, ``k_cache_<i>``/``v_cache_<i>``;
  both return ``logits`` for every row; ``litert_config.json`` beside the file says the shapes
  and the special ids.
- **litert-torch's** (``litert-torch export_hf``, :mod:`rtmatrix.converters.litert_torch`):
  signatures ``prefill_<N>`` (one per prefill length) and ``decode``; inputs ``tokens``,
  ``input_pos``, ``mask``, ``kv_cache_k_<i>``/``kv_cache_v_<i>``; a prefill returns the cache
  only, so a prompt's last token goes through ``decode`` for its logits. The shapes are read from
  the signatures (the mask's last dimension is the cache), the vocabulary from decode's
  ``logits``, the special ids from the checkpoint's config the converter copied beside it.

Both take the same additive mask (``rtmatrix.fixtures.tflite_export.causal_mask``) and int32
ids and positions. Nothing here imports LiteRT: the interpreter's signature list and a runner's
input/output details are passed in as the dicts it returns.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtmatrix.fixtures.genai_config import special_ids_beside

OWN = "rtmatrix .tflite export"
LITERT_TORCH = "litert-torch export_hf"
#: where the row's context limit comes from, per layout (named in the context-length error)
CACHE_SOURCE = {
    OWN: "rtmatrix.fixtures.tflite_export.MAX_CTX",
    LITERT_TORCH: "the converter's --cache_length, rtmatrix.converters.litert_torch.CACHE_LENGTH",
}
_PREFILL_N = re.compile(r"prefill_(\d+)")


@dataclass(frozen=True)
class Layout:
    """What the row needs to drive one file: its signature names and shapes, input names, the
    cache tensors' names, whether a prefill returns logits, the vocabulary and special ids."""

    made_by: str  # OWN or LITERT_TORCH
    #: prefill length -> its signature's name, shortest first
    prefills: tuple[tuple[int, str], ...]
    max_ctx: int
    ids_input: str
    cache_prefixes: tuple[str, ...]
    prefill_logits: bool
    vocab_size: int
    special_ids: dict[str, int]

    @property
    def chunks(self) -> tuple[int, ...]:
        return tuple(n for n, _name in self.prefills)

    def prefill_for(self, n: int) -> tuple[int, str]:
        """The shortest prefill signature that holds ``n`` tokens, else the longest."""
        return next((p for p in self.prefills if p[0] >= n), self.prefills[-1])

    def is_cache(self, name: str) -> bool:
        return name.startswith(self.cache_prefixes)

    def to_dict(self) -> dict[str, Any]:
        return {"made_by": self.made_by, "signatures": [s for _n, s in self.prefills] + ["decode"],
                "prefill_lengths": list(self.chunks), "cache_length": self.max_ctx,
                "prefill_returns_logits": self.prefill_logits}  # fmt: skip


#: a decode runner's ``(get_input_details(), get_output_details())``
Details = tuple[dict[str, Any], dict[str, Any]]


def read(signatures: dict[str, Any], decode_details: Details, path: Path) -> Layout:
    """The layout of the file at ``path`` from the interpreter's ``get_signature_list()`` and its
    decode runner's ``(input details, output details)``; ``ValueError`` naming what a file of
    neither layout has."""
    names = sorted(signatures)
    if "decode" not in signatures:
        msg = f"{path.name}: no 'decode' signature (signatures: {', '.join(names) or 'none'})"
        raise ValueError(msg)
    if "prefill" in signatures:
        return own(path)
    prefills = sorted((int(m.group(1)), s) for s in names if (m := _PREFILL_N.fullmatch(s)))
    if not prefills:
        msg = (f"{path.name}: neither rtmatrix's 'prefill' nor litert-torch's 'prefill_<N>' "
               f"signature (signatures: {', '.join(names)})")  # fmt: skip
        raise ValueError(msg)
    return litert_torch(tuple(prefills), decode_details, path)


def own(path: Path) -> Layout:
    """rtmatrix's own export: its shapes and special ids from ``litert_config.json``."""
    cfg_path = path.with_name("litert_config.json")
    try:
        config = json.loads(cfg_path.read_text("utf-8"))
        return Layout(
            made_by=OWN, prefills=((int(config["prefill_chunk"]), "prefill"),),
            max_ctx=int(config["max_ctx"]), ids_input="input_ids",
            cache_prefixes=("k_cache_", "v_cache_"), prefill_logits=True,
            vocab_size=int(config["vocab_size"]),
            special_ids={k: int(config[f"{k}_token_id"]) for k in ("bos", "eos")},
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = f"{cfg_path}: the row needs the exporter's config beside the file ({exc})"
        raise ValueError(msg) from exc


def litert_torch(
    prefills: tuple[tuple[int, str], ...], decode_details: Details, path: Path
) -> Layout:
    """litert-torch's export: shapes from the decode signature's mask and logits."""
    inputs, outputs = decode_details
    missing = [n for n in ("tokens", "input_pos", "mask") if n not in inputs]
    if missing or "logits" not in outputs:
        lacks = ", ".join(missing or ["logits"])
        has = f"inputs: {', '.join(sorted(inputs))}; outputs: {', '.join(sorted(outputs))}"
        msg = f"{path.name}: decode signature lacks {lacks} ({has})"
        raise ValueError(msg)
    return Layout(
        made_by=LITERT_TORCH, prefills=prefills,
        max_ctx=int(inputs["mask"]["shape"][-1]), ids_input="tokens",
        cache_prefixes=("kv_cache_",), prefill_logits=False,
        vocab_size=int(outputs["logits"]["shape"][-1]), special_ids=special_ids_beside(path),
    )  # fmt: skip
