"""The LiteRT rows' options, declared once (:mod:`rtmatrix.options`)."""

from __future__ import annotations

from rtmatrix.options import Option, Options

OPTIONS = {
    "LiteRtAdapter": Options(
        "litert",
        (Option("xnnpack", ("bool",), True, "the default XNNPACK delegate (false: builtin only)"),),
    ),
    "LiteRtLmAdapter": Options("litert_lm"),
}
