"""The MNN-LLM engine row (``mnn_llm``): recorded, with the reason it cannot run rtmatrix's
fixture — not a stub that pretends to.

``MNN.llm.create(config.json)`` loads ``llm.mnn`` + ``llm.mnn.weight``, ``tokenizer.txt``,
``embeddings_bf16.bin`` and ``llm_config.json``. Its ``llm.mnn`` must take the token embeddings
(float ``[seq, 1, hidden]``) as ``input_ids``, a float ``attention_mask``, ``position_ids`` and
``logits_index``, with the KV cache held inside MNN's fused ``Attention`` op (no past/present
tensors). Only MNN's ``llmexport`` writes that graph, from a torch model through torch-exported
custom ops; it is not in the ``mnn`` wheel. Fed rtmatrix's own converted model, the engine stops
with "past_key_values.7.value is input but not found" / "Load module failed". Rewriting the ONNX
graph into that op by hand is MNN's exporter's job, not a harness's.
"""

from __future__ import annotations

from typing import ClassVar

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.adapters.unavailable import UnavailableEngine

WHY = (
    "MNN-LLM loads an llm.mnn whose KV cache lives in MNN's fused Attention op (inputs: "
    "embeddings, attention_mask, position_ids, logits_index); only MNN's llmexport writes it, "
    "from a torch model, and it is not in the mnn wheel. rtmatrix's converted decoder (explicit "
    "past/present tensors) is refused: 'past_key_values.7.value is input but not found'"
)


class MnnLlmAdapter(UnavailableEngine):
    name: ClassVar[str] = "mnn_llm"
    distribution: ClassVar[str] = "mnn"
    extra: ClassVar[str] = "mnn"
    container: ClassVar[str] = "onnx"
    WHY: ClassVar[str] = WHY
    ENGINE: ClassVar[str] = "MNN.llm"

    def import_runtime(self) -> str:
        try:
            import MNN
            import MNN.llm  # present in the wheel: the engine exists, its input does not
        except ImportError as exc:
            msg = f"mnn is not installed ({exc}); pip install 'rtmatrix[mnn]'"
            raise RuntimeUnavailable(msg) from exc
        return str(MNN.version())
