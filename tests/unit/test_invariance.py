"""Batch invariance and session isolation without a server: divergence, margins, the
numerics/isolation classification, the request plan, the phase against fake token servers (one
that keeps sessions apart, one that leaks another request's prompt into a batch) and the
reference comparison."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from rtmatrix.outcome import Source
from rtmatrix.scenarios import invariance as inv

TIE = 0.05


def test_first_divergence() -> None:
    assert inv.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert inv.first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert inv.first_divergence([1, 2], [1, 2, 3]) == 2


def test_gap_is_exact_or_a_lower_bound() -> None:
    top = [[7, -1.0], [8, -1.02], [9, -3.0]]
    g, exact = inv.gap(top, 7, 8)
    assert g == pytest.approx(0.02) and exact
    g, exact = inv.gap(top, 7, 42)
    assert g == pytest.approx(2.0) and not exact  # 42 below the list: at least 2
    assert inv.gap(top, 42, 7) == (None, False)
    assert inv.gap(None, 7, 8) == (None, False)


def test_a_near_tie_flip_is_numerics() -> None:
    a, b = [5, 7, 1], [5, 8, 2]
    top_a = [[[5, -0.1]], [[7, -1.0], [8, -1.01]], []]
    top_b = [[[5, -0.1]], [[8, -1.0], [7, -1.02]], []]
    d = inv.compare(a, b, TIE, top_a=top_a, top_b=top_b)
    assert d.kind == "numerics" and d.position == 1 and d.tokens == (7, 8)
    assert d.margin == pytest.approx(0.02)  # the larger of the two runs' gaps


def test_a_large_margin_divergence_is_isolation() -> None:
    a, b = [5, 7], [5, 8]
    top_a = [[[5, -0.1]], [[7, -0.5], [3, -2.0]]]  # 8 not even in a's top list
    top_b = [[[5, -0.1]], [[8, -0.2], [7, -0.21]]]
    d = inv.compare(a, b, TIE, top_a=top_a, top_b=top_b)
    assert d.kind == "isolation" and d.margin == pytest.approx(1.5)
    assert "at least" in d.margin_detail


def test_no_margin_known_and_length_differences_are_not_numerics() -> None:
    assert inv.compare([1, 2], [1, 3], TIE).kind == "isolation"
    assert inv.compare([1, 2], [1, 3], TIE, large="mismatch").kind == "mismatch"
    assert inv.compare([1, 2], [1, 2, 3], TIE).kind == "length"
    assert inv.compare([1, 2], [1, 2], TIE).kind == "agree"


def test_the_plan_spreads_lengths_within_the_context() -> None:
    reqs = inv.plan(8, 16, 16, 64, 512, 1)
    lengths = [len(r["prompt"]) for r in reqs]
    assert len(set(lengths)) == 8 and min(lengths) >= 2 and max(lengths) <= 16
    assert len({tuple(r["prompt"]) for r in reqs}) == 8 and all(r["prompt"][0] == 1 for r in reqs)
    assert len({r["max_tokens"] for r in reqs}) > 1
    assert all(len(r["prompt"]) + r["max_tokens"] < 64 for r in reqs)
    tight = inv.plan(4, 40, 40, 48, 512, 1)
    assert all(len(r["prompt"]) + r["max_tokens"] <= 47 for r in tight)


class FakeTokenServer:
    """Greedy 'generation' as a function of the prompt; ``leak``: requests that are in flight
    together all answer from one of their prompts (state shared between sessions). Margins are
    large: every token wins by 3 logits."""

    token_api = "fake"

    def __init__(self, n: int, leak: bool = False) -> None:
        self.n, self.leak = n, leak
        self._cv = threading.Condition()
        self._inflight: list[Sequence[int]] = []
        self._batch: Sequence[int] | None = None

    def complete_tokens(
        self, port: int, prompt: Sequence[int], max_tokens: int, banned: Sequence[int], n_probs: int
    ) -> dict[str, Any]:
        with self._cv:
            self._inflight.append(prompt)
            if len(self._inflight) == self.n:  # the whole batch is in: one shared state
                self._batch = self._inflight[0]
                self._cv.notify_all()
            together = self._cv.wait_for(lambda: self._batch is not None, timeout=0.05)
            source = self._batch if (self.leak and together and self._batch) else prompt
            self._inflight.remove(prompt)
            if not self._inflight:
                self._batch = None
        toks = [(sum(source) * 31 + i * 7) % 500 + 3 for i in range(max_tokens)]
        top = [[[t, -0.1], [t + 1, -3.1]] for t in toks]
        return {"tokens": toks, "top": top}


def _run(server: FakeTokenServer) -> dict[str, Any]:
    reqs = inv.plan(server.n, 12, 8, 64, 512, 1)
    return inv.run_phase(server, 0, reqs, [2], dict(inv.DEFAULTS))


def test_isolated_sessions_pass_the_check() -> None:
    res = _run(FakeTokenServer(4))
    (c,) = inv.checks(res)
    assert c["ok"], c
    assert all(r["versus"]["concurrent_sequential"]["kind"] == "agree" for r in res["requests"])


def test_a_server_that_leaks_sessions_fails_the_check() -> None:
    res = _run(FakeTokenServer(4, leak=True))
    (c,) = inv.checks(res)
    assert not c["ok"] and "isolation at token 0" in c["detail"], c
    m = inv.metrics(res, "")
    leaks = m["serve_invariance_concurrent_sequential_isolation_or_mismatch"].value
    assert isinstance(leaks, int) and leaks >= 1
    margin = m["serve_invariance_concurrent_sequential_margin_min"]
    assert margin.source is Source.RUNTIME_COUNTER and margin.value == pytest.approx(3.0)


def test_with_reference_uses_the_references_own_margin() -> None:
    res = _run(FakeTokenServer(4))
    first = res["requests"][0]
    served = first["sequential"]["tokens"]

    def generate(prompt: Sequence[int], n: int) -> tuple[list[int], list[Any]]:
        if list(prompt) != first["prompt"]:
            return served_of(prompt, n)
        # the reference agrees for 2 tokens, then prefers token 1 over the server's by 0.01
        ids = [*served[:2], 1, *served[3:n]]
        steps = [np.zeros(600, dtype=np.float32) for _ in range(n)]
        steps[2][1], steps[2][served[2]] = 5.0, 4.99
        return ids, steps

    def served_of(prompt: Sequence[int], n: int) -> tuple[list[int], list[Any]]:
        req = next(r for r in res["requests"] if r["prompt"] == list(prompt))
        return list(req["sequential"]["tokens"]), [np.zeros(600, dtype=np.float32)] * n

    checks = inv.with_reference(res, generate, exact=True, how="fake")
    assert checks and checks[0]["ok"], checks
    v = first["versus"]["sequential_reference"]
    assert v["kind"] == "numerics" and v["position"] == 2
    assert v["margin"] == pytest.approx(0.01, abs=1e-4)
    assert "top" not in first["sequential"] and "2" in first["sequential"]["top_at_divergence"]
    assert inv.with_reference(_run(FakeTokenServer(4)), served_of, exact=False, how="x") == []


def test_metrics_without_the_phase_are_unavailable() -> None:
    m = inv.metrics(None, "the driver offers no token server")
    assert m["serve_invariance"].value is None
    assert m["serve_invariance"].reason == "the driver offers no token server"
