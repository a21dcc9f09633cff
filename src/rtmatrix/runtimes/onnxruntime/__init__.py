"""ONNX Runtime: the ``InferenceSession`` adapter with rtmatrix's KV-cache loop (``adapter.py``),
the pure parts of its placement evidence (``placement.py``: "Node placements" log, fallback rule),
its profiling-JSON reader (``profile.py``) and the ONNX graph and EP assignment its partition
evidence is built from (``graph_partitions.py``), shared by the other ORT-based rows."""
