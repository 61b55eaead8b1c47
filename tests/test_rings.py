"""The record rings: one per CPU, so that CPUs recording at once do not queue
for one lock, and the drain that merges their records back into one order
(userspace/recorder/rings.c): the trace's model replays opens, forks and
chdirs in record order, which one ring gave by itself."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import iotrace_cmd, keep_spool, needs_root
from iotrace.abi import EVENT_DTYPE, OP

import iotrace

MiB = 1 << 20


def possible_cpus() -> int:
    n = 0
    for part in Path("/sys/devices/system/cpu/possible").read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def expected_rings(ringbuf_mb: int, cpus: int) -> int:
    n = 1
    while n * 2 <= min(cpus, 8) and (ringbuf_mb * MiB) // (n * 2) >= 256 * 1024:
        n *= 2
    return n


@needs_root()
def test_a_ring_per_cpu_and_one_order(tmp_path):
    """Two fio jobs reading at once on different CPUs write to different
    rings; the spool holds every read fio counted, in the order the calls
    ended."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(32 * MiB))
    keep, env = keep_spool(tmp_path)
    res = iotrace_cmd("run", "-q", "--no-node-summary", "-o", str(tmp_path / "t"), "--",
                      "fio", "--name=r", f"--filename={data}", "--rw=randread", "--bs=4k",
                      "--ioengine=psync", "--size=32M", "--io_size=128M", "--numjobs=2",
                      "--invalidate=0", "--group_reporting", "--output-format=json", env=env)
    assert res.returncode == 0, res.stderr
    ios = json.loads(res.stdout[res.stdout.index("{"):])["jobs"][0]["read"]["total_ios"]
    assert ios == 2 * 128 * MiB // 4096
    t = iotrace.open_trace(tmp_path / "t")
    rings = expected_rings(64, possible_cpus())
    assert t.meta["probes"]["rings"] == rings
    assert t.meta["probes"]["rings"] * t.meta["probes"]["ring_bytes"] == 64 * MiB
    assert t.meta["drops"] == 0
    # the spool went to `keep` (the trace itself is empty): its records
    recs = np.concatenate([np.fromfile(p, dtype=EVENT_DTYPE) for p in sorted(keep.glob("*.ev"))])
    reads = recs[(recs["op"] == OP["pread64"]) & (recs["ino"] == data.stat().st_ino)]
    assert len(reads) == ios
    assert len(np.unique(reads["pid"])) == 2
    if rings < 2:
        pytest.skip("one possible CPU: one ring, nothing to merge")
    end = reads["ts_ns"].astype(np.int64) + reads["dur_ns"].astype(np.int64)
    # reads that ended before one the spool already holds: a record made on
    # one CPU between another's end and its reserve (a program nested in it)
    # can swap two neighbours; each ring's records in runs (no merge) put
    # half of them behind the other ring's
    late = int((end[1:] < np.maximum.accumulate(end)[:-1]).sum())
    assert late <= max(3, len(reads) // 10_000), late


@needs_root()
def test_a_quiet_ring_is_read_while_a_busy_one_wakes_the_drain(tmp_path):
    """One thread on CPU 0 opens directories; another on CPU 1, where fio
    keeps that CPU's ring waking the drain, opens a file relative to each
    directory's fd (openat). The directory's open sits in CPU 0's ring, which
    fills too slowly to wake anyone; it must still be read before the openat
    that names the file through it, or that file has no path."""
    if possible_cpus() < 2 or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    dirs = [tmp_path / f"d{i}" for i in range(100)]
    for d in dirs:
        d.mkdir()
        (d / "data.bin").write_bytes(b"x" * 4096)
    data = tmp_path / "fio.bin"
    data.write_bytes(os.urandom(16 * MiB))
    script = tmp_path / "dirfds.py"
    script.write_text(f"""import os, queue, threading, time
dirs = {[str(d) for d in dirs]!r}
q = queue.Queue()

def opener():
    os.sched_setaffinity(0, {{0}})
    for d in dirs:
        q.put(os.open(d, os.O_RDONLY | os.O_DIRECTORY))
        time.sleep(0.01)
    q.put(None)

def reader():
    os.sched_setaffinity(0, {{1}})
    while (dfd := q.get()) is not None:
        fd = os.open("data.bin", os.O_RDONLY, dir_fd=dfd)
        os.read(fd, 1)

time.sleep(0.3)                      # fio is running
threads = [threading.Thread(target=f) for f in (opener, reader)]
for t in threads:
    t.start()
for t in threads:
    t.join()
""")
    res = iotrace_cmd("run", "-q", "--no-node-summary", "-o", str(tmp_path / "t"), "--",
                      "sh", "-c", f"fio --name=busy --filename={data} --rw=randread --bs=4k "
                      f"--ioengine=psync --size=16M --invalidate=0 --time_based --runtime=2 "
                      f"--cpus_allowed=1 --output=/dev/null & {sys.executable} {script}; wait")
    assert res.returncode == 0, res.stderr
    t = iotrace.open_trace(tmp_path / "t")
    assert t.meta["probes"]["rings"] >= 2
    paths = sorted(r[0] or "" for r in t.con.execute(
        "select e.path from events e join files f using (file_id) "
        "where e.op = 'openat' and f.path like ? and e.ret >= 0",
        [str(tmp_path / "d%" / "data.bin")]).fetchall())
    assert len(paths) == 100
    assert paths == sorted(str(d / "data.bin") for d in dirs)
