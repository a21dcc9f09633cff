"""The two .tflite layouts the LiteRT row runs (rtmatrix's own export, litert-torch's), told apart
by their signatures, without LiteRT: the interpreter's signature list and the decode runner's
details are the dicts it returns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.runtimes.litert import layout

SIGS_LT = {
    "decode": {"inputs": ["tokens"], "outputs": ["logits"]},
    "prefill_8": {"inputs": ["tokens"], "outputs": []},
    "prefill_32": {"inputs": ["tokens"], "outputs": []},
}


def details(vocab: int = 100, ctx: int = 512, inputs: tuple[str, ...] = ()) -> layout.Details:
    ins: dict[str, Any] = {
        "tokens": {"shape": [1, 1]},
        "input_pos": {"shape": [1]},
        "mask": {"shape": [1, 1, 1, ctx]},
        "kv_cache_k_0": {"shape": [1, 2, ctx, 16]},
        "kv_cache_v_0": {"shape": [1, 2, 16, ctx]},
    }
    for name in inputs:
        ins.pop(name)
    outs = {"logits": {"shape": [1, 1, vocab]}, "kv_cache_k_0": {}, "kv_cache_v_0": {}}
    return ins, outs


def converted(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, 7]}))
    return tmp_path / "model.tflite"


def test_litert_torchs_file_is_read_from_its_signatures(tmp_path: Path) -> None:
    lay = layout.read(SIGS_LT, details(vocab=49152, ctx=512), converted(tmp_path))
    assert lay.made_by == layout.LITERT_TORCH
    assert lay.prefills == ((8, "prefill_8"), (32, "prefill_32"))
    assert (lay.max_ctx, lay.vocab_size, lay.ids_input) == (512, 49152, "tokens")
    assert lay.special_ids == {"bos": 1, "eos": 2}
    assert lay.prefill_logits is False
    assert lay.is_cache("kv_cache_k_0") and not lay.is_cache("mask")
    assert lay.to_dict()["signatures"] == ["prefill_8", "prefill_32", "decode"]


@pytest.mark.parametrize(("n", "want"), [(1, 8), (8, 8), (9, 32), (32, 32), (100, 32)])
def test_a_chunk_takes_the_shortest_prefill_that_holds_it(
    tmp_path: Path, n: int, want: int
) -> None:
    lay = layout.read(SIGS_LT, details(), converted(tmp_path))
    assert lay.prefill_for(n) == (want, f"prefill_{want}")


def test_rtmatrixs_own_file_is_read_from_its_config(tmp_path: Path) -> None:
    cfg = {"prefill_chunk": 32, "max_ctx": 512, "vocab_size": 64, "bos_token_id": 1,
           "eos_token_id": 2}  # fmt: skip
    (tmp_path / "litert_config.json").write_text(json.dumps(cfg))
    sigs: dict[str, Any] = {"prefill": {}, "decode": {}}
    lay = layout.read(sigs, ({}, {}), tmp_path / "model.tflite")
    assert lay.made_by == layout.OWN and lay.prefills == ((32, "prefill"),)
    assert (lay.max_ctx, lay.vocab_size, lay.ids_input) == (512, 64, "input_ids")
    assert lay.prefill_logits is True and lay.is_cache("k_cache_3")


def test_rtmatrixs_own_file_without_its_config_says_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the exporter's config beside the file"):
        layout.read({"prefill": {}, "decode": {}}, ({}, {}), tmp_path / "model.tflite")


@pytest.mark.parametrize(
    ("sigs", "det", "says"),
    [
        ({"serving_default": {}}, ({}, {}), "no 'decode' signature (signatures: serving_default)"),
        ({"decode": {}, "encode": {}}, ({}, {}), "neither rtmatrix's 'prefill' nor litert-torch's"),
        (SIGS_LT, details(inputs=("mask",)), "decode signature lacks mask"),
    ],
)  # fmt: skip
def test_a_file_of_neither_layout_is_refused_naming_what_it_has(
    tmp_path: Path, sigs: dict[str, Any], det: layout.Details, says: str
) -> None:
    with pytest.raises(ValueError, match=r"^model\.tflite: ") as exc:
        layout.read(sigs, det, converted(tmp_path))
    assert says in str(exc.value)
