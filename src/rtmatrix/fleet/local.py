"""A Dask scheduler and labelled workers on loopback, as separate processes with temporary TLS
certificates: what the tests and ``nox -s fleet`` run, and what a fleet looks like on one machine.

    python -m rtmatrix.fleet.local --labels lab-a,lab-b,lab-c          # serve until Ctrl-C
    python -m rtmatrix.fleet.local --run matrix/fleet.toml             # run a matrix on it

Each process starts in a session of its own; :meth:`LocalCluster.close` kills every process of
every tree (a worker's cell subprocesses included), so nothing outlives the cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from rtmatrix.fleet.security import ENV

SCHEDULER_ENV = {
    # a lost host is an outcome, not a retry elsewhere
    "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
}


@dataclass
class LocalCluster:
    address: str
    workdir: Path
    #: client environment: RTMATRIX_TLS_* pointing at the temporary certificates
    env: dict[str, str]
    scheduler: subprocess.Popen[bytes]
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    #: every pid ever seen in one of its trees (for the no-survivor check)
    seen: set[int] = field(default_factory=set)
    startup_s: float = 0.0

    def add_worker(self, name: str, labels: Sequence[str], env: dict[str, str]) -> None:
        """Start ``dask worker`` (no nanny, one thread) holding ``label=1`` for each label; as a
        host of its own it builds fixtures into its own cache (``<workdir>/<name>/cache``)."""
        env = env | {"RTMATRIX_CACHE_DIR": str(self.workdir / name / "cache")}
        resources = ",".join(f"{lbl}=1" for lbl in labels)
        args = ["worker", self.address, "--no-nanny", "--nthreads", "1", "--name", name]
        args += ["--no-dashboard", "--death-timeout", "30"]
        args += ["--resources", resources] if resources else []
        self.workers[name] = _dask(args + _tls_args(self.env), self.workdir / f"{name}.log", env)
        self.seen.add(self.workers[name].pid)

    def wait_for_workers(self, n: int, timeout_s: float = 60.0) -> None:
        from distributed import Client

        from rtmatrix.fleet.security import security_for

        security, _ = security_for(self.address, None, self.env)
        with Client(self.address, security=security, timeout=timeout_s) as client:
            client.wait_for_workers(n, timeout=timeout_s)

    def tree(self) -> list[psutil.Process]:
        procs = []
        for p in [self.scheduler, *self.workers.values()]:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(p.pid)
                procs += [root, *root.children(recursive=True)]
        self.seen |= {p.pid for p in procs}
        return procs

    def kill_worker(self, name: str) -> None:
        """A host dying: SIGKILL the worker and everything it started, at once."""
        proc = self.workers.pop(name)
        _kill_tree(proc)

    def close(self) -> None:
        self.tree()
        for proc in [*self.workers.values(), self.scheduler]:
            _kill_tree(proc)
        self.workers.clear()

    def survivors(self) -> list[int]:
        """Pids of this cluster still alive (zombies excepted)."""
        alive = []
        for pid in self.seen:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        return alive

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _dask(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_" + args[0], *args[1:]],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    psutil.wait_procs(procs, timeout=5)


def _tls_args(env: dict[str, str]) -> list[str]:
    """The dask CLI's TLS options for the certificates named in ``env`` (none without TLS)."""
    if not env:
        return []
    return [
        "--tls-ca-file",
        env[ENV["ca_file"]],
        "--tls-cert",
        env[ENV["cert_file"]],
        "--tls-key",
        env[ENV["key_file"]],
    ]


def write_certificates(workdir: Path) -> dict[str, str]:
    """``Security.temporary()``'s self-signed certificate and key as files; the env that
    points rtmatrix at them."""
    from distributed.security import Security

    sec = Security.temporary()
    files = {
        "ca_file": (workdir / "ca.pem", sec.tls_ca_file),
        "cert_file": (workdir / "cert.pem", sec.tls_client_cert),
        "key_file": (workdir / "key.pem", sec.tls_client_key),
    }
    for path, text in files.values():
        path.write_text(str(text), "utf-8")
        path.chmod(0o600)
    return {ENV[k]: str(path) for k, (path, _) in files.items()}


def start(
    labels: Sequence[str],
    workdir: Path,
    *,
    tls: bool = True,
    env: dict[str, str] | None = None,
    timeout_s: float = 60.0,
) -> LocalCluster:
    """A scheduler on 127.0.0.1 (a free port) and one worker per label, named after it."""
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    base = dict(os.environ if env is None else env) | SCHEDULER_ENV
    client_env = write_certificates(workdir) if tls else {}
    sched_file = workdir / "scheduler.json"
    sched_file.unlink(missing_ok=True)
    args = ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
    args += ["--scheduler-file", str(sched_file), "--protocol", "tls" if tls else "tcp"]
    scheduler = _dask(args + _tls_args(client_env), workdir / "scheduler.log", base)
    cluster = LocalCluster("", workdir, client_env, scheduler, seen={scheduler.pid})
    try:
        cluster.address = _wait_for_file(sched_file, scheduler, timeout_s)
        for label in labels:
            cluster.add_worker(label, [label], base)
        cluster.wait_for_workers(len(labels), timeout_s)
    except BaseException:
        cluster.close()
        raise
    cluster.startup_s = time.monotonic() - t0
    return cluster


def _wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            msg = f"the scheduler exited with {proc.returncode}; see {path.parent}/scheduler.log"
            raise RuntimeError(msg)
        with contextlib.suppress(OSError, ValueError, KeyError):
            return str(json.loads(path.read_text("utf-8"))["address"])
        time.sleep(0.05)
    msg = f"the scheduler wrote no {path} within {timeout_s:.0f} s"
    raise TimeoutError(msg)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rtmatrix.fleet.local", description=__doc__)
    p.add_argument("--labels", default="lab-a,lab-b,lab-c", help="one worker per label")
    p.add_argument("--workdir", default=".fleet", help="certificates and logs (%(default)s)")
    p.add_argument("--run", metavar="MATRIX", help="run this matrix on the cluster, then stop")
    p.add_argument("--results", default="results", help="results folder for --run")
    args = p.parse_args(argv)
    labels = [lbl for lbl in args.labels.split(",") if lbl]
    with start(labels, Path(args.workdir).resolve()) as cluster:
        print(
            f"rtmatrix: scheduler {cluster.address}, workers {', '.join(labels)} "
            f"(started in {cluster.startup_s:.1f} s; logs in {cluster.workdir})"
        )
        exports = " ".join(f"{k}={v}" for k, v in cluster.env.items())
        cmd = [sys.executable, "-m", "rtmatrix", "run"]
        if args.run:
            cmd += [args.run, "--cluster", cluster.address, "--results", args.results]
            return subprocess.run(cmd, env=os.environ | cluster.env, check=False).returncode
        print(f"rtmatrix: try: {exports} rtmatrix run MATRIX --cluster {cluster.address}")
        print("rtmatrix: Ctrl-C stops the cluster")
        with contextlib.suppress(KeyboardInterrupt):
            while cluster.scheduler.poll() is None:
                time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
