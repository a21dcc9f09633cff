"""The ``openvino_genai`` row's options, declared once (:mod:`rtmatrix.options`)."""

from __future__ import annotations

from rtmatrix.options import Option, Options
from rtmatrix.runtimes.openvino.options import DEVICE, HINT, PRECISION, PROPERTIES

OPTIONS = Options(
    "openvino_genai",
    (
        DEVICE,
        PRECISION,
        HINT,
        PROPERTIES,
        Option("attention_backend", ("str",), "SDPA", "attention backend", ("SDPA", "PA"),
               "ATTENTION_BACKEND", "PA (paged attention)"),
        Option("kv_cache_precision", ("str",), "f32", "KV-cache precision",
               ("f32", "f16", "bf16", "u8", "u4"), "KV_CACHE_PRECISION", "u8 on the CPU"),
        Option("cb_cache_size_gb", ("int",), 1, "the batch pipeline's KV cache (GB)"),
        Option("cb_max_num_seqs", ("int",), 16, "the batch pipeline's sequences"),
    ),
)  # fmt: skip
