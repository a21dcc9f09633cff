"""The ``serve`` scenario in process (``scenarios.batch``): levels, traces, batch invariance, with
a fake batching engine (no runtime)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pytest

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.protocol import Job, JobParams
from rtmatrix.scenarios import batch, invariance, require_capability, run_scenario, scenario_metrics


class FakeEngine:
    """A batching engine whose ids depend only on each request's prompt (``leak``: in a batch of
    several, request 0's ids leak into request 1's, an isolation bug)."""

    name = "fake-engine"
    vocab_size = 512
    special_ids: ClassVar[dict[str, int]] = {"bos": 1}
    batch_api = "fake.add_request/step"

    def __init__(self, *, leak: bool = False, fail: bool = False) -> None:
        self.leak, self.fail = leak, fail
        self.batches: list[int] = []

    @staticmethod
    def ids(prompt: Sequence[int], n: int) -> list[int]:
        return [(sum(prompt) * 7 + 13 * k) % 500 + 3 for k in range(n)]

    def batch_generate(
        self, requests: Sequence[tuple[Sequence[int], int]], on_token: Callable[[int, int], None]
    ) -> list[list[int]]:
        if self.fail:
            msg = "scheduler refused the request"
            raise RuntimeError(msg)
        self.batches.append(len(requests))
        out = [self.ids(p, n) for p, n in requests]
        if self.leak and len(out) > 1:
            out[1] = out[0][: len(out[1])] + [0] * max(0, len(out[1]) - len(out[0]))
        for step in range(max(len(o) for o in out)):
            for i, o in enumerate(out):
                if step < len(o):
                    on_token(i, o[step])
        return out

    def batch_state(self) -> dict[str, Any]:
        return {"built": True, "max_cache_usage": 0.25, "cache_size_in_bytes": 1024}


def job(**options: Any) -> Job:
    params = JobParams(n_ctx=64, threads=1, prompt_tokens=8, gen_tokens=6, repetitions=1, warmup=0)
    base = {"serve_concurrency": [1, 2, 4], "serve_rounds": 2, "invariance_requests": 4}
    return Job(adapter="test", model_path="m", params=params, options=base | options, timeout_s=60)


def run(engine: FakeEngine, **options: Any) -> dict[str, Any]:
    adapter: Any = engine
    return run_scenario("serve", adapter, job(**options), [1, 5, 6, 7], [2], lambda _n, _t: None)


def checks(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in res["checks"]}


def test_a_batching_engine_is_served_in_process_at_every_level() -> None:
    eng = FakeEngine()
    res = run(eng)
    assert res["in_process"] and res["api"] == eng.batch_api
    # warm-up, then 2 rounds of 1, 2 and 4 at once, then 4 at once and 4 alone
    assert eng.batches == [1, 1, 1, 2, 2, 4, 4, 4, 1, 1, 1, 1]
    assert all(c["ok"] for c in res["checks"]), res["checks"]
    assert {r["tokens"][0] for rounds in res["levels"].values() for r in rounds} == {6}
    m = scenario_metrics("serve", res)
    tps = m["serve_c4_throughput_tps"].value
    assert isinstance(tps, float) and tps > 0
    assert m["serve_startup_s"].detail["method"].startswith("first request")
    assert "serve_server_rss_start_bytes" not in m  # no server process
    assert m["serve_invariance"].value == "4/4"
    assert res["findings"] == [
        "the engine's KV cache peaked at 25.0 % of 1024 bytes (its own metrics)"
    ]


def test_a_request_that_sees_another_ones_ids_fails_isolation() -> None:
    res = run(FakeEngine(leak=True))
    c = checks(res)["serve_invariance_isolation"]
    assert not c["ok"] and "isolation" in c["detail"], c
    inv = res["invariance"]
    kinds = [r["versus"]["concurrent_sequential"]["kind"] for r in inv["requests"]]
    assert kinds.count("isolation") == 1 and kinds.count("agree") == 3


def test_the_reference_judges_the_engine_runs_with_no_ids_masked() -> None:
    res = run(FakeEngine())
    inv = res["invariance"]
    assert inv["banned"] == [] and "masks no ids" in inv["banned_note"]

    def generate(prompt: Sequence[int], n: int) -> tuple[list[int], list[Any]]:
        return FakeEngine.ids(prompt, n), []

    got = invariance.with_reference(inv, generate, exact=True, how="fake")
    assert got[0]["ok"], got


def test_an_engine_error_is_each_requests_failure_not_the_scenarios() -> None:
    res = run(FakeEngine(fail=True))
    assert res["startup_s"] is None and "refused" in res["startup_error"]
    c = checks(res)
    assert not c["serve_requests_completed"]["ok"]
    assert not c["serve_invariance_isolation"]["ok"]
    m = scenario_metrics("serve", res)
    assert m["serve_startup_s"].source == "unavailable"
    assert "refused" in str(m["serve_startup_s"].reason)


def test_levels_default_to_one_to_eight() -> None:
    assert batch.levels_of(job()) == [1, 2, 4]
    j = job()
    j.options.pop("serve_concurrency")
    assert batch.levels_of(j) == [1, 2, 4, 8]


def test_an_adapter_with_neither_capability_is_unavailable() -> None:
    class Plain:
        name = "plain"

    require_capability("serve", FakeEngine())  # type: ignore[arg-type]
    with pytest.raises(RuntimeUnavailable, match="Serving"):
        require_capability("serve", Plain())  # type: ignore[arg-type]
    with pytest.raises(RuntimeUnavailable, match="Serving"):
        run_scenario("serve", Plain(), job(), [1], [], lambda _n, _t: None)  # type: ignore[arg-type]


def test_the_in_process_result_keeps_its_wire_keys_in_order() -> None:
    assert list(run(FakeEngine())) == [
        "scenario", "runtime", "api", "in_process", "prompt_tokens", "max_tokens",
        "masked_token_ids", "skipped", "levels", "startup_s", "startup_method", "invariance",
        "engine_state", "findings", "traces", "checks",
    ]  # fmt: skip
    failed = run(FakeEngine(fail=True), serve_invariance=False)
    assert "startup_error" in failed and "invariance" not in failed
