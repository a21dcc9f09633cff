"""The MNN-LLM row without MNN: which folder it runs, the config it asks for over the exporter's,
where it reads bos/eos, and when a 16-bit export is judged as bf16 (its embedding table)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rtmatrix.adapters.base import load_adapter_class
from rtmatrix.options import declared
from rtmatrix.runtimes.mnn.llm import (
    MnnLlmAdapter,
    asked_config,
    check_folder,
    folder_of,
    numerics,
    special_ids,
    stored_weights,
)


def _export(folder: Path, bits: int = 16, embedding: str | None = "bf16") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "llm.mnn", "llm.mnn.weight", "llm_config.json"):
        (folder / name).write_text("{}", "utf-8")
    (folder / "export_args.json").write_text(json.dumps({"quant_bit": bits}), "utf-8")
    if embedding:
        (folder / f"embeddings_{embedding}.bin").write_bytes(b"e")
    return folder


def test_the_row_is_fed_by_mnns_own_exporter() -> None:
    cls = load_adapter_class("mnn_llm")
    assert cls is MnnLlmAdapter
    assert (cls.converter, cls.container, cls.distribution) == ("mnn_llmexport", "mnn", "mnn")


def test_it_runs_an_exporters_folder_and_names_what_another_lacks(tmp_path: Path) -> None:
    out = _export(tmp_path / "out")
    assert folder_of(out / "llm.mnn.weight") == out and folder_of(out) == out
    assert check_folder(out) == out / "config.json"
    (out / "llm.mnn").unlink()
    with pytest.raises(
        FileNotFoundError, match=re.escape("not MNN-LLM's exporter output (no llm.mnn)")
    ):
        check_folder(out)


def test_threads_always_and_the_rest_only_where_asked() -> None:
    assert asked_config({}, 2) == {"thread_num": 2}
    got = asked_config({"precision": "HIGH", "memory": "low", "backend": "cpu"}, 4)
    assert got == {"thread_num": 4, "precision": "high", "memory": "low", "backend_type": "cpu"}
    with pytest.raises(
        ValueError, match=re.escape("options.precision must be one of low, normal, high")
    ):
        asked_config({"precision": "fp32"}, 2)


def test_the_options_are_declared() -> None:
    opts = declared("rtmatrix.runtimes.mnn.llm:MnnLlmAdapter")
    assert opts is not None
    assert {o.name for o in opts.options} == {"precision", "memory", "backend"}
    assert opts.problems({"precision": "high", "quality_tokens": 128}) == []
    assert [k for k, _ in opts.problems({"precison": "high"})] == ["precison"]


def test_bos_and_eos_come_from_the_checkpoints_generation_config(tmp_path: Path) -> None:
    assert special_ids(tmp_path) == {"eos": -1}
    (tmp_path / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": [2, 7]}')
    assert special_ids(tmp_path) == {"bos": 1, "eos": 2}


def test_a_16_bit_export_with_a_bf16_embedding_table_is_judged_as_bf16(tmp_path: Path) -> None:
    judged = stored_weights(_export(tmp_path / "q16"))
    assert judged is not None and judged["judged_as"] == "bf16"
    assert "embeddings_bf16.bin" in judged["by"]
    assert stored_weights(_export(tmp_path / "q4", bits=4)) is None  # int4w says so already
    assert stored_weights(_export(tmp_path / "tied", embedding=None)) is None
    assert stored_weights(tmp_path / "nothing") is None


def test_numerics_name_the_embedding_table_and_memory_lows_activation_quantization() -> None:
    export = {"export_args": {"quant_bit": 8}, "embedding": {"file": "embeddings_bf16.bin",
                                                             "precision": "bf16"}}  # fmt: skip
    low = numerics({"asked": {"thread_num": 2}, "reported": {"memory": "low"}}, export)
    assert low.weight_layout is not None and low.weight_layout.value == "bf16"
    assert low.activation_quantization is not None
    assert low.activation_quantization.value == "i8" and low.activation_quantization.default
    normal = numerics({"asked": {"memory": "normal"}, "reported": {"memory": "normal"}}, export)
    assert normal.activation_quantization is None
    f16 = numerics({"reported": {"memory": "low"}}, {"export_args": {"quant_bit": 16}})
    assert f16.activation_quantization is None and f16.weight_layout is None
