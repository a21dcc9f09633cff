"""llama.cpp's own quality figures: ``llama-perplexity --kl-divergence`` on the same text.

The anchor for the harness's teacher-forced KLD (:mod:`rtmatrix.metrics.quality`): the base
file (the f32 export of the same checkpoint) writes its log-probabilities with
``--kl-divergence-base`` over one chunk of ``n_ctx`` ids of the text, then the cell's file is
judged against them with ``--kl-divergence``. llama-perplexity scores the second half of a chunk
(positions ``n_ctx/2 .. n_ctx-2``, each predicting the next id) and needs a text of at least
``2 * n_ctx`` ids; the harness scores the same positions of its own pass
(:func:`rtmatrix.metrics.quality.anchor_window`), so the two figures are over the same ids.

Nothing here imports the binding; every failure is :class:`ToolUnavailable` with the reason.
"""

from __future__ import annotations

import re
import shlex
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rtmatrix.runtimes.llama_cpp.reftool import (
    LOG_TAIL_CHARS,
    ToolBuild,
    ToolUnavailable,
    run_group,
    tool_env,
)

BINARY = "llama-perplexity"
#: llama-perplexity prints its summary only over at least this many scored positions
MIN_SCORED = 100

_SUMMARY = {
    "kld_mean": re.compile(r"^Mean\s+KLD:\s*([-\d.eE+]+)\s*±\s*([-\d.eE+]+)", re.M),
    "kld_p99": re.compile(r"^99\.0%\s+KLD:\s*([-\d.eE+]+)", re.M),
    "same_top_pct": re.compile(r"^Same top p:\s*([-\d.eE+]+)\s*±\s*([-\d.eE+]+)\s*%", re.M),
    "ppl": re.compile(r"^Mean PPL\(Q\)\s*:\s*([-\d.eE+]+)", re.M),
    "ppl_base": re.compile(r"^Mean PPL\(base\)\s*:\s*([-\d.eE+]+)", re.M),
}


def parse_kld_output(text: str) -> dict[str, float]:
    """The summary of ``--kl-divergence`` (llama-perplexity prints it to its log): mean KLD
    and its uncertainty, p99 KLD, same top % and its uncertainty, PPL(Q) and PPL(base)."""
    out: dict[str, float] = {}
    for key, pattern in _SUMMARY.items():
        found = pattern.search(text)
        if found is None:
            continue
        out[key] = float(found.group(1))
        if pattern.groups > 1:
            out[f"{key}_uncertainty"] = float(found.group(2))
    if "kld_mean" not in out or "same_top_pct" not in out:
        tail = text[-LOG_TAIL_CHARS:]
        msg = f"{BINARY} printed no 'Mean KLD' / 'Same top p' summary; output tail: {tail}"
        raise ToolUnavailable(msg)
    return out


def common_args(n_ctx: int, threads: int, flash_attn: str, repack: bool) -> list[str]:
    """One chunk of ``n_ctx`` ids, in one batch, with the row's threads, flash attention and
    extra buffer types (``--repack``/``--no-repack``)."""
    return [
        "-c", str(n_ctx), "-b", str(n_ctx), "--chunks", "1", "-t", str(threads),
        "-ngl", "0", "-fa", flash_attn, "--repack" if repack else "--no-repack",
    ]  # fmt: skip


def _run(build: ToolBuild, args: Sequence[str], timeout_s: float) -> tuple[list[str], str]:
    cmd = [str(build.bin_dir / BINARY), *args]
    try:
        rc, out, err = run_group(cmd, tool_env(build.bin_dir), timeout_s, BINARY)
    except OSError as exc:
        msg = f"{BINARY} could not start: {exc}"
        raise ToolUnavailable(msg) from exc
    text = out + err
    if rc != 0:
        msg = f"{BINARY} exited {rc}: {shlex.join(cmd)}; output tail: {text[-LOG_TAIL_CHARS:]}"
        raise ToolUnavailable(msg)
    return cmd, text


def kl_divergence(
    build: ToolBuild,
    base: Path,
    model: Path,
    text: str,
    *,
    n_ctx: int,
    threads: int,
    flash_attn: str = "auto",
    repack: bool = True,
    timeout_s: float = 600.0,
    kv: Sequence[str] = (),
) -> dict[str, Any]:
    """``model``'s KL divergence from ``base`` over one chunk of ``n_ctx`` ids of ``text``, as
    llama-perplexity computes it: its figures, both command lines and the tool's version."""
    if n_ctx - 1 - n_ctx // 2 < MIN_SCORED:
        msg = (f"a chunk of {n_ctx} ids scores {n_ctx - 1 - n_ctx // 2} positions; "
               f"{BINARY} summarizes {MIN_SCORED} or more (a longer text is needed)")  # fmt: skip
        raise ToolUnavailable(msg)
    if BINARY not in build.manifest.get("binaries", {}):
        msg = f"the tool build in {build.root} has no {BINARY} (rebuild the tools)"
        raise ToolUnavailable(msg)
    common = [*common_args(n_ctx, threads, flash_attn, repack), *kv]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rtmatrix-ppl-") as tmp:
        text_file, logits = Path(tmp) / "text.txt", Path(tmp) / "base-logits.bin"
        text_file.write_text(text, "utf-8")
        base_cmd, _ = _run(build, ["-m", str(base), "-f", str(text_file), *common,
                                   "--kl-divergence-base", str(logits)], timeout_s)  # fmt: skip
        kld_cmd, out = _run(build, ["-m", str(model), "--kl-divergence-base", str(logits),
                                    "--kl-divergence", *common], timeout_s)  # fmt: skip
    figures = parse_kld_output(out)
    return figures | {
        "evidence": {
            "tool": BINARY,
            "tool_version": build.tool_version(BINARY),
            "base": str(base),
            "n_ctx": n_ctx,
            "scored_positions": [n_ctx // 2, n_ctx - 2],
            "commands": [shlex.join(base_cmd), shlex.join(kld_cmd)],
            "wall_s": round(time.perf_counter() - t0, 2),
        }
    }
