"""The OpenVINO row: OpenVINO's own runtime (``openvino``) on the ONNX fixture, driven by
rtmatrix's KV-cache loop; its messages -> error kinds in :mod:`.errors`."""
