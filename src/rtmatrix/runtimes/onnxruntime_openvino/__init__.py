"""ONNX Runtime with the OpenVINO execution provider (its own venv): the adapter, built on the
ONNX Runtime row, with the delegate's partition analysis and OpenVINO's device query
(``adapter.py``)."""
