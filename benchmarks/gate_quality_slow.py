"""A llama.cpp adapter made slower on purpose, for ``gate_quality.py``'s injected regression.

Each single-token decode (or, with ``options.slowdown_phase = "prefill"``, each prefill) is
followed by a busy wait until the call's own duration divided by (1 - fraction) has passed, so
the harness-clock TG (or PP) throughput drops by that fraction whatever the machine's speed, like
a runtime upgrade that made that phase slower. The fraction is the row's ``options.slowdown``
(``compare_quality.py``), else ``RTMATRIX_SLOWDOWN`` (``gate_quality.py``), else 0.15. The other
phase and llama.cpp's own counters are untouched.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from rtmatrix.runtimes.llama_cpp.adapter import LlamaCppAdapter

#: the phases a slowdown can be injected into
PHASES = ("decode", "prefill")


class SlowLlamaCppAdapter(LlamaCppAdapter):
    name: ClassVar[str] = "llama_cpp"

    def configure(self, options: dict[str, Any]) -> None:
        super().configure(options)
        default = float(os.environ.get("RTMATRIX_SLOWDOWN", "0.15"))
        self._slowdown = float(options.get("slowdown", default))
        self._phase = str(options.get("slowdown_phase", "decode"))
        if self._phase not in PHASES:
            msg = f"slowdown_phase {self._phase!r}: one of {', '.join(PHASES)}"
            raise ValueError(msg)

    def _wait(self, phase: str, t0: float) -> None:
        """Busy-wait so the call took its own time ÷ (1 - fraction), in the slowed phase."""
        if getattr(self, "_phase", "decode") != phase:
            return
        fraction = getattr(self, "_slowdown", float(os.environ.get("RTMATRIX_SLOWDOWN", "0.15")))
        elapsed = time.perf_counter() - t0
        until = t0 + elapsed / (1.0 - fraction)
        while time.perf_counter() < until:
            pass

    def prefill(self, tokens: Sequence[int]) -> None:
        t0 = time.perf_counter()
        super().prefill(tokens)
        self._wait("prefill", t0)

    def decode(self, token: int) -> None:
        t0 = time.perf_counter()
        super().decode(token)
        self._wait("decode", t0)
