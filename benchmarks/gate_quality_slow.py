"""A llama.cpp adapter made slower on purpose, for ``gate_quality.py``'s injected regression.

Each single-token decode is followed by a busy wait until the decode's own duration divided by
(1 - fraction) has passed, so the harness-clock TG throughput drops by that fraction whatever the
machine's speed, like a runtime upgrade that made decode slower. The fraction is the row's
``options.slowdown`` (``compare_quality.py``), else ``RTMATRIX_SLOWDOWN`` (``gate_quality.py``),
else 0.15. Prefill and llama.cpp's own counters are untouched.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from rtmatrix.runtimes.llama_cpp.adapter import LlamaCppAdapter


class SlowLlamaCppAdapter(LlamaCppAdapter):
    name: ClassVar[str] = "llama_cpp"

    def configure(self, options: dict[str, Any]) -> None:
        super().configure(options)
        default = float(os.environ.get("RTMATRIX_SLOWDOWN", "0.15"))
        self._slowdown = float(options.get("slowdown", default))

    def decode(self, token: int) -> None:
        fraction = getattr(self, "_slowdown", float(os.environ.get("RTMATRIX_SLOWDOWN", "0.15")))
        t0 = time.perf_counter()
        super().decode(token)
        elapsed = time.perf_counter() - t0
        until = t0 + elapsed / (1.0 - fraction)
        while time.perf_counter() < until:
            pass
