"""llama.cpp's own converter (the installed binding's sdist): a tiny Llama checkpoint written by
transformers converts to an f32 GGUF whose logits equal transformers' own; an architecture the
converter does not know is its refusal, in its own words; a second call is the cache's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

from rtmatrix.converters.base import ConverterRefused, offline_prefix
from rtmatrix.converters.llama_cpp import (
    OUTTYPES,
    PROBE,
    TOOL,
    check_outtype,
    convert,
    convert_artifact,
    converter_source,
    error_line,
    gguf_imported_from,
)

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "tests" / "helpers" / "tiny_llama_checkpoint.py"
IDS = [1, 504, 2145, 11, 314, 5, 17, 28, 2]
#: what the converter imports from this environment, and what loads its file here
NEEDED = ("torch", "transformers", "sentencepiece", "llama_cpp")


def _needs_converter() -> pytest.MarkDecorator:
    missing = [m for m in NEEDED if find_spec(m) is None]
    why = f"the converter needs {', '.join(missing)}: pip install {' '.join(missing)}"
    return pytest.mark.skipif(bool(missing), reason=why)


def _helper(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(HELPER), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt") / "tiny-llama"
    _helper("write", str(folder))
    return folder


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("converted")


# -- without the converter ---------------------------------------------------------------------
def test_outtypes_other_than_the_converters_own_are_refused_naming_the_valid_ones(
    tmp_path: Path,
) -> None:
    assert check_outtype("q8_0") == "q8_0"
    with pytest.raises(ValueError, match=re.escape("f32, f16, bf16, q8_0")):
        convert(tmp_path, "q4_k_m", root=tmp_path)
    assert OUTTYPES == ("f32", "f16", "bf16", "q8_0")


TRACEBACK = """INFO:hf-to-gguf:Loading model: foo
Traceback (most recent call last):
  File "convert_hf_to_gguf.py", line 312, in <module>
    main()
  File "conversion/__init__.py", line 240, in get_model_class
    raise NotImplementedError(f"Architecture {name!r} not supported!")
NotImplementedError: Architecture 'Foo' not supported!
"""


def test_the_error_line_is_the_last_tracebacks_exception() -> None:
    log = "Traceback (most recent call last):\n  x\nValueError: first\n" + TRACEBACK
    assert error_line(log + f"{PROBE}/x/gguf-py/gguf/__init__.py\n") == (
        "NotImplementedError: Architecture 'Foo' not supported!"
    )
    assert error_line("Traceback (most recent call last):\n  File x\nKeyError: 'rope'\n") == (
        "KeyError: 'rope'"
    )


def test_without_a_traceback_the_error_line_is_the_last_logged_error() -> None:
    log = "INFO:hf-to-gguf:Model architecture: Foo\nERROR:hf-to-gguf:Model Foo is not supported\n"
    assert error_line(log + f"{PROBE}None\n") == "Model Foo is not supported"
    assert error_line("something went wrong\n\n") == "something went wrong"
    assert error_line("") == "it printed nothing"


def test_the_probe_says_which_gguf_was_imported() -> None:
    assert gguf_imported_from(f"INFO:x\n{PROBE}/t/gguf-py/gguf/__init__.py\n") == (
        "/t/gguf-py/gguf/__init__.py"
    )
    assert gguf_imported_from("INFO:x\n") is None


# -- the real converter ------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.slow
@_needs_converter()
def test_the_converter_is_the_installed_bindings_own() -> None:
    import importlib.metadata

    source = converter_source()
    assert source.version == importlib.metadata.version("llama-cpp-python")
    assert source.script.name == TOOL and source.script.is_file()
    assert (source.gguf_py / "gguf" / "__init__.py").is_file()
    assert (source.root / "conversion" / "__init__.py").is_file()  # what the script imports
    assert source.root.name == f"llama.cpp-convert-{source.version}"
    assert re.fullmatch(r"[0-9a-f]{64}", source.sdist_sha256)
    assert source.manifest["sdist"]["file"] == f"llama_cpp_python-{source.version}.tar.gz"
    assert re.fullmatch(r"[0-9a-f]{40}", source.commit), source.commit
    assert source.version in source.label and source.commit[:8] in source.label
    t0 = time.perf_counter()
    assert converter_source().root == source.root  # extracted once
    assert time.perf_counter() - t0 < 5.0


@pytest.mark.integration
@pytest.mark.slow
@_needs_converter()
def test_f32_conversion_has_transformers_logits(checkpoint: Path, cache: Path) -> None:
    done = convert_artifact(checkpoint, "f32", root=cache)
    conv = done.conversion
    assert done.built and done.path.name == "model.gguf" and done.path.stat().st_size > 0
    assert (conv.tool, conv.distribution, conv.options) == (
        TOOL, "llama-cpp-python", {"outtype": "f32"}
    )  # fmt: skip
    assert conv.version == converter_source().version
    assert conv.command[-5:] == [str(checkpoint), "--outfile", conv.command[-3], "--outtype", "f32"]
    assert conv.command[: len(offline_prefix()[0])] == list(offline_prefix()[0])
    assert "network namespace" in conv.offline, conv.offline
    assert conv.network_attempts == []
    assert conv.source == str(checkpoint) and re.fullmatch(r"[0-9a-f]{64}", conv.source_sha256)
    assert "successfully exported" in conv.log_tail
    # the converter imported the sdist's gguf-py, not this environment's gguf
    gguf_py = converter_source().gguf_py
    assert Path(done.manifest["gguf_imported_from"]).is_relative_to(gguf_py)
    log = (done.path.parent / "convert.log").read_text("utf-8")
    assert log.endswith(f"{PROBE}{done.manifest['gguf_imported_from']}\n")

    from gguf import GGUFReader

    reader = GGUFReader(done.path)
    assert reader.fields["tokenizer.ggml.pre"].contents() == "smollm"  # the BPE hash it knows
    assert reader.fields["general.file_type"].contents() == 0  # ALL_F32
    assert {t.tensor_type.name for t in reader.tensors} == {"F32"}

    ref = np.array(json.loads(_helper("logits", str(checkpoint), ",".join(map(str, IDS)))))
    from llama_cpp import Llama

    # an f32 KV cache: llama.cpp's default f16 cache alone moves these logits by ~8e-4
    model = Llama(str(done.path), n_ctx=64, logits_all=True, verbose=False, n_threads=2,
                  type_k=0, type_v=0)  # fmt: skip
    model.eval(IDS)
    got = np.array(model.scores[: len(IDS)])
    model.close()
    assert got.shape == ref.shape == (len(IDS), 49152)
    assert float(np.abs(got - ref).max()) < 1e-4

    t0 = time.perf_counter()
    again = convert_artifact(checkpoint, "f32", root=cache)
    assert not again.built and time.perf_counter() - t0 < 5.0
    assert again.conversion == conv and again.path == done.path
    via = convert(checkpoint, "f32", root=cache)
    assert (via.path, via.conversion, via.built) == (done.path, conv, False)


@pytest.mark.integration
@pytest.mark.slow
@_needs_converter()
def test_an_unknown_architecture_is_the_converters_refusal(
    checkpoint: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "not-a-model"
    shutil.copytree(checkpoint, folder)
    config = json.loads((folder / "config.json").read_text("utf-8"))
    config["architectures"] = ["NotAModelForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config), "utf-8")
    root = tmp_path / "cache"

    with pytest.raises(ConverterRefused) as refused:
        convert(folder, "f16", root=root)
    message = str(refused.value)
    version = converter_source().version
    assert message.startswith(
        f"llama.cpp's {TOOL} (llama-cpp-python {version}) refused {folder.resolve()} (llama): "
    )
    assert message.endswith("Model NotAModelForCausalLM is not supported"), message
    conv = refused.value.conversion
    assert conv.tool == TOOL and conv.options == {"outtype": "f16"}
    assert "NotAModelForCausalLM" in conv.log_tail
    assert not list(root.glob("*/model.gguf"))  # not cached as a success
    assert sorted(p.suffix for p in root.glob("*.refused.*")) == [".json", ".log"]

    t0 = time.perf_counter()
    with pytest.raises(ConverterRefused, match="cached refusal") as again:
        convert(folder, "f16", root=root)
    assert time.perf_counter() - t0 < 5.0
    assert again.value.conversion == conv
