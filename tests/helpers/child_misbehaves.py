"""A stand-in for a fixture child process (``python -m tests.helpers.child_misbehaves MODE``)
that fails the ways a runtime's code can: a segfault, an abort, a missing runtime, a hang, a
Python error, or a clean exit that wrote nothing."""

from __future__ import annotations

import os
import signal
import sys
import time

from rtmatrix.fixtures.child import UNAVAILABLE_EXIT


def main(argv: list[str]) -> int:
    # the env var wins, so a fixture module's own commands (quantize JOB, ...) can be redirected
    mode = os.environ.get("RTMATRIX_TEST_CHILD_MODE") or (argv[0] if argv else "ok")
    if mode == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "abort":
        os.abort()
    if mode == "unavailable":
        print("needs onnxruntime; pip install 'rtmatrix[onnxruntime]'", file=sys.stderr)
        return UNAVAILABLE_EXIT
    if mode == "hang":
        time.sleep(60)
    if mode == "raise":
        msg = "quantizer exploded"
        raise RuntimeError(msg)
    print("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
