"""The MNN rows' options, declared once (:mod:`rtmatrix.options`)."""

from __future__ import annotations

from rtmatrix.options import Option, Options

OPTIONS = {
    "MnnAdapter": Options(
        "mnn",
        (
            Option("precision", ("str",), "normal", "MNN's precision mode",
                   ("normal", "low", "low_bf16", "high"), "precision", "normal"),
            Option("weight_quant_bits", ("int",), 0, "the converter's weight quantization bits"),
            Option("weight_quant_block", ("int",), 0, "the converter's quantization block"),
            Option("weight_quant_asymmetric", ("bool",), False, "asymmetric weight quantization"),
            Option("fp16", ("bool",), False, "the converter stores weights in fp16"),
        ),
    ),
    "MnnLlmAdapter": Options(
        "mnn_llm",
        (
            Option("precision", ("str",), None, "MNN-LLM's precision level (config precision)",
                   ("low", "normal", "high"), "precision", "the exporter's config: low"),
            Option("memory", ("str",), None, "MNN-LLM's memory level (low: quantized weights' "
                   "matmuls quantize activations)", ("low", "normal", "high"), "memory",
                   "the exporter's config: low"),
            Option("backend", ("str",), None, "MNN-LLM's backend", (), "backend_type",
                   "the exporter's config: cpu"),
        ),
    ),
}  # fmt: skip
