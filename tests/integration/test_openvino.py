"""Real ONNX Runtime with the OpenVINO execution provider (``onnxruntime-openvino``) on the tiny
fixture and its partition variants, delegate on and off, through real worker processes.

Runs in the venv of ``nox -s openvino`` (``pip install 'rtmatrix[onnxruntime-openvino]'``); skipped
where ``OpenVINOExecutionProvider`` is not available (e.g. beside the plain onnxruntime wheel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.fixtures.spec import get_spec
from rtmatrix.matrix import parse_matrix
from rtmatrix.metrics.partitions import delegate_vs_control, tensor_bytes
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration
ort = pytest.importorskip("onnxruntime")
OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"
if OV not in ort.get_available_providers():
    pytest.skip(
        f"{OV} is not available in this onnxruntime {ort.__version__} "
        f"({', '.join(ort.get_available_providers())}); run these in the venv of "
        "`nox -s openvino` (pip install 'rtmatrix[onnxruntime-openvino]')",
        allow_module_level=True,
    )

PROMPT, GEN = 12, 8
SPEC = get_spec("tiny")
VARIANTS = (None, "partition-end", "partition-every-layer")


def _run(tmp_path: Path, body: str) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 180\n"
        f"[params]\nthreads = 2\nn_ctx = 64\nprompt_tokens = {PROMPT}\ngen_tokens = {GEN}\n" + body
    )
    m = parse_matrix(text, tmp_path / "m.toml")
    return cast(
        dict[str, Any],
        load_run(run_matrix(m, tmp_path / "results", progress=lambda _: None, cwd=repo)),
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    fixtures = "".join(
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\n" + (f"variant = '{v}'\n" if v else "")
        for v in VARIANTS
    )
    body = (
        "[[runtimes]]\nname = 'ort_openvino'\nadapter = 'onnxruntime_openvino'\n"
        "options = { paired_control_rounds = 2 }\n"
        "[[runtimes]]\nname = 'ort_cpu_control'\nadapter = 'onnxruntime_openvino'\n"
        f"options = {{ providers = ['{CPU}'] }}\n" + fixtures
    )
    return _run(tmp_path_factory.mktemp("ov"), body)


def cell(run: dict[str, Any], runtime: str, variant: str | None) -> dict[str, Any]:
    return next(
        c for c in run["cells"] if c["runtime"] == runtime and c["fixture"]["variant"] == variant
    )


def parts(run: dict[str, Any], runtime: str, variant: str | None) -> dict[str, Any]:
    c = cell(run, runtime, variant)
    assert c["outcome"]["status"] == "ok", c["outcome"]
    p: dict[str, Any] = c["evidence"]["partitions"]
    assert "error" not in p and "unavailable" not in p, p
    return p


@pytest.mark.parametrize("runtime", ["ort_openvino", "ort_cpu_control"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_cell_is_ok_with_exact_parity(
    run: dict[str, Any], runtime: str, variant: str | None
) -> None:
    c = cell(run, runtime, variant)
    assert c["outcome"]["status"] == "ok" and c["verdict"] == "PASS", c["outcome"]
    assert c["parity"]["all_tokens_agree"] and c["parity"]["tokens_compared"] == GEN
    assert c["parity"]["max_abs_logit_err"] < 1e-3
    assert c["metrics"]["pp_tps"]["value"] > 0 and c["metrics"]["tg_tps"]["value"] > 0


def test_runtime_row_is_the_openvino_build(run: dict[str, Any]) -> None:
    rt = run["runtimes"]["ort_openvino"]
    assert rt["distribution"] == "onnxruntime-openvino" and rt["extra"] == "onnxruntime-openvino"
    assert rt["version"] == ort.__version__
    ev = cell(run, "ort_openvino", None)["evidence"]
    assert ev["placement"]["used"] == [OV, CPU] and ev["placement"]["fallback"] is False
    assert ev["model"]["ir_version"] <= ev["model"]["max_ir_version_for_this_build"] == 13


def test_clean_fixture_is_one_partition_all_on_the_delegate(run: dict[str, Any]) -> None:
    p = parts(run, "ort_openvino", None)
    assert p["role"] == "delegate" and p["delegate"] == OV
    assert p["partitions"] == 1 and p["delegate_partitions"] == 1
    assert p["coverage"]["pct"] == 100.0
    assert p["boundary_tensors"] == 0 and p["boundary_bytes"] == {"prefill": 0, "decode": 0}
    (only,) = p["per_partition"]
    assert only["subgraph"].startswith("OpenVINO-EP-subgraph_")
    assert only["time_us"]["prefill"] > 0 and only["time_us"]["decode"] > 0
    pl = cell(run, "ort_openvino", None)["evidence"]["placement"]
    assert pl["partitions"] == 1 and pl["subgraphs"] == [only["subgraph"]]
    # the measured phase's own peak, before the analysis sessions
    assert p["memory"]["peak_rss_before_analysis_bytes"] > 50 * 2**20
    assert p["sources"]["timed_runs"]["decode"] > 1  # the measured session's own profile


def test_op_at_the_end_makes_two_partitions_with_the_hidden_state_crossing(
    run: dict[str, Any],
) -> None:
    p = parts(run, "ort_openvino", "partition-end")
    assert p["partitions"] == 2
    ov, cpu = p["per_partition"]
    assert (ov["ep"], cpu["ep"]) == (OV, CPU)
    assert cpu["ops"] == {"TransposeMatMul": 1}
    assert 90.0 < p["coverage"]["pct"] < 100.0
    (t,) = p["tensors"]
    # computed from the real graph: the final RMSNorm's output, [1, tokens, n_embd] float32
    assert t["tensor"] == "output_norm.out" and t["from"] == ov["id"] and t["to"] == [cpu["id"]]
    assert t["shape"] == {"prefill": [1, PROMPT, SPEC.n_embd], "decode": [1, 1, SPEC.n_embd]}
    assert t["bytes_per_token"] == {"prefill": 4 * SPEC.n_embd, "decode": 4 * SPEC.n_embd}
    assert p["boundary_bytes"] == {"prefill": 4 * SPEC.n_embd * PROMPT, "decode": 4 * SPEC.n_embd}
    for part in (ov, cpu):
        assert part["time_us"]["prefill"] > 0 and part["time_us"]["decode"] > 0
    assert cpu["out_bytes"]["decode"]["to_graph_outputs"] == 4 * SPEC.vocab_size  # the logits
    # a whole-model subgraph compiles its weights in; a partial one is handed them as inputs
    # every run (ORT's profile parameter_size) - recorded, whatever this build does with them
    clean = parts(run, "ort_openvino", None)
    assert clean["delegate_parameter_bytes_per_run"]["decode"] == 0
    assert p["delegate_parameter_bytes_per_run"]["decode"] > 0
    assert ov["fused_node"]["decode"]["outputs"] == 1 + 2 * SPEC.n_layer  # hidden + present.*


def test_op_in_every_layer_splits_every_layer(run: dict[str, Any]) -> None:
    p = parts(run, "ort_openvino", "partition-every-layer")
    assert p["partitions"] > 2 * SPEC.n_layer  # delegate | rope on CPU | delegate ... per layer
    assert p["delegate_partitions"] > SPEC.n_layer
    cpu_ops: dict[str, int] = {}
    for part in p["per_partition"]:
        if part["ep"] == CPU:
            for op, n in part["ops"].items():
                cpu_ops[op] = cpu_ops.get(op, 0) + n
    assert cpu_ops.get("RotaryEmbedding") == 2 * SPEC.n_layer
    assert p["coverage"]["pct"] > 80.0  # high node coverage, many boundaries
    tensors = {t["tensor"]: t for t in p["tensors"]}
    kv_width = SPEC.n_head_kv * SPEC.head_dim
    for i in range(SPEC.n_layer):
        # the k projection leaves the delegate for the contrib rope and comes back rotated
        for name in (f"blk.{i}.k.matmul", f"blk.{i}.k.rope.contrib"):
            t = tensors[name]
            assert t["shape"]["prefill"] == [1, PROMPT, kv_width], name
            assert t["bytes_per_token"]["prefill"] == 4 * kv_width * len(t["to"]), name
    # totals are the sum over the listed tensors: bytes come from the graph's tensors only
    for ph in ("prefill", "decode"):
        assert p["boundary_bytes"][ph] == sum(t["bytes"][ph] for t in p["tensors"])
        for t in p["tensors"]:
            one = tensor_bytes((t["dtype"], tuple(t["shape"][ph])))
            assert one is not None and t["bytes"][ph] == one * len(t["to"])
    assert p["boundary_bytes_per_token"]["prefill"] == p["boundary_bytes"]["prefill"] / PROMPT
    # the decode step carries the attention over the whole context across boundaries
    assert p["boundary_bytes_per_token"]["decode"] > p["boundary_bytes_per_token"]["prefill"]
    assert p["graph_check"]["assigned_nodes_not_in_graph"] == 0
    assert p["graph_check"]["graph_nodes_not_assigned"] == 0
    assert p["graph_check"]["fused_outputs_match"] is True
    subgraphs = [x["subgraph"] for x in p["per_partition"] if x["ep"] == OV]
    assert all(s and s.startswith("OpenVINO-EP-subgraph_") for s in subgraphs)
    assert len(set(subgraphs)) == p["delegate_partitions"]


def test_more_boundaries_more_bytes(run: dict[str, Any]) -> None:
    per_token = [
        parts(run, "ort_openvino", v)["boundary_bytes_per_token"]["prefill"] for v in VARIANTS
    ]
    assert per_token[0] == 0 < per_token[1] < per_token[2]


@pytest.mark.parametrize("variant", VARIANTS)
def test_control_runs_the_same_graph_on_the_cpu_ep_only(
    run: dict[str, Any], variant: str | None
) -> None:
    p = parts(run, "ort_cpu_control", variant)
    assert p["role"] == "control" and p["delegate"] is None
    assert p["coverage"]["pct"] == 0.0 and p["boundary_tensors"] == 0
    assert p["partitions"] == 1
    ev = cell(run, "ort_cpu_control", variant)["evidence"]
    assert ev["placement"]["used"] == [CPU] and ev["precision"] == {"delegate": None}


def test_delegate_on_vs_off_side_by_side(run: dict[str, Any]) -> None:
    rows = {r["variant"]: r for r in delegate_vs_control(run["cells"])}
    assert set(rows) == set(VARIANTS)
    for v, r in rows.items():
        assert r["control_runtime"] == "ort_cpu_control", v
        for ratio in ("pp_ratio", "tg_ratio"):
            assert r[ratio] is not None and r[ratio] > 0, (v, r)
        assert set(r["delegate_slower"]) == {"pp", "tg"}
    assert rows["partition-every-layer"]["partitions"] > rows[None]["partitions"] == 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_paired_control_in_the_delegate_cell(run: dict[str, Any], variant: str | None) -> None:
    pc = parts(run, "ort_openvino", variant)["paired_control"]
    assert pc["rounds"] == 2 and pc["prompt_tokens"] == PROMPT
    assert pc["decode_steps"] == GEN - 1  # the decode steps of one repetition
    for ph in ("pp", "tg"):
        assert len(pc[f"{ph}_ratios"]) == 2 and pc[f"{ph}_ratio_median"] > 0
        assert all(v > 0 for v in pc["delegate_tps"][ph] + pc["control_tps"][ph])
        assert pc["delegate_slower"][ph] == (pc[f"{ph}_ratio_median"] < 1.0)
    row = next(r for r in delegate_vs_control(run["cells"]) if r["variant"] == variant)
    assert row["paired"]["pp_ratio_median"] == pc["pp_ratio_median"]
    assert "paired_control" not in parts(run, "ort_cpu_control", variant)  # only where on


def test_precision_is_recorded(run: dict[str, Any]) -> None:
    ev = cell(run, "ort_openvino", None)["evidence"]
    prec = ev["precision"]
    assert prec["ovep_precision_option"] is None and "FP32" in prec["ovep_precision_used"]
    assert prec["openvino_device_default_hint"]  # what OpenVINO alone would pick on this CPU
    assert "CPU" in ev["openvino"]["devices"] and ev["openvino"]["version"]
    assert ev["session"]["providers_passed"][0] == [OV, {"num_of_threads": "2"}]


def test_a_precision_the_cpu_device_refuses_is_a_fallback(tmp_path: Path) -> None:
    """The OpenVINO EP refuses FP16 on CPU at creation; ORT then runs on the CPU EP with a
    warning only: the row must say fallback, not ok."""
    body = (
        "[[runtimes]]\nname = 'ov_fp16'\nadapter = 'onnxruntime_openvino'\n"
        f"options = {{ providers = [['{OV}', {{ precision = 'FP16' }}], '{CPU}'] }}\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\n"
    )
    c = _run(tmp_path, body)["cells"][0]
    assert c["outcome"]["status"] == "fallback" and c["verdict"] == "FAIL", c["outcome"]
    pl = c["evidence"]["placement"]
    assert pl["used"] == [CPU] and f"{OV} not registered in the session" in pl["problems"]
    assert c["evidence"]["precision"]["ovep_precision_option"] == "FP16"
    assert c["evidence"]["partitions"]["role"] == "control"  # nothing ran on the delegate


@pytest.fixture(scope="module")
def shape_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    fixtures = "".join(
        f"[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\nvariant = '{v}'\n"
        + ("expect_kind = 'dynamic-shape'\n" if v == "fixed-shape" else "")
        for v in ("data-dependent-shape", "fixed-shape")
    )
    body = (
        "[[runtimes]]\nname = 'ort_openvino'\nadapter = 'onnxruntime_openvino'\n"
        "[[runtimes]]\nname = 'ort_cpu_control'\nadapter = 'onnxruntime_openvino'\n"
        f"options = {{ providers = ['{CPU}'] }}\n" + fixtures
    )
    return _run(tmp_path_factory.mktemp("ov-shapes"), body)


def test_a_data_dependent_shape_runs_whole_on_the_delegate(shape_run: dict[str, Any]) -> None:
    """Measured with onnxruntime-openvino 1.24.1 on CPU: the EP takes NonZero and the whole
    graph (one partition) and the tokens stay exact; neither an error nor a fallback."""
    for runtime in ("ort_openvino", "ort_cpu_control"):
        c = cell(shape_run, runtime, "data-dependent-shape")
        assert c["outcome"]["status"] == "ok" and c["parity"]["all_tokens_agree"], c["outcome"]
    p = parts(shape_run, "ort_openvino", "data-dependent-shape")
    assert p["partitions"] == 1 and p["coverage"]["pct"] == 100.0
    assert p["per_partition"][0]["ops"].get("NonZero") == 1


@pytest.mark.parametrize("runtime", ["ort_openvino", "ort_cpu_control"])
def test_a_fixed_shape_graph_fed_another_length_is_refused(
    shape_run: dict[str, Any], runtime: str
) -> None:
    c = cell(shape_run, runtime, "fixed-shape")
    assert c["outcome"]["status"] == "error" and c["verdict"] == "PASS"
    assert "Got invalid dimensions for input" in c["outcome"]["message"]
    assert c["outcome"]["error_kind"] == "dynamic-shape"
