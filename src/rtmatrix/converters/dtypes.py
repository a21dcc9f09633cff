"""Every converter's own quantized dtypes (``genai-int4``, ``ov-int8``, ``mnn-q4``, ...), read from
the homes' declarations (``VENDOR_DTYPES``, :class:`rtmatrix.converters.base.VendorDtype`).

This is the one list the rest derives from: the matrix loader (which rows may take which dtype),
parity's logit tolerances, the numerics' quantized set and the utilization's integer dtypes.
Importing a home imports no converter (each runs its tool in a child), so reading the list is
cheap; it is read once per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from rtmatrix.converters import HOMES, home
from rtmatrix.converters.base import VendorDtype


@dataclass(frozen=True)
class Declared:
    """A converter's quantized dtype and the converter (its home's name) that declares it."""

    converter: str
    dtype: VendorDtype


@cache
def declared() -> dict[str, Declared]:
    """dtype name -> its declaration, over every converter home; a name two homes declare is a
    ``ValueError`` naming both."""
    out: dict[str, Declared] = {}
    for name in HOMES:
        for dtype in of_home(name):
            if dtype.name in out:
                first = out[dtype.name].converter
                msg = f"dtype {dtype.name!r} is declared by converters {first} and {name}"
                raise ValueError(msg)
            out[dtype.name] = Declared(name, dtype)
    return out


def of_home(converter: str) -> tuple[VendorDtype, ...]:
    """The quantized dtypes converter ``converter``'s home declares (none for a home that
    declares no ``VENDOR_DTYPES``, an unknown one, or one that cannot be imported here)."""
    try:
        mod = home(converter)
    except (KeyError, ImportError):
        return ()
    found = getattr(mod, "VENDOR_DTYPES", ())
    return tuple(d for d in found if isinstance(d, VendorDtype))


def names() -> tuple[str, ...]:
    """Every converter's quantized dtype, in the homes' order."""
    return tuple(declared())


def owner(dtype: str | None) -> str | None:
    """The converter whose own quantization ``dtype`` is, else None."""
    found = declared().get(dtype or "")
    return found.converter if found else None


def bits(dtype: str | None) -> int | None:
    """The weights' bits of a converter's quantized dtype, else None."""
    found = declared().get(dtype or "")
    return found.dtype.bits if found else None


def with_bits(converter: str | None, n: int | None) -> str | None:
    """Converter ``converter``'s own quantized dtype at ``n`` bits (what ``int8w`` on its row
    would have meant), else None."""
    if converter is None or n is None:
        return None
    return next((d.name for d in of_home(converter) if d.bits == n), None)
