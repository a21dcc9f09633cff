"""The order of the eligible candidates: the Pareto front first, then the priorities; candidates
within noise of each other tied."""

from __future__ import annotations

from rtmatrix.selection import Constraints, select
from tests.helpers.selection_runs import labels, make_cell, make_run, model_in


def test_pareto_front_first_then_the_priorities() -> None:
    run = make_run(0, [
        make_cell("alpha", "q8_0", tg=100, kld=0.004, rss_mib=500),
        make_cell("beta", "q4_0", tg=80, kld=0.05, rss_mib=300),
        make_cell("gamma", "f32", tg=40, kld=0.0, rss_mib=900),
    ])  # fmt: skip
    m = model_in(select([run]))
    assert labels(m.ranked) == ["alpha q8_0", "beta q4_0", "gamma f32"]
    assert [c.layer for c in m.ranked] == [1, 1, 2]
    assert "ahead of beta q4_0 on quality: KLD 0.004 nats vs 0.05 nats" in m.ranked[0].reasons
    swapped = Constraints().with_overrides(["priorities=memory"])
    assert labels(model_in(select([run], swapped)).ranked)[:2] == ["beta q4_0", "alpha q8_0"]


def test_candidates_within_noise_of_each_other_are_tied() -> None:
    run = make_run(0, [
        make_cell("alpha", "q8_0", tg=101, samples=[100, 103, 98, 101, 99], rss_mib=500),
        make_cell("beta", "q8_0", tg=99, samples=[98, 101, 96, 99, 100], rss_mib=510),
        make_cell("gamma", "q8_0", tg=60, rss_mib=500),
    ])  # fmt: skip
    m = model_in(select([run]))
    alpha, beta, gamma = m.ranked
    assert (alpha.place, beta.place, gamma.place) == (1, 1, 3)
    assert alpha.tied_with == ("beta q8_0",) and beta.tied_with == ("alpha q8_0",)
    assert not gamma.tied_with
    assert "tied with beta q8_0: within noise on every priority" in alpha.reasons
    assert "=1. **beta q8_0**, because" in select([run]).to_markdown()
