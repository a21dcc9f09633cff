"""The LiteRT row (``litert``): ai-edge-litert's Interpreter on rtmatrix's own .tflite export and
on what litert-torch writes from a Hugging Face checkpoint (``converters/litert_torch.py``)."""
