"""The LiteRT-LM engine row (``litert_lm``): recorded, with the reason it cannot run here.

``litert-lm-api`` (LiteRT-LM's Python API) has no wheel for Linux x86_64 with Python 3.11 on the
package registry, so the engine cannot be installed in this project's environment; the row
says so instead of leaving the engine out of the matrix silently."""

from __future__ import annotations

from typing import ClassVar

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.adapters.unavailable import UnavailableEngine

WHY = (
    "litert-lm-api (the LiteRT-LM engine) has no wheel for Linux x86_64 / Python 3.11 on the "
    "package registry; it cannot be installed here"
)


class LiteRtLmAdapter(UnavailableEngine):
    name: ClassVar[str] = "litert_lm"
    distribution: ClassVar[str] = "litert-lm-api"
    extra: ClassVar[str] = "litert"
    container: ClassVar[str] = "tflite"
    WHY: ClassVar[str] = WHY
    ENGINE: ClassVar[str] = "LiteRT-LM"

    def import_runtime(self) -> str:
        try:
            import litert_lm  # type: ignore[import-not-found]
        except ImportError as exc:
            msg = f"{WHY} ({exc})"
            raise RuntimeUnavailable(msg) from exc
        return str(getattr(litert_lm, "__version__", "unknown"))
