"""The TVM exporter: artifact layout, manifest, weight layout, cache behaviour.

The build compiles in a child process, so these tests never import TVM themselves; they need
apache-tvm installed (``pip install 'rtmatrix[mlc]'``) and skip without it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtmatrix.fixtures import build_fixture, get_format, tvm_layout
from rtmatrix.fixtures import tvm_export as te
from rtmatrix.fixtures import tvm_model as tm
from rtmatrix.fixtures.cache import CachedArtifact
from rtmatrix.fixtures.model import make_weights
from rtmatrix.fixtures.spec import ExporterUnavailable, get_spec
from rtmatrix.fixtures.variants import FIXED_SHAPE_PROMPT_TOKENS
from rtmatrix.runtimes.tvm import adapter as tvm_adapter

needs_tvm = pytest.mark.skipif(find_spec("tvm") is None, reason="apache-tvm is not installed")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_tensor_cache(folder: Path) -> dict[str, np.ndarray[Any, Any]]:
    index = json.loads((folder / te.TENSOR_CACHE).read_text("utf-8"))
    out = {}
    for shard in index["records"]:
        data = (folder / shard["dataPath"]).read_bytes()
        assert len(data) == shard["nbytes"]
        for rec in shard["records"]:
            raw = data[rec["byteOffset"] : rec["byteOffset"] + rec["nbytes"]]
            out[rec["name"]] = np.frombuffer(raw, dtype=np.float32).reshape(rec["shape"])
    return out


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory: pytest.TempPathFactory) -> CachedArtifact:
    if find_spec("tvm") is None:
        pytest.skip("apache-tvm is not installed")
    return build_fixture(get_spec("tiny"), "tvm", "f32", root=tmp_path_factory.mktemp("tvm"))


def test_registry_exposes_the_tvm_format() -> None:
    fmt = get_format("tvm")
    assert fmt is not None and fmt.filename == "model.so" and fmt.dtypes == ("f32",)
    assert "unknown-arch" in fmt.format_variants


def test_export_key_holds_tvm_version_and_host_cpu() -> None:
    spec = get_spec("tiny")
    key = te.export_key(spec, "f32")
    assert key["format"] == "tvm" and key["spec"] == spec.content()
    assert key["apache_tvm"] == te.tvm_version()
    assert key["host"]["machine"] and len(key["host"]["cpu_flags_sha256"]) == 64
    assert key["pipeline"] == tm.PIPELINE
    assert te.export_key(spec, "f32", "unknown-arch") != key


def test_the_parents_side_imports_no_tvm() -> None:
    # the nn module (tvm_irmodule) and the schedule (tvm_schedule) import TVM at module level:
    # only compile_module, in the compiling process, may import them
    code = (
        "import sys\n"
        "from rtmatrix.fixtures import tvm_export, tvm_model\n"
        "from rtmatrix.fixtures.model import make_weights\n"
        "from rtmatrix.fixtures.spec import get_spec\n"
        "spec = get_spec('tiny')\n"
        "tvm_export.export_key(spec, 'f32')\n"
        "tvm_model.tvm_params(tvm_model.model_config(spec), make_weights(spec))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tvm'"
        " or m.startswith(('rtmatrix.fixtures.tvm_irmodule', 'rtmatrix.fixtures.tvm_schedule'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_only_f32_and_stored_weights_are_the_weights() -> None:
    w = make_weights(get_spec("tiny"))
    assert te.stored_weights(w, "f32") is w
    with pytest.raises(ValueError, match="valid: f32"):
        te.stored_weights(w, "q8_0")


def test_packed_layout_is_an_exact_rearrangement() -> None:
    spec = get_spec("tiny")
    cfg = tm.model_config(spec)
    w = make_weights(spec)
    params = tm.tvm_params(cfg, w)
    assert list(params) == tvm_layout.param_names(cfg)
    qkv = params["blk.1.attn_qkv.weight"]  # (out / b, in, b)
    nb, n_in, b = qkv.shape
    unpacked = qkv.transpose(0, 2, 1).reshape(nb * b, n_in)
    q_rows = w["blk.1.attn_q.weight"].shape[0]
    np.testing.assert_array_equal(unpacked[:q_rows], w["blk.1.attn_q.weight"])
    down = params["blk.0.ffn_down.weight"]
    np.testing.assert_array_equal(
        down.transpose(0, 2, 1).reshape(-1, down.shape[1]), w["blk.0.ffn_down.weight"]
    )
    cos, sin = tm.rope_tables(cfg)
    assert cos.shape == (spec.n_ctx_train, spec.head_dim // 2)
    assert cos[0, 0] == 1.0 and sin[0, 0] == 0.0


def test_a_missing_weight_leaves_its_fused_tensor_out() -> None:
    spec = get_spec("tiny")
    w = {k: v for k, v in make_weights(spec).items() if k != "blk.0.attn_k.weight"}
    params = tm.tvm_params(tm.model_config(spec), w)
    assert "blk.0.attn_qkv.weight" not in params and "blk.1.attn_qkv.weight" in params


def test_without_apache_tvm_the_build_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(te, "tvm_version", lambda: None)
    spec = get_spec("tiny")
    with pytest.raises(ExporterUnavailable, match=r"rtmatrix\[mlc\]"):
        te.write_variant(spec, "f32", tmp_path / "model.so", make_weights(spec), None)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, ("aot", True, True)),
        ({"mode": "jit"}, ("jit", False, True)),
        ({"mode": "aot", "runtime_only": False, "verify": False}, ("aot", False, False)),
        ({"cancel_cycles": 3, "leak_tolerance_mb": 8.0}, ("aot", True, True)),
        ({"mode": "jit", "cancel_after_tokens": 2}, ("jit", False, True)),
    ],
)
def test_adapter_options(options: dict[str, Any], expected: tuple[str, bool, bool]) -> None:
    assert tvm_adapter._check_options(options) == expected


def test_unknown_options_are_ignored_and_listed() -> None:
    options = {"mode": "aot", "cancel_cycles": 3, "cancel_after_tokens": 2, "leak_tolerance_mb": 8}
    assert tvm_adapter._check_options(options) == ("aot", True, True)
    assert tvm_adapter.ignored_options(options) == [
        "cancel_after_tokens",
        "cancel_cycles",
        "leak_tolerance_mb",
    ]
    assert tvm_adapter.ignored_options({"mode": "jit", "allocator": "pooled"}) == []
    # the values of the keys TVM uses are still checked, beside ignored ones
    with pytest.raises(tvm_adapter.TvmOptionError, match="valid: naive, pooled"):
        tvm_adapter._check_options({"cancel_cycles": 3, "allocator": "arena"})


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"mode": "interpreted"}, "valid: aot, jit"),
        ({"mode": "jit", "runtime_only": True}, "needs TVM's compiler"),
        ({"allocator": "arena"}, "valid: naive, pooled"),
    ],
)
def test_adapter_rejects_bad_options(options: dict[str, Any], match: str) -> None:
    with pytest.raises(tvm_adapter.TvmOptionError, match=match):
        tvm_adapter._check_options(options)


def test_configure_decides_the_import_mode() -> None:
    adapter = tvm_adapter.TvmAdapter()
    adapter.configure({"mode": "jit"})
    assert adapter._options == {"mode": "jit"}


@needs_tvm
def test_artifact_files_and_manifest(tiny_artifact: CachedArtifact) -> None:
    folder = tiny_artifact.path.parent
    spec = get_spec("tiny")
    for name in ("model.so", te.TENSOR_CACHE, te.SPEC_FILE, te.MANIFEST_FILE, "manifest.json"):
        assert (folder / name).is_file(), name
    assert not (folder / "build-job.json").exists()
    m = json.loads((folder / te.MANIFEST_FILE).read_text("utf-8"))
    assert m["tvm"]["version"] == metadata.version("apache-tvm")
    assert m["tvm"]["commit"] and m["tvm"]["llvm_version_major"] >= 10
    target = m["target"]
    assert target["json"]["kind"] == "llvm" and target["json"]["mcpu"]
    assert target["mcpu"] in target["string"] and target["llvm_cpu_features"]
    assert target["vector_width_bits"] >= 128 and target["host_cpu_flags"]
    comp = m["compile"]
    assert comp["pipeline"] == tm.PIPELINE == "rtmatrix-cpu"
    assert comp["schedule_rules"][:3] == ["CpuMatmul", "CpuInjective", "CpuRowReduction"]
    assert comp["compile_s"] > 0 and comp["total_s"] >= comp["compile_s"]
    lib = m["library"]
    assert lib["sha256"] == _sha256(tiny_artifact.path) == tiny_artifact.manifest["sha256"]
    assert lib["size_bytes"] == tiny_artifact.path.stat().st_size
    for w in m["weights"]["files"]:
        assert _sha256(folder / w["file"]) == w["sha256"]
    assert m["weights"]["size_bytes"] == sum(w["size_bytes"] for w in m["weights"]["files"])
    assert m["fixture"]["spec_sha256"] == spec.content_hash()
    assert m["python"]["version"].count(".") == 2
    assert m["library"]["cc_version"] is None or "gcc" in m["library"]["cc_version"].lower()
    spec_doc = json.loads((folder / te.SPEC_FILE).read_text("utf-8"))
    assert spec_doc["param_names"] == tvm_layout.param_names(tm.model_config(spec))
    assert spec_doc["target"] == target["json"] and spec_doc["pipeline"] == comp["pipeline"]


@needs_tvm
def test_every_kernel_with_arithmetic_is_scheduled(tiny_artifact: CachedArtifact) -> None:
    m = json.loads((tiny_artifact.path.parent / te.MANIFEST_FILE).read_text("utf-8"))
    scheduled = m["compile"]["prim_funcs_scheduled"]
    assert any("linear" in f for f in scheduled) and any("attn_scores" in f for f in scheduled)
    # what no rule takes is a view change (a reshape/split the VM turns into a copy)
    for name in m["compile"]["prim_funcs_unscheduled"]:
        assert "reshape" in name or "split" in name, name


@needs_tvm
def test_weights_file_holds_the_packed_weights(tiny_artifact: CachedArtifact) -> None:
    spec = get_spec("tiny")
    stored = _read_tensor_cache(tiny_artifact.path.parent)
    expected = tm.tvm_params(tm.model_config(spec), make_weights(spec))
    assert list(stored) == list(expected)
    for name, arr in expected.items():
        np.testing.assert_array_equal(stored[name], arr)


@needs_tvm
def test_a_cached_artifact_is_not_compiled_again(
    tiny_artifact: CachedArtifact, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tiny_artifact.path.parent.parent
    mtime = tiny_artifact.path.stat().st_mtime_ns

    def no_compile(*_a: Any, **_k: Any) -> None:
        msg = "the compiler was started for a cached artifact"
        raise AssertionError(msg)

    monkeypatch.setattr(subprocess, "run", no_compile)
    t0 = time.perf_counter()
    again = build_fixture(get_spec("tiny"), "tvm", "f32", root=root)
    assert time.perf_counter() - t0 < 1.0
    assert not again.built and again.path == tiny_artifact.path
    assert again.path.stat().st_mtime_ns == mtime
    assert again.manifest["sha256"] == tiny_artifact.manifest["sha256"]


def test_shape_variants_in_the_registry() -> None:
    fmt = get_format("tvm")
    assert fmt is not None and "fixed-shape" in fmt.format_variants
    assert "data-dependent-shape" not in fmt.format_variants
    assert "symbolic shapes" in fmt.cannot_express["data-dependent-shape"]


@needs_tvm
def test_fixed_shape_compiles_prefill_for_one_length(tmp_path: Path) -> None:
    art = build_fixture(get_spec("tiny"), "tvm", "f32", "fixed-shape", root=tmp_path)
    spec_doc = json.loads((art.path.parent / te.SPEC_FILE).read_text("utf-8"))
    n = FIXED_SHAPE_PROMPT_TOKENS
    assert spec_doc["config"]["prefill_tokens"] == n  # what JIT mode compiles from, too
    assert spec_doc["functions"]["prefill"].startswith(f"(ids int32[{n}], ")
    assert spec_doc["functions"]["decode"].startswith("(ids int32[1], ")
    plain = tm.model_config(get_spec("tiny"))
    assert "prefill_tokens" not in plain  # every other fixture keeps a symbolic prefill length
