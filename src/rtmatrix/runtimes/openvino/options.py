"""The ``openvino`` row's options, declared once (:mod:`rtmatrix.options`)."""

from __future__ import annotations

from rtmatrix.options import Option, Options

DEVICE = Option("device", ("str",), "CPU", "the OpenVINO device", runtime_default="CPU")
PRECISION = Option(
    "inference_precision", ("str",), None, "compute precision (f32 forces f32)",
    ("f32", "bf16", "f16"), "INFERENCE_PRECISION_HINT",
    "the CPU's best: bf16 with AVX512_BF16/AMX, else f32",
)  # fmt: skip
HINT = Option("performance_hint", ("str",), "LATENCY", "performance hint",
              ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"), "PERFORMANCE_HINT",
              "LATENCY (benchmark_app: THROUGHPUT)")  # fmt: skip
PROPERTIES = Option("properties", ("table",), {}, "any other compile properties")

OPTIONS = Options(
    "openvino",
    (
        DEVICE,
        PRECISION,
        HINT,
        PROPERTIES,
        Option("num_streams", ("int", "str"), None, "inference streams (an integer or AUTO)",
               runtime_name="NUM_STREAMS"),
        Option("kv_cache_precision", ("str",), None,
               "a stateful model's KV cache (OpenVINO's exporter's IR)",
               ("f32", "f16", "bf16", "u8", "u4"), "KV_CACHE_PRECISION",
               "u8 on the CPU (stateful models only)"),
    ),
)  # fmt: skip
