"""The llama-server row's home report (``runtimes/llama_server/stack.py``): its own log lines
read with the llama.cpp home's readers."""

from __future__ import annotations

from rtmatrix.numerics import judged_as
from rtmatrix.runtimes.llama_server import stack

LINES = [
    "system_info: n_threads = 2 | CPU : AVX2 = 1 | LLAMAFILE = 1 |",
    "load_tensors:   CPU_Mapped model buffer size =    10.00 MiB",
    "llama_kv_cache: size =    1.00 MiB (  512 cells,   4 layers,  4/4 seqs), K (f16):    0.50 MiB,"
    " V (f16):    0.50 MiB",
]
EV = {"flash_attn": {"requested": "auto", "resolved": "enabled"},
      "extra_buffer_types": {"requested": True}}  # fmt: skip


def test_the_servers_kv_cache_and_attention_are_read_from_its_log() -> None:
    num = stack.report(EV, LINES, "f32", {"F32": 30}, {}).numerics
    assert num.kv_cache is not None and num.kv_cache.value == "f16" and num.kv_cache.default
    assert num.attention is not None and num.attention.value == "flash (f16)"
    assert num.control == {"type_k": "f32", "type_v": "f32", "flash_attn": "off"}
    assert judged_as("f32", num).judged_as == "f16"


def test_a_log_without_the_kv_line_says_so() -> None:
    num = stack.report(EV, LINES[:2], "f32", {"F32": 30}, {}).numerics
    assert num.kv_cache is None and num.unavailable
    assert num.control == {"flash_attn": "off"}  # what the log did say: flash attention ran


def test_an_attention_path_the_log_does_not_resolve_is_unknown_not_guessed() -> None:
    ev = {"flash_attn": {"requested": "auto", "resolved": "not in the log"}}
    num = stack.report(ev, LINES, "f32", {"F32": 30}, {}).numerics
    assert num.attention is not None and num.attention.value == "unknown"
    assert "not in the log" in num.attention.said and "llama-server" in num.attention.source
