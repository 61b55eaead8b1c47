"""The report on both engines: DuckDB and Apache Spark (local mode, and a
standalone cluster of a master and two workers started on this machine from
the PySpark distribution) give the same report of the same trace set, field
for field: every rule's SQL run on Spark (--spark-sql), and each node's
analysis a Spark task (the default).

The set holds real traces of programs that make the rules fire: fio random
4 KiB reads (random access, small reads), fio reading a file four times
(redundant I/O), a naive small-file data set (metadata storm), numpy
checkpoints with fsync (checkpoint burst), threads on one mutex (lock
contention), a training loop fed by reader threads (the verdict) and boto3
against a local S3 server through a proxy that throttles (the object-storage
rules).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import WORKLOADS, iotrace_cmd, needs_root, trace_run
from spark_cluster import report_diff as diff

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install '.[spark]')")
if shutil.which("java") is None:
    pytest.skip("no Java runtime for Spark", allow_module_level=True)

MiB = 1 << 20
pytestmark = needs_root()


def record(tmp: Path, host: str, *command: str) -> Path:
    out = tmp / "set" / f"host={host}"
    proc, trace = trace_run(out, *command)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert trace.meta["drops"] == 0
    return out


@pytest.fixture(scope="module")
def trace_set(tmp_path_factory, lockwait_run):
    tmp = tmp_path_factory.mktemp("engines")
    data = tmp / "data.bin"
    data.write_bytes(b"\x01" * (32 * MiB))
    record(tmp, "fio-rand", "fio", "--name=r", f"--filename={data}", "--rw=randread",
           "--bs=4k", "--io_size=8M", "--size=32M", "--ioengine=psync",
           f"--output={tmp / 'r.json'}")
    # Spark costs ~25 s a node here (its queries' fixed costs): one node runs
    # three programs whose findings do not meet, each on files of its own
    again = tmp / "again.bin"
    again.write_bytes(b"\x02" * (32 * MiB))
    small = tmp / "small"
    subprocess.run([sys.executable, str(WORKLOADS / "mc_small_files.py"), "make", str(small),
                    "5000"], check=True)
    ck = tmp / "ckpt"
    ck.mkdir()
    record(tmp, "files", "sh", "-c",
           f"{sys.executable} {WORKLOADS / 'mc_small_files.py'} read {small} && "
           f"{sys.executable} {WORKLOADS / 'mc_checkpoint.py'} numpy {ck} 3 15 0.1 && "
           f"fio --name=s --filename={again} --rw=read --bs=1M --size=32M --loops=4 "
           f"--ioengine=psync --output={tmp / 's.json'}")
    samples = tmp / "samples"
    samples.mkdir()
    for i in range(24):
        (samples / f"sample_{i:03d}.bin").write_bytes(bytes([i]) * MiB)
    record(tmp, "loader", sys.executable, str(WORKLOADS / "train_loader.py"), str(samples),
           str(tmp / "truth.json"), "--loader", "threads", "--workers", "2", "--prep", "0.03",
           "--compute", "0.01", "--compute-kind", "sleep")
    shutil.copytree(lockwait_run[0].root, tmp / "set" / "host=locks")
    try:
        import objstore
        import boto3  # noqa: F401
        import moto  # noqa: F401
    except ImportError:
        return tmp / "set"
    with objstore.moto_server(tmp / "moto.log") as port:
        objstore.create_bucket(port, "data")
        with objstore.proxy(port, tmp, throttle_every=6) as px:
            record(tmp, "s3", sys.executable, str(WORKLOADS / "s3_client.py"), "--endpoint",
                   f"http://127.0.0.1:{px.port}", "--bucket", "data", "--size", "100000",
                   "--epochs", "2", "--lists", "60")
    return tmp / "set"


def report(set_dir: Path, *args: str) -> dict:
    proc = iotrace_cmd("report", str(set_dir), "--from-events", "--format", "json", *args,
                       timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def subset(trace_set: Path, dest: Path, hosts) -> Path:
    """A set of some of trace_set's nodes."""
    dest.mkdir()
    for host in hosts:
        if (trace_set / f"host={host}").exists():
            shutil.copytree(trace_set / f"host={host}", dest / f"host={host}")
    return dest


# Spark's cost is per query (a node's report runs about a hundred; a second
# each on the standalone cluster here): local mode has three of the nodes,
# the cluster the other two
LOCAL_NODES = ("files", "loader", "s3")
CLUSTER_NODES = ("fio-rand", "locks")


def test_spark_and_duckdb_give_the_same_report(trace_set, tmp_path):
    part = subset(trace_set, tmp_path / "set", LOCAL_NODES)
    # one node as a trace made before the request tables were written: both
    # engines derive them from its events
    for name in ("requests", "connections", "fuse_requests"):
        (part / "host=files" / f"{name}.parquet").unlink()
    duck = report(part, "--target-read", "1GB/s")
    spark = report(part, "--target-read", "1GB/s", "--engine", "spark", "--spark-sql",
                   "--spark-master", "local[2]")
    assert duck["engine"] == "duckdb" and spark["engine"] == "spark"
    assert set(spark["node_report_sources"].values()) == {"events"}
    for r in (duck, spark):
        assert all(not n["rule_errors"] for n in r["node_reports"].values()), \
            {h: n["rule_errors"] for h, n in r["node_reports"].items()}
    # the equality is not of empty reports: the rules fired where the programs ask
    fired = {h: {f["id"] for f in n["findings"]} for h, n in duck["node_reports"].items()}
    assert {"metadata-storm", "checkpoint-burst", "redundant-io"} <= fired["files"], fired
    assert duck["node_reports"]["loader"]["verdict"]["loops"], duck["node_reports"]["loader"]
    if "s3" in fired:
        assert {"throttled", "small-objects", "few-in-flight", "list-storm",
                "refetched-objects"} <= fired["s3"], fired
    duck.pop("engine"), spark.pop("engine")
    assert diff(duck, spark) == []


def test_spark_standalone_cluster_gives_the_same_report(trace_set, tmp_path, cluster):
    """Every rule's SQL on the cluster (--spark-sql): the same report as DuckDB's."""
    part = subset(trace_set, tmp_path / "set", CLUSTER_NODES)
    duck = report(part)
    spark = report(part, "--engine", "spark", "--spark-sql", "--spark-master", cluster)
    assert spark["engine"] == "spark"
    fired = {h: {f["id"] for f in n["findings"]} for h, n in spark["node_reports"].items()}
    assert {"random-access", "small-reads"} <= fired["fio-rand"], fired
    assert "lock-contention" in fired["locks"], fired
    duck.pop("engine"), spark.pop("engine")
    assert diff(duck, spark) == []


def test_nodes_as_spark_tasks_on_the_cluster(trace_set, cluster):
    """The default on Spark: each node's analysis one task of a single job,
    DuckDB on an executor over that node's files (the executors' Python is
    this one, with iotrace). All the set's nodes; the report is DuckDB's."""
    duck = report(trace_set, "--target-read", "1GB/s")
    spark = report(trace_set, "--target-read", "1GB/s", "--engine", "spark",
                   "--spark-master", cluster)
    assert spark["engine"] == "spark" and len(spark["node_reports"]) >= 4
    assert set(spark["node_report_sources"].values()) == {"events"}
    duck.pop("engine"), spark.pop("engine")
    assert diff(duck, spark) == []


def test_executors_without_iotrace_are_a_clear_error(trace_set, tmp_path):
    """Executors whose Python lacks iotrace (the system's Python here): one
    line that says so and what to do, exit 3."""
    import os
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no system Python to stand for an executor's")
    part = subset(trace_set, tmp_path / "set", ("loader",))
    res = iotrace_cmd("report", str(part), "--from-events", "--engine", "spark",
                      "--spark-master", "local[1]", timeout=300,
                      env=dict(os.environ, PYSPARK_PYTHON="/usr/bin/python3"))
    assert res.returncode == 3, res.stderr[-2000:]
    line = [x for x in res.stderr.splitlines() if x.startswith("iotrace:")]
    assert line and "cannot import iotrace" in line[-1] and "--spark-sql" in line[-1], \
        res.stderr[-2000:]


def test_spark_options_checked():
    proc = iotrace_cmd("report", "/nonexistent", "--spark-master", "spark://x:7077")
    assert proc.returncode == 2
    assert "--spark-master is for --engine spark" in proc.stderr
    proc = iotrace_cmd("report", "/nonexistent", "--spark-sql")
    assert proc.returncode == 2
    assert "--spark-sql is for --engine spark" in proc.stderr


def test_spark_that_cannot_start_is_a_clear_error(tmp_path):
    """No Java runtime where Spark looks (JAVA_HOME): one line, exit 3."""
    import os
    trace = tmp_path / "set" / "host=a"
    proc, _ = trace_run(trace, "true")
    assert proc.returncode == 0, proc.stderr
    res = iotrace_cmd("report", str(trace), "--engine", "spark",
                      env=dict(os.environ, JAVA_HOME="/nonexistent-java"), timeout=120)
    assert res.returncode == 3, res.stderr[-2000:]
    line = [x for x in res.stderr.splitlines() if x.startswith("iotrace:")]
    assert line and "cannot start Spark" in line[-1] and "Java" in line[-1], res.stderr[-2000:]
