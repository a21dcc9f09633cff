"""Compare rtmatrix's memory read-bandwidth probe with an independent tool (a script, not a test).

    .venv/bin/python benchmarks/bandwidth_probe.py --quick       # smoke run, a few seconds
    .venv/bin/python benchmarks/bandwidth_probe.py               # the figures: ~1 minute
    .venv/bin/python benchmarks/bandwidth_probe.py --threads 1 --threads 2 --rounds 5

The probe is :mod:`rtmatrix.metrics.hostprobe` (numpy ``maximum.reduce`` over a buffer split
into one slice per thread), run in its child exactly as a run runs it, with the matmul probes
off. The independent tool is Debian's ``sysbench`` (``apt-get install sysbench``)::

    sysbench memory --memory-oper=read --memory-access-mode=seq \\
        --memory-block-size=<buffer ÷ threads> --memory-total-size=<16 × buffer> --threads=N run

Each sysbench thread reads its own block over and over, so the block must be far larger than the
last-level cache: with ``--memory-block-size=1M`` (its usual example) every read after the first
hits L2, and it reports cache bandwidth (~100 GB/s on a host whose DRAM gives ~30). The script
gives each thread buffer ÷ threads, the probe's own split.

Rounds alternate the two tools (probe, sysbench, probe, ...) so that drift in the host's load
falls on both; each probe round contributes its passes, each sysbench round ``--repeats`` runs.
Printed per tool and thread count: median GB/s, min–max, interquartile range, n, and the
probe ÷ sysbench ratio of the medians; and how many cores were busy outside the probe (a
shared host reads low). Quote it with the spread, and say whether the host was quiet.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence

from rtmatrix.metrics.hostlimits import HostLimits, ProbeConfig, measure
from rtmatrix.metrics.hostprobe import llc_bytes, spread

INSTALL = "apt-get install sysbench"


def sysbench_command(threads: int, buffer_mib: int, total_mib: int) -> list[str]:
    block = max(1, buffer_mib // threads)
    return ["sysbench", "memory", "--memory-oper=read", "--memory-access-mode=seq",
            f"--memory-block-size={block}M", f"--memory-total-size={total_mib}M",
            f"--threads={threads}", "run"]  # fmt: skip


def sysbench_once(cmd: list[str]) -> float:
    """Bytes/s of one sysbench run (its ``MiB transferred (X MiB/sec)`` line)."""
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    m = re.search(r"MiB transferred \(([\d.]+) MiB/sec\)", out)
    if m is None:
        msg = f"no throughput line in sysbench's output: {out[-300:]}"
        raise RuntimeError(msg)
    return float(m.group(1)) * 2**20


def probe_once(threads: int, config: ProbeConfig) -> tuple[list[float], float | None]:
    """The probe's passes (bytes/s) and the cores busy outside it."""
    found = measure(threads, config, progress=lambda _: None)
    if not isinstance(found, HostLimits) or found.bandwidth.value is None:
        why = found if isinstance(found, str) else found.bandwidth.reason
        msg = f"the probe measured nothing: {why}"
        raise RuntimeError(msg)
    return list(found.bandwidth.samples), found.host_busy_cores


def line(tool: str, threads: int, samples: Sequence[float]) -> str:
    s = spread(samples)
    gb = 1e9
    return (f"  {tool:<9} t{threads}  median {s['median'] / gb:6.1f} GB/s  min–max "
            f"{s['min'] / gb:5.1f}–{s['max'] / gb:5.1f}  IQR {s['iqr'][0] / gb:5.1f}–"
            f"{s['iqr'][1] / gb:5.1f}  n={s['n']}")  # fmt: skip


def compare(threads: int, rounds: int, repeats: int, buffer_mib: int) -> None:
    config = ProbeConfig(buffer_mib=buffer_mib, repeats=repeats, dtypes=())
    cmd = sysbench_command(threads, buffer_mib, 16 * buffer_mib)
    ours: list[float] = []
    theirs: list[float] = []
    busy: list[float] = []
    for r in range(rounds):
        samples, cores = probe_once(threads, config)
        ours += samples
        busy += [cores] if cores is not None else []
        theirs += [sysbench_once(cmd) for _ in range(repeats)]
        print(f"  round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    print(line("rtmatrix", threads, ours))
    print(line("sysbench", threads, theirs))
    ratio = statistics.median(ours) / statistics.median(theirs)
    load = f"{max(busy):.2f}" if busy else "unknown"
    print(f"  probe ÷ sysbench (medians) {ratio:.2f}; most cores busy outside the probe: {load}")
    print(f"  sysbench: {' '.join(cmd)}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, action="append", help="repeatable (default 2)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=7, help="probe passes / sysbench runs a round")
    ap.add_argument("--buffer-mib", type=int, default=512)
    ap.add_argument("--quick", action="store_true", help="1 round, 3 repeats, 128 MiB")
    args = ap.parse_args(argv)
    if shutil.which("sysbench") is None:
        print(f"sysbench is not installed; {INSTALL}", file=sys.stderr)
        return 2
    rounds, repeats, buffer = args.rounds, args.repeats, args.buffer_mib
    if args.quick:
        rounds, repeats, buffer = 1, 3, 128
    version = subprocess.run(["sysbench", "--version"], capture_output=True, text=True).stdout
    llc = llc_bytes()
    print(f"read bandwidth, {buffer} MiB buffer (LLC {llc / 2**20 if llc else '?'} MiB), "
          f"{rounds} round(s) × {repeats}; {version.strip()}")  # fmt: skip
    for threads in args.threads or [2]:
        compare(threads, rounds, repeats, buffer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
