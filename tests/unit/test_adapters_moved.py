"""The adapters' old import paths (``rtmatrix.adapters.<name>``, before they moved to
``rtmatrix.runtimes.<name>.adapter``): each warns naming the new path and gives the same objects;
nothing in rtmatrix imports them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

import rtmatrix
from rtmatrix.adapters._moved import MOVED
from rtmatrix.adapters.base import BUILTIN_ADAPTERS

CLASSES = {
    "rtmatrix.adapters.llama_cpp": "LlamaCppAdapter",
    "rtmatrix.adapters.onnxruntime": "OrtAdapter",
    "rtmatrix.adapters.onnxruntime_genai": "OrtGenaiAdapter",
    "rtmatrix.adapters.onnxruntime_openvino": "OrtOpenVinoAdapter",
    "rtmatrix.adapters.tvm": "TvmAdapter",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_with_the_new_one_and_gives_the_same_class(
    old: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    new = importlib.import_module(MOVED[old])
    with pytest.warns(DeprecationWarning, match=MOVED[old].replace(".", r"\.")):
        mod = importlib.import_module(old)
    cls = CLASSES[old]
    assert getattr(mod, cls) is getattr(new, cls)
    assert f"{MOVED[old]}:{cls}" in BUILTIN_ADAPTERS.values()


def test_a_subclassing_plugin_imports_the_old_path_and_the_warning_points_at_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "rtmatrix.adapters.llama_cpp", raising=False)
    with pytest.warns(DeprecationWarning, match="rtmatrix.runtimes.llama_cpp.adapter") as rec:
        from rtmatrix.adapters.llama_cpp import LlamaCppAdapter
    from rtmatrix.runtimes.llama_cpp.adapter import LlamaCppAdapter as New

    class Plugin(LlamaCppAdapter):
        name = "plugin"

    assert issubclass(Plugin, New)
    assert rec[0].filename == __file__
    old = importlib.import_module("rtmatrix.adapters.llama_cpp")
    assert old._new is importlib.import_module("rtmatrix.runtimes.llama_cpp.adapter")
    assert old.flash_attn_mode is sys.modules["rtmatrix.runtimes.llama_cpp.adapter"].flash_attn_mode


def test_nothing_in_rtmatrix_imports_an_old_path() -> None:
    root = Path(rtmatrix.__file__).parent
    shims = {root / "adapters" / f"{old.rsplit('.', 1)[1]}.py" for old in MOVED}
    shims.add(root / "adapters" / "_moved.py")
    for path in root.rglob("*.py"):
        if path in shims:
            continue
        text = path.read_text("utf-8")
        found = [old for old in MOVED if old in text]
        assert not found, f"{path} names {found}"
