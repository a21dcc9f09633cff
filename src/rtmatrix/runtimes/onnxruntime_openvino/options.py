"""The ``onnxruntime_openvino`` row's options: ONNX Runtime's, and the OpenVINO EP's analysis."""

from __future__ import annotations

from rtmatrix.options import Option, Options
from rtmatrix.runtimes.onnxruntime.options import SESSION

OPTIONS = Options(
    "onnxruntime_openvino",
    (
        *SESSION,
        Option("partition_analysis", ("bool",), True, "the heterogeneous partition analysis"),
        Option("paired_control_rounds", ("int",), 0, "paired rounds against a CPU-only session"),
        Option("partition_timing", ("str",), "measured", "how partition time is attributed",
               ("measured", "probe")),
    ),
)  # fmt: skip
