"""The ``onnxruntime_genai`` row's options, declared once (:mod:`rtmatrix.options`)."""

from __future__ import annotations

from rtmatrix.options import Option, Options

OPTIONS = Options(
    "onnxruntime_genai",
    (
        Option("providers", ("list",), None, "execution providers for the genai config",
               runtime_default="cpu"),
        Option("placement_log", ("bool",), True, "read node placement from ORT's verbose log"),
        Option("provider_options", ("table",), {}, "per-provider options"),
        Option("session_options", ("table",), {}, "genai_config session_options entries"),
    ),
)  # fmt: skip
