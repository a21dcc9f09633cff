"""A real checkpoint's tokenizer written beside its exported model: the same ids from the
written tokenizer.json, and a config that adds no BOS and names the special tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtmatrix.fixtures.tokenizer import TOKENIZER_FILES, encode, shipped_text, write_files


def test_the_written_tokenizer_gives_the_harness_ids(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    from rtmatrix.fixtures.sources import SourceError
    from rtmatrix.fixtures.spec import get_spec

    try:
        spec = get_spec("smollm2-135m")
    except SourceError as exc:  # no registry here
        pytest.skip(f"the shipped model cannot be found or downloaded: {exc}")
    write_files(spec.source, tmp_path, spec.bos_id, spec.eos_id)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(TOKENIZER_FILES)
    text = shipped_text("story.txt")
    written = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert written.encode(text, add_special_tokens=False).ids == encode(spec.source, text)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text("utf-8"))
    assert cfg["add_bos_token"] is False and cfg["eos_token"] == written.id_to_token(spec.eos_id)
