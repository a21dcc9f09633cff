"""A tiny Llama checkpoint folder written by transformers, and its fp32 logits, for the converter
tests; run as a child (``python tests/helpers/tiny_llama_checkpoint.py write|logits FOLDER``) so
the test process never imports torch.

``write FOLDER``: ``LlamaConfig`` 64 wide, 2 layers, 4/2 heads, vocab 49152, seeded random weights
(``model.safetensors``, ``config.json``) and SmolLM2's tokenizer (rtmatrix's ``write_files``: the
BPE pre-tokenizer hash llama.cpp's converter knows as ``smollm``).
``logits FOLDER IDS``: transformers' fp32 forward over the comma-separated ids, as JSON rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HIDDEN = 64
LAYERS = 2
VOCAB = 49152
BOS, EOS = 1, 2


def write(folder: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rtmatrix.fixtures import sources, tokenizer

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=BOS, eos_token_id=EOS, dtype="float32",
    )  # fmt: skip
    model: Any = LlamaForCausalLM(config)
    model.eval()
    with torch.no_grad():  # larger than the init's 0.02 std, so logits differ measurably
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.08)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.write_files(str(sources.locate("smollm2-135m")), folder, bos_id=BOS, eos_id=EOS)


def logits(folder: Path, ids: list[int]) -> list[list[float]]:
    import torch
    from transformers import LlamaForCausalLM

    model: Any = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([ids])).logits[0]
    return [[float(x) for x in row] for row in out]


def main(argv: list[str]) -> int:
    what, folder = argv[0], Path(argv[1])
    if what == "write":
        write(folder)
        return 0
    if what == "logits":
        ids = [int(x) for x in argv[2].split(",")]
        json.dump(logits(folder, ids), sys.stdout)
        return 0
    print(f"unknown command {what!r}; valid: write, logits", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
