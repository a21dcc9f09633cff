"""Third-party-style adapters whose sampler is written in numpy over a real runtime's logits
(ONNX Runtime, the harness's own KV loop): one right, one that applies the temperature after
top-p while documenting it before, one that ignores the seed, one that ignores top-k and one
that ignores the repetition penalty. The ``sample`` scenario must pass the first and catch the
others (the last two where ``power_against_ignored`` says the parameters let it). Loaded by the
worker through ``module:Class`` strings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from rtmatrix.metrics.sampler import ORDERS, Params, distribution
from rtmatrix.runtimes.onnxruntime.adapter import OrtAdapter


class NumpySampler(OrtAdapter):
    """Samples each id from ``applied`` order's distribution, seeded (``seeded``)."""

    sampler_api: ClassVar[str] = "tests.helpers.wrong_sampler: numpy over ONNX Runtime's logits"
    sampler_order: ClassVar[str] = "temperature-then-truncate"
    sampler_order_source: ClassVar[str] = "tests/helpers/wrong_sampler.py"
    applied: ClassVar[str] = "temperature-then-truncate"
    seeded: ClassVar[bool] = True

    def sample_generate(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        rng = np.random.default_rng(seed if self.seeded else None)
        p = Params.from_options(params)
        self.reset()
        self.prefill(list(prompt))
        out: list[int] = []
        for _ in range(n_gen):
            prob = distribution(
                self.last_logits(), self.effective(p), ORDERS[self.applied], [*prompt, *out]
            )
            out.append(int(rng.choice(len(prob), p=prob)))
            if len(out) < n_gen:
                self.decode(out[-1])
        return out

    def effective(self, p: Params) -> Params:
        """The parameters this sampler actually applies."""
        return p


class TemperatureAfterTopP(NumpySampler):
    """Documents temperature before top-p; applies it after."""

    applied: ClassVar[str] = "truncate-then-temperature"


class IgnoresTheSeed(NumpySampler):
    """Draws from fresh OS entropy whatever the seed."""

    seeded: ClassVar[bool] = False


class IgnoresTopK(NumpySampler):
    """Takes top_k and draws as if it were off."""

    def effective(self, p: Params) -> Params:
        return replace(p, top_k=0)


class IgnoresThePenalty(NumpySampler):
    """Takes repeat_penalty and draws as if it were 1."""

    def effective(self, p: Params) -> Params:
        return replace(p, repeat_penalty=1.0)
