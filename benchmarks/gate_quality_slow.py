"""A llama.cpp adapter made slower on purpose, for ``gate_quality.py``'s injected regression.

Each single-token decode is followed by a busy wait of ``RTMATRIX_SLOWDOWN`` (a fraction, default
0.15) times the decode's own duration divided by (1 - fraction), so the harness-clock TG throughput
drops by that fraction whatever the machine's speed, like a runtime upgrade that made decode
slower. Prefill and llama.cpp's own counters are untouched.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

from rtmatrix.runtimes.llama_cpp.adapter import LlamaCppAdapter


class SlowLlamaCppAdapter(LlamaCppAdapter):
    name: ClassVar[str] = "llama_cpp"

    def decode(self, token: int) -> None:
        fraction = float(os.environ.get("RTMATRIX_SLOWDOWN", "0.15"))
        t0 = time.perf_counter()
        super().decode(token)
        elapsed = time.perf_counter() - t0
        until = t0 + elapsed / (1.0 - fraction)
        while time.perf_counter() < until:
            pass
