"""onnxruntime-genai: the ``og.Generator`` adapter (``adapter.py``) and its streaming and
prefill-abort paths (``stream.py``)."""
