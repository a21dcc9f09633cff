"""Declared, typed row options: each runtime's home declares the ``[[runtimes]] options`` it reads
once (name, type, default, the runtime's own name and default, one line of doc), in a module that
imports no runtime (``runtimes/<name>/options.py``: ``OPTIONS``), so the matrix loader refuses a
misspelt or mistyped option before anything runs ("did you mean") and ``rtmatrix runtimes`` lists
them. Options every row takes (the harness's own: the reference tool, the real model's quality
pass) are :data:`HARNESS`.

Ground level: nothing here imports a runtime or an adapter.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: JSON/TOML value kinds an option may take, by name (bool is not an int here)
_KINDS: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "list": (list,),
    "table": (dict,),
}



def value_text(value: Any) -> str:
    """An option's value as the matrix writes it: ``true``/``false`` for a bool."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def options_text(options: Mapping[str, Any], sep: str = ", ") -> str:
    """Options as the matrix writes their values: ``flash_attn=off, use_mmap=false``."""
    return sep.join(f"{k}={value_text(v)}" for k, v in options.items())


@dataclass(frozen=True)
class Option:
    """One row option as its home declares it."""

    name: str
    #: accepted kinds (``bool``, ``int``, ``float``, ``str``, ``list``, ``table``)
    kinds: tuple[str, ...]
    #: the row's default (None: the runtime's own, not set by rtmatrix)
    default: Any
    doc: str
    #: allowed values (case-insensitive for strings); empty: any value of the kinds
    choices: tuple[Any, ...] = ()
    #: the runtime's own name for it (a property, a flag) and its own default, in words
    runtime_name: str = ""
    runtime_default: str = ""

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not valid for this option, or None."""
        accepted = tuple(t for k in self.kinds for t in _KINDS[k])
        if isinstance(value, bool) and "bool" not in self.kinds:
            return f"expected {' or '.join(self.kinds)}, got bool {value!r}"
        if not isinstance(value, accepted):
            return f"expected {' or '.join(self.kinds)}, got {type(value).__name__} {value!r}"
        if self.choices:
            norm = value.lower() if isinstance(value, str) else value
            allowed = [c.lower() if isinstance(c, str) else c for c in self.choices]
            if norm not in allowed:
                valid = ", ".join(repr(c) for c in self.choices)
                return f"{value!r} is not one of {valid}"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kinds": list(self.kinds), "default": self.default,
                "doc": self.doc, "choices": list(self.choices), "runtime_name": self.runtime_name,
                "runtime_default": self.runtime_default}  # fmt: skip


@dataclass(frozen=True)
class Options:
    """The options one row declares."""

    row: str
    options: tuple[Option, ...] = ()
    #: a row may take options it does not know (a pass-through table of the runtime's own)
    open_keys: tuple[str, ...] = field(default_factory=tuple)

    def names(self) -> list[str]:
        return [o.name for o in (*self.options, *HARNESS)] + list(SCENARIO_OPTIONS)

    def get(self, name: str) -> Option | None:
        return next((o for o in (*self.options, *HARNESS) if o.name == name), None)

    def problems(self, raw: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``(key, problem)`` for every option in ``raw`` this row does not take or that has a
        wrong value; an empty list when all is well."""
        out = []
        for key, value in raw.items():
            opt = self.get(key)
            if opt is None and key in SCENARIO_OPTIONS:
                continue  # a scenario's own option, set for the whole row: its scenario reads it
            if opt is None:
                near = difflib.get_close_matches(key, self.names(), n=1, cutoff=0.6)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                valid = ", ".join(sorted(self.names()))
                out.append((key, f"unknown option for row {self.row!r}{hint} valid: {valid}"))
                continue
            why = opt.problem(value)
            if why:
                out.append((key, why))
        return out


#: options every row takes: read by the runner, not by the runtime
HARNESS: tuple[Option, ...] = (
    Option("reference_tool", ("bool",), True,
           "run the runtime's own benchmark tool after the cell (where it has one)"),
    Option("quality", ("bool",), True,
           "a real model's teacher-forced quality pass (KLD, same-top) after the timed run"),
    Option("quality_text", ("str",), None, "the real model's quality text (a packaged name)"),
    Option("quality_tokens", ("int",), None, "positions of the quality text to score"),
    Option("text_prompt", ("bool",), True,
           "prompt a real model with its text (false: the seeded token ids)"),
)  # fmt: skip


#: options the lifecycle scenarios read (a fixture's options, or a row's for all its fixtures);
#: each scenario checks its own values when it runs
SCENARIO_OPTIONS = (
    "cancel_after_tokens", "cancel_cycles", "cancel_max_tokens_after", "cancel_modes",
    "cancel_prefill_attempts", "constrained_draws", "constrained_tokens", "draws",
    "invariance_n_probs", "invariance_requests", "invariance_tie_margin", "leak_tolerance_mb",
    "min_p", "repeat_penalty", "sample_alpha", "sample_processes", "sample_tokens", "seed",
    "serve_concurrency", "serve_interrupt_probe", "serve_interrupt_requests", "serve_invariance",
    "serve_request_timeout_s", "serve_rounds", "serve_slow_delay_s", "serve_slow_tokens",
    "serve_start_timeout_s", "serve_tokens", "server_timings", "stream_tokens", "temperature",
    "top_k", "top_p", "unsatisfiable_tokens",
)  # fmt: skip


def options_module(adapter_target: str) -> str | None:
    """``runtimes/<name>/options.py`` beside a built-in adapter (``module:Class``), else None."""
    module = adapter_target.split(":", 1)[0]
    if not module.startswith("rtmatrix.runtimes."):
        return None
    parts = module.split(".")
    return ".".join(parts[:3]) + ".options"


def declared(adapter_target: str) -> Options | None:
    """The options a built-in row declares (None: a third-party adapter, not checked here)."""
    name = options_module(adapter_target)
    if name is None:
        return None
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError:
        return None
    found = getattr(module, "OPTIONS", None)
    if isinstance(found, dict):  # a home with several rows (a module of two adapters)
        cls = adapter_target.split(":", 1)[-1]
        found = found.get(cls)
    return found if isinstance(found, Options) else None
