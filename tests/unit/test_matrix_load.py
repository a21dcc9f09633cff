from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.matrix import Matrix, MatrixError, load_matrix, parse_matrix

GOOD = """
[run]
repetitions = 3
[params]
threads = [1, 2]
prompt_tokens = 32
[[runtimes]]
name = "llama_cpp"
[[fixtures]]
model = "tiny"
dtypes = ["f32", "q4_0"]
[[fixtures]]
name = "mine"
path = "models/mine.gguf"
"""


def parse(text: str) -> Matrix:
    return parse_matrix(text, Path("m.toml"))


def test_cells_are_the_product_of_runtimes_fixtures_and_params(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.gguf").write_bytes(b"GGUF....")
    m = parse_matrix(GOOD, tmp_path / "m.toml")
    cells = m.cells()
    assert len(cells) == 1 * 3 * 2
    assert {c.params["threads"] for c in cells} == {1, 2}
    assert all(c.params["prompt_tokens"] == 32 and c.params["n_ctx"] == 512 for c in cells)
    assert m.run["repetitions"] == 3 and m.run["warmup"] == 1
    assert cells[0].adapter == "rtmatrix.runtimes.llama_cpp.adapter:LlamaCppAdapter"
    user = next(c for c in cells if c.fixture.name == "mine")
    assert user.fixture.path == tmp_path / "models/mine.gguf" and user.fixture.dtype is None
    assert len({c.key for c in cells}) == len(cells)


def test_shipped_matrices_are_valid(repo: Path) -> None:
    for path in sorted((repo / "matrix").glob("*.toml")):
        assert load_matrix(path).cells(), path


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("[[fixtures]]\nmodel='tiny'\n", r"m.toml: runtimes: expected at least one"),
        (
            "[[runtimes]]\nname='llamacpp'\n[[fixtures]]\nmodel='tiny'\n",
            r"runtimes\[0\].name: unknown runtime 'llamacpp'; did you mean 'llama_cpp'\?",
        ),
        (
            "[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nmodel='huge'\n",
            r"fixtures\[0\].model: unknown fixture model 'huge'; valid: small, tiny",
        ),
        (
            "[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nmodel='tiny'\ndtypes=['q2_k']\n",
            r"fixtures\[0\].dtypes: unknown dtype 'q2_k'; valid: f32, f16, q8_0, q4_0",
        ),
        (
            "[params]\nthreads='two'\n[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nmodel='tiny'\n",
            r"params.threads: expected an integer >= 1, got 'two'",
        ),
        (
            "[run]\nrepeats=3\n[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nmodel='tiny'\n",
            r"run: unknown key\(s\) repeats; valid: repetitions, warmup",
        ),
        (
            "[run]\ntimeout_s=-1\n[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nmodel='tiny'\n",
            r"run.timeout_s: expected a positive number",
        ),
        (
            "[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nmodel='tiny'\n[[fixtures]]\nmodel='tiny'\n",
            r"fixture\(s\) listed twice: tiny/f32",
        ),
        (
            "[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nname='x'\n",
            r"fixtures\[0\].model: unknown fixture model None",
        ),
        ("runtimes = [\n", r"\(syntax\): not valid TOML"),
    ],
)
def test_errors_name_file_key_and_choices(text: str, pattern: str) -> None:
    with pytest.raises(MatrixError, match=pattern):
        parse(text)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match=r"nope.toml: cannot read matrix file"):
        load_matrix(tmp_path / "nope.toml")


def test_module_class_adapter_is_accepted() -> None:
    m = parse("[[runtimes]]\nname='mine'\nadapter='pkg.mod:Cls'\n[[fixtures]]\nmodel='tiny'\n")
    assert [(r.name, r.adapter) for r in m.runtimes] == [("mine", "pkg.mod:Cls")]


def test_fixture_overrides_expectations_and_fill() -> None:
    m = parse(
        "[params]\nn_ctx = 256\ngen_tokens = 16\n"
        "[[runtimes]]\nname='llama_cpp'\noptions = {use_mmap = true, type_k = 'f16'}\n"
        "[[fixtures]]\nmodel='tiny'\nname='full'\nparams={prompt_tokens='fill'}\n"
        "run={repetitions=1}\noptions={type_k = 'f32'}\n"
        "[[fixtures]]\nmodel='tiny'\nvariant='truncated'\n"
        "[[fixtures]]\nmodel='tiny'\nvariant='nan-weights'\nexpect='ok'\nverdicts={ok='WARN'}\n"
    )
    full, trunc, nan = m.cells()
    assert full.params["prompt_tokens"] == 256 - 16 and full.run["repetitions"] == 1
    assert full.options == {"use_mmap": True, "type_k": "f32"}
    assert trunc.fixture.name == "tiny-truncated" and trunc.fixture.expect == "error"
    assert trunc.run["repetitions"] == 5  # the matrix default
    assert nan.fixture.expect == "ok" and nan.fixture.verdicts == {"ok": "WARN"}


@pytest.mark.parametrize(
    ("fixture", "pattern"),
    [
        ("variant='rotten'", r"unknown variant 'rotten'; valid: nan-weights"),
        ("expect='maybe'", r"expect: expected one of ok, error"),
        ("verdicts={fine='PASS'}", r"verdicts: unknown outcome 'fine'"),
        ("verdicts={ok='GREAT'}", r"verdicts.ok: unknown verdict 'GREAT'"),
        ("params={threads=0}", r"fixtures\[0\].params.threads: expected an integer >= 1"),
        ("run={retries=2}", r"fixtures\[0\].run: unknown key\(s\) retries"),
    ],
)
def test_fixture_entry_errors(fixture: str, pattern: str) -> None:
    with pytest.raises(MatrixError, match=pattern):
        parse(f"[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nmodel='tiny'\n{fixture}\n")


def test_runtime_level_expectation_overrides_the_fixture() -> None:
    m = parse(
        "[[runtimes]]\nname='strict'\nadapter='llama_cpp'\nexpect='error'\n"
        "verdicts={crash='WARN'}\n"
        "[[runtimes]]\nname='llama_cpp'\n"
        "[[fixtures]]\nmodel='tiny'\nverdicts={hang='WARN'}\n"
    )
    strict, plain = m.cells()
    assert strict.expect == "error" and strict.verdicts == {"hang": "WARN", "crash": "WARN"}
    assert plain.expect == "ok" and plain.verdicts == {"hang": "WARN"}


def test_gate_thresholds_are_validated() -> None:
    base = "[[runtimes]]\nname='llama_cpp'\n[[fixtures]]\nmodel='tiny'\n"
    parse(base + "[gate]\nfail = ['tg_tps:5%']\n")
    with pytest.raises(MatrixError, match=r"m.toml: gate.fail: .*tg_tsp"):
        parse(base + "[gate]\nfail = ['tg_tsp:5%']\n")


def test_skip_variants_is_validated() -> None:
    base = "[[fixtures]]\nmodel='tiny'\n[[runtimes]]\nname='llama_cpp'\n"
    m = parse(base + "skip_variants = ['truncated']\n")
    assert m.runtimes[0].skip_variants == ("truncated",)
    with pytest.raises(MatrixError, match=r"skip_variants: unknown variant\(s\) \['rotten'\]"):
        parse(base + "skip_variants = ['rotten']\n")


SWEEP = """
[[runtimes]]
name = "llama_cpp"
options = { use_mmap = true }
sweep = { flash_attn = ["on", "off"], type_k = ["f16", "f32", "q8_0"] }
[[runtimes]]
name = "onnxruntime"
[[fixtures]]
model = "tiny"
"""


def test_a_sweep_multiplies_rows_and_cells_and_names_each_combination() -> None:
    m = parse(SWEEP)
    swept = [rt for rt in m.runtimes if rt.base_name == "llama_cpp"]
    assert [rt.name for rt in swept] == [
        f"llama_cpp[flash_attn={fa},type_k={n}]"
        for fa in ("on", "off")
        for n in ("f16", "f32", "q8_0")
    ]
    assert all(rt.options["use_mmap"] is True for rt in swept)
    assert swept[3].options["flash_attn"] == "off" and swept[3].swept["type_k"] == "f16"
    cells = m.cells()
    assert len(cells) == 6 + 1 and len({c.key for c in cells}) == 7
    assert {c.options["flash_attn"] for c in cells if c.runtime.startswith("llama_cpp[")} == {
        "on",
        "off",
    }
    # --runtime takes the table's own name for all its rows, or one row by its full name
    assert m.rows_selected({"llama_cpp"}) == {rt.name for rt in swept}
    assert m.rows_selected({swept[0].name}) == {swept[0].name}
    # --distribution takes every row whose adapter declares that PyPI distribution
    assert m.rows_selected(set(), {"llama-cpp-python"}) == {rt.name for rt in swept}
    assert m.rows_selected(set(), {"onnxruntime"}) == {"onnxruntime"}
    assert m.distributions() == {"llama-cpp-python", "onnxruntime"}
    # --converter takes every row whose adapter names that converter (the rows it feeds)
    assert m.rows_selected(set(), converters={"llama_cpp"}) == {rt.name for rt in swept}
    assert m.rows_selected(set(), converters={"ort_genai"}) == {"onnxruntime"}
    assert m.converters() == {"llama_cpp", "ort_genai"}
    assert m.row_names() >= {"llama_cpp", "onnxruntime", swept[5].name}
    plain = next(rt for rt in m.runtimes if rt.name == "onnxruntime")
    assert plain.base_name == "onnxruntime" and plain.swept == {}


def test_a_fixture_limited_to_a_swept_table_runs_on_every_row_of_its_sweep() -> None:
    m = parse(SWEEP + 'runtimes = ["llama_cpp"]\n')
    assert {c.runtime for c in m.cells()} == {rt.name for rt in m.runtimes if rt.swept}
    one = next(rt.name for rt in m.runtimes if rt.swept)
    m = parse(SWEEP + f'runtimes = ["{one}"]\n')
    assert {c.runtime for c in m.cells()} == {one}


@pytest.mark.parametrize(
    ("sweep", "pattern"),
    [
        ("sweep = { use_mmap = [true] }\noptions = { use_mmap = false }", r"set in options too"),
        ("sweep = { flash_attn = 'on' }", r"sweep.flash_attn: expected a non-empty list"),
        ("sweep = { flash_attn = [] }", r"sweep.flash_attn: expected a non-empty list"),
        ("sweep = {}", r"sweep: an empty sweep gives no rows"),
        ("sweep = { providers = [['CPUExecutionProvider']] }", r"a list option goes in options"),
        ("sweep = { flash_attn = ['on', 'on'] }", r"a value is listed twice"),
    ],
)
def test_a_bad_sweep_names_the_key_and_the_fix(sweep: str, pattern: str) -> None:
    text = f"[[runtimes]]\nname = 'llama_cpp'\n{sweep}\n[[fixtures]]\nmodel = 'tiny'\n"
    with pytest.raises(MatrixError, match=r"m\.toml: runtimes\[0\]\.?.*" + pattern):
        parse(text)


def test_crash_control_is_a_table_of_options_or_false() -> None:
    base = "[[fixtures]]\nmodel = 'tiny'\n[[runtimes]]\nname = 'llama_cpp'\n"
    assert parse(base).cells()[0].crash_control is None  # the adapter's own
    off = parse(base + "crash_control = false\n").cells()[0]
    assert off.crash_control is False
    own = parse(base + "crash_control = { flash_attn = 'off' }\n").cells()[0]
    assert own.crash_control == {"flash_attn": "off"}
    with pytest.raises(MatrixError, match=r"runtimes\[0\]\.crash_control.*extra_buffer_types"):
        parse(base + "crash_control = {}\n")
    with pytest.raises(MatrixError, match=r"runtimes\[0\]\.crash_control: expected a table"):
        parse(base + "crash_control = 'off'\n")


def _prompted(line: str, model: str = 'model = "smollm2-135m"') -> Matrix:
    return parse(f'[[runtimes]]\nname = "llama_cpp"\n[[fixtures]]\n{model}\n{line}\n')


def test_a_real_model_takes_a_prompt_a_prompt_file_or_one_of_rtmatrixs_texts(
    tmp_path: Path,
) -> None:
    got = _prompted('prompt = "Once upon a time"').fixtures[0].prompt
    assert got == ("the fixture's prompt", "Once upon a time")
    what, text = _prompted('prompt_file = "story.txt"').fixtures[0].prompt or ("", "")
    assert what == "rtmatrix's text story.txt" and text.startswith("The lighthouse keeper")
    mine = tmp_path / "p.txt"
    mine.write_text("my prompt", "utf-8")
    assert _prompted(f'prompt_file = "{mine}"').fixtures[0].prompt == (
        "prompt_file p.txt",
        "my prompt",
    )
    assert _prompted("").fixtures[0].prompt is None


def test_a_prompt_on_a_seeded_model_or_a_missing_file_names_the_key_and_fix() -> None:
    with pytest.raises(MatrixError, match=r"fixtures\[0\]\.prompt: .*real checkpoint"):
        _prompted('prompt = "hi"', 'model = "tiny"')
    with pytest.raises(MatrixError, match=r"fixtures\[0\]\.prompt_file: cannot read .*nope\.txt"
                       r".*rtmatrix's own texts: quality\.txt"):  # fmt: skip
        _prompted('prompt_file = "nope.txt"')
    with pytest.raises(MatrixError, match="prompt or prompt_file, not both"):
        _prompted('prompt = "a"\nprompt_file = "story.txt"')
    with pytest.raises(MatrixError, match='give source = "PATH" instead of path'):
        _prompted('prompt = "a"', 'name = "x"\npath = "x.gguf"')


def test_a_fixture_can_name_the_rows_that_run_it() -> None:
    two = '[[runtimes]]\nname = "llama_cpp"\n[[runtimes]]\nname = "onnxruntime"\n'
    m = parse(two + '[[fixtures]]\nmodel = "tiny"\n[[fixtures]]\nmodel = "small"\n'
              'runtimes = ["onnxruntime"]\n')  # fmt: skip
    got = sorted((c.runtime, c.fixture.name) for c in m.cells())
    assert got == [("llama_cpp", "tiny"), ("onnxruntime", "small"), ("onnxruntime", "tiny")]
    with pytest.raises(MatrixError, match=r"fixtures\[0\]\.runtimes: unknown row\(s\) tvm; "
                       "valid: llama_cpp, onnxruntime"):  # fmt: skip
        parse(two + '[[fixtures]]\nmodel = "tiny"\nruntimes = ["tvm"]\n')
    with pytest.raises(MatrixError, match=r"fixtures\[0\]\.runtimes: expected a list"):
        parse(two + '[[fixtures]]\nmodel = "tiny"\nruntimes = "tvm"\n')


VENDOR_ROWS = """
[[runtimes]]
name = "onnxruntime"
[[runtimes]]
name = "onnxruntime_genai"
[[runtimes]]
name = "openvino"
[[runtimes]]
name = "mnn_llm"
"""


def test_a_converters_own_dtype_runs_on_the_rows_its_converter_feeds() -> None:
    m = parse(VENDOR_ROWS + '[[fixtures]]\nmodel = "smollm2-135m-hf"\n'
              'dtypes = ["genai-int8", "genai-int4"]\nruntimes = ["onnxruntime", '
              '"onnxruntime_genai"]\n[[fixtures]]\nmodel = "smollm2-135m-hf"\n'
              'dtypes = ["mnn-q8"]\nruntimes = ["mnn_llm"]\n')  # fmt: skip
    got = sorted((c.runtime, c.fixture.label) for c in m.cells())
    assert got == [("mnn_llm", "smollm2-135m-hf/mnn-q8"),
                   ("onnxruntime", "smollm2-135m-hf/genai-int4"),
                   ("onnxruntime", "smollm2-135m-hf/genai-int8"),
                   ("onnxruntime_genai", "smollm2-135m-hf/genai-int4"),
                   ("onnxruntime_genai", "smollm2-135m-hf/genai-int8")]  # fmt: skip


def test_a_converters_dtype_on_other_rows_is_refused_at_load_naming_each_row() -> None:
    with pytest.raises(MatrixError) as exc:
        parse(VENDOR_ROWS + '[[fixtures]]\nmodel = "smollm2-135m-hf"\ndtypes = ["ov-int8"]\n')
    text = str(exc.value)
    assert text.startswith("m.toml: 3 problems; nothing was run:"), text
    assert ("m.toml: fixtures[0].dtypes: 'ov-int8' is converter optimum_intel's own quantization "
            "(optimum-cli export openvino --weight-format int8); row 'onnxruntime' is fed by "
            "converter ort_genai; did you mean 'genai-int8'? valid: f32, genai-int8, genai-int4; "
            "or give this fixture runtimes = ['openvino']") in text  # fmt: skip
    assert "row 'mnn_llm' is fed by converter mnn_llmexport; did you mean 'mnn-q8'?" in text


def test_rtmatrixs_weight_only_dtype_on_a_converted_checkpoint_is_refused_at_load() -> None:
    with pytest.raises(MatrixError, match=r"m\.toml: fixtures\[0\]\.dtypes: 'int4w' is rtmatrix's "
                       r"own ONNX writer's weight-only int4 .* did you mean 'mnn-q4'\? valid: "
                       r"f16, mnn-q8, mnn-q4$"):  # fmt: skip
        parse(VENDOR_ROWS + '[[fixtures]]\nmodel = "qwen3-toy"\ndtypes = ["int4w"]\n'
              'runtimes = ["mnn_llm"]\n')  # fmt: skip
    m = parse(VENDOR_ROWS + '[[fixtures]]\nmodel = "tiny"\ndtypes = ["int8w", "int4w"]\n'
              'runtimes = ["onnxruntime"]\n')  # fmt: skip
    assert [c.fixture.dtype for c in m.cells()] == ["int8w", "int4w"]  # its own ONNX writer's


def test_a_converters_dtype_on_rtmatrixs_own_model_is_refused_at_load() -> None:
    with pytest.raises(MatrixError, match=r"'genai-int4' is converter ort_genai's own "
                       r"quantization .* of a Hugging Face checkpoint; model 'small' is written by "
                       r"rtmatrix's own exporters; did you mean 'int4w'\?"):  # fmt: skip
        parse(VENDOR_ROWS + '[[fixtures]]\nmodel = "small"\ndtypes = ["genai-int4"]\n'
              'runtimes = ["onnxruntime"]\n')  # fmt: skip


def _bad_inputs(tmp_path: Path) -> Path:
    """A vocab-only GGUF (as llama.cpp's source tree ships them), a Qwen2 folder without
    weights, a folder of an architecture transformers cannot load, and a matrix that also
    misspells an option and names a missing model file."""
    import gguf

    vocab = tmp_path / "ggml-vocab-gpt-2.gguf"
    w = gguf.GGUFWriter(str(vocab), "gpt2")
    w.add_token_list(["a", "b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    qwen = tmp_path / "qwen2"  # an architecture transformers loads, but no weights
    qwen.mkdir()
    (qwen / "config.json").write_text('{"model_type": "qwen2", "vocab_size": 8}')
    other = tmp_path / "other"  # an architecture transformers cannot load
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "not-a-model"}')
    (other / "model.safetensors").write_bytes(b"")
    text = f"""
[[runtimes]]
name = "llama_cpp"
options = {{ flash_atn = "on" }}
[[fixtures]]
name = "mine"
path = "{tmp_path / "nonexistent" / "model.gguf"}"
[[fixtures]]
source = "{vocab}"
[[fixtures]]
source = "{qwen}"
[[fixtures]]
source = "{other}"
"""
    m = tmp_path / "m.toml"
    m.write_text(text)
    return m


def test_every_bad_input_is_named_at_load_each_with_file_key_and_fix(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    with pytest.raises(MatrixError) as err:
        load_matrix(_bad_inputs(tmp_path))
    text = str(err.value)
    assert "5 problems; nothing was run" in text
    assert "runtimes[0].options.flash_atn: unknown option" in text and "'flash_attn'" in text
    assert "fixtures[0].path:" in text and "does not exist; fix 'path'" in text
    assert "fixtures[1].source:" in text and "general.architecture = 'gpt2'" in text
    assert "holds no tensors (a vocab-only file?)" in text  # transformers reads gpt2 GGUFs
    assert "fixtures[2].source:" in text and "has no *.safetensors weights" in text
    assert "fixtures[3].source:" in text and f"checkpoint {tmp_path / 'other'}:" in text
    assert "model_type = 'not-a-model' is not an architecture transformers" in text


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ('{ type_k = "f8" }', "type_k: 'f8' is not one of"),
        ("{ use_mmap = 1 }", "use_mmap: expected bool, got int 1"),
        ('{ flash_attn = "maybe" }', "flash_attn: 'maybe' is not one of"),
    ],
)
def test_a_declared_options_value_is_type_checked(options: str, pattern: str) -> None:
    text = f"[[runtimes]]\nname = 'llama_cpp'\noptions = {options}\n[[fixtures]]\nmodel = 'tiny'\n"
    with pytest.raises(MatrixError, match=pattern):
        parse_matrix(text, Path("m.toml"))


def test_a_swept_option_is_checked_like_a_plain_one() -> None:
    text = ("[[runtimes]]\nname = 'openvino'\nsweep = { inference_precision = ['f32', 'f64'] }\n"
            "[[fixtures]]\nmodel = 'tiny'\n")  # fmt: skip
    with pytest.raises(MatrixError, match="inference_precision: 'f64' is not one of"):
        parse_matrix(text, Path("m.toml"))
