"""``python -m rtmatrix.runtimes.llama_server``: build (or find) llama-server in the tool cache,
from the sdist of the installed llama-cpp-python, and print where it is."""

from __future__ import annotations

import sys

from rtmatrix.runtimes.llama_cpp import reftool


def main() -> int:
    try:
        tools = reftool.build_tools(log=lambda msg: print(msg, file=sys.stderr))
    except reftool.ToolUnavailable as exc:
        print(f"llama-server cannot be built here: {exc.reason}", file=sys.stderr)
        return 1
    print(tools.llama_server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
