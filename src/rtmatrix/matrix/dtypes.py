"""Which dtypes a matrix may give, and which a row may take for a fixture.

rtmatrix's own exporters write the seeded fixture models in their dtypes
(:func:`rtmatrix.fixtures.all_dtypes`); a checkpoint that reaches the runtimes through their
vendors' converters is written by the row's converter, whose quantized dtypes are its own
(``genai-int4``, ``ov-int8``, ``mnn-q4``: :mod:`rtmatrix.converters.dtypes`). Two placements are
problems of the matrix, found at load with the dtype the row does take:

- a converter's own dtype on a row another converter (or none) feeds, or on a model rtmatrix's
  own exporters write;
- rtmatrix's own weight-only dtypes (``int8w``/``int4w``, its ONNX writer's) on a checkpoint the
  row's converter writes, where that converter does not take them.

Any other dtype a row's format or converter lacks stays a skipped cell
(:func:`rtmatrix.fixtures.unsupported`), so one fixture table may list dtypes of several formats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rtmatrix import converters
from rtmatrix.converters import dtypes as vendor
from rtmatrix.fixtures import all_dtypes
from rtmatrix.fixtures.onnx_export import WEIGHT_ONLY
from rtmatrix.selection.constraints import choices

#: rtmatrix's own weight-only dtype at a bit width (what ``mnn-q8`` on a seeded model means)
OWN_WITH_BITS = {bits: name for name, bits in WEIGHT_ONLY.items()}


@dataclass(frozen=True)
class Row:
    """A ``[[runtimes]]`` row as the check needs it: its name and the converter that feeds it."""

    name: str
    converter: str | None


def valid() -> tuple[str, ...]:
    """Every dtype a fixture may give: rtmatrix's own exporters' and every converter's own."""
    return tuple(dict.fromkeys([*all_dtypes(), *vendor.names()]))


def unknown(dtypes: Sequence[str]) -> str | None:
    """What is wrong with a fixture's ``dtypes`` that no exporter or converter has, else None."""
    names = valid()
    bad = [d for d in dtypes if d not in names]
    if not bad:
        return None
    return f"unknown dtype {bad[0]!r}" + choices(bad[0], names) + (
        f" (unknown too: {', '.join(repr(d) for d in bad[1:])})" if bad[1:] else "")  # fmt: skip


def problem(
    dtype: str, model: str, converted: bool, row: Row, feeds: Sequence[str] = ()
) -> str | None:
    """Why ``row`` cannot take ``dtype`` of ``model`` (``converted``: it reaches the runtimes
    through their converters), else None. ``feeds``: the matrix's rows that ``dtype``'s
    converter feeds, for the fix."""
    owner = vendor.owner(dtype)
    if owner is not None:
        return _misplaced_vendor(dtype, owner, model, converted, row, feeds)
    if dtype in WEIGHT_ONLY and converted and row.converter is not None:
        return _own_on_converted(dtype, model, row)
    return None


def _what(dtype: str, owner: str) -> str:
    """``'genai-int4' is converter ort_genai's own quantization (onnxruntime_genai.models.builder
    --precision int4)``"""
    found = vendor.declared()[dtype].dtype
    return (f"{dtype!r} is converter {owner}'s own quantization "
            f"({converters.home(owner).TOOL} {found.option})")  # fmt: skip


def _misplaced_vendor(
    dtype: str, owner: str, model: str, converted: bool, row: Row, feeds: Sequence[str]
) -> str | None:
    bits = vendor.bits(dtype)
    if not converted:
        why = (f"{_what(dtype, owner)} of a Hugging Face checkpoint; model {model!r} is written "
               "by rtmatrix's own exporters")  # fmt: skip
        return why + choices(dtype, all_dtypes(), OWN_WITH_BITS.get(bits or 0))
    if row.converter == owner:
        return None
    fix = f"; or give this fixture runtimes = {list(feeds)!r}" if feeds else ""
    if row.converter is None:
        return f"{_what(dtype, owner)}; row {row.name!r} takes no converter's file{fix}"
    takes = tuple(converters.home(row.converter).DTYPES)
    why = f"{_what(dtype, owner)}; row {row.name!r} is fed by converter {row.converter}"
    return why + choices(dtype, takes, vendor.with_bits(row.converter, bits)) + fix


def _own_on_converted(dtype: str, model: str, row: Row) -> str | None:
    assert row.converter is not None  # checked by problem()
    takes = tuple(converters.home(row.converter).DTYPES)
    if dtype in takes:  # a converter that still takes rtmatrix's generic name
        return None
    why = (f"{dtype!r} is rtmatrix's own ONNX writer's weight-only int{WEIGHT_ONLY[dtype]} (for "
           f"its seeded models); model {model!r} reaches row {row.name!r} through converter "
           f"{row.converter}, whose quantization has a name of its own")  # fmt: skip
    return why + choices(dtype, takes, vendor.with_bits(row.converter, WEIGHT_ONLY[dtype]))
