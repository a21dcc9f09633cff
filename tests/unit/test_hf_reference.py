"""transformers' fp32 eager reference: refuses what transformers cannot load (without importing
it), and on a toy checkpoint is deterministic, cached, and its KV-cache greedy decode agrees with
one teacher-forced pass."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from rtmatrix.fixtures import archs
from rtmatrix.fixtures import hf_reference as ref
from rtmatrix.fixtures.model import greedy_pick
from rtmatrix.fixtures.spec import FixtureError

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="torch and transformers compute the reference",
)
PROMPT = [1, 504, 2365, 30, 1345, 288, 5765, 28, 7845, 314, 253, 1180, 30, 378, 4030, 1675]
GEN = 8
BANNED = (2,)


def _folder(tmp_path: Path, model_type: str | None, weights: bool = True) -> Path:
    config = {} if model_type is None else {"model_type": model_type}
    (tmp_path / "config.json").write_text(json.dumps(config), "utf-8")
    if weights:
        (tmp_path / "model.safetensors").write_bytes(b"not really")
    return tmp_path


@needs_torch
def test_can_load_accepts_a_known_causal_lm_without_importing_it(tmp_path: Path) -> None:
    for model_type in ("llama", "qwen3", "gemma3_text", "phi3", "smollm3", "qwen3_moe"):
        assert ref.can_load(_folder(tmp_path, model_type)) is None, model_type
    assert "torch" not in sys.modules and "transformers" not in sys.modules


@needs_torch
def test_can_load_refuses_a_made_up_model_type_naming_it(tmp_path: Path) -> None:
    reason = ref.can_load(_folder(tmp_path, "qwen9_hyper"))
    assert reason is not None
    assert reason.startswith("config.json model_type = 'qwen9_hyper' is not an architecture ")
    assert "causal-LM types, e.g. llama" in reason
    near = ref.can_load(_folder(tmp_path, "qwen4"))
    assert near is not None and "did you mean" in near


@needs_torch
def test_can_load_refuses_a_model_type_without_a_causal_lm(tmp_path: Path) -> None:
    reason = ref.can_load(_folder(tmp_path, "vit"))
    assert reason is not None and "has no causal-LM class" in reason


def test_can_load_refuses_a_folder_without_config_type_or_weights(tmp_path: Path) -> None:
    assert ref.can_load(tmp_path) == f"{tmp_path} has no config.json"
    assert ref.can_load(_folder(tmp_path, None)) == f"{tmp_path / 'config.json'} has no model_type"
    (tmp_path / "model.safetensors").unlink()
    assert ref.can_load(_folder(tmp_path, "llama", weights=False)) == (
        f"{tmp_path} has no *.safetensors weights"
    )


def test_mapping_keys_reads_a_literal_ordered_dict_and_its_updates() -> None:
    source = (
        "from collections import OrderedDict\n"
        "NAMES = OrderedDict([('llama', 'LlamaForCausalLM'), ('qwen3', 'Qwen3ForCausalLM')])\n"
        "NAMES.update({'extra': 'ExtraConfig'})\n"
        "OTHER = OrderedDict([('bert', 'BertModel')])\n"
    )
    assert ref._mapping_keys(source, "NAMES") == {"llama", "qwen3", "extra"}


def test_folder_sha256_follows_the_content(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "llama")
    before = ref.folder_sha256(folder)
    assert ref.folder_sha256(folder) == before
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert ref.folder_sha256(folder) != before


def test_a_folder_transformers_cannot_load_is_refused_before_any_child(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match=r"model_type = 'qwen9_hyper'"):
        ref.hf_reference(_folder(tmp_path, "qwen9_hyper"), PROMPT, GEN, BANNED, root=tmp_path)


@pytest.fixture(scope="module")
def qwen3() -> Path:
    return archs.checkpoint_folder("qwen3-toy")


@needs_torch
@pytest.mark.slow
def test_greedy_tokens_agree_with_teacher_forced_logits(qwen3: Path, tmp_path: Path) -> None:
    first = ref.hf_reference(qwen3, PROMPT, GEN, BANNED, root=tmp_path)
    assert len(first.tokens) == len(first.margins) == GEN and first.logits is None
    assert first.first_logits.shape == (49152,) and first.first_logits.dtype == np.float32
    assert first.tokens[0] == greedy_pick(first.first_logits, BANNED)
    assert first.provenance["attn_implementation"] == "eager"
    assert first.provenance["dtype"] == "float32"
    assert first.provenance["model_class"] == "Qwen3ForCausalLM"
    assert first.provenance["cache"] == "built"
    quality = PROMPT + first.tokens
    forced = ref.hf_reference(qwen3, PROMPT, GEN, BANNED, quality_ids=quality, root=tmp_path)
    assert forced.tokens == first.tokens
    assert forced.logits is not None and forced.logits.shape == (len(quality) - 1, 49152)
    start = len(PROMPT) - 1  # the row predicting the first generated token
    np.testing.assert_allclose(forced.logits[start], first.first_logits, atol=1e-4)
    steps = [greedy_pick(forced.logits[start + i], BANNED) for i in range(GEN)]
    assert steps == first.tokens
    assert "torch" not in sys.modules and "transformers" not in sys.modules


@needs_torch
@pytest.mark.slow
def test_the_reference_is_cached_and_deterministic(qwen3: Path, tmp_path: Path) -> None:
    built = ref.hf_reference(qwen3, PROMPT, GEN, BANNED, root=tmp_path / "a")
    hit = ref.hf_reference(qwen3, PROMPT, GEN, BANNED, root=tmp_path / "a")
    assert hit.provenance["cache"] == "hit"
    assert hit.provenance["wall_s"] == built.provenance["wall_s"]  # the stored run, not a new one
    again = ref.hf_reference(qwen3, PROMPT, GEN, BANNED, root=tmp_path / "b")
    assert again.provenance["cache"] == "built"
    assert again.tokens == built.tokens == hit.tokens and again.margins == built.margins
    np.testing.assert_array_equal(again.first_logits, built.first_logits)
    assert min(built.margins) >= 0.0 and np.median(built.margins) > 0.05  # not flat logits


@needs_torch
@pytest.mark.slow
def test_weights_transformers_cannot_read_fail_in_the_child(qwen3: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(qwen3, broken)
    (broken / "model.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(FixtureError, match=r"(?s)transformers reference of .*broken failed in "
                       r"its child process \(exit 1\): .*transformers cannot run"):  # fmt: skip
        ref.hf_reference(broken, PROMPT, GEN, BANNED, root=tmp_path)
