"""The llama.cpp rows' options (``llama_cpp`` and, with its own, ``llama_server``), declared once
(:mod:`rtmatrix.options`); imports no runtime."""

from __future__ import annotations

from rtmatrix.options import Option, Options

KV = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
FLASH = ("auto", "on", "off", True, False)

SHARED = (
    Option("flash_attn", ("str", "bool"), "auto", "flash attention", FLASH, "flash_attn / -fa",
           "tools: auto; llama-cpp-python's Llama(): off"),
    Option("extra_buffer_types", ("bool",), True,
           "let the CPU backend repack weights into its AMX / CPU_REPACK layouts",
           runtime_name="use_extra_bufts / --repack", runtime_default="true"),
    Option("type_k", ("str",), None, "the KV cache's K type", KV, "type_k / -ctk", "f16"),
    Option("type_v", ("str",), None, "the KV cache's V type", KV, "type_v / -ctv", "f16"),
)  # fmt: skip

OPTIONS = Options(
    "llama_cpp",
    (
        *SHARED,
        Option("use_mmap", ("bool",), True, "map the file (false: read it into memory)",
               runtime_name="use_mmap", runtime_default="true"),
        Option("reference_extra_args", ("list",), [],
               "extra arguments for llama-bench (the reference tool)"),
    ),
)  # fmt: skip
