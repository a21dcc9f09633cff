"""``python -m rtmatrix.runtimes.llama_cpp.server_main --no-extra-bufts ARGS``: llama-cpp-python's
server (``python -m llama_cpp.server ARGS``) with llama.cpp's extra buffer types off.

The server's model settings have no field for ``llama_model_params.use_extra_bufts``; this
launcher loads the models with it as the llama_cpp row's ``extra_buffer_types = false`` does
(:func:`rtmatrix.runtimes.llama_cpp.adapter.model_params`), then runs the server unchanged.
"""

from __future__ import annotations

import sys

from rtmatrix.runtimes.llama_cpp.adapter import model_params

FLAG = "--no-extra-bufts"


def main(argv: list[str]) -> None:
    use_extra_bufts = FLAG not in argv
    sys.argv = ["llama_cpp.server", *(a for a in argv if a != FLAG)]
    from llama_cpp.server.__main__ import main as serve

    with model_params(use_extra_bufts):
        serve()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main(sys.argv[1:])
