"""ONNX Runtime: the ``InferenceSession`` adapter with rtmatrix's KV-cache loop (``adapter.py``),
the pure parts of its placement evidence (``placement.py``: "Node placements" log, fallback rule)
and its profiling-JSON reader (``profile.py``), shared by the other ORT-based rows."""
