from __future__ import annotations

import sys
from typing import Any

import pytest

from rtmatrix.adapters import base
from rtmatrix.adapters.base import Adapter, AdapterError, load_adapter_class, resolve_adapter


def test_builtin_names_resolve_to_module_class_strings() -> None:
    assert resolve_adapter("llama_cpp") == "rtmatrix.runtimes.llama_cpp.adapter:LlamaCppAdapter"
    assert resolve_adapter("a.b:C") == "a.b:C"


def test_unknown_name_suggests_and_lists() -> None:
    with pytest.raises(AdapterError, match=r"did you mean 'llama_cpp'\? valid: .*llama_cpp"):
        resolve_adapter("llamacpp")


def test_entry_point_plugins_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_entry_points", lambda: {"mine": "pkg:Mine", "llama_cpp": "x:Y"})
    assert resolve_adapter("mine") == "pkg:Mine"
    assert resolve_adapter("llama_cpp").startswith("rtmatrix.")  # built-ins are not shadowed


def test_loading_the_adapter_class_does_not_import_the_runtime() -> None:
    had = "llama_cpp" in sys.modules
    cls = load_adapter_class("llama_cpp")
    assert cls.container == "gguf" and cls.extra == "llama-cpp"
    assert ("llama_cpp" in sys.modules) == had


def test_missing_method_fails_at_instantiation() -> None:
    class Half(Adapter):
        name = "half"

        def import_runtime(self) -> str:
            return "0"

    with pytest.raises(TypeError, match="abstract"):
        Half()  # type: ignore[abstract]


@pytest.mark.parametrize(
    ("target", "pattern"),
    [
        ("no_such_module_xyz:Cls", "cannot be imported"),
        ("rtmatrix.outcome:Status", "is not an rtmatrix Adapter subclass"),
        ("rtmatrix.outcome:Nope", "is not an rtmatrix Adapter subclass"),
    ],
)
def test_bad_targets(target: str, pattern: str) -> None:
    with pytest.raises(AdapterError, match=pattern):
        load_adapter_class(target)


def test_all_abstract_methods_are_declared() -> None:
    expected = {
        "import_runtime",
        "load",
        "vocab_size",
        "special_ids",
        "reset",
        "prefill",
        "decode",
        "last_logits",
        "counters",
        "evidence",
        "close",
    }
    methods: Any = Adapter.__abstractmethods__
    assert set(methods) == expected
