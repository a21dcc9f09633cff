"""Old import paths of the built-in adapters, kept for one release after they moved to
``rtmatrix.runtimes.<name>.adapter``: each old module (``rtmatrix.adapters.llama_cpp``, ...)
re-exports the new one and warns once, on import, naming the new path.

Only third-party code imports the old paths: nothing in rtmatrix does, and the registry names
the new ``module:Class`` strings, so the parent still imports no adapter and no runtime.
"""

from __future__ import annotations

import warnings

#: old module -> the module it moved to
MOVED: dict[str, str] = {
    "rtmatrix.adapters.llama_cpp": "rtmatrix.runtimes.llama_cpp.adapter",
    "rtmatrix.adapters.onnxruntime": "rtmatrix.runtimes.onnxruntime.adapter",
    "rtmatrix.adapters.onnxruntime_genai": "rtmatrix.runtimes.onnxruntime_genai.adapter",
    "rtmatrix.adapters.onnxruntime_openvino": "rtmatrix.runtimes.onnxruntime_openvino.adapter",
    "rtmatrix.adapters.tvm": "rtmatrix.runtimes.tvm.adapter",
}


def warn_moved(old: str) -> None:
    """The DeprecationWarning of importing ``old``, attributed to the importing line."""
    new = MOVED[old]
    msg = (
        f"{old} moved to {new}; import from {new} "
        f"(the old path is kept for one release, then removed)"
    )
    # 1: here, 2: the old module's body, then the import machinery (skipped), then the importer
    warnings.warn(msg, DeprecationWarning, stacklevel=3)
