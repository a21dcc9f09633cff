"""Third-party adapters that fool the harness's measurements, one way each, for the self-checks
(:mod:`rtmatrix.metrics.selfcheck`). The worker loads them through ``module:Class`` strings,
as any third-party adapter; each is the numpy runtime of :mod:`tests.helpers.adapters` with one
dishonesty added."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import LoadParams
from rtmatrix.fixtures.model import greedy_pick
from tests.helpers.adapters import NumpyAdapter

#: a fresh prompt's prefill, and a repeated one's (3x faster): sleeps on top of the compute
FRESH_S, REPEAT_S = 0.060, 0.020


class PromptCacheAdapter(NumpyAdapter):
    """Keeps the last prompt it was given and prefills it 3x faster when it comes again (a
    prefix cache that holds one prompt, as OpenVINO GenAI's paged attention does here, and
    says nothing about itself): its logits, and so its ids, are right. A probe that only
    alternated fresh and repeated prompts would never see it."""

    name: ClassVar[str] = "prompt_cache"

    def __init__(self) -> None:
        super().__init__()
        self._last: tuple[int, ...] = ()

    def prefill(self, tokens: Sequence[int]) -> None:
        if len(tokens) > 1:  # a prompt (decode() feeds single ids through here)
            key = tuple(tokens)
            time.sleep(REPEAT_S if key == self._last else FRESH_S)
            self._last = key
        super().prefill(tokens)


class CachedIdsEngine(NumpyAdapter):
    """Runs its own generation loop (EngineGeneration) and answers a repeated prompt with the
    ids it returned before, at once, without running the model."""

    name: ClassVar[str] = "cached_ids"

    def __init__(self) -> None:
        super().__init__()
        self._answers: dict[tuple[int, ...], list[int]] = {}

    def engine_generate(
        self,
        prompt: Sequence[int],
        n_gen: int,
        banned: Sequence[int],
        on_token: Callable[[int], None],
    ) -> list[int]:
        key = (*prompt, -n_gen)
        if key not in self._answers:
            time.sleep(FRESH_S)
            self.reset()
            super().prefill(prompt)
            ids = [greedy_pick(self.last_logits(), banned)]
            for _ in range(n_gen - 1):
                self.decode(ids[-1])
                ids.append(greedy_pick(self.last_logits(), banned))
            self._answers[key] = ids
        for t in self._answers[key]:
            on_token(t)
        return list(self._answers[key])

    def evidence(self) -> dict[str, Any]:
        return super().evidence() | {"engine_loop": {"api": "a fake engine's generate()"}}


class DriftingIdsAdapter(NumpyAdapter):
    """Gives the right logits to its first two generations (the warm-up and the parity pass)
    and, from the third on, raises another id far above the top one at the third generated
    position: the timed repetitions produce other ids than the parity pass judged."""

    name: ClassVar[str] = "drifting_ids"
    #: the generated position whose logits are bent, and by how much
    POSITION, BOOST = 2, 50.0

    def __init__(self) -> None:
        super().__init__()
        self._generations = 0
        self._steps = 0

    def load(self, model_path: Path, params: LoadParams) -> None:
        super().load(model_path, params)
        self._generations = 0

    def reset(self) -> None:
        super().reset()
        self._generations += 1
        self._steps = 0

    def decode(self, token: int) -> None:
        super().decode(token)
        self._steps += 1

    def last_logits(self) -> NDArray[np.float32]:
        out = super().last_logits()
        if self._generations >= 3 and self._steps == self.POSITION:
            second = int(np.argsort(out)[-2])
            out[second] += self.BOOST
        return out


class MiscountingAdapter(NumpyAdapter):
    """Reports runtime counters that disagree with the ids it was given: one prompt token
    fewer than the prompt has (as a runtime that silently drops one would)."""

    name: ClassVar[str] = "miscounting"

    def __init__(self) -> None:
        super().__init__()
        self._counts = {"pp_tokens": 0.0, "tg_tokens": 0.0}

    def reset(self) -> None:
        super().reset()
        self._counts = {"pp_tokens": 0.0, "tg_tokens": 0.0}

    def prefill(self, tokens: Sequence[int]) -> None:
        super().prefill(tokens)
        if len(tokens) > 1:
            self._counts["pp_tokens"] += len(tokens) - 1

    def decode(self, token: int) -> None:
        super().prefill([token])
        self._counts["tg_tokens"] += 1

    def counters(self) -> dict[str, float]:
        return dict(self._counts)
