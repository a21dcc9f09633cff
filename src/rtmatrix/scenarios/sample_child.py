"""The ``sample`` scenario's second process: ``python -m rtmatrix.scenarios.sample_child`` reads
one JSON job on stdin (adapter, model, threads, sampling parameters, seed, prompt), loads the
model afresh, samples once and prints ``{"tokens": [...]}`` as its last line. It runs inside the
worker's process group, so a killed cell takes it down too."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    from rtmatrix.adapters.base import LoadParams, load_adapter_class

    job = json.loads(sys.stdin.read())
    adapter = load_adapter_class(job["adapter"])()
    adapter.import_runtime()
    adapter.configure(job["options"])
    params = LoadParams(n_ctx=job["n_ctx"], threads=job["threads"], options=job["options"])
    adapter.load(Path(job["model_path"]), params)
    try:
        tokens = adapter.sample_generate(  # type: ignore[attr-defined]
            job["prompt"], job["n"], job["params"], job["seed"]
        )
    finally:
        adapter.close()
    print(json.dumps({"tokens": [int(t) for t in tokens]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
