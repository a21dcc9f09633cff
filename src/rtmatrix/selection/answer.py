"""The answer: per model, its eligible candidates in order and the excluded ones; for every
model of the runs, under one set of constraints — as JSON (``to_dict``) and as Markdown for CI
summaries (``to_markdown``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rtmatrix.results.columns import params_text
from rtmatrix.selection.constraints import Constraints
from rtmatrix.selection.verdict import Candidate

EXIT_ELIGIBLE, EXIT_NONE = 0, 1


@dataclass(frozen=True)
class ModelSelection:
    """The verdict for one model: its eligible candidates in order, the excluded ones."""

    model: str
    kind: str  # one of rtmatrix.selection.models.KINDS
    host: str
    run_id: str
    params: Mapping[str, Any]
    ranked: tuple[Candidate, ...]
    excluded: tuple[Candidate, ...]
    notes: tuple[str, ...] = ()
    runs: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "kind": self.kind, "host": self.host,
                "run_id": self.run_id, "params": dict(self.params), "runs": self.runs,
                "ranked": [c.to_dict() for c in self.ranked],
                "excluded": [c.to_dict() for c in self.excluded],
                "notes": list(self.notes)}  # fmt: skip

    def markdown(self) -> list[str]:
        runs = f"{self.runs} runs, newest {self.run_id}" if self.runs > 1 else f"run {self.run_id}"
        at = f", at {params_text(dict(self.params))}" if self.params else ""
        out = [f"For **{self.model}** ({self.kind}) on {self.host}, {runs}{at}, under these "
               "constraints:", ""]  # fmt: skip
        out += [_ranked_line(c) for c in self.ranked]
        if not self.ranked:
            out.append("No candidate meets the constraints.")
        if self.excluded:
            out += ["", "Excluded:", *(_excluded_line(c) for c in self.excluded)]
        if self.notes:
            out += ["", *(f"_Note: {n}_" for n in self.notes)]
        return out


def _ranked_line(c: Candidate) -> str:
    tie = "=" if c.tied_with else ""
    return f"{tie}{c.place}. **{c.label}**, because {'; '.join(c.reasons)}."


def _excluded_line(c: Candidate) -> str:
    return f"- **{c.label}**: {'; '.join(f.text for f in c.failures)}."


@dataclass(frozen=True)
class Selection:
    """The answer for every model of the runs, under one set of constraints."""

    constraints: Constraints
    models: tuple[ModelSelection, ...]
    run_ids: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        """0 when the first model has an eligible candidate, 1 when it has none (or there is
        no model to choose for)."""
        return EXIT_ELIGIBLE if self.models and self.models[0].ranked else EXIT_NONE

    def to_dict(self) -> dict[str, Any]:
        lines = self.constraints.lines()
        return {
            "format": "rtmatrix-select", "runs": list(self.run_ids),
            "exit_code": self.exit_code, "constraints": self.constraints.to_dict(),
            "constraint_lines": [{"key": k, "value": v, "from": o, "why": w}
                                 for k, v, o, w in lines],
            "models": [m.to_dict() for m in self.models],
        }  # fmt: skip

    def to_markdown(self) -> str:
        out = ["## Selection", "", f"Constraints: {self.constraints.summary()}.", ""]
        for m in self.models:
            out += [*m.markdown(), ""]
        if not self.models:
            out += ["No model with a cell expected to run in these runs.", ""]
        out += ["<details><summary>Constraints</summary>", "",
                "| constraint | value | from | why |", "|---|---|---|---|"]  # fmt: skip
        for key, value, origin, why in self.constraints.lines():
            out.append(f"| `{key}` | {value} | {origin} | {why} |")
        out += ["", "</details>", ""]
        return "\n".join(out)
