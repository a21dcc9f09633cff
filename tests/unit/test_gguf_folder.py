"""A GGUF as a Hugging Face folder (transformers' GGUF loader): what is refused, and why, from the
file's header and transformers' source text alone (no torch in this process)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from rtmatrix.fixtures import gguf_folder
from rtmatrix.fixtures.gguf_folder import cache_key, gguf_header, gguf_refusal

gguf = pytest.importorskip("gguf")


def _write(path: Path, arch: str, tensors: int) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_token_list(["a", "b"])
    for i in range(tensors):
        w.add_tensor(f"t{i}", np.zeros((2, 2), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_header_gives_architecture_and_tensor_count(tmp_path: Path) -> None:
    assert gguf_header(_write(tmp_path / "a.gguf", "qwen3", 2)) == ("qwen3", 2)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    assert gguf_header(bad) == (None, 0)
    assert "no readable GGUF header" in (gguf_refusal(bad) or "")


def test_a_vocab_only_file_is_refused_for_want_of_weights(tmp_path: Path) -> None:
    why = gguf_refusal(_write(tmp_path / "vocab.gguf", "gpt2", 0))
    assert why is not None and "holds no tensors" in why


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="no transformers")
def test_transformers_gguf_architectures_are_read_from_its_source() -> None:
    known = gguf_folder.supported_architectures()
    assert {"llama", "qwen2", "qwen3", "gemma3", "phi3"} <= known
    assert not {"general", "tokenizer"} & known  # mapping sections, not architectures
    assert "torch" not in sys.modules


@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("transformers", "accelerate")),
    reason="needs transformers and accelerate",
)
def test_an_architecture_transformers_cannot_dequantize_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    why = gguf_refusal(_write(tmp_path / "x.gguf", "not-an-arch", 1))
    assert why is not None and "general.architecture = 'not-an-arch'" in why and "qwen3" in why
    assert gguf_refusal(_write(tmp_path / "q.gguf", "qwen3", 1)) is None


def test_the_cache_key_follows_the_bytes_and_the_loader_versions(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.gguf", "qwen3", 1)
    b = _write(tmp_path / "b.gguf", "qwen3", 2)
    ka, kb = cache_key(a), cache_key(b)
    assert ka["gguf_sha256"] != kb["gguf_sha256"]
    assert {"transformers", "torch", "gguf", "accelerate"} <= set(ka)
    assert cache_key(a) == ka
