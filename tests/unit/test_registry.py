from __future__ import annotations

import pytest

from rtmatrix.metrics import registry
from rtmatrix.metrics.cell import cold_start, latency, memory, throughput
from rtmatrix.metrics.registry import METRICS, Direction, MetricSpec
from rtmatrix.names import M
from rtmatrix.report import plots
from rtmatrix.results import diff, paired

# the defaults diff had before the registry held them: they must not move
_BEFORE: dict[str, tuple[Direction, float, bool]] = {
    "pp_tps": (Direction.HIGHER, 0.10, True),
    "tg_tps": (Direction.HIGHER, 0.10, True),
    "pp_tps_counter": (Direction.HIGHER, 0.10, False),
    "tg_tps_counter": (Direction.HIGHER, 0.10, False),
    "ttft_s": (Direction.LOWER, 0.10, False),
    "tpot_s": (Direction.LOWER, 0.10, False),
    "token_latency_p50_s": (Direction.LOWER, 0.25, False),
    "token_latency_p90_s": (Direction.LOWER, 0.25, False),
    "cold_start_process_s": (Direction.LOWER, 0.50, False),
    "cold_start_import_s": (Direction.LOWER, 0.50, False),
    "cold_start_load_s": (Direction.LOWER, 0.50, False),
    "cold_start_first_token_s": (Direction.LOWER, 0.50, False),
    "cold_start_total_s": (Direction.LOWER, 0.50, False),
    "peak_rss_sampled_bytes": (Direction.LOWER, 0.10, False),
    "peak_rss_os_bytes": (Direction.LOWER, 0.10, True),
    "package_size_bytes": (Direction.LOWER, 0.20, True),
    "energy_j": (Direction.LOWER, 0.10, False),
    "power_w": (Direction.LOWER, 0.10, False),
}


def test_every_core_metric_has_exactly_one_spec() -> None:
    assert set(METRICS) == {m.value for m in M}
    assert all(isinstance(s, MetricSpec) and s.name == name for name, s in METRICS.items())
    assert all(s.label and s.unit for s in METRICS.values())


def test_compared_metrics_keep_their_directions_thresholds_gates_and_order() -> None:
    assert registry.compared() == _BEFORE
    assert list(registry.compared()) == list(_BEFORE)  # the CLI lists them in this order
    assert diff.KNOWN_METRICS == _BEFORE


def test_throughput_is_higher_and_time_memory_energy_lower() -> None:
    for name in (M.PP_TPS, M.TG_TPS, M.PP_TPS_COUNTER, M.TG_TPS_COUNTER):
        assert registry.direction_of(name) is Direction.HIGHER
        assert registry.spec(name).unit == "tokens/s"
    for name in (M.TTFT, M.COLD_TOTAL, M.PEAK_RSS_OS, M.ENERGY_PER_TOKEN, M.POWER):
        assert registry.direction_of(name) is Direction.LOWER
    for name in (
        M.LICENSE,
        M.KLD_MEAN,
        M.HOST_BUSY_CORES,
        M.TG_TPS_REFERENCE,
        M.PP_REFERENCE_RATIO,
    ):
        assert registry.direction_of(name) is None


# entries added since, whose direction is their own (not compared: no threshold)
_DIRECTED_SINCE = {"tg_bandwidth_util": Direction.HIGHER, "pp_compute_util": Direction.HIGHER}


def test_entries_agree_with_the_suffix_rule_that_held_before() -> None:
    """Every entry diff did not know has the direction its name's suffix gave it before."""
    for name, s in METRICS.items():
        if name in _BEFORE:
            continue
        if name in _DIRECTED_SINCE:
            assert s.direction is _DIRECTED_SINCE[name], name
            assert s.threshold is None and not s.gated and not s.ranked, name
            continue
        by_suffix = next(
            (d for suffix, d in registry.SUFFIX_DIRECTION if name.endswith(suffix)), None
        )
        assert s.direction is by_suffix, name


def test_families_without_an_entry_fall_back_on_the_suffix() -> None:
    assert registry.direction_of("stream_ttft_s") is Direction.LOWER
    assert registry.direction_of("serve_c4_throughput_tps") is Direction.HIGHER
    assert registry.direction_of("cancel_rss_growth_bytes") is Direction.LOWER
    assert registry.direction_of("stream_chunks") is None
    assert registry.threshold_of("serve_c4_throughput_tps") == registry.FALLBACK_THRESHOLD
    assert registry.threshold_of(M.ENERGY_PREFILL) == registry.FALLBACK_THRESHOLD
    assert registry.threshold_of(M.COLD_LOAD) == 0.50


def test_diff_and_paired_read_the_registry() -> None:
    checks = diff.default_checks()
    assert list(checks) == list(registry.compared())
    gated = tuple(name for name, c in checks.items() if c.gate)
    assert (
        gated == registry.gated() == ("pp_tps", "tg_tps", "peak_rss_os_bytes", "package_size_bytes")
    )
    assert diff.direction_of is registry.direction_of
    assert diff.Direction is Direction
    crit = paired.Criterion.for_metric("token_latency_p90_s")
    assert crit.direction is Direction.LOWER
    assert crit.min_effect == pytest.approx(0.25 / 5)
    assert crit.margin == pytest.approx(0.25 / 2)


def test_unknown_name_lists_close_ones() -> None:
    with pytest.raises(KeyError, match="did you mean tg_tps"):
        registry.spec("tg_tsp")
    with pytest.raises(KeyError, match="no plot axis"):
        registry.axis_of(M.LICENSE)


def test_plots_take_labels_and_scales_from_the_registry() -> None:
    hist = {p.metric: (p.ylabel, p.scale) for p in plots.HIST_PANELS}
    assert hist == {
        "pp_tps": ("PP tokens/s", 1.0),
        "tg_tps": ("TG tokens/s", 1.0),
        "peak_rss_os_bytes": ("peak RSS (MiB)", 2.0**-20),
        "cold_start_total_s": ("cold start (ms)", 1e3),
    }
    for p in plots.HIST_PANELS:
        axis = registry.axis_of(p.metric)
        assert (p.ylabel, p.scale) == (axis.label, axis.scale)
    assert [s.label for s in plots.THROUGHPUT_PANELS] == ["PP", "TG"]
    assert [s.label for s in plots.COLD_START_PARTS] == ["process", "import", "load", "first token"]
    assert [s.name for s in plots.COLD_START_PARTS] == [
        M.COLD_PROCESS,
        M.COLD_IMPORT,
        M.COLD_LOAD,
        M.COLD_FIRST_TOKEN,
    ]


def test_cell_metrics_carry_the_registry_units() -> None:
    out = throughput([]) | latency([]) | cold_start({}, 0.0) | memory(None, 0.1, None)
    assert len(out) == 15
    for name, metric in out.items():
        assert metric.unit == registry.unit_of(name), name


def test_a_scenario_family_is_declared_and_read_not_parsed_by_its_readers() -> None:
    from rtmatrix.names import Scenario
    from rtmatrix.scenarios import family

    serve, cancel, stream = (family(s) for s in (Scenario.SERVE, Scenario.CANCEL, Scenario.STREAM))
    names = ["serve_c1_ttft_p50_s", "serve_c4_ttft_p50_s", "serve_c4_tpot_p50_s", "serve_startup_s"]
    assert serve.values(names) == ["1", "4"] and serve.values(names, member="tpot_p50_s") == ["4"]
    assert serve.name(4, "ttft_p50_s") == "serve_c4_ttft_p50_s" and serve.owns("serve_startup_s")
    assert serve.split("serve_startup_s") is None  # no level: not a per-level metric
    # a mode's members are declared: cancel_prefill_* and cancel_rss_before_bytes are not modes
    got = cancel.values(["cancel_close_stop_latency_s", "cancel_rss_before_bytes",
                         "cancel_prefill_attempts", "cancel_drop_tokens_after"])  # fmt: skip
    assert got == ["close", "drop"]
    assert stream.split("stream_ttft_s") is None and stream.owns("stream_ttft_s")
