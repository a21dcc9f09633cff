"""The MNN row (``mnn``): MNN's converter and module API on the ONNX fixture."""
