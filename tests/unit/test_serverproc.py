"""The child-server lifecycle on a small Python HTTP server (no runtime): ready when its path
answers 200, an early exit or silence is an error carrying the log, stop escalates to SIGKILL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rtmatrix.serverproc import ChildServer, free_port, request

SERVER = r"""
import http.server, signal, sys, time
mode, port = sys.argv[1], int(sys.argv[2])
print("fake server", mode, flush=True)
if mode == "exit":
    print("error: cannot load the model", flush=True)
    sys.exit(3)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 200 if self.path == "/ready" and mode != "never-ready" else 503
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"ok" if code == 200 else b"loading")
    def log_message(self, *a):
        pass
time.sleep(0.3)  # "loading the model": not listening yet
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _server(tmp_path: Path, mode: str, **kw: float) -> ChildServer:
    port = free_port()
    argv = [sys.executable, "-c", SERVER, mode, str(port)]
    log = tmp_path / f"{mode}.log"
    return ChildServer(argv, None, log, port, program="fake", ready_path="/ready", **kw)


def test_ready_when_the_path_answers_then_stopped_by_sigterm(tmp_path: Path) -> None:
    srv = _server(tmp_path, "ok")
    took = srv.start(30)
    assert took >= 0.3 and srv.startup_s == took and srv.alive()
    assert request(srv.port, "GET", "/ready") == (200, b"ok")
    assert (srv.rss() or 0) > 1_000_000
    out = srv.stop()
    assert out["stopped"] == "SIGTERM" and out["exit_code"] == -15 and not srv.alive()
    assert srv.stop()["stopped"] == "had already exited"
    assert "fake server ok" in srv.log_tail()


def test_an_early_exit_is_an_error_with_the_log(tmp_path: Path) -> None:
    srv = _server(tmp_path, "exit")
    early = r"(?s)fake exited with code 3 before it answered: .*cannot load the model"
    with pytest.raises(RuntimeError, match=early):
        srv.start(30)
    assert srv.rss() is None


def test_a_server_that_never_gets_ready_is_an_error_naming_the_path(tmp_path: Path) -> None:
    srv = _server(tmp_path, "never-ready")
    with pytest.raises(RuntimeError, match=r"fake did not answer /ready within 2 s"):
        srv.start(2)
    assert srv.stop()["stopped"] == "SIGTERM"


def test_sigterm_ignored_escalates_to_sigkill(tmp_path: Path) -> None:
    srv = _server(tmp_path, "ignore-term", stop_wait_s=1.0)
    srv.start(30)
    out = srv.stop()
    assert out["stopped"].startswith("SIGKILL after SIGTERM") and out["exit_code"] == -9


def test_never_started() -> None:
    srv = ChildServer(["x"], None, Path("/nonexistent/log"), 1, program="x", ready_path="/")
    assert srv.stop() == {"stopped": "never started"} and not srv.alive() and srv.log_tail() == ""
    assert request(free_port(), "GET", "/")[0] is None  # nothing listens: (None, the error)
