"""The TVM rows' options, declared once (:mod:`rtmatrix.options`)."""

from __future__ import annotations

from rtmatrix.options import Option, Options

OPTIONS = Options(
    "tvm",
    (
        Option("mode", ("str",), "aot", "ahead-of-time library or JIT compile", ("aot", "jit")),
        Option("runtime_only", ("bool",), None, "load only TVM's runtime (default: true for aot)"),
        Option("verify", ("bool",), True, "check the library against its manifest"),
        Option("allocator", ("str",), "naive", "the Relax VM's allocator", ("naive", "pooled")),
    ),
)  # fmt: skip
