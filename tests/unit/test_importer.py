"""Importing a real checkpoint: a GGUF file and a HF-style safetensors folder of the same model
give identical canonical weights; what the exporters cannot express, and a damaged file, are
refused naming the file, the key or tensor, and what is supported."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rtmatrix.fixtures import build_fixture, prepare_fixture, reference_for
from rtmatrix.fixtures.importer import (
    CheckpointError,
    hf_name,
    permute_rows,
    read_checkpoint,
    read_fields,
    unpermute_rows,
)
from rtmatrix.fixtures.model import make_weights
from rtmatrix.fixtures.spec import ModelSpec, get_spec
from rtmatrix.matrix import MatrixError, parse_matrix


def write_hf_folder(
    spec: ModelSpec, path: Path, *, tied: bool = False, config: dict[str, object] | None = None
) -> Path:
    """A Hugging Face-style folder of ``spec``'s seeded weights: HF names, rotate-half q/k."""
    from safetensors.numpy import save_file

    path.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, w in make_weights(spec).items():
        if tied and name == "output.weight":
            continue
        if name.endswith("attn_q.weight"):
            w = unpermute_rows(w, spec.n_head)
        elif name.endswith("attn_k.weight"):
            w = unpermute_rows(w, spec.n_head_kv)
        tensors[hf_name(name)] = np.ascontiguousarray(w)
    save_file(tensors, str(path / "model.safetensors"))
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.n_embd,
        "intermediate_size": spec.n_ff,
        "num_hidden_layers": spec.n_layer,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "max_position_embeddings": spec.n_ctx_train,
        "rope_theta": spec.rope_theta,
        "rms_norm_eps": spec.rms_eps,
        "tie_word_embeddings": tied,
        "bos_token_id": spec.bos_id,
        "eos_token_id": spec.eos_id,
    } | (config or {})
    (path / "config.json").write_text(json.dumps(cfg), "utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_gguf() -> Path:
    return prepare_fixture("tiny", "tiny", "f32", None, "gguf").path


def test_permute_is_llama_cpps_and_unpermute_inverts_it() -> None:
    w = np.arange(2 * 8 * 3, dtype=np.float32).reshape(16, 3)  # 2 heads of 8 rows
    p = permute_rows(w, 2)
    # head 0: rows 0..3 (first half) and 4..7 (second half) interleave
    assert [int(r[0] // 3) for r in p[:8]] == [0, 4, 1, 5, 2, 6, 3, 7]
    assert np.array_equal(unpermute_rows(p, 2), w)


def test_gguf_and_safetensors_folder_give_identical_canonical_weights(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    spec = get_spec("tiny")
    from_gguf = read_checkpoint(tiny_gguf)
    from_hf = read_checkpoint(write_hf_folder(spec, tmp_path / "hf"))
    assert from_gguf.fields == from_hf.fields
    assert from_gguf.fields["vocab_size"] == spec.vocab_size
    assert from_gguf.weights.keys() == from_hf.weights.keys() == make_weights(spec).keys()
    for name, w in from_gguf.weights.items():
        assert np.array_equal(w, from_hf.weights[name]), name
        assert np.array_equal(w, make_weights(spec)[name]), name
    assert not from_gguf.tied_embeddings and not from_hf.tied_embeddings
    assert from_gguf.tokenizer["tokenizer.ggml.model"] == "llama"


def test_tied_embeddings_become_the_output_head(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    ck = read_checkpoint(write_hf_folder(spec, tmp_path / "hf", tied=True))
    assert ck.tied_embeddings and read_fields(tmp_path / "hf")["tied_embeddings"]
    assert np.array_equal(ck.weights["output.weight"], ck.weights["token_embd.weight"])


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        (
            {"model_type": "mistral", "architectures": ["MistralForCausalLM"]},
            "model_type = 'mistral'",
        ),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling = {'type': 'linear'"),
        ({"attention_bias": True}, "attention_bias = true"),
        ({"head_dim": 16}, "head_dim = 16"),
    ],
)
def test_what_the_exporters_cannot_express_is_refused_naming_the_key(
    tmp_path: Path, config: dict[str, object], needle: str
) -> None:
    folder = write_hf_folder(get_spec("tiny"), tmp_path / "hf", config=config)
    with pytest.raises(CheckpointError, match="supported") as info:
        read_checkpoint(folder)
    assert str(folder) in str(info.value) and needle in str(info.value)


def test_another_gguf_architecture_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    other = build_fixture(get_spec("tiny"), "gguf", "f32", "unknown-arch").path
    with pytest.raises(
        CheckpointError, match=r"general\.architecture = 'rtmatrix-unknown'"
    ) as info:
        read_fields(other)
    assert "supported: general.architecture 'llama'" in str(info.value)
    text = f"[[runtimes]]\nname = 'llama_cpp'\n[[fixtures]]\nsource = '{other}'\ndtypes = ['f32']\n"
    with pytest.raises(MatrixError, match=r"fixtures\[0\]\.source: .*general\.architecture"):
        parse_matrix(text, tmp_path / "m.toml")  # refused at load: the user's input
    with pytest.raises(ValueError, match=r"general\.architecture"):  # and by the importer
        prepare_fixture("other", f"source:{other}", "f32", None, "gguf")


def test_a_truncated_checkpoint_names_the_file(tmp_path: Path, tiny_gguf: Path) -> None:
    data = tiny_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(CheckpointError, match=str(cut)):
        read_checkpoint(cut)
    (tmp_path / "x.bin").write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(CheckpointError, match=r"not GGUF; give a \.gguf file or a HF-style folder"):
        read_checkpoint(tmp_path / "x.bin")


def test_a_tensor_with_no_place_is_refused_naming_it(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    folder = write_hf_folder(get_spec("tiny"), tmp_path / "hf")
    save_file({"model.layers.0.self_attn.q_proj.bias": np.zeros(128, np.float32)},
              str(folder / "extra.safetensors"))  # fmt: skip
    with pytest.raises(
        CheckpointError, match=r"'model\.layers\.0\.self_attn\.q_proj\.bias' has no place"
    ):
        read_checkpoint(folder)


def test_a_users_checkpoint_is_a_fixture_in_every_dtype_with_a_reference(tmp_path: Path) -> None:
    folder = write_hf_folder(get_spec("tiny"), tmp_path / "mine")
    text = (
        "[[runtimes]]\nname = 'llama_cpp'\n"
        f"[[fixtures]]\nsource = '{folder}'\ndtypes = ['f32', 'q8_0']\n"
    )
    cells = parse_matrix(text, tmp_path / "m.toml").cells()
    assert [c.fixture.label for c in cells] == ["mine/f32", "mine/q8_0"]
    model = cells[0].fixture.model
    assert model == f"source:{folder}"
    spec = get_spec(model)
    assert spec.source == str(folder.resolve()) and len(spec.source_sha256) == 64
    assert spec.content_hash() != get_spec("tiny").content_hash()  # its own cache entries
    # no tokenizer.json: the GGUF export says what is missing
    with pytest.raises(ValueError, match=r"needs a byte-level BPE tokenizer\.json"):
        prepare_fixture("mine", model, "f32", None, "gguf")
    onnx = prepare_fixture("mine", model, "f32", None, "onnx")
    assert onnx.path.is_file() and onnx.spec_sha256 == spec.content_hash()
    assert not (onnx.path.parent / "tokenizer.json").exists()  # ids need none: still exported
    ref = reference_for(model, "f32", 8, 4, "onnx")
    tiny_ref = reference_for("tiny", "f32", 8, 4, "onnx")
    assert ref.tokens == tiny_ref.tokens  # the same weights, imported
