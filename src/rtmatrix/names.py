"""One registry per kind of name: the scenarios a cell can run and the metrics a cell records.

Every module spells a scenario or a core metric through these enums (``Scenario.STREAM``,
``M.PP_TPS``); both are ``StrEnum`` so they compare and serialize as the plain strings that the
result files have always held. Scenario-specific metric families (``stream_*``, ``cancel_*``,
``serve_c<N>_*``) are named by their scenario modules under the prefixes of the scenario registry
(``rtmatrix.scenarios.SPECS``).
"""

from __future__ import annotations

from enum import StrEnum


class Scenario(StrEnum):
    """What a cell runs after the model is loaded."""

    GENERATE = "generate"  # the timed prefill + greedy decode loop
    STREAM = "stream"
    CANCEL = "cancel"
    SERVE = "serve"
    SAMPLE = "sample"  # the runtime's own sampler: reproducibility, order, distribution

    @classmethod
    def lifecycle(cls) -> tuple[Scenario, ...]:
        """The lifecycle scenarios (everything but the plain generation)."""
        return tuple(s for s in cls if s is not cls.GENERATE)

    @classmethod
    def parse(cls, value: str) -> Scenario:
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(s.value for s in cls)
            msg = f"unknown scenario {value!r}; valid: {valid}"
            raise ValueError(msg) from None


class M(StrEnum):
    """Core metric names (the keys of a cell's ``metrics``)."""

    PACKAGE_SIZE = "package_size_bytes"
    LICENSE = "license"
    COLD_PROCESS = "cold_start_process_s"
    COLD_IMPORT = "cold_start_import_s"
    COLD_LOAD = "cold_start_load_s"
    COLD_FIRST_TOKEN = "cold_start_first_token_s"
    COLD_TOTAL = "cold_start_total_s"
    PEAK_RSS_SAMPLED = "peak_rss_sampled_bytes"
    PEAK_RSS_OS = "peak_rss_os_bytes"
    PP_TPS = "pp_tps"
    PP_TPS_COUNTER = "pp_tps_counter"
    TG_TPS = "tg_tps"
    TG_TPS_COUNTER = "tg_tps_counter"
    PP_TPS_REFERENCE = "pp_tps_reference"
    PP_REFERENCE_RATIO = "pp_reference_ratio"
    TG_REFERENCE_RATIO = "tg_reference_ratio"
    TG_TPS_REFERENCE = "tg_tps_reference"
    TTFT = "ttft_s"
    TPOT = "tpot_s"
    TOKEN_P50 = "token_latency_p50_s"
    TOKEN_P90 = "token_latency_p90_s"
    ENERGY_PREFILL = "energy_prefill_j"
    ENERGY_DECODE = "energy_decode_j"
    ENERGY = "energy_j"
    POWER = "power_w"
    ENERGY_PER_TOKEN = "energy_per_token_j"
    HOST_BUSY_CORES = "host_busy_cores"
    HOST_STEAL_CORES = "host_steal_cores"
    LIFECYCLE_CHECKS = "lifecycle_checks"
    # a real model's teacher-forced pass against the f32 reference (metrics/quality.py)
    KLD_MEAN = "kld_mean"
    KLD_P99 = "kld_p99"
    SAME_TOP = "same_top_pct"
    PPL = "ppl"
    PPL_REFERENCE = "ppl_reference"
    # the runtime's own quality tool (llama-perplexity --kl-divergence) on the same text, and
    # the harness's figures over the same positions against it
    KLD_REFERENCE = "kld_reference"
    SAME_TOP_REFERENCE = "same_top_reference"
    KLD_REFERENCE_RATIO = "kld_reference_ratio"
    SAME_TOP_REFERENCE_DIFF = "same_top_reference_diff"
    # how close the cell came to this host's measured limits (metrics/utilization.py)
    TG_BANDWIDTH_UTIL = "tg_bandwidth_util"
    PP_COMPUTE_UTIL = "pp_compute_util"


#: throughput metrics (tokens/s), harness clock and runtime counters
THROUGHPUT = (M.PP_TPS, M.PP_TPS_COUNTER, M.TG_TPS, M.TG_TPS_COUNTER)
#: per-token latency metrics (seconds)
LATENCY = (M.TTFT, M.TPOT, M.TOKEN_P50, M.TOKEN_P90)
#: what the plain generation measures and a lifecycle-scenario cell does not
GENERATE_ONLY = THROUGHPUT + LATENCY
