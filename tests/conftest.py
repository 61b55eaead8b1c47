"""Shared helpers: run iotrace for real (root, real BPF) and open the trace."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import iotrace
from iotrace.abi import ASYNC_READ_OPS, READ_OPS, sql_list

ROOT = Path(__file__).resolve().parent.parent
IOTRACE = [sys.executable, "-m", "iotrace"]

# Not root, and without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN. The unprivileged
# user keeps CAP_DAC_READ_SEARCH (ambient) and nothing else: it reads the
# checkout and the venv wherever they live (a 0700 home directory too), and
# that capability is no way to trace.
UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                "--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search"]
WORKLOADS = Path(__file__).resolve().parent / "workloads"


def build_workload(tmp_path_factory, name: str, *flags: str) -> Path:
    """tests/workloads/NAME.c compiled with gcc -O2 FLAGS (skips without gcc)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    out = tmp_path_factory.mktemp("bin") / name
    subprocess.run(["gcc", "-O2", "-o", str(out), str(WORKLOADS / f"{name}.c"), *flags],
                   check=True)
    return out


def workload_data(tmp_path_factory, name: str, script: str, *args: str) -> Path:
    """A fresh directory of data that tests/workloads/SCRIPT makes in it:
    `SCRIPT DIR ARGS...` (its own way of asking, "--make N" or "make N")."""
    d = tmp_path_factory.mktemp(name)
    subprocess.run([sys.executable, str(WORKLOADS / script), str(d), *args], check=True)
    return d


@pytest.fixture(scope="session")
def lockwait_bin(tmp_path_factory):
    """tests/workloads/lockwait.c built once: threads timing their own mutex waits."""
    return build_workload(tmp_path_factory, "lockwait", "-pthread")


@pytest.fixture(scope="session")
def verbs_bin(tmp_path_factory):
    """tests/workloads/verbs_mr.c built once against libibverbs."""
    if not Path("/usr/include/infiniband/verbs.h").exists():
        pytest.skip("libibverbs-dev not installed")
    return build_workload(tmp_path_factory, "verbs_mr", "-libverbs")


@pytest.fixture(scope="session")
def lockwait_run(tmp_path_factory, lockwait_bin):
    """One traced run of lockwait (4 threads x 60 reads under one mutex), shared by
    the raw-trace test and the lock-contention rule test: (trace, data file, mutex
    address, {tid: wait ns the thread measured itself})."""
    base = tmp_path_factory.mktemp("lockwait")
    data = base / "data.bin"
    data.write_bytes(b"m" * (16 * 4096))
    proc, trace = trace_run(base / "trace", str(lockwait_bin), str(data), "4", "60")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    mutex = int(lines[0].split()[1], 16)
    measured = {int(t): int(w) for t, w in (line.split() for line in lines[1:] if line.strip())}
    return trace, data, mutex, measured


def wait_for(pred, timeout=60.0) -> bool:
    """Polls pred every 50 ms until it is true (True) or timeout passes (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def attached(pid: int, out: Path, *extra: str):
    """`iotrace attach --pid pid -o out` (with extra options), ready when the
    block starts; stopped as a user stops it, with Ctrl-C (SIGINT), when the
    block ends, and it must then exit 0. Killed if the block fails."""
    tracer = subprocess.Popen([*IOTRACE, "attach", "-q", *extra, "--pid", str(pid),
                               "-o", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (out / "meta.json").exists()), "attach never became ready"
        yield tracer
        tracer.send_signal(signal.SIGINT)
        assert tracer.wait(timeout=120) == 0, tracer.stderr.read()
    finally:
        tracer.kill()


def needs_root():
    return pytest.mark.skipif(os.geteuid() != 0, reason="tracing needs root (real BPF)")


def iotrace_cmd(*args: str, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run([*IOTRACE, *args], **kw)


def trace_run(out: Path, *command: str, extra: tuple = (), **kw):
    """`iotrace run -o out -- command`; returns (completed process, Trace).
    Without the node summary (a report at the end of each run): the tests of
    trace sets ask for it."""
    proc = iotrace_cmd("run", "-q", "--no-node-summary", "-o", str(out), *extra, "--",
                       *command, **kw)
    trace = iotrace.open_trace(out) if (out / "meta.json").exists() else None
    return proc, trace


def keep_spool(base: Path) -> tuple[Path, dict]:
    """(where the recorder's spool segments stay, an environment for
    iotrace_cmd): an IOTRACE_RECORDER wrapper that points the recorder's
    --spool at base/kept, which iotrace neither converts nor deletes (the
    trace iotrace writes is then empty)."""
    from iotrace.session import recorder_path
    keep = base / "kept"
    wrapper = base / "recorder"
    wrapper.write_text(f"#!{sys.executable}\nimport os, sys\n"
                       "a = sys.argv[1:]\n"
                       f"a[a.index('--spool') + 1] = {str(keep)!r}\n"
                       f"os.makedirs({str(keep)!r}, exist_ok=True)\n"
                       f"os.execv({recorder_path()!r}, [{recorder_path()!r}, *a])\n")
    wrapper.chmod(0o755)
    return keep, dict(os.environ, IOTRACE_RECORDER=str(wrapper))


def rows(trace, query: str, *params):
    return trace.con.execute(query, list(params)).fetchall()


def scalar(trace, query: str, *params):
    return trace.con.execute(query, list(params)).fetchone()[0]


def evict(path: Path) -> None:
    """Drops `path`'s pages (a file, or every file under a directory) from the
    page cache, each file written back first (pages must be clean to drop, and
    not mapped): read cold from the device next. Only the test's data: the
    page cache of the tools (Python, torch, fio, iotrace) stays, as on a
    machine whose software is on another disk."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    # DONTNEED drains only the calling CPU's batch of pages on their way to
    # the LRU lists, and a page still in another CPU's is not dropped: 1.5
    # MiB of a 16 MiB file just written stayed cached in one run. So it is
    # asked from each CPU in turn, and what stays resident is checked.
    cpus = os.sched_getaffinity(0)
    for attempt in range(5):
        try:
            for cpu in sorted(cpus):
                os.sched_setaffinity(0, {cpu})
                for f in files:
                    fd = os.open(f, os.O_RDONLY)
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)
        finally:
            os.sched_setaffinity(0, cpus)
        left = resident_bytes(files)
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"{left} bytes of {path} stay in the page cache after eviction")


def resident_bytes(files: list) -> int:
    """Bytes of the files in the page cache (util-linux fincore), 0 where it
    is not installed."""
    if not files or not shutil.which("fincore"):
        return 0
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES",
                          *map(str, files)], capture_output=True, text=True)
    return sum(int(x) for x in out.stdout.split() if x.isdigit()) if out.returncode == 0 else 0


@contextlib.contextmanager
def cold_throttled_reads(path: Path, bps: int = 0, iops: int = 0):
    """Yields a command prefix that runs a job in a blkio cgroup reading `path`'s
    device at `bps` bytes/s or `iops` requests/s (cgroup v1 blkio.throttle or
    v2 io.max), with `path` (a file, or the files under a directory) evicted
    from the page cache first: real slow storage. Only the data is made cold:
    the job's own libraries (torch: 2.5 s more to import cold, far more
    through the throttle) stay cached, as on a node whose software is on
    another disk. Skips the test where neither exists."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    v1, v2 = Path("/sys/fs/cgroup/blkio"), Path("/sys/fs/cgroup")
    if (v1 / "blkio.throttle.read_bps_device").exists():
        root = v1
        limit_file = f"blkio.throttle.read_{'iops' if iops else 'bps'}_device"
        limit = f"{dev} {iops or bps}\n"
    elif (v2 / "cgroup.controllers").exists() and "io" in (v2 / "cgroup.controllers").read_text():
        root, limit_file = v2, "io.max"
        limit = f"{dev} riops={iops}\n" if iops else f"{dev} rbps={bps}\n"
    else:
        pytest.skip("no blkio/io cgroup controller to throttle the storage")
    cg = root / f"iotrace-test-{os.getpid()}"
    cg.mkdir(exist_ok=True)
    try:
        try:
            (cg / limit_file).write_text(limit)
        except OSError as e:
            pytest.skip(f"cannot throttle {dev}: {e}")
        evict(path)
        yield ("sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh")
    finally:
        with contextlib.suppress(OSError):
            cg.rmdir()


def from_first_ask(trace, path: Path, nbytes: int, rate: float, since: str) -> float:
    """`rate` (nbytes over a span that starts at the first read request's
    issue or completion: `since`) over a span that starts when the job first
    asked for the file's data instead (a read call, or an io_uring or libaio
    read's submission). The block layer sees a request only once
    a throttle lets it go: the wait of the first one is in no request."""
    (asked, issued, completed), = rows(trace, f"""
        select min(e.ts_ns) filter (where e.op in {sql_list(READ_OPS + ASYNC_READ_OPS)}),
               min(e.ts_ns) filter (where e.op = 'block_rq'),
               min(e.ts_ns + e.dur_ns) filter (where e.op = 'block_rq')
        from events e join files f using (file_id) where f.path = ?""", str(path))
    start = {"issue": issued, "completion": completed}[since]
    return nbytes / (nbytes / rate + max(start - asked, 0) / 1e9)


@pytest.fixture
def cpu_neighbour():
    """Two processes that spin on CPU (one a core of this 2-core machine),
    not traced: another job on the same node."""
    spin = "while True: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    yield
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def blockdir(tmp_path):
    """A directory on a block device for page-cache, block and O_DIRECT tests:
    the test's tmp dir here, under $IOTRACE_BLOCK_DIR in the VM (an ext4 on a
    loop device: the guest's /tmp is not a block device)."""
    base = Path(os.environ.get("IOTRACE_BLOCK_DIR") or tmp_path)
    d = base / f"blk-{os.getpid()}-{tmp_path.name}"
    d.mkdir(parents=True, exist_ok=True)
    if os.major(os.stat(d).st_dev) == 0:
        pytest.skip(f"{d} is not on a block device (set IOTRACE_BLOCK_DIR)")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone Spark cluster (spark://, a master and two workers of a
    core each: executors in JVMs of their own reading the traces by their
    paths), one for each module that asks (it starts in ~13 s; stopped after
    it, so that its JVMs stay out of the timings of the tests that follow)."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install '.[spark]')")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime for Spark")
    from spark_cluster import standalone_cluster
    with standalone_cluster(tmp_path_factory.mktemp("spark")) as url:
        yield url


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(port, dir) of a moto S3 server process with a bucket "data", one per
    test module (tests/objstore.py)."""
    import objstore
    d = tmp_path_factory.mktemp("s3")
    with objstore.moto_server(d / "moto.log") as port:
        objstore.create_bucket(port, "data")
        yield port, d
