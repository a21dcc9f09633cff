"""Where a paired round's spread comes from: the counted repetitions of A/A comparisons.

Reads the CSV ``compare_quality.py --samples FILE`` appends (one row per counted repetition:
comparison, cell, metric, round, side, position in the round's order, repetition index, value,
turn pattern, repetitions, warm-ups) and prints, per metric and design (pattern, repetitions,
warm-ups, shape, and the comparison's condition: A/A or an injected slowdown):

- the **per-round sd of the log-ratio** (B's median over A's, the figure a comparison's check
  judges) for the recorded repetitions and for subsets of them read from the same rounds:
  ``first-even`` (the first 2·⌊n/2⌋ counted repetitions: every side has as many repetitions
  that follow its own turn as the other's), ``drop-first`` (the first counted repetition
  treated as one more warm-up);
- the **after-self effect**: the mean log-value of a repetition whose preceding turn was its
  own side's, minus one preceded by the other side's (within process; in ABBA order the side
  second in the round's order gets one more such repetition of an odd count);
- the **repetition-index profile**: each counted repetition's mean log-value relative to its
  process's median (a warm-up still under way shows as a first repetition off the rest);
- the **B-second effect**: half the difference of the mean log-ratio of rounds ordered AB and
  BA (the ledger's figure).

Turn positions are rebuilt from the pattern (:func:`rtmatrix.turns.turn_order`) and the
warm-ups, as the comparison granted them. Figures only, no verdict.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from rtmatrix.turns import turn_order


def after_self(position: int, rep: int, warmup: int, reps: int, pattern: str) -> bool | None:
    """Whether the turn before a counted repetition was the same side's (None: the first
    turn of the round)."""
    sequence = turn_order("ab", warmup + reps, pattern)
    me = "ab"[position]
    turns = [i for i, s in enumerate(sequence) if s == me]
    at = turns[warmup + rep]
    return None if at == 0 else sequence[at - 1] == me


def annotate(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["after_self"] = [
        after_self(int(p), int(r), int(w), int(n), str(t))
        for p, r, w, n, t in zip(
            df["position"], df["rep"], df["warmup"], df["reps"], df["turns"], strict=True
        )
    ]
    df["shape"] = df["cell"].astype(str).str.rsplit("|", n=1).str[-1]
    # the condition ends the comparison's id (compare_quality.ledger_rows): A/A, pp10%, ...
    df["condition"] = df["comparison"].astype(str).str.rsplit("-", n=1).str[-1]
    df["design"] = (
        df["turns"].astype(str) + " r" + df["reps"].astype(str) + " w" + df["warmup"].astype(str)
        + " " + df["shape"] + " " + df["condition"]
    )  # fmt: skip
    df["log"] = np.log(df["value"].astype(float))
    return df


def round_ratios(df: pd.DataFrame, keep: pd.Series) -> pd.Series:
    """Per (comparison, round): log(median B / median A) over the kept repetitions."""
    med = df[keep].groupby(["comparison", "round", "side"])["value"].median().unstack("side")
    med = med.dropna()
    return pd.Series(np.log(med["b"] / med["a"]), index=med.index)


def subsets(df: pd.DataFrame) -> dict[str, pd.Series]:
    n = df["reps"].astype(int)
    even = 2 * (n // 2)
    return {
        "all": pd.Series(True, index=df.index),
        "first-even": df["rep"] < even,
        "drop-first": df["rep"] >= 1,
    }


def second_effect(df: pd.DataFrame) -> float:
    first = df[df["position"] == 0].groupby(["comparison", "round"])["side"].first()
    d = round_ratios(df, pd.Series(True, index=df.index))
    order = first.reindex(d.index)
    ab, ba = d[order == "a"], d[order == "b"]
    return float((ab.mean() - ba.mean()) / 2) if len(ab) and len(ba) else math.nan


def describe(df: pd.DataFrame) -> list[str]:
    lines = []
    for (metric, design), part in df.groupby(["metric", "design"]):
        rounds = part.groupby(["comparison", "round"]).ngroups
        lines.append(f"{metric} [{design}]: {part['comparison'].nunique()} comparisons, "
                     f"{rounds} rounds")  # fmt: skip
        for name, keep in subsets(part).items():
            d = round_ratios(part, keep)
            lines.append(
                f"  {name:10s} per-round sd of log-ratio {d.std(ddof=1):.4f} "
                f"(mean {d.mean():+.4f}, n {len(d)})"
            )
        proc = part.groupby(["comparison", "round", "side"])["log"]
        rel = part["log"] - proc.transform("median")
        flagged = part["after_self"].dropna().astype(bool)
        gap = rel[flagged.index][flagged].mean() - rel[flagged.index][~flagged].mean()
        lines.append(f"  after-self effect {gap:+.4f} (log, within process)")
        profile = rel.groupby(part["rep"]).mean()
        lines.append(
            "  repetition profile (mean log vs process median): "
            + ", ".join(f"#{i} {v:+.4f}" for i, v in profile.items())
        )
        lines.append(f"  B-second effect {second_effect(part):+.4f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("samples", type=Path, help="the CSV of compare_quality.py --samples")
    p.add_argument("--metric", action="append", help="only these metrics (default: all)")
    args = p.parse_args(argv)
    df = pd.read_csv(args.samples)
    if args.metric:
        df = df[df["metric"].isin(args.metric)]
    print("\n".join(describe(annotate(df))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
