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

from conftest import iotrace_cmd, needs_root
from iotrace.abi import EVENT_DTYPE, OP
from iotrace.session import recorder_path

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


def keep_spool(base: Path) -> tuple[Path, dict]:
    """An IOTRACE_RECORDER wrapper that makes the recorder write its spool
    where the test can read it (iotrace converts and deletes its own)."""
    keep = base / "kept"
    wrapper = base / "recorder"
    wrapper.write_text(f"#!{sys.executable}\nimport os, sys\n"
                       "a = sys.argv[1:]\n"
                       f"a[a.index('--spool') + 1] = {str(keep)!r}\n"
                       f"os.makedirs({str(keep)!r}, exist_ok=True)\n"
                       f"os.execv({recorder_path()!r}, [{recorder_path()!r}, *a])\n")
    wrapper.chmod(0o755)
    return keep, dict(os.environ, IOTRACE_RECORDER=str(wrapper))


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
