"""The one explicit-KV generation loop of the rows whose loop rtmatrix drives (ONNX Runtime,
OpenVINO, MNN, LiteRT): the context check, the position, the last logits, prefill and decode.
Each row supplies only how one call of its runtime runs (:meth:`ExplicitKvAdapter._forward`:
tokens in, its cache kept, the last position's logits out) and how its cache is emptied.

Nothing here imports a runtime.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter


class ExplicitKvAdapter(Adapter):
    """An adapter whose model takes its KV cache as explicit tensors (past in, present out)."""

    _n_ctx: int = 0
    _pos: int = 0
    _logits: NDArray[np.float32] | None = None

    @abstractmethod
    def _forward(self, tokens: Sequence[int], start: int, total: int, phase: str) -> NDArray[Any]:
        """Run ``tokens`` at positions ``start`` .. ``total - 1`` over the cache, keep the new
        cache, return the last position's logits; ``phase`` is ``prefill`` or ``decode``."""

    @abstractmethod
    def _clear_cache(self) -> None:
        """An empty cache (no positions)."""

    def _room(self, n: int) -> int:
        """The context length after ``n`` more tokens; refuses none, and a full context."""
        if n == 0:
            msg = "no tokens to process"
            raise ValueError(msg)
        total = self._pos + n
        if total > self._n_ctx:
            msg = f"context full: {self._pos} cached + {n} new tokens > n_ctx {self._n_ctx}"
            raise ValueError(msg)
        return total

    def _step(self, tokens: Sequence[int], phase: str) -> None:
        total = self._room(len(tokens))
        logits = self._forward(tokens, self._pos, total, phase)
        self._logits = np.asarray(logits, dtype=np.float32)
        self._pos = total

    def reset(self) -> None:
        self._clear_cache()
        self._pos = 0
        self._logits = None

    def prefill(self, tokens: Sequence[int]) -> None:
        self._step(tokens, "prefill")

    def decode(self, token: int) -> None:
        self._step([token], "decode")

    def last_logits(self) -> NDArray[np.float32]:
        if self._logits is None:
            msg = "no logits yet: prefill first"
            raise RuntimeError(msg)
        return np.array(self._logits, dtype=np.float32, copy=True)
