"""The ``sample`` scenario's worker half with a fake sampler (no runtime): the checks, the
constrained-output phase, the parent's judgement against a reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from rtmatrix.metrics.sampler import ORDERS, Params, distribution
from rtmatrix.protocol import Job, JobParams
from rtmatrix.scenarios import sample, scenario_metrics

LOGITS = np.random.default_rng(3).normal(0.0, 1.0, 64)


class FakeSampler:
    name = "fake"
    vocab_size = 64
    special_ids: dict[str, int] = {}  # noqa: RUF012
    sampler_api = "fake"
    sampler_order = "truncate-then-temperature"
    sampler_order_source = "here"
    constraint_api = "fake schema"

    def __init__(self, applied: str = "truncate-then-temperature", seeded: bool = True) -> None:
        self.applied, self.seeded = applied, seeded

    def sample_generate(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        rng = np.random.default_rng(seed if self.seeded else None)
        prob = distribution(LOGITS, Params.from_options(params), ORDERS[self.applied])
        return [int(rng.choice(64, p=prob)) for _ in range(n_gen)]

    def sample_constrained(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int,
        schema: dict[str, Any],
    ) -> dict[str, Any]:  # fmt: skip
        text = '{"command": "stop"}'
        if n_gen < 5:
            return {"tokens": [1] * n_gen, "text": text[:n_gen], "stop": "length"}
        return {"tokens": [1] * 6, "text": text, "stop": "eos"}


def job(**options: Any) -> Job:
    params = JobParams(n_ctx=64, threads=1, prompt_tokens=4, gen_tokens=8, repetitions=1, warmup=0)
    base = {"sample_processes": False, "draws": 300, "sample_tokens": 8}
    return Job(adapter="test", model_path="m", params=params, options=base | options, timeout_s=60)


def run(adapter: FakeSampler, **options: Any) -> dict[str, Any]:
    res = sample.run(adapter, job(**options), [1, 2, 3, 4], [], lambda _n, _t: None).to_dict()  # type: ignore[arg-type]
    res["checks"] += sample.with_reference(res, lambda _ids: LOGITS)
    return res


def checks(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in res["checks"]}


def test_a_faithful_sampler_passes_every_check() -> None:
    res = run(FakeSampler())
    got = checks(res)
    assert all(c["ok"] for c in got.values()), got
    assert res["order"]["found"] == "truncate-then-temperature"
    m = scenario_metrics("sample", res)
    assert m["sample_order_found"].value == "truncate-then-temperature"
    assert m["sample_constrained_valid"].value == "10/10"
    assert m["lifecycle_checks"].value == f"{len(got)}/{len(got)}"
    assert len(res["first_steps_reference_top5"]) == 3


def test_the_other_order_and_an_ignored_seed_are_caught() -> None:
    got = checks(run(FakeSampler(applied="temperature-then-truncate")))
    assert not got["sample_order"]["ok"] and got["sample_same_seed_twice"]["ok"]
    got = checks(run(FakeSampler(seeded=False)))
    assert not got["sample_same_seed_twice"]["ok"]
    assert got["sample_same_seed_twice"]["divergence"]["reference_logits"]


def test_the_constraint_checks_say_what_the_runtime_did_at_a_short_budget() -> None:
    got = checks(run(FakeSampler()))
    assert got["sample_constrained_valid"]["ok"]
    short = got["sample_constrained_budget_ends"]
    assert short["ok"] and "'length'" in short["detail"] and "not valid" in short["detail"]


def test_valid_parses_and_validates() -> None:
    assert sample.valid('{"command": "start"}', sample.COMMANDS_SCHEMA) == (True, "")
    ok, why = sample.valid('{"command": "fly"}', sample.COMMANDS_SCHEMA)
    assert not ok and why.startswith("invalid")
    ok, why = sample.valid('{"comm', sample.COMMANDS_SCHEMA)
    assert not ok and why.startswith("not JSON")


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="temperature"):
        sample.SampleOptions.from_job(job(temperature=0.0))


def test_the_options_are_typed_with_their_defaults() -> None:
    opts = sample.SampleOptions.from_job(job(top_k=None, seed="7"))
    assert opts.top_k == 0 and opts.seed == 7 and opts.draws == 300 and opts.sample_alpha == 0.001
    assert opts.params() == {
        "temperature": 2.0, "top_k": 0, "top_p": 0.5, "min_p": 0.0, "repeat_penalty": 1.0
    }  # fmt: skip
    assert sample.SampleOptions.defaults()["draws"] == 400


def test_the_result_crosses_as_a_dict_with_the_parents_additions() -> None:
    res = run(FakeSampler())
    assert list(res)[-2:] == ["first_steps_reference_top5", "order"]
    typed = sample.SampleResult.from_dict(res)
    assert typed.to_dict() == res and list(typed.to_dict()) == list(res)
    assert "order_unavailable" not in res
