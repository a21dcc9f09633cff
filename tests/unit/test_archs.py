"""The architecture family: every member's config carries its feature, and a built member is a
real Hugging Face folder, cached, and the same bytes whether built alone or in a batch."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from rtmatrix.fixtures import archs
from rtmatrix.fixtures.cache import file_sha256

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="torch and transformers build the toy checkpoints",
)
BATCH = ("qwen3-toy", "gemma3-custom-toy", "phi4-mini-toy")


def test_the_family_has_eleven_members_with_features() -> None:
    assert len(archs.ARCHITECTURES) == 11
    for name, member in archs.ARCHITECTURES.items():
        assert member.name == name and archs.is_member(name)
        assert member.features and member.description
        cfg = member.full_config
        assert cfg["hidden_size"] == 64 and cfg["vocab_size"] == 49152
        assert cfg["num_attention_heads"] == 4 and cfg["num_key_value_heads"] == 2
        assert cfg["max_position_embeddings"] >= 1024
        assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (1, 2)
    assert not archs.is_member("qwen3") and not archs.is_member("tiny")
    assert len({m.seed for m in archs.ARCHITECTURES.values()}) == 11


def test_each_feature_is_in_the_config() -> None:
    a = archs.ARCHITECTURES
    assert a["qwen3-toy"].config["head_dim"] == 32 != 64 // 4
    assert a["llama3-rope-toy"].config["rope_parameters"]["rope_type"] == "llama3"
    gemma = a["gemma3-toy"].config
    assert gemma["sliding_window"] == 16 and "layer_types" not in gemma
    assert a["gemma3-custom-toy"].config["layer_types"] == ["sliding_attention",
                                                           "full_attention"] * 3  # fmt: skip
    rope = a["phi4-mini-toy"].config["rope_parameters"]
    assert rope["rope_type"] == "longrope" and rope["partial_rotary_factor"] == 0.75
    assert len(rope["short_factor"]) == len(rope["long_factor"]) == int(16 * 0.75) // 2
    assert a["smollm3-custom-toy"].config["no_rope_layer_interval"] == 2
    assert "no_rope_layer_interval" not in a["smollm3-toy"].config
    moe = a["qwen3-moe-toy"].config
    assert (moe["num_experts"], moe["num_experts_per_tok"]) == (4, 2)


def test_an_unknown_member_names_the_valid_ones() -> None:
    with pytest.raises(KeyError, match=r"member 'qwen9-toy'; valid: llama-toy, llama3-rope-toy"):
        archs.member("qwen9-toy")


def test_the_cache_key_holds_versions_seed_and_config() -> None:
    key = archs.cache_key(archs.ARCHITECTURES["qwen3-toy"])
    assert {"transformers", "torch", "seed", "config", "arch_version"} <= set(key)
    assert key["config"]["head_dim"] == 32
    assert "torch" not in sys.modules and "transformers" not in sys.modules


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path], list[str]]:
    """Three members built in one child into a root of their own; the lines it logged."""
    root = tmp_path_factory.mktemp("archs")
    lines: list[str] = []
    return root, archs.checkpoint_folders(BATCH, root=root, log=lines.append), lines


@needs_torch
@pytest.mark.slow
def test_a_built_member_is_a_hugging_face_folder(
    batch: tuple[Path, dict[str, Path], list[str]],
) -> None:
    _, folders, lines = batch
    assert [line.split()[1] for line in lines] == list(BATCH)
    for name, folder in folders.items():
        assert {p.name for p in folder.iterdir()} >= set(archs.HF_FILES), name
        config = json.loads((folder / "config.json").read_text("utf-8"))
        assert config["model_type"] == archs.ARCHITECTURES[name].model_type
        assert config["vocab_size"] == 49152 and config["initializer_range"] == archs.INIT_STD
        tok = json.loads((folder / "tokenizer_config.json").read_text("utf-8"))
        assert tok["eos_token"] == "<|im_end|>"
        assert tok["model_max_length"] == config["max_position_embeddings"]
    assert "torch" not in sys.modules and "transformers" not in sys.modules


@needs_torch
@pytest.mark.slow
def test_the_features_survive_save_pretrained(
    batch: tuple[Path, dict[str, Path], list[str]],
) -> None:
    from safetensors.numpy import load_file

    _, folders, _ = batch
    config = json.loads((folders["qwen3-toy"] / "config.json").read_text("utf-8"))
    assert config["head_dim"] == 32
    weights = load_file(str(folders["qwen3-toy"] / archs.MAIN_FILE))
    assert weights["model.layers.0.self_attn.q_proj.weight"].shape == (4 * 32, 64)
    assert "model.layers.0.self_attn.q_norm.weight" in weights
    assert "lm_head.weight" not in weights  # tied
    assert abs(float(weights["model.embed_tokens.weight"].std()) - archs.INIT_STD) < 0.01
    gemma = json.loads((folders["gemma3-custom-toy"] / "config.json").read_text("utf-8"))
    assert gemma["layer_types"] == ["sliding_attention", "full_attention"] * 3
    assert gemma["sliding_window"] == 16
    phi = json.loads((folders["phi4-mini-toy"] / "config.json").read_text("utf-8"))
    # transformers 5 writes rope_parameters (not rope_scaling), partial_rotary_factor inside it
    assert phi["rope_parameters"]["rope_type"] == "longrope"
    assert phi["rope_parameters"]["partial_rotary_factor"] == 0.75
    assert phi["rope_parameters"]["original_max_position_embeddings"] == 4096
    assert phi["max_position_embeddings"] == 16384


@needs_torch
@pytest.mark.slow
def test_a_member_is_cached_and_the_same_built_alone(
    batch: tuple[Path, dict[str, Path], list[str]], tmp_path: Path
) -> None:
    root, folders, _ = batch
    lines: list[str] = []
    assert archs.checkpoint_folders(BATCH, root=root, log=lines.append) == folders
    assert lines == []  # a cache hit builds nothing
    alone = archs.checkpoint_folder("qwen3-toy", root=tmp_path)
    assert alone != folders["qwen3-toy"]
    for name in archs.HF_FILES:
        assert file_sha256(alone / name) == file_sha256(folders["qwen3-toy"] / name), name
