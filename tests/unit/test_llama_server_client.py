"""llama-server's client side without a server: the Prometheus text of /metrics, /slots, the
native /completion body and answers (samples copied from a llama-server of the shared build)."""

from __future__ import annotations

import pytest

from rtmatrix.runtimes.llama_server import client

METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 451
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 64
llamacpp:n_busy_slots_per_decode 2.18868
llamacpp:requests_processing 0

http_requests{method="post",code="200"} 3 1700000000000
broken line without a value
llamacpp:odd NaN-ish
"""

IDLE = {"id": 0, "n_ctx": 512, "speculative": False, "is_processing": False}
BUSY = {
    "id": 3,
    "n_ctx": 512,
    "is_processing": True,
    "id_task": 9,
    "n_prompt_tokens": 44,
    "n_prompt_tokens_processed": 41,
    "next_token": [{"has_next_token": True, "n_remain": 396, "n_decoded": 4}],
}


def test_prometheus_text_is_parsed_to_samples() -> None:
    got = client.parse_prometheus(METRICS)
    assert got["llamacpp:prompt_tokens_total"] == 451.0
    assert got["llamacpp:n_busy_slots_per_decode"] == pytest.approx(2.18868)
    assert got['http_requests{method="post",code="200"}'] == 3.0  # labels kept, timestamp dropped
    assert "broken" not in " ".join(got) and "llamacpp:odd" not in got
    assert len(got) == 5


def test_a_scrape_is_handed_on_in_neutral_names() -> None:
    """The driver translates llama-server's Prometheus names; the scenario never spells them."""
    from rtmatrix.adapters.capabilities import SERVER_COUNTERS, SERVER_GAUGES, ServerCounters
    from rtmatrix.runtimes.llama_server.driver import LlamaServerDriver

    got = client.counter_reading(client.parse_prometheus(METRICS))
    assert got.figures == {
        "prompt_tokens": 451.0,
        "tokens_predicted": 64.0,
        "busy_slots_per_decode": pytest.approx(2.18868),
    }
    assert set(got.raw) == {"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"}
    assert set(client.PROMETHEUS_NAMES) == set(SERVER_COUNTERS) | set(SERVER_GAUGES)
    assert isinstance(LlamaServerDriver(None), ServerCounters)  # type: ignore[arg-type]
    assert LlamaServerDriver.counter_labels == {"decode_calls": "llama_decode calls"}


def test_counter_deltas_take_only_counters_both_scrapes_have() -> None:
    before = {"a_total": 10.0, "g": 5.0, "b_total": 1.0}
    after = {"a_total": 25.0, "g": 9.0, "c_total": 4.0}
    assert client.counter_deltas(before, after) == {"a_total": 15.0}


def test_slots_idle_and_busy() -> None:
    idle, busy = client.parse_slots([IDLE, BUSY])
    assert idle.phase == "idle" and idle.task is None and idle.n_ctx == 512
    assert busy.phase == "decode" and busy.task == 9 and busy.n_prompt_processed == 41
    assert busy.n_decoded == 4
    prefill = client.parse_slots([{**BUSY, "next_token": [{"n_decoded": 0}]}])[0]
    assert prefill.phase == "prefill"
    assert client.busy([idle, busy, prefill]) == 2
    assert busy.to_dict()["phase"] == "decode"


@pytest.mark.parametrize("bad", [{"slots": []}, [{"is_processing": True}], ["x"]])
def test_slots_of_another_shape_are_refused(bad: object) -> None:
    with pytest.raises(client.ServerError, match="/slots"):
        client.parse_slots(bad)


def test_completion_body_is_greedy_over_token_ids_without_the_prompt_cache() -> None:
    body = client.completion_body([1, 5, 6], 8, [2], stream=True, n_probs=4)
    assert body["prompt"] == [1, 5, 6] and body["n_predict"] == 8
    assert body["samplers"] == ["top_k"] and body["top_k"] == 1
    assert body["logit_bias"] == [[2, False]] and body["cache_prompt"] is False
    assert body["return_tokens"] is True and body["n_probs"] == 4 and body["stream"] is True
    assert "n_probs" not in client.completion_body([1], 1, [], stream=False)


def test_an_answer_gives_tokens_and_top_logprobs() -> None:
    answer = {
        "tokens": [128, 507],
        "id_slot": 3,
        "stop_type": "limit",
        "timings": {"prompt_n": 41},
        "completion_probabilities": [
            {
                "id": 128,
                "top_logprobs": [{"id": 128, "logprob": -4.07}, {"id": 133, "logprob": -4.18}],
            },
            {"id": 507, "top_logprobs": [{"id": 507, "logprob": -4.0}, {"id": 327}]},
        ],
    }
    c = client.Completion()
    client.absorb(c, answer)
    client.absorb(c, {"tokens": [9], "id_slot": -1})  # a stream event: slot -1 is not a slot
    assert c.tokens == [128, 507, 9] and c.slot == 3 and c.stop_type == "limit"
    assert c.top == [[(128, -4.07), (133, -4.18)], [(507, -4.0)]]
    assert c.to_dict()["top"][0] == [[128, -4.07], [133, -4.18]]
