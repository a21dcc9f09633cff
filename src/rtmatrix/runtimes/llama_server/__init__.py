"""llama.cpp's own ``llama-server``, built from the sdist of the installed llama-cpp-python (the
shared build of :mod:`rtmatrix.runtimes.llama_cpp.reftool`): the adapter (``adapter.py``: one
server process per cell, started at load, as a child of the worker), its process and command
line (``process.py``), the HTTP client it needs (``client.py``: ``/completion`` with token ids,
``n_probs``, ``/slots``, ``/metrics``), the streaming and mid-prefill paths over HTTP
(``stream.py``) and the driver the ``serve`` scenario starts its own servers with
(``driver.py``). ``python -m rtmatrix.runtimes.llama_server`` builds the tools into the cache."""
