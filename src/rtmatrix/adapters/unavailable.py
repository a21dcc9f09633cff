"""A row for an engine that cannot run here: it imports what it can and ends every cell
``unavailable`` with the reason (``WHY``), instead of leaving the engine out of the matrix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, LoadParams, RuntimeUnavailable


class UnavailableEngine(Adapter):
    """Subclasses set ``WHY`` (and ``ENGINE``) and implement ``import_runtime``."""

    WHY: ClassVar[str] = ""
    ENGINE: ClassVar[str] = ""

    def load(self, model_path: Path, params: LoadParams) -> None:
        raise RuntimeUnavailable(self.WHY)

    @property
    def vocab_size(self) -> int:
        raise RuntimeUnavailable(self.WHY)

    @property
    def special_ids(self) -> dict[str, int]:
        raise RuntimeUnavailable(self.WHY)

    def reset(self) -> None:
        raise RuntimeUnavailable(self.WHY)

    def prefill(self, tokens: Sequence[int]) -> None:
        raise RuntimeUnavailable(self.WHY)

    def decode(self, token: int) -> None:
        raise RuntimeUnavailable(self.WHY)

    def last_logits(self) -> NDArray[np.float32]:
        raise RuntimeUnavailable(self.WHY)

    def counters(self) -> dict[str, float]:
        return {}

    def evidence(self) -> dict[str, Any]:
        return {"engine": self.ENGINE, "unavailable": self.WHY}

    def close(self) -> None:
        return None
