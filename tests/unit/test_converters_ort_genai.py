"""onnxruntime-genai's model builder as a converter home: a tiny Qwen3 checkpoint written by
transformers converts to a folder whose model.onnx, fed as rtmatrix's explicit-KV loop feeds it,
has transformers' fp32 logits; an architecture the builder does not know is its refusal, in its
own words, cached; a second conversion is the cache's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtmatrix.converters.base import ChildRun, ConverterRefused
from rtmatrix.converters.ort_genai import (
    DTYPES,
    PRECISIONS,
    REQUIRED,
    TOOL,
    VENDOR_DTYPES,
    check_precision,
    convert,
    convert_artifact,
    error_line,
    refusal,
    require_builder,
)
from rtmatrix.fixtures.spec import ExporterUnavailable

N_IDS = 48
#: measured: max |Δlogit| 3.0e-6 (prefill) and 2.9e-6 (token by token) over logits in ±4.2
LOGIT_ATOL = 1e-4

#: run as a child so the test process never imports torch: the Qwen3 toy (and a GPT-2 toy, an
#: architecture the builder has no class for), SmolLM2's tokenizer, transformers' fp32 logits
CHILD = """
import json, sys
from pathlib import Path
import numpy as np, torch, transformers as tf
from rtmatrix.fixtures.sources import locate
from rtmatrix.fixtures.tokenizer import encode, shipped_text, write_files

root, n = Path(sys.argv[1]), int(sys.argv[2])
source = str(locate("smollm2-135m"))
configs = {
    "qwen3": tf.Qwen3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, intermediate_size=128, vocab_size=49152,
        max_position_embeddings=1024, initializer_range=0.1, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2),
    "gpt2": tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=49152, n_positions=1024,
        bos_token_id=1, eos_token_id=2),
}
for name, config in configs.items():
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    model.save_pretrained(root / name)
    write_files(source, root / name, 1, 2)
ids = encode(source, shipped_text())[:n]
model = tf.AutoModelForCausalLM.from_pretrained(root / "qwen3", dtype=torch.float32,
                                                attn_implementation="eager").eval()
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0].numpy()
np.save(root / "logits.npy", logits)
(root / "ids.json").write_text(json.dumps(ids))
"""


def _needs_builder() -> pytest.MarkDecorator:
    missing = [d for d, m in REQUIRED.items() if find_spec(m) is None]
    why = f"the model builder needs {', '.join(missing)}: pip install {' '.join(missing)}"
    return pytest.mark.skipif(bool(missing) or find_spec("onnxruntime") is None, reason=why)


@pytest.fixture(scope="module")
def toys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("toys")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(N_IDS)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("converted")


# -- without the builder ------------------------------------------------------------------------
def test_precisions_other_than_the_builders_cpu_ones_are_refused(tmp_path: Path) -> None:
    assert check_precision("int4") == "int4"
    with pytest.raises(ValueError, match=re.escape("fp32, int8, int4")):
        convert(tmp_path, "fp16", root=tmp_path)
    assert set(DTYPES.values()) <= set(PRECISIONS)


def test_the_builders_own_quantizations_are_dtypes_of_their_own() -> None:
    assert DTYPES == {"f32": "fp32", "genai-int8": "int8", "genai-int4": "int4"}
    assert [(d.name, d.option, d.bits) for d in VENDOR_DTYPES] == [
        ("genai-int8", "--precision int8", 8),
        ("genai-int4", "--precision int4", 4),
    ]
    assert all("blocks of 32" in d.doc and "accuracy_level 4" in d.doc for d in VENDOR_DTYPES)


def test_a_missing_package_is_unavailable_with_the_pip_command() -> None:
    packages = {d: "1.0" for d in REQUIRED} | {"onnx-ir": "absent"}
    with pytest.raises(ExporterUnavailable, match="pip install onnx-ir"):
        require_builder(packages)


TRACEBACK = """Extra options: {}
Traceback (most recent call last):
  File "builders/base.py", line 670, in make_rope_init
    if config.rope_parameters["rope_type"] == "yarn":
       ~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^
KeyError: 'rope_type'
"""


def test_the_error_line_is_the_last_tracebacks_exception() -> None:
    assert error_line(TRACEBACK) == "KeyError: 'rope_type'"
    assert error_line("Reading layer 0\n\nSaving ONNX model\n") == "Saving ONNX model"
    assert error_line("") == "it printed nothing"


@pytest.mark.parametrize(
    ("run", "kept"),
    [
        (ChildRun(1, 1.0, TRACEBACK), True),
        (ChildRun(-9, 1.0, "Reading layer 0\n"), False),  # killed (memory): may pass again
        (ChildRun(-9, 9.0, "Reading layer 0\n", timed_out=True), False),
        (ChildRun(1, 1.0, "ModuleNotFoundError: No module named 'onnx_ir'\n"), False),
        (ChildRun(0, 1.0, "Saving ONNX model\n"), True),  # exit 0 without the file
    ],
)
def test_only_a_refusal_a_retry_would_repeat_is_cached(
    tmp_path: Path, run: ChildRun, kept: bool
) -> None:
    config = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    message, keep = refusal("0.18.0", tmp_path, "fp32", run, "model.onnx")
    assert keep is kept
    assert message.startswith(f"onnxruntime-genai's model builder ({TOOL}, onnxruntime-genai ")
    assert "model_type gemma3_text (Gemma3ForCausalLM)" in message


# -- the real builder ---------------------------------------------------------------------------
def _run_explicit_kv(model: Path, ids: list[int], prefill: int) -> np.ndarray[Any, Any]:
    """``ids``' logits from ``model.onnx`` fed as rtmatrix's onnxruntime row feeds a graph:
    input_ids, attention_mask of the total length, past_key_values.* (empty first, then the
    previous present.*); ``prefill`` ids in the first call, then one id per call. The cache's
    head dimension is symbolic in the builder's graph: genai_config's head_size gives it."""
    import onnxruntime as ort

    head = json.loads(model.with_name("genai_config.json").read_text())["model"]["decoder"]
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}
    outputs = [o.name for o in sess.get_outputs()]
    assert set(inputs) - {n for n in inputs if n.startswith("past_key_values.")} == {
        "input_ids", "attention_mask"}  # fmt: skip
    past = {n: np.zeros((1, i.shape[1], 0, head["head_size"]), np.float32)
            for n, i in inputs.items() if n.startswith("past_key_values.")}  # fmt: skip
    rows: list[np.ndarray[Any, Any]] = []
    start = 0
    for chunk in [ids[:prefill], *([t] for t in ids[prefill:])]:
        total = start + len(chunk)
        feeds = {**past, "input_ids": np.asarray([chunk], np.int64),
                 "attention_mask": np.ones((1, total), np.int64)}  # fmt: skip
        got = dict(zip(outputs, sess.run(outputs, feeds), strict=True))
        for name in past:
            present = got[name.replace("past_key_values.", "present.")]
            assert present.shape[2] == total  # plain ORT: present is past + new, not a buffer
            past[name] = present
        rows.extend(got["logits"][0])
        start = total
    return np.stack(rows)


@pytest.mark.integration
@pytest.mark.slow
@_needs_builder()
def test_fp32_conversion_has_transformers_logits(toys: Path, cache: Path) -> None:
    done = convert_artifact(toys / "qwen3", "fp32", root=cache)
    assert done.built and done.path.name == "model.onnx"
    folder = done.path.parent
    for name in ("model.onnx.data", "genai_config.json", "tokenizer.json", "convert.log"):
        assert (folder / name).is_file(), name
    conv = done.conversion
    assert (conv.converter, conv.tool) == ("ort_genai", TOOL)
    assert conv.distribution == "onnxruntime-genai"
    assert conv.options == {"precision": "fp32", "execution_provider": "cpu"}
    assert conv.network_attempts == []
    assert done.manifest["genai_config"]["head_size"] == 32
    ids = json.loads((toys / "ids.json").read_text())
    ref = np.load(toys / "logits.npy")
    for prefill in (N_IDS, 1, 16):  # one call; token by token; a prompt then tokens
        got = _run_explicit_kv(done.path, ids, prefill)
        assert float(np.abs(got - ref).max()) < LOGIT_ATOL, prefill
        assert (got.argmax(-1) == ref.argmax(-1)).all()
    again = convert_artifact(toys / "qwen3", "fp32", root=cache)
    assert not again.built and again.path == done.path and again.conversion == conv


@pytest.mark.integration
@pytest.mark.slow
@_needs_builder()
def test_the_folder_runs_in_onnxruntime_genai(toys: Path, cache: Path) -> None:
    og = pytest.importorskip("onnxruntime_genai")
    path = convert(toys / "qwen3", "fp32", root=cache).path
    ids = json.loads((toys / "ids.json").read_text())[:8]
    model = og.Model(str(path.parent))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=16)
    gen = og.Generator(model, params)
    gen.append_tokens(np.asarray(ids, np.int32))
    last = np.array(gen.get_logits())[0, -1]
    del gen, params, model
    assert float(np.abs(last - np.load(toys / "logits.npy")[7]).max()) < LOGIT_ATOL


@pytest.mark.integration
@pytest.mark.slow
@_needs_builder()
def test_an_unknown_architecture_is_the_builders_refusal_cached(toys: Path, cache: Path) -> None:
    with pytest.raises(ConverterRefused) as first:
        convert(toys / "gpt2", "fp32", root=cache)
    message = str(first.value)
    assert "onnxruntime-genai's model builder" in message
    assert re.search(r"onnxruntime-genai \d+\.\d+", message)
    assert "model_type gpt2 (GPT2LMHeadModel)" in message
    assert "NotImplementedError" in message and "not currently supported" in message
    assert first.value.conversion.tool == TOOL
    t0 = time.perf_counter()
    with pytest.raises(ConverterRefused, match="cached refusal") as second:
        convert(toys / "gpt2", "fp32", root=cache)
    assert time.perf_counter() - t0 < 2.0  # the builder did not run again
    assert second.value.conversion == first.value.conversion
    assert list(cache.glob("ort-genai-gpt2-fp32-*.refused.log"))
