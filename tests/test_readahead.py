"""Readahead and memory-mapped access patterns, checked against fio's own
numbers: a sequential reader with readahead turned off (fio's
fadvise_hint=random: POSIX_FADV_RANDOM), random page touches of a mapping
with and without MADV_RANDOM (fio's mmap engine: fadvise_hint=1 advises
MADV_RANDOM for random patterns, 0 advises nothing, so the kernel reads
around each fault). Each finding is checked on the run that should raise it
and on its twin that should not. The files live on a block device (blockdir)."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from conftest import cold_throttled_reads, evict, needs_root, rows, trace_run
from test_storage import MIB, findings_of, random_file

pytestmark = [needs_root(),
              pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")]


def fio_traced(out, data, *args, prefix=()):
    report = out.parent / (out.name + "-fio.json")
    proc, trace = trace_run(out, *prefix, "fio", "--name=j", f"--filename={data}", "--bs=4k",
                            "--output-format=json", f"--output={report}", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(report.read_text())["jobs"][0]["read"], trace


def test_sequential_reads_without_readahead(tmp_path, blockdir):
    data = random_file(blockdir / "seq.bin", 32)
    evict(data)
    fio, _ = fio_traced(tmp_path / "off", data, "--rw=read", "--fadvise_hint=random")
    f = findings_of(tmp_path / "off").get("readahead-missing")
    assert f, "no readahead-missing finding for in-order reads with POSIX_FADV_RANDOM"
    entry, = [x for x in f["files"] if x["path"] == str(data)]
    # every 4 KiB read missed and brought its own 4 KiB
    assert entry["reads"] == fio["total_ios"]
    assert entry["missing_reads"] >= 0.95 * fio["total_ios"]
    assert entry["bytes_per_miss"] == 4096
    assert entry["sequential_share"] >= 0.99
    # the same reads with readahead (fio's default advice: sequential)
    evict(data)
    fio_traced(tmp_path / "on", data, "--rw=read", "--fadvise_hint=1")
    assert "readahead-missing" not in findings_of(tmp_path / "on")


def fault_totals(trace, data):
    (faults, majors, brought), = rows(trace, """
        select count(*), count(*) filter (where e.ret > 0), coalesce(sum(e.ret), 0)
        from events e join files f using (file_id)
        where e.op = 'page_fault' and f.path = ?""", str(data))
    return faults, majors, brought


def test_read_around_wasted_on_sparse_random_touches(tmp_path, blockdir):
    """1 MiB of random 4 KiB touches in a 128 MiB mapping: without advice the
    kernel reads around each fault (128 KiB and up), and most of it is never
    touched; with MADV_RANDOM each fault brings its own page."""
    data = random_file(blockdir / "sparse.bin", 128)
    args = ("--ioengine=mmap", "--rw=randread", "--size=128M", "--io_size=1M")
    evict(data)
    fio, trace = fio_traced(tmp_path / "around", data, *args, "--fadvise_hint=0")
    _, majors, brought = fault_totals(trace, data)
    f = findings_of(tmp_path / "around").get("readahead-wasted")
    assert f, f"no readahead-wasted finding ({majors} major faults brought {brought} bytes)"
    ev = f["evidence"]
    assert ev["brought_bytes"] >= brought
    # a lower bound: at most what fio touched was used
    assert 16 * MIB <= ev["wasted_bytes_at_least"] <= ev["brought_bytes"] - fio["io_bytes"]
    assert f["files"][0]["path"] == str(data)

    evict(data)
    fio, trace = fio_traced(tmp_path / "random", data, *args, "--fadvise_hint=1")
    faults, majors, brought = fault_totals(trace, data)
    assert majors == faults == fio["total_ios"] and brought == fio["io_bytes"]
    assert "readahead-wasted" not in findings_of(tmp_path / "random")


def test_random_faults_on_slow_storage(tmp_path, blockdir):
    """Random 4 KiB touches of a mapping with MADV_RANDOM on a device held to
    1000 requests/s: one major fault per touch, each a device round trip."""
    data = random_file(blockdir / "mapped.bin", 32)
    with cold_throttled_reads(data, iops=1000) as prefix:
        fio, trace = fio_traced(tmp_path / "t", data, "--ioengine=mmap", "--rw=randread",
                                "--size=32M", "--io_size=4M", "--fadvise_hint=1",
                                prefix=prefix)
    f = findings_of(tmp_path / "t").get("mmap-random-faults")
    assert f, "no mmap-random-faults finding"
    entry, = [x for x in f["files"] if x["path"] == str(data)]
    assert entry["major_faults"] == fio["total_ios"]
    assert entry["random_share"] >= 0.9
    # 1024 requests at 1000/s: about a second stalled
    assert 0.8 <= f["evidence"]["stall_s"] <= 2.5, f["evidence"]
    # the same mapping read in order: faults follow each other, no finding
    evict(data)
    fio_traced(tmp_path / "seq", data, "--ioengine=mmap", "--rw=read", "--size=32M")
    found = findings_of(tmp_path / "seq")
    assert "mmap-random-faults" not in found and "readahead-wasted" not in found


def test_numpy_memmap_random_rows_waste_read_around(tmp_path, blockdir):
    """The loader pattern: a Dataset indexing a memory-mapped .npy at random
    rows (500 rows of 4 KiB out of 32768, cold). Read-around brings far more
    than the 2 MB the rows hold."""
    np = pytest.importorskip("numpy")
    path = blockdir / "rows.npy"
    np.save(path, np.arange(32768 * 512, dtype=np.int64).reshape(32768, 512))   # 128 MiB
    evict(path)
    script = (f"import numpy as np; a = np.load({str(path)!r}, mmap_mode='r'); "
              "idx = np.random.default_rng(1).choice(len(a), 500, replace=False); "
              "print(int(a[np.sort(idx)].sum()))")
    proc, trace = trace_run(tmp_path / "t", sys.executable, "-c", script)
    assert proc.returncode == 0, proc.stderr
    used = 500 * 512 * 8
    _, majors, brought = fault_totals(trace, path)
    f = findings_of(tmp_path / "t").get("readahead-wasted")
    assert f, f"no readahead-wasted finding ({majors} major faults brought {brought} bytes)"
    ev = f["evidence"]
    assert ev["major_faults"] == majors and ev["brought_bytes"] >= brought
    assert 16 * MIB <= ev["wasted_bytes_at_least"] <= ev["brought_bytes"] - used
