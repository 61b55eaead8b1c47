"""A standalone Apache Spark cluster on this machine, for the tests: a master
and workers started from the PySpark distribution's own launcher
(bin/spark-class), as a site would start them (sbin/start-master.sh and
start-worker.sh run the same classes), each worker with its own cores,
memory and scratch directory. The master's web UI answers /json with the
workers alive; the cluster is ready when all are."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home
    return Path(_find_spark_home())


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                       timeout: float = 120.0):
    """Yields the master's URL (spark://127.0.0.1:PORT) once `workers`
    workers have registered; stops them all after."""
    home = spark_home()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(work / "logs"), SPARK_NO_DAEMONIZE="1")
    port, ui = free_port(), free_port()
    procs = []

    def start(name: str, *args: str) -> None:
        log = open(work / f"{name}.log", "w")
        procs.append(subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env,
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))

    work.mkdir(parents=True, exist_ok=True)
    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui))
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            d = work / f"worker{i}"
            d.mkdir(exist_ok=True)
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                  "--cores", str(cores), "--memory", memory, "--work-dir", str(d),
                  "--webui-port", str(free_port()), url)
        end = time.monotonic() + timeout
        alive = 0
        while time.monotonic() < end:
            if any(p.poll() is not None for p in procs):
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json", timeout=2) as r:
                    state = json.load(r)
                alive = sum(w.get("state") == "ALIVE" for w in state.get("workers", []))
                if alive >= workers:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        if alive < workers:
            logs = "\n".join(f"{p.name}: {p.read_text()[-800:]}" for p in work.glob("*.log"))
            raise RuntimeError(f"the Spark cluster did not start ({alive} of {workers} "
                               f"workers alive): {logs}")
        yield url
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def report_diff(a, b, path="") -> list[str]:
    """Where two reports (JSON values) differ: numbers within 1e-9 (relative)
    are equal."""
    import math
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            out += report_diff(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} vs {len(b)} items")
        for i, (x, y) in enumerate(zip(a, b)):
            out += report_diff(x, y, f"{path}[{i}]")
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
            out.append(f"{path}: {a!r} vs {b!r}")
    elif a != b:
        out.append(f"{path}: {str(a)[:200]!r} vs {str(b)[:200]!r}")
    return out
