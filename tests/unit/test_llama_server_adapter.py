"""The llama_server adapter without a server: the vocabulary read from the GGUF file, what a
server row cannot do, a missing tool build, and the flash-attention record."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.adapters.base import RuntimeUnavailable, load_adapter_class
from rtmatrix.adapters.capabilities import Abortable, Serving, Streaming
from rtmatrix.fixtures import prepare_fixture
from rtmatrix.runtimes.llama_server import adapter as a


def test_the_registry_finds_the_row_and_its_capabilities() -> None:
    cls = load_adapter_class("llama_server")
    assert cls is a.LlamaServerAdapter and cls.container == "gguf"
    inst = cls()
    assert all(isinstance(inst, c) for c in (Streaming, Abortable, Serving))


def test_the_vocabulary_comes_from_the_gguf_file() -> None:
    path = prepare_fixture("tiny", "tiny", "f32", None, "gguf").path
    v = a.Vocab(path)
    assert v.size == 512 and (v.bos, v.eos) == (1, 2)
    assert len(v.ids_of(a.BYTE)) == 256 and v.bos in v.ids_of(a.CONTROL)


def test_a_server_row_has_no_decode_loop() -> None:
    ad = a.LlamaServerAdapter()
    with pytest.raises(RuntimeUnavailable, match="no single prefill/decode step"):
        ad.prefill([1, 2])
    with pytest.raises(RuntimeUnavailable):
        ad.reset()
    assert ad.counters() == {} and ad.evidence() == {}


def test_without_the_tool_build_the_row_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTMATRIX_TOOLS_DIR", str(tmp_path))
    with pytest.raises(RuntimeUnavailable, match="llama-server is not available"):
        a.LlamaServerAdapter().import_runtime()


def test_options_keep_only_what_the_row_knows() -> None:
    ad = a.LlamaServerAdapter()
    ad.configure({"parallel": 8, "cancel_cycles": 3})
    assert ad._opts["parallel"] == 8 and "cancel_cycles" not in ad._opts


def test_flash_attention_as_requested_and_resolved() -> None:
    got = a.flash_attn_record("auto", ["0.00.090 I resolve_fused_ops: Flash Attention enabled"])
    assert got == {"requested": "auto", "resolved": "enabled"}
    assert "verbosity 4" in a.flash_attn_record("auto", ["nothing"])["resolved"]
