"""What differs between two cells' settings and stacks, as named changes (``SettingChange``):
shared by :mod:`rtmatrix.results.diff` (a changed cell's stack lines) and
:mod:`rtmatrix.results.explain` (a flagged cell's explanations), so neither imports the other."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rtmatrix.results.records import CellRecord, evidence_of

#: a value longer than this is cut (with an ellipsis) where a change is shown
MAX_VALUE_CHARS = 160
_SPACE = re.compile(r"\s+")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> dotted keys; lists and scalars are leaves, empty mappings vanish."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flatten(value, f"{name}.")
        else:
            out[name] = value
    return out


@dataclass(frozen=True)
class SettingChange:
    name: str
    a: str | None
    b: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "a": self.a, "b": self.b}


#: the stack's layers, most likely explanation of a change first
STACK_ORDER = ("kernels", "numerics", "backend", "runtime", "format")


def stack_differences(rec_a: CellRecord | None, rec_b: CellRecord | None) -> list[SettingChange]:
    """What differs between the two sides' ``evidence.stack``, layer by layer (kernels first)."""
    out: list[SettingChange] = []
    sa = evidence_of(rec_a).get("stack") or {}
    sb = evidence_of(rec_b).get("stack") or {}
    for layer in STACK_ORDER:
        fa, fb = flatten({layer: sa.get(layer) or {}}), flatten({layer: sb.get(layer) or {}})
        for name in sorted(set(fa) | set(fb)):
            if fa.get(name) != fb.get(name):
                out.append(
                    SettingChange(
                        name,
                        None if fa.get(name) is None else _short(fa[name]),
                        None if fb.get(name) is None else _short(fb[name]),
                    )
                )
    return out
