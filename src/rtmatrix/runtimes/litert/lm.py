"""The LiteRT-LM engine row (``litert_lm``): recorded, with the reason it cannot run here.

``litert-lm-api`` (LiteRT-LM's Python API) has no wheel for Linux x86_64 with Python 3.11 on the
package registry, so the engine cannot be installed in this project's environment; the row
says so instead of leaving the engine out of the matrix silently."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, LoadParams, RuntimeUnavailable

WHY = (
    "litert-lm-api (the LiteRT-LM engine) has no wheel for Linux x86_64 / Python 3.11 on the "
    "package registry; it cannot be installed here"
)


class LiteRtLmAdapter(Adapter):
    name: ClassVar[str] = "litert_lm"
    distribution: ClassVar[str] = "litert-lm-api"
    extra: ClassVar[str] = "litert"
    container: ClassVar[str] = "tflite"

    def import_runtime(self) -> str:
        try:
            import litert_lm  # type: ignore[import-not-found]
        except ImportError as exc:
            msg = f"{WHY} ({exc})"
            raise RuntimeUnavailable(msg) from exc
        return str(getattr(litert_lm, "__version__", "unknown"))

    def load(self, model_path: Path, params: LoadParams) -> None:
        msg = "the LiteRT-LM engine reads .litertlm bundles; rtmatrix writes none yet"
        raise RuntimeUnavailable(msg)

    @property
    def vocab_size(self) -> int:
        raise RuntimeUnavailable(WHY)

    @property
    def special_ids(self) -> dict[str, int]:
        raise RuntimeUnavailable(WHY)

    def reset(self) -> None:
        raise RuntimeUnavailable(WHY)

    def prefill(self, tokens: Sequence[int]) -> None:
        raise RuntimeUnavailable(WHY)

    def decode(self, token: int) -> None:
        raise RuntimeUnavailable(WHY)

    def last_logits(self) -> NDArray[np.float32]:
        raise RuntimeUnavailable(WHY)

    def counters(self) -> dict[str, float]:
        return {}

    def evidence(self) -> dict[str, Any]:
        return {"engine": "LiteRT-LM", "unavailable": WHY}

    def close(self) -> None:
        return None
