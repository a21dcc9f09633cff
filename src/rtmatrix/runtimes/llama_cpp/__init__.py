"""llama.cpp through llama-cpp-python: the adapter (``adapter.py``, low-level ``llama_decode``
loop and the one rule for its load settings), its streaming and prefill-abort paths
(``stream.py``) and the OpenAI-compatible server driver (``server.py``)."""
