"""Every converter's own quantized dtypes, read from the homes' declarations: one list, each
name once, each owned by the converter that declares it, each the home's ``DTYPES`` maps to
the option it passes."""

from __future__ import annotations

from types import ModuleType

import pytest

from rtmatrix.converters import HOMES, dtypes, home
from rtmatrix.converters.base import VendorDtype

#: the issue's six: the converter and the option value each passes
EXPECTED = {
    "genai-int8": ("ort_genai", "--precision", "int8", 8),
    "genai-int4": ("ort_genai", "--precision", "int4", 4),
    "ov-int8": ("optimum_intel", "--weight-format", "int8", 8),
    "ov-int4": ("optimum_intel", "--weight-format", "int4", 4),
    "mnn-q8": ("mnn_llmexport", "--quant_bit", "8", 8),
    "mnn-q4": ("mnn_llmexport", "--quant_bit", "4", 4),
}


def test_each_vendor_dtype_is_declared_by_its_converter_with_its_own_option() -> None:
    found = dtypes.declared()
    for name, (converter, flag, value, bits) in EXPECTED.items():
        d = found[name]
        assert (d.converter, d.dtype.flag, d.dtype.value, d.dtype.bits) == (converter, flag,
                                                                           value, bits)  # fmt: skip
        assert home(converter).DTYPES[name] == value  # what prepare passes the converter
        assert dtypes.owner(name) == converter and dtypes.bits(name) == bits
    assert set(EXPECTED) <= set(dtypes.names())


def test_every_declaration_says_what_the_vendor_default_does() -> None:
    for d in dtypes.declared().values():
        assert d.dtype.doc and len(d.dtype.doc) <= 200 and "\n" not in d.dtype.doc, d
        assert d.dtype.option == f"{d.dtype.flag} {d.dtype.value}"
        assert str(d.dtype.bits) in d.dtype.doc, d  # the doc names the weights' width


def test_the_converters_no_longer_take_rtmatrixs_generic_weight_only_names() -> None:
    for converter in ("ort_genai", "optimum_intel", "mnn_llmexport"):
        assert not {"int8w", "int4w"} & set(home(converter).DTYPES), converter


def test_the_float_dtypes_are_not_vendor_dtypes() -> None:
    assert dtypes.owner("f32") is None and dtypes.owner("q8_0") is None
    assert dtypes.owner(None) is None and dtypes.bits("int4w") is None
    assert home("llama_cpp").VENDOR_DTYPES == ()  # q8_0/q4_0: GGUF's own type names


def test_a_converter_names_its_dtype_at_a_bit_width() -> None:
    assert dtypes.with_bits("mnn_llmexport", 8) == "mnn-q8"
    assert dtypes.with_bits("optimum_intel", 4) == "ov-int4"
    assert dtypes.with_bits("llama_cpp", 8) is None
    assert dtypes.with_bits(None, 8) is None and dtypes.with_bits("ort_genai", None) is None
    assert dtypes.of_home("no_such_converter") == ()


def test_a_name_two_homes_declare_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    twin = ModuleType("twin")
    twin.__dict__["VENDOR_DTYPES"] = (VendorDtype("mnn-q4", "--bits", "4", 4, "4-bit"),)
    real_home = home

    def fake_home(name: str) -> ModuleType:
        return twin if name == "twin" else real_home(name)

    monkeypatch.setattr(dtypes, "HOMES", HOMES | {"twin": "twin"})
    monkeypatch.setattr(dtypes, "home", fake_home)
    dtypes.declared.cache_clear()
    try:
        with pytest.raises(ValueError, match="'mnn-q4' is declared by converters mnn_llmexport "
                           "and twin"):  # fmt: skip
            dtypes.declared()
    finally:
        dtypes.declared.cache_clear()
