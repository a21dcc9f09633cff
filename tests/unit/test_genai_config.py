"""The special ids a row reads beside its model file: the ONNX exporter's genai_config.json, else
the Hugging Face config files a converter copied beside its model (OpenVINO's exporter)."""

from __future__ import annotations

import json
from pathlib import Path

from rtmatrix.fixtures.genai_config import special_ids_beside


def _write(folder: Path, name: str, data: object) -> None:
    (folder / name).write_text(json.dumps(data), "utf-8")


def test_the_onnx_exporters_genai_config_comes_first(tmp_path: Path) -> None:
    _write(tmp_path, "genai_config.json", {"model": {"bos_token_id": 1, "eos_token_id": [2, 7]}})
    _write(tmp_path, "generation_config.json", {"bos_token_id": 5, "eos_token_id": 6})
    assert special_ids_beside(tmp_path / "model.onnx") == {"bos": 1, "eos": 2}


def test_a_converters_folder_gives_the_checkpoints_own_ids(tmp_path: Path) -> None:
    _write(tmp_path, "generation_config.json", {"bos_token_id": 1, "eos_token_id": [2, 3]})
    _write(tmp_path, "config.json", {"bos_token_id": 9, "eos_token_id": 9})
    assert special_ids_beside(tmp_path / "openvino_model.xml") == {"bos": 1, "eos": 2}
    (tmp_path / "generation_config.json").unlink()
    assert special_ids_beside(tmp_path / "openvino_model.xml") == {"bos": 9, "eos": 9}


def test_no_file_or_an_unreadable_one_is_no_eos(tmp_path: Path) -> None:
    assert special_ids_beside(tmp_path / "model.onnx") == {"eos": -1}
    (tmp_path / "config.json").write_text("{not json", "utf-8")
    _write(tmp_path, "generation_config.json", ["a list"])
    assert special_ids_beside(tmp_path / "model.onnx") == {"eos": -1}
