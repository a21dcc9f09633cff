"""MNN-LLM end to end: a seeded Llama toy through MNN's own exporter (llmexport, for real,
offline: its telemetry's pip install is blocked and recorded, nothing is installed), run by
``MNN.llm`` through the row's adapter, whose per-position logits are transformers' within a
bf16 embedding table's error; then the row in the matrix: llama-toy agrees, the Llama-3 rope
toy is the exporter's silent change of the model (wrong-output, charged to the converter)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from rtmatrix.adapters.base import LoadParams
from rtmatrix.converters.base import offline_prefix

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
N_IDS = 48
PREFILL = 16
#: measured on llama-toy at 16 bits: max |Δlogit| 0.158 over logits in ±8 (transformers with
#: its embedding table rounded to bf16 and its linear weights to fp16: 0.158 too), top-1 33/33
BF16_ATOL = 0.25
#: found, not imported: this process must stay free of torch
NEEDED = ("llmexport", "MNN", "torch", "transformers", "onnx")

#: transformers' fp32 logits for the toy, in a child (the test process never imports torch)
CHILD = """
import sys
from pathlib import Path
import numpy as np, torch, transformers as tf
from rtmatrix.fixtures.sources import locate
from rtmatrix.fixtures.tokenizer import encode, shipped_text

folder, out, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
ids = encode(str(locate("smollm2-135m")), shipped_text())[:n]
model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                attn_implementation="eager").eval()
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0].numpy()
np.savez(out, ids=np.asarray(ids), logits=logits)
"""


@pytest.fixture(scope="module")
def toy() -> Path:
    missing = [m for m in NEEDED if find_spec(m) is None]
    if missing:
        why = f"MNN-LLM's exporter needs {', '.join(missing)}: pip install 'rtmatrix[mnn-llm]'"
        pytest.skip(why)
    from rtmatrix.fixtures import archs

    return archs.checkpoint_folder("llama-toy")


@pytest.fixture(scope="module")
def reference(toy: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ref") / "ref.npz"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(toy), str(out), str(N_IDS)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as data:
        return {"ids": [int(i) for i in data["ids"]], "logits": data["logits"]}


def test_a_16_bit_export_runs_in_mnn_llm_with_transformers_logits(
    toy: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    from rtmatrix.converters import mnn_llmexport as mle
    from rtmatrix.runtimes.mnn.llm import MnnLlmAdapter

    done = mle.convert(toy, "16", root=tmp_path)
    assert done.built and done.path.name == "llm.mnn.weight"
    conv = done.conversion
    assert (conv.converter, conv.tool, conv.distribution) == ("mnn_llmexport", "llmexport.py",
                                                              "llmexport")  # fmt: skip
    assert conv.version and conv.wall_s > 0 and conv.options["quant_bit"] == "16"
    if offline_prefix()[0]:
        assert conv.command[:2] == ["/usr/bin/unshare", "-n"] or conv.command[1] == "-n"
        assert "network namespace" in conv.offline
    # MNN's converter imports its telemetry logger, which tries to pip-install its SDK
    assert f"{mle.BLOCKED}pip install -U aliyun-log-python-sdk" in conv.network_attempts
    assert done.manifest["environment"]["unchanged"] is True, done.manifest["environment"]
    assert done.manifest["embedding"]["precision"] == "bf16"

    adapter = MnnLlmAdapter()
    assert adapter.import_runtime()
    adapter.load(done.path, LoadParams(n_ctx=128, threads=2, options={"precision": "high"}))
    assert adapter.vocab_size == reference["logits"].shape[-1]
    assert adapter.special_ids == {"bos": 1, "eos": 2}
    ids, ref = reference["ids"], reference["logits"]
    for _ in range(2):  # reset empties the cache: the second pass equals the first
        adapter.reset()
        adapter.prefill(ids[:PREFILL])
        rows = [adapter.last_logits()]
        for t in ids[PREFILL:]:
            adapter.decode(t)
            rows.append(adapter.last_logits())
        got = np.stack(rows)
        want = ref[PREFILL - 1 :]
        assert (got.argmax(-1) == want.argmax(-1)).all()
        assert float(np.abs(got - want).max()) < BF16_ATOL
    assert adapter.tokenize_text("Hello world") == [19556, 905]  # SmolLM2's own ids
    assert adapter.evidence()["requantized"]["judged_as"] == "bf16"
    adapter.close()
    again = mle.convert(toy, "16", root=tmp_path)
    assert not again.built and again.conversion == conv


def test_the_row_in_the_matrix_agrees_on_llama_and_catches_llama3_rope(
    toy: Path, tmp_path: Path
) -> None:
    from rtmatrix.matrix import parse_matrix
    from rtmatrix.results import load_run
    from rtmatrix.runner import run_matrix

    text = (
        "[run]\nrepetitions = 1\nwarmup = 0\ntimeout_s = 300\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 16\ngen_tokens = 8\n"
        "[[runtimes]]\nname = 'mnn_llm'\noptions = { quality_tokens = 64, precision = 'high' }\n"
        "[[fixtures]]\nmodel = 'llama-toy'\ndtypes = ['f32', 'f16']\n"
        "[[fixtures]]\nmodel = 'llama3-rope-toy'\ndtypes = ['f16']\n"
    )
    m = parse_matrix(text, tmp_path / "m.toml")
    run = cast(dict[str, Any], load_run(run_matrix(m, tmp_path / "r", progress=lambda _: None,
                                                   cwd=REPO)))  # fmt: skip
    cells = {c["key"].split("|")[1]: c for c in run["cells"]}
    skipped = json.dumps(run.get("skipped") or [])
    assert "llama-toy/f32" not in cells and "writes no 'f32'" in skipped
    ok = cells["llama-toy/f16"]
    assert ok["outcome"]["status"] == "ok", ok["outcome"]
    assert ok["parity"]["requantized"]["judged_as"] == "bf16"
    assert ok["parity"]["conversion"]["changed_the_model"] is False
    assert ok["metrics"]["kld_mean"]["value"] < 1e-2
    assert ok["fixture"]["conversion"]["tool"] == "llmexport.py"
    rope = cells["llama3-rope-toy/f16"]
    assert rope["outcome"]["status"] == "wrong-output", rope["outcome"]
    assert rope["outcome"]["charged_to"] == "converter"
    conv = rope["parity"]["conversion"]
    assert conv["changed_the_model"] and conv["top1_agree"] < conv["top1_positions"] // 2
