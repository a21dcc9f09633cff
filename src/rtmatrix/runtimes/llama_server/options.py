"""The ``llama_server`` row's options, declared once (:mod:`rtmatrix.options`)."""

from __future__ import annotations

from rtmatrix.options import Option, Options
from rtmatrix.runtimes.llama_cpp.options import SHARED

OPTIONS = Options(
    "llama_server",
    (
        *SHARED,
        Option("parallel", ("int",), 4, "server slots (--parallel)", runtime_name="--parallel",
               runtime_default="auto"),
        Option("cont_batching", ("bool",), True, "continuous batching",
               runtime_name="--cont-batching", runtime_default="on"),
        Option("server_args", ("list",), [], "extra llama-server arguments"),
        Option("start_timeout_s", ("float",), 90.0, "seconds for the server to become healthy"),
        Option("request_timeout_s", ("float",), 120.0, "seconds per HTTP request"),
        Option("use_mmap", ("bool",), True, "map the file (the serve scenario's binding server)"),
    ),
)  # fmt: skip
