"""llama-perplexity's KL-divergence summary, parsed as the tool prints it, and the checks made
before it runs (a chunk too short to summarize, a tool build without the binary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.runtimes.llama_cpp import perplexity as ppl
from rtmatrix.runtimes.llama_cpp.reftool import ToolBuild, ToolUnavailable

# the summary lines as perplexity.cpp's format strings print them (values invented)
SUMMARY = """\
kl_divergence: computing over 1 chunks, n_ctx=354, batch_size=354, n_seq=1
chunk  PPL  ln(PPL(Q)/PPL(base))  KL Divergence  Δp RMS  Same top p
   1   11.2345 ± 1.2345   0.01234 ± 0.00567   0.00389 ± 0.00041   1.234 ± 0.123 %   97.159 ± 1.254 %

====== Perplexity statistics ======
Mean PPL(Q)                   :  11.234500 ±   1.234500
Mean PPL(base)                :  11.100000 ±   1.200000
Cor(ln(PPL(Q)), ln(PPL(base))):  99.91%

====== KL divergence statistics ======
Mean    KLD:   0.003890 ±   0.000410
Maximum KLD:   0.052100
99.9%   KLD:   0.050000
99.0%   KLD:   0.031000
Median  KLD:   0.002100

====== Token probability statistics ======
RMS Δp    :  1.234 ± 0.123 %
Same top p: 97.159 ± 1.254 %
"""


def test_the_summary_is_read_with_its_uncertainties() -> None:
    got = ppl.parse_kld_output(SUMMARY)
    assert got["kld_mean"] == 0.00389 and got["kld_mean_uncertainty"] == 0.00041
    assert got["same_top_pct"] == 97.159 and got["same_top_pct_uncertainty"] == 1.254
    assert got["kld_p99"] == 0.031
    assert got["ppl"] == 11.2345 and got["ppl_base"] == 11.1


def test_output_without_a_summary_is_unavailable_with_its_tail() -> None:
    with pytest.raises(ToolUnavailable, match=r"(?s)no .Mean KLD.*failed to decode"):
        ppl.parse_kld_output("perplexity: tokenizing the input ..\nfailed to decode\n")


def test_the_tool_runs_one_chunk_in_one_batch_with_the_rows_settings() -> None:
    args = ppl.common_args(354, 2, "auto", repack=False)
    assert args[args.index("-c") + 1] == "354" and args[args.index("-b") + 1] == "354"
    assert args[args.index("--chunks") + 1] == "1" and "--no-repack" in args
    assert "--repack" in ppl.common_args(354, 2, "on", repack=True)


def test_a_chunk_too_short_or_a_build_without_the_binary_is_refused(tmp_path: Path) -> None:
    build = ToolBuild(tmp_path, "0.0.0", {"binaries": {"llama-bench": {}}}, built=False)
    with pytest.raises(ToolUnavailable, match="scores 99 positions"):
        ppl.kl_divergence(build, tmp_path, tmp_path, "t", n_ctx=200, threads=1)
    with pytest.raises(ToolUnavailable, match="has no llama-perplexity"):
        ppl.kl_divergence(build, tmp_path, tmp_path, "t", n_ctx=354, threads=1)
