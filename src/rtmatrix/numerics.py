"""What a cell actually computed: the devices it ran on and its **effective numerics**, as each
runtime's own home reports them (:class:`rtmatrix.adapters.capabilities.StackReporting`).

Runtimes choose precisions by host: OpenVINO's CPU plugin computes an f32 model in bf16 where the
CPU has AVX512_BF16 or AMX, llama.cpp keeps its KV cache in f16 under f32 weights, OpenVINO
GenAI's CPU default KV cache is u8. A verdict that ignores this judges bf16 arithmetic with an
f32 tolerance on one host and passes on another. So each fact here carries the runtime's own
words, where it was read, and whether it is a default the runtime chose (for this host) rather
than a value the row asked for; :func:`judged_as` turns the facts into the dtype whose tolerance
applies, with the sentence that says so.

Ground level: nothing here imports a runtime; the types travel in the worker's result
(:class:`rtmatrix.protocol.WorkerResult` ``stack``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from rtmatrix.doc import Doc

#: effective precisions, most precise first; a cell is judged at the lowest one that ran
PRECISION_ORDER = ("f32", "f16", "bf16", "u8", "i8", "u4", "i4")
#: a runtime's own words for a precision -> rtmatrix's name
_ALIASES = {
    "f32": "f32", "fp32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "fp16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "u8": "u8", "uint8": "u8", "i8": "i8", "int8": "i8", "q8_0": "i8",
    "u4": "u4", "i4": "i4", "q4_0": "i4",
    # OpenVINO's element types as its properties print them (<Type: 'uint8_t'>)
    "uint8_t": "u8", "int8_t": "i8", "uint4_t": "u4", "int4_t": "i4",
}  # fmt: skip
#: the requested dtypes a downgrade is judged for (a quantized file already has its tolerance)
FLOAT_DTYPES = ("f32", "f16")
#: rtmatrix's own dtypes whose weights are stored quantized
OWN_QUANTIZED = frozenset({"q8_0", "q4_0", "int8", "int8w", "int4w", "as-shipped"})


class QuantizedDtypes(AbstractSet[str]):
    """The requested dtypes whose weights are stored quantized (a home's kernel-level fallback
    test): rtmatrix's own (:data:`OWN_QUANTIZED`) and every converter's own (``genai-int4``,
    ``ov-int8``, ``mnn-q4``: :mod:`rtmatrix.converters.dtypes`), the latter read on first use,
    so that importing this ground module imports no converter home."""

    def __contains__(self, dtype: object) -> bool:
        return dtype in OWN_QUANTIZED or dtype in _every_quantized()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(_every_quantized()))

    def __len__(self) -> int:
        return len(_every_quantized())


@cache
def _every_quantized() -> frozenset[str]:
    from rtmatrix.converters.dtypes import names

    return OWN_QUANTIZED | frozenset(names())


QUANTIZED: AbstractSet[str] = QuantizedDtypes()
#: the KV cache's precision -> the tolerance it implies for a float model's logits
_KV_JUDGED_AS = {"f16": "f16", "bf16": "bf16", "u8": "kv-q8", "i8": "kv-q8", "u4": "kv-q4",
                 "i4": "kv-q4"}  # fmt: skip


def precision(word: object) -> str | None:
    """rtmatrix's name for a runtime's precision word (``bfloat16`` and OpenVINO's
    ``<Type: 'bfloat16'>`` -> ``bf16``, ``float16`` -> ``f16``, ``q8_0`` -> ``i8``), else None."""
    for token in re.findall(r"[a-z0-9_]+", str(word).lower()):
        if token in _ALIASES:
            return _ALIASES[token]
    return None


@dataclass(frozen=True)
class Fact(Doc):
    """One numerics fact: the value (a precision, or on/off), the runtime's own words, where
    it was read, whether it is the runtime's default (the row did not ask for it) and whether
    that default depends on the host (OpenVINO's bf16 on an AVX512_BF16 CPU, llama.cpp's AMX
    repack): the facts a report calls "what this host changed"."""

    _what: ClassVar[str] = "numerics fact"

    value: str
    said: str
    source: str
    default: bool = False
    host_dependent: bool = False


@dataclass(frozen=True)
class Numerics(Doc):
    """The effective numerics of one cell and the devices its work ran on."""

    _what: ClassVar[str] = "numerics"
    _nested: ClassVar[dict[str, type[Doc]]] = {
        "matmul": Fact,
        "attention": Fact,
        "kv_cache": Fact,
        "weight_layout": Fact,
        "activation_quantization": Fact,
    }

    #: device kinds the work ran on: ``cpu``, ``gpu:<name>``, ...
    devices: list[str] = field(default_factory=list)
    #: compute precision of the matmuls
    matmul: Fact | None = None
    #: attention path and its precision (flash attention on/off, SDPA, ...)
    attention: Fact | None = None
    kv_cache: Fact | None = None
    #: weight layout or repacking (llama.cpp's CPU_REPACK / AMX buffers, ...)
    weight_layout: Fact | None = None
    #: activations quantized at run time (OpenVINO's dynamic quantization, ...)
    activation_quantization: Fact | None = None
    #: the row options that force the requested precision (the numerics control run)
    control: dict[str, Any] = field(default_factory=dict)
    #: in the runtime's words, what the control options turn off
    control_explains: str = ""
    #: why a fact could not be read (the rest stands)
    unavailable: str | None = None

    def facts(self) -> dict[str, Fact]:
        return {k: v for k in self._nested if isinstance(v := getattr(self, k), Fact)}

    def host_changed(self) -> list[str]:
        """The facts the runtime chose by default here (they depend on the host), in words."""
        return [f"{k}: {f.said}" for k, f in self.facts().items() if f.host_dependent]


@dataclass(frozen=True)
class Judged:
    """The dtype a cell's outputs are judged as, and why when it is not the requested one."""

    requested: str
    judged_as: str
    reason: str | None = None

    @property
    def downgraded(self) -> bool:
        return self.judged_as != self.requested

    def to_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "judged_as": self.judged_as, "reason": self.reason,
                "downgraded": self.downgraded}  # fmt: skip


#: what a cell may be judged as, strictest first (their tolerances: rtmatrix.metrics.parity)
JUDGED_ORDER = ("f32", "f16", "bf16", "kv-q8", "kv-q4")
_MATMUL_JUDGED_AS = {"f32": "f32", "f16": "f16", "bf16": "bf16"}


def judged_as(dtype: str, numerics: Numerics | None, runtime: str = "the runtime") -> Judged:
    """The dtype whose tolerance applies to a cell that asked for ``dtype`` and computed with
    ``numerics``: a float dtype computed at a lower precision (bf16/f16 matmuls, attention's
    products in f16, a reduced KV cache) is judged as what ran, never silently as what was
    asked. An attention fact counts where its value names a precision (``flash (f16)``)."""
    if numerics is None or dtype not in FLOAT_DTYPES:
        return Judged(dtype, dtype)
    worst, why = dtype, []
    for name, table, what in (("matmul", _MATMUL_JUDGED_AS, "computed the matmuls in"),
                              ("attention", _MATMUL_JUDGED_AS, "computed attention in"),
                              ("kv_cache", _KV_JUDGED_AS, "kept the KV cache in")):  # fmt: skip
        fact = getattr(numerics, name)
        p = precision(fact.value) if isinstance(fact, Fact) else None
        judged = table.get(p) if p else None
        if judged is None or JUDGED_ORDER.index(judged) <= JUDGED_ORDER.index(dtype):
            continue
        who = ("its default on this host" if fact.host_dependent
               else "its default" if fact.default else "as the row asked")  # fmt: skip
        why.append(f"{runtime} {what} {p} ({fact.said}; {who})")
        if JUDGED_ORDER.index(judged) > JUDGED_ORDER.index(worst):
            worst = judged
    if worst == dtype:
        return Judged(dtype, dtype)
    return Judged(dtype, worst, "; ".join(why))


@dataclass(frozen=True)
class StackReport(Doc):
    """The layers a runtime's home reports for one cell (the format and runtime layers are
    read by the parent): the **backend** it handed the work to, the **kernels** that computed
    the matmuls (a kernel-level fallback marked ``fallback`` with ``fallback_reason``), and the
    effective **numerics** — each in the runtime's words, or ``unavailable`` with the reason."""

    _what: ClassVar[str] = "stack report"
    _nested: ClassVar[dict[str, type[Doc]]] = {"numerics": Numerics}

    backend: dict[str, Any] = field(default_factory=dict)
    kernels: dict[str, Any] = field(default_factory=dict)
    numerics: Numerics = field(default_factory=Numerics)


def unavailable(why: str) -> dict[str, Any]:
    """A layer that could not be read, saying why."""
    return {"unavailable": why}
