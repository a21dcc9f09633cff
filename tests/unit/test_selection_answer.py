"""The answer as JSON and Markdown."""

from __future__ import annotations

import json

from rtmatrix.selection import select
from tests.helpers.selection_runs import default_run


def test_the_verdict_as_json_and_markdown() -> None:
    sel = select([default_run()])
    doc = sel.to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["format"] == "rtmatrix-select" and doc["exit_code"] == 0
    first = doc["models"][0]["ranked"][0]
    assert first["label"] == "llama_cpp q8_0" and first["place"] == 1
    assert first["figures"]["kld_mean"]["value"] == 0.0038
    assert {ln["key"] for ln in doc["constraint_lines"]} >= {"max_kld", "licenses"}
    text = sel.to_markdown()
    assert text.startswith("## Selection\n\nConstraints: peak memory ≤ 2048 MiB; ")
    assert "\n\nFor **smollm2-135m** (real checkpoint) on " in text
    assert "under these constraints:\n\n1. **llama_cpp q8_0**, because KLD 0.0038 nats" in text
    assert "| `max_kld` | 0.1 nats | default |" in text
