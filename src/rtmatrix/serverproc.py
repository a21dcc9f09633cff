"""A server the worker starts as its own child on loopback: spawn it, wait until it answers,
watch it, stop it (SIGTERM, then SIGKILL). The ``serve`` scenario (a runtime's own server,
:mod:`rtmatrix.scenarios.serve`) and the llama-server row
(:mod:`rtmatrix.runtimes.llama_server.process`) both run theirs through :class:`ChildServer`.

It is spawned without a new session, so it stays in the worker's process group: a cell the
supervisor kills takes its server down with it. Nothing here imports a runtime.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

HOST = "127.0.0.1"
STOP_WAIT_S = 15.0


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def request(
    port: int, method: str, path: str, body: bytes | None = None, timeout: float = 10.0
) -> tuple[int | None, bytes]:
    """One request on its own connection: (status, body), or (None, the error in words)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as exc:
        return None, f"{type(exc).__name__}: {exc}".encode()
    finally:
        conn.close()


class ChildServer:
    """A server process of this one, logging to ``log_path``, ready when ``GET ready_path``
    answers 200."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str] | None,
        log_path: Path,
        port: int,
        *,
        program: str,
        ready_path: str,
        poll_s: float = 0.05,
        stop_wait_s: float = STOP_WAIT_S,
    ) -> None:
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.port = port
        self.program = program
        self.ready_path = ready_path
        self.poll_s = poll_s
        self.stop_wait_s = stop_wait_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    def start(self, timeout_s: float) -> float:
        """Spawn and wait until it is ready; the seconds that took. A server that exits or
        never answers is a RuntimeError carrying its log."""
        t0 = time.perf_counter()
        with self.log_path.open("wb") as log:
            # no new session: the server stays in the worker's process group
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        while time.perf_counter() - t0 < timeout_s:
            if self.proc.poll() is not None:
                msg = (
                    f"{self.program} exited with code {self.proc.returncode} before it "
                    f"answered: {self.exit_detail()}"
                )
                raise RuntimeError(msg)
            status, _ = request(self.port, "GET", self.ready_path, timeout=2.0)
            if status == 200:
                self.startup_s = time.perf_counter() - t0
                return self.startup_s
            time.sleep(self.poll_s)
        msg = (
            f"{self.program} did not answer {self.ready_path} within {timeout_s:.0f} s: "
            f"{self.log_tail(600)}"
        )
        raise RuntimeError(msg)

    def exit_detail(self) -> str:
        """What the log says about an early exit (the end of it, unless a subclass knows better)."""
        return self.log_tail(600)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss(self) -> int | None:
        if self.proc is None or not self.alive():
            return None
        try:
            return int(psutil.Process(self.proc.pid).memory_info().rss)
        except psutil.Error:
            return None

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", errors="replace")
        except OSError:
            return ""

    def stop(self) -> dict[str, Any]:
        """SIGTERM, then SIGKILL after ``stop_wait_s``; how it went."""
        if self.proc is None:
            return {"stopped": "never started"}
        if self.proc.poll() is not None:
            return {"stopped": "had already exited", "exit_code": self.proc.returncode}
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        how = "SIGTERM"
        try:
            self.proc.wait(self.stop_wait_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(self.stop_wait_s)
            how = f"SIGKILL after SIGTERM was ignored for {self.stop_wait_s:.0f} s"
        return {
            "stopped": how,
            "exit_code": self.proc.returncode,
            "stop_s": time.perf_counter() - t0,
        }
