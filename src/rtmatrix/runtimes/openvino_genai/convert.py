"""The fixture's ONNX decoder -> the stateful OpenVINO IR that OpenVINO GenAI's engine loads.

``LLMPipeline`` and ``ContinuousBatchingPipeline`` want ``openvino_model.xml``/``.bin`` of a
*stateful* decoder (its KV cache in ReadValue/Assign state, a ``beam_idx`` input that reorders
it) with a ``ScaledDotProductAttention`` op per layer (the paged-attention rewrite looks for it).
rtmatrix's ONNX fixture has an explicit cache (``past_key_values.N.*`` in, ``present.N.*`` out)
and attention as MatMul/Softmax, so this converts it with OpenVINO's own API, in the worker:

1. ``openvino.convert_model`` on ``model.onnx`` (OpenVINO's ONNX frontend);
2. each layer's attention output (``blk.L.att.o4``) is replaced by one SDPA op over the layer's
   query (``blk.L.q.bhsd``), its whole key/value cache (``present.L.*``, repeated to the query
   heads) and the fixture's additive mask (``mask.bias3``): the same function;
3. a ``beam_idx`` parameter gathers every past tensor along the batch; then
   ``apply_make_stateful_transformation`` turns the past/present pairs into state, and each
   state starts as zeros of ``[batch, kv_heads, 0, head_dim]``;
4. ``openvino.save_model(..., compress_to_fp16=False)`` (its default halves the weights), with a
   ``generation_config.json`` naming the fixture's bos/eos.

The result is cached (:func:`rtmatrix.fixtures.cache.cached_build`) by the fixture folder's own
content-hash name, the file's size, the OpenVINO version and :data:`CONVERTER_VERSION`; the
cell's evidence says whether it converted now and how long it took.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

CONVERTER_VERSION = "1"
MODEL_XML = "openvino_model.xml"
_PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)$")


def _i64(*values: int) -> Any:
    """An int64 vector constant."""
    from openvino import opset13 as ops

    return ops.constant(np.array(values, dtype=np.int64))


def _outputs_by_name(model: Any) -> dict[str, Any]:
    """Every named output port of the graph's ops (a Result carries its producer's tensor
    names: wiring to it instead of the producer breaks serialization, so Results are left out)."""
    out: dict[str, Any] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Result":
            continue
        for port in op.outputs():
            for name in port.get_names():
                out[name] = port
    return out


def rewrite_attention(model: Any, n_head: int, n_kv: int, head_dim: int) -> int:
    """Replace each layer's MatMul/Softmax attention with one SDPA op; returns the layer count."""
    from openvino import opset13 as ops

    outs = _outputs_by_name(model)
    layers = sorted(int(m.group(1)) for n in outs if (m := re.fullmatch(r"present\.(\d+)\.key", n)))
    if not layers or "mask.bias3" not in outs:
        msg = "not an rtmatrix ONNX decoder: no present.N.key outputs or no mask.bias3 tensor"
        raise ValueError(msg)
    group = n_head // n_kv
    mask = ops.unsqueeze(outs["mask.bias3"], _i64(1))
    scale = ops.constant(np.float32(1.0 / np.sqrt(head_dim)))

    def repeat(x: Any) -> Any:  # [B, kv, T, D] -> [B, heads, T, D]
        u = ops.unsqueeze(x, _i64(2))
        b = ops.broadcast(u, _i64(1, 1, group, 1, 1), broadcast_spec="BIDIRECTIONAL")
        return ops.reshape(b, _i64(0, n_head, -1, head_dim), special_zero=True)

    for i in layers:
        q = outs[f"blk.{i}.q.bhsd"]
        k, v = outs[f"present.{i}.key"], outs[f"present.{i}.value"]
        sdpa = ops.scaled_dot_product_attention(q, repeat(k), repeat(v), mask, scale, causal=False)
        for target in list(outs[f"blk.{i}.att.o4"].get_target_inputs()):
            target.replace_source_output(sdpa.output(0))
    model.validate_nodes_and_infer_types()
    return len(layers)


def make_stateful(model: Any) -> Any:
    """past/present pairs -> state, with ``beam_idx`` and a zero-length initial state."""
    import openvino as ov
    from openvino import opset13 as ops
    from openvino._offline_transformations import apply_make_stateful_transformation

    pairs = {}
    for p in model.get_parameters():
        m = _PAST.match(p.output(0).get_any_name())
        if m:
            pairs[m.group(0)] = f"present.{m.group(1)}.{m.group(2)}"
    beam_idx = ops.parameter(ov.PartialShape([-1]), ov.Type.i32, name="beam_idx")
    beam_idx.output(0).get_tensor().set_names({"beam_idx"})
    for p in model.get_parameters():
        if p.output(0).get_any_name() in pairs:
            consumers = list(p.output(0).get_target_inputs())
            gathered = ops.gather(p, beam_idx, ops.constant(np.int64(0)))
            for c in consumers:
                c.replace_source_output(gathered.output(0))
    model.add_parameters([beam_idx])
    model.validate_nodes_and_infer_types()
    apply_make_stateful_transformation(model, pairs)
    ids_shape = ops.shape_of(model.input("input_ids"), output_type="i64")
    batch = ops.gather(ids_shape, _i64(0), ops.constant(np.int64(0)))
    for op in model.get_ops():
        if op.get_type_name() == "ReadValue":
            dims = [d.get_min_length() for d in op.get_output_partial_shape(0)]
            parts = [batch if i == 0 else _i64(d) for i, d in enumerate(dims)]
            op.set_arguments([ops.broadcast(ops.constant(np.float32(0)), ops.concat(parts, 0))])
    model.validate_nodes_and_infer_types()
    return ov.Model(model.get_results(), model.get_sinks(), model.get_parameters(), "model")


def _dims(model: Any) -> tuple[int, int, int]:
    """(query heads, kv heads, head dim) from the first layer's tensors."""
    outs = _outputs_by_name(model)
    q, k = outs["blk.0.q.bhsd"].get_partial_shape(), outs["present.0.key"].get_partial_shape()
    return int(q[1].get_length()), int(k[1].get_length()), int(k[3].get_length())


def convert(onnx_path: Path, out_dir: Path, special: dict[str, int]) -> dict[str, Any]:
    """Write the engine's folder for ``onnx_path`` into ``out_dir``; returns what was done."""
    import openvino as ov

    t0 = time.perf_counter()
    model = ov.convert_model(str(onnx_path))
    n_head, n_kv, head_dim = _dims(model)
    layers = rewrite_attention(model, n_head, n_kv, head_dim)
    model = make_stateful(model)
    vocab = model.output("logits").get_partial_shape()[-1]
    if vocab.is_dynamic:
        msg = f"{onnx_path}: the logits output has no static vocabulary dimension"
        raise ValueError(msg)
    out_dir.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(out_dir / MODEL_XML), compress_to_fp16=False)
    named = {"bos_token_id": special.get("bos"), "eos_token_id": special.get("eos")}
    gen = {k: v for k, v in named.items() if v is not None and v >= 0}
    (out_dir / "generation_config.json").write_text(json.dumps(gen), "utf-8")
    return {
        "converter_version": CONVERTER_VERSION,
        "openvino": str(ov.__version__),
        "source": str(onnx_path),
        "layers": layers,
        "heads": n_head,
        "kv_heads": n_kv,
        "head_dim": head_dim,
        "vocab": int(vocab.get_length()),
        "convert_s": round(time.perf_counter() - t0, 3),
        "steps": "convert_model -> SDPA per layer -> beam_idx + make_stateful -> save_model "
        "(f32 weights)",
    }


def engine_folder(onnx_path: Path, special: dict[str, int]) -> tuple[Path, dict[str, Any], bool]:
    """The cached engine folder for the fixture at ``onnx_path``: (folder, manifest, built now)."""
    import openvino as ov

    from rtmatrix.fixtures.cache import cached_build

    key = {
        "converter_version": CONVERTER_VERSION,
        "openvino": str(ov.__version__),
        "fixture": onnx_path.parent.name,  # the fixture's content-hash folder
        "file": onnx_path.name,
        "size": onnx_path.stat().st_size,
        "special": special,
    }
    art = cached_build(
        f"openvino-genai-{onnx_path.parent.name}",
        key,
        MODEL_XML,
        lambda path: convert(onnx_path, path.parent, special),
    )
    return art.path.parent, art.manifest, art.built
