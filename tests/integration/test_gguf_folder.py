"""SmolLM2-135M as a Hugging Face folder made by transformers' GGUF loader: the same weights as
the packaged Q4_1 file, dequantized, so transformers' fp32 forward pass on the folder and
rtmatrix's numpy reference on the GGUF must agree — a check of each against the other."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from rtmatrix.fixtures import reference_for
from rtmatrix.fixtures.spec import get_spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NEEDS = ("torch", "transformers", "accelerate", "gguf")


@pytest.fixture(scope="module", autouse=True)
def _needs() -> None:
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]  # found, not imported
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install 'rtmatrix[reference]')")


def test_the_folder_is_the_gguf_judged_against_transformers() -> None:
    hf, gguf = get_spec("smollm2-135m-hf"), get_spec("smollm2-135m")
    assert hf.converted and hf.reference == "transformers" and not gguf.converted
    shape = ("n_layer", "n_embd", "n_head", "n_head_kv", "n_ff", "vocab_size", "bos_id")
    assert hf.architecture == "llama"
    assert [getattr(hf, k) for k in shape] == [getattr(gguf, k) for k in shape]


def test_transformers_on_the_folder_agrees_with_the_numpy_reference_on_the_gguf() -> None:
    numpy_ref = reference_for("smollm2-135m", "f32", 16, 8, "gguf")
    hf_ref = reference_for("smollm2-135m-hf", "f32", 16, 8)
    assert hf_ref.tokens == numpy_ref.tokens
    delta = float(np.max(np.abs(hf_ref.first_logits - numpy_ref.first_logits)))
    assert delta < 1e-3, f"max |Δ first logits| {delta}"
