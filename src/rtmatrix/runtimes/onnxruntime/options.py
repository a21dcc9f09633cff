"""The ONNX Runtime row's options, declared once (:mod:`rtmatrix.options`)."""

from __future__ import annotations

from rtmatrix.options import Option, Options

SESSION = (
    Option("providers", ("list",), None, "execution providers, in order (names or [name, opts])",
           runtime_name="providers", runtime_default="CPUExecutionProvider"),
    Option("disable_cpu_ep_fallback", ("bool",), False,
           "a strict run: what the providers cannot run is a load error",
           runtime_name="session.disable_cpu_ep_fallback", runtime_default="0"),
    Option("graph_optimization_level", ("str",), None, "graph optimizations",
           ("disable", "basic", "extended", "all"), "graph_optimization_level", "all"),
    Option("execution_mode", ("str",), None, "operator scheduling", ("sequential", "parallel"),
           "execution_mode", "sequential"),
    Option("inter_op_threads", ("int",), None, "the inter-op pool's size",
           runtime_name="inter_op_num_threads", runtime_default="0 (its own choice)"),
    Option("allow_spinning", ("bool",), None, "intra-op threads spin while waiting",
           runtime_name="session.intra_op.allow_spinning", runtime_default="1"),
    Option("log_severity_level", ("int",), 2, "the session's log level (0 verbose … 4 fatal)",
           (0, 1, 2, 3, 4), "log_severity_level", "2"),
    Option("session_config", ("table",), {}, "extra add_session_config_entry pairs"),
    Option("placement_source", ("str",), "auto", "where node counts come from",
           ("auto", "api", "log", "profile")),
)  # fmt: skip

OPTIONS = Options("onnxruntime", SESSION)
