"""A checkpoint of any architecture as a fixture model judged against transformers: its spec from
config.json alone (no torch in the parent), its parameter count from the safetensors headers,
the settings a reader checks first, and the load-time refusal of what transformers cannot load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rtmatrix.fixtures import checkpoints
from rtmatrix.fixtures.prepare import unconvertible

GEMMA = {
    "model_type": "gemma3_text", "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "head_dim": 32, "sliding_window": 16,
    "layer_types": ["sliding_attention", "full_attention"] * 3, "bos_token_id": 2,
    "eos_token_id": [1, 106], "tie_word_embeddings": True,
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "default", "rope_theta": 1e6}},
}  # fmt: skip


def _folder(tmp_path: Path, cfg: dict[str, object]) -> Path:
    from safetensors.numpy import save_file

    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file({"a": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.float32)},
              str(tmp_path / "model.safetensors"))  # fmt: skip
    return tmp_path


def test_the_spec_fields_come_from_the_config_and_the_weights_headers(tmp_path: Path) -> None:
    folder = _folder(tmp_path, GEMMA)
    f = checkpoints.spec_fields(folder, checkpoints.read_config(folder))
    assert (f["vocab_size"], f["n_embd"], f["n_layer"], f["n_head"], f["n_head_kv"]) == (
        300, 64, 6, 4, 2)  # fmt: skip
    assert f["rope_theta"] == 1e6  # the full layers' θ of a per-layer-type rope
    assert (f["bos_id"], f["eos_id"]) == (2, 1) and f["architecture"] == "gemma3_text"
    assert f["param_count"] == 3 * 4 + 5


def test_features_name_the_settings_a_converter_may_miss(tmp_path: Path) -> None:
    got = checkpoints.features(_folder(tmp_path, GEMMA))
    assert got["model_type"] == "gemma3_text" and got["sliding_window"] == 16
    assert got["layer_types"][:2] == ["sliding_attention", "full_attention"]
    assert "full_attention" in got["rope_parameters"] and "vocab_size" not in got


def test_a_folder_transformers_cannot_load_is_refused_naming_the_model_type(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path, GEMMA | {"model_type": "not-a-model"})
    with pytest.raises(checkpoints.CheckpointRefused, match="model_type = 'not-a-model'"):
        checkpoints.folder_spec("mine", folder)
    (tmp_path / "g").mkdir()
    spec = checkpoints.folder_spec("gemma", _folder(tmp_path / "g", GEMMA))
    assert spec.converted and spec.architecture == "gemma3_text" and spec.n_params == 17


def test_a_row_takes_a_converted_checkpoint_only_through_its_own_converter() -> None:
    assert "names no converter" in str(unconvertible(None, "f32", None))
    assert unconvertible("llama_cpp", "f32", None) is None
    assert unconvertible("llama_cpp", "q4_0", None) is None  # convert, then llama-quantize
    assert "writes no 'int8'" in str(unconvertible("llama_cpp", "int8", None))
    assert "writes no 'q8_0'" in str(unconvertible("ort_genai", "q8_0", None))
    assert "own exporters make" in str(unconvertible("llama_cpp", "f32", "nan-weights"))
