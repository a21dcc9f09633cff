"""What every plain-generation cell records, whatever the runtime (integration tests share it)."""

from __future__ import annotations

SOURCES = frozenset(
    {
        "runtime-counter",
        "reference-tool",
        "hardware-counter",
        "external-meter",
        "harness-clock",
        "harness-comparison",
        "os-accounting",
        "package-metadata",
        "modelled",
        "derived",
        "unavailable",
    }
)

GENERATE_METRICS = frozenset(
    {
        "package_size_bytes",
        "license",
        "cold_start_process_s",
        "cold_start_import_s",
        "cold_start_load_s",
        "cold_start_first_token_s",
        "cold_start_total_s",
        "peak_rss_sampled_bytes",
        "peak_rss_os_bytes",
        "host_busy_cores",
        "host_steal_cores",
        "pp_tps",
        "pp_tps_counter",
        "tg_tps",
        "tg_tps_counter",
        "ttft_s",
        "tpot_s",
        "token_latency_p50_s",
        "token_latency_p90_s",
        "energy_j",
        "energy_prefill_j",
        "energy_decode_j",
        "energy_per_token_j",
        "power_w",
        "tg_bandwidth_util",
        "pp_compute_util",
    }
)
# this VM has no energy counter: these are unavailable, naming what was looked for
ENERGY_METRICS = frozenset(m for m in GENERATE_METRICS if m.startswith(("energy_", "power_")))

#: what a llama.cpp performance cell adds: llama-bench's figures and the harness / tool ratios
REFERENCE_METRICS = frozenset(
    {"pp_tps_reference", "tg_tps_reference", "pp_reference_ratio", "tg_reference_ratio"}
)
