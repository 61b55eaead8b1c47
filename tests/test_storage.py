"""Page cache against storage, block devices and mmap, on real storage.

Ground truth is the workload's: the file's size read cold (page cache dropped)
must come from storage and a device, read warm from memory; fio's own JSON for
O_DIRECT requests; a cgroup throttle for the device's rate. The files live on
a block device: the test's tmp dir here, $IOTRACE_BLOCK_DIR in the VM (an
ext4 on a loop device: its /tmp is tmpfs).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import iotrace

from conftest import (cold_throttled_reads, evict, from_first_ask, iotrace_cmd, needs_root, rows,
                      scalar, trace_run)


pytestmark = needs_root()

MIB = 1 << 20


def random_file(path: Path, mib: int) -> Path:
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MIB))
    return path


def summary(out: Path) -> dict:
    proc = iotrace_cmd("summary", "--format", "json", str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def file_entry(s: dict, path: Path) -> dict:
    found = [f for f in s["files"] if f["path"] == str(path)]
    assert found, f"{path} not in the summary's files"
    return found[0]


def test_cold_read_comes_from_storage_warm_from_memory(tmp_path, blockdir):
    """dd reads the file cold, then again warm, in one job (this machine's
    host reclaims idle page cache within seconds: the second pass must follow
    the first at once)."""
    data = random_file(blockdir / "data.bin", 32)
    size = data.stat().st_size
    evict(data)
    dd = f"dd if={data} of=/dev/null bs=64k status=none"
    proc, trace = trace_run(tmp_path / "t", "sh", "-c", f"{dd}; {dd}")
    assert proc.returncode == 0, proc.stderr
    passes = rows(trace, """
        select e.pid, sum(e.ret), sum(e.arg) from events e join files f using (file_id)
        where e.op = 'read' and f.path = ? group by e.pid order by min(e.ts_ns)""", str(data))
    assert [p[1] for p in passes] == [size, size]
    (_, _, cold_miss), (_, _, warm_miss) = passes
    assert abs(cold_miss - size) <= 0.05 * size
    assert warm_miss <= 0.05 * size            # hits >= 95%
    summ = summary(tmp_path / "t")       # once: each CLI start costs seconds under emulation
    entry = file_entry(summ, data)
    assert entry["by_interface"]["syscall"]["read_bytes"] == 2 * size
    assert entry["cache_miss_bytes"] == cold_miss + warm_miss
    assert entry["cache_hit_bytes"] == 2 * size - entry["cache_miss_bytes"]
    assert abs(entry["device_read_bytes"] - entry["cache_miss_bytes"]) <= 0.05 * size
    # the Perfetto timeline: a counter track per device and one for the bytes
    # that came from storage, each summing to what the trace says
    proc = iotrace_cmd("export", "--perfetto", "--no-findings", str(tmp_path / "t"),
                       "-o", str(tmp_path / "t.pftrace"))
    assert proc.returncode == 0, proc.stderr
    tracks = counter_totals(tmp_path / "t.pftrace")
    dev = max(summ["devices"], key=lambda d: d["read_bytes"])
    assert tracks[f"device {dev['name']}: read MB/s"] == pytest.approx(dev["read_bytes"], rel=1e-3)
    assert tracks["job: from storage (page-cache misses) MB/s"] >= cold_miss


def counter_totals(path: Path) -> dict:
    """Bytes under each MB/s counter track of a .pftrace (a value holds until
    the next point), decoded with the `perfetto` package's protos."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    tr = pb.Trace.FromString(path.read_bytes())
    names = {p.track_descriptor.uuid: p.track_descriptor.name for p in tr.packet
             if p.HasField("track_descriptor")}
    points: dict = {}
    for p in tr.packet:
        if p.HasField("track_event") and p.track_event.HasField("double_counter_value"):
            points.setdefault(p.track_event.track_uuid, []).append(
                (p.timestamp, p.track_event.double_counter_value))
    return {names[u]: sum(v * 1e6 * (t2 - t) / 1e9 for (t, v), (t2, _) in zip(pts, pts[1:]))
            for u, pts in points.items() if names.get(u, "").endswith("MB/s")}


def test_numpy_mmap_faults_bring_the_file_in(tmp_path, blockdir):
    np = pytest.importorskip("numpy")
    path = blockdir / "array.npy"
    np.save(path, np.arange(4 * MIB, dtype=np.int64))   # 32 MiB
    size = path.stat().st_size
    evict(path)
    script = (f"import numpy as np; a = np.load({str(path)!r}, mmap_mode='r'); "
              f"print(int(a.sum()))")
    proc, trace = trace_run(tmp_path / "t", sys.executable, "-c", script)
    assert proc.returncode == 0, proc.stderr
    n = 4 * MIB
    assert int(proc.stdout.split()[-1]) == n * (n - 1) // 2
    (faults, major, faulted), = rows(trace, """
        select count(*), count(*) filter (where e.ret > 0), coalesce(sum(e.ret), 0)
        from events e join files f using (file_id)
        where e.op = 'page_fault' and f.path = ?""", str(path))
    assert major > 0 and faults >= major
    assert abs(faulted - size) <= 0.10 * size, (faulted, size)
    entry = file_entry(summary(tmp_path / "t"), path)
    assert entry["by_interface"]["mmap"]["reads"] == faults
    assert abs(entry["cache_miss_bytes"] - size) <= 0.10 * size


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_fio_mmap_engine_cold(tmp_path, blockdir):
    data = random_file(blockdir / "fio-mmap.bin", 32)
    size = data.stat().st_size
    evict(data)
    report = tmp_path / "fio.json"
    proc, _ = trace_run(tmp_path / "t", "fio", "--name=mm", f"--filename={data}",
                        "--ioengine=mmap", "--rw=read", "--bs=64k", f"--size={size}",
                        "--output-format=json", f"--output={report}")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(report.read_text())["jobs"][0]
    assert job["read"]["io_bytes"] == size
    entry = file_entry(summary(tmp_path / "t"), data)
    assert entry["by_interface"]["mmap"]["reads"] > 0
    assert abs(entry["cache_miss_bytes"] - size) <= 0.10 * size


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_direct_io_requests_match_fio(tmp_path, blockdir):
    data = random_file(blockdir / "fio-direct.bin", 16)
    evict(data)   # no dirty pages for O_DIRECT to flush first
    report = tmp_path / "fio.json"
    proc, trace = trace_run(tmp_path / "t", "fio", "--name=d", f"--filename={data}",
                            "--ioengine=psync", "--direct=1", "--rw=randread", "--bs=4k",
                            "--size=16M", "--io_size=4M", "--output-format=json",
                            f"--output={report}")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(report.read_text())["jobs"][0]
    (reqs, nbytes, bad), = rows(trace, """
        select count(*), sum(e.req_bytes), count(*) filter (where e.ret != 0)
        from events e join files f using (file_id)
        where e.op = 'block_rq' and f.path = ? and e.flags & 255 = 0""", str(data))
    assert reqs == job["read"]["total_ios"]
    assert nbytes == job["read"]["io_bytes"] and bad == 0
    entry = file_entry(summary(tmp_path / "t"), data)
    assert entry["device_read_bytes"] == job["read"]["io_bytes"]
    assert entry["cache_miss_bytes"] == 0   # O_DIRECT bypasses the page cache
    # traced from its start: every fd seen opened, none reused unseen (fio
    # maps libraries through fds it closed and reused: 66 were miscounted)
    assert trace.meta["counters"]["fd_identity_mismatches"] == 0


def test_writeback_of_the_jobs_file_is_the_jobs(tmp_path, blockdir):
    out = blockdir / "written.bin"
    proc, trace = trace_run(tmp_path / "t", "sh", "-c",
                            f"dd if=/dev/urandom of={out} bs=1M count=16 status=none; sync")
    assert proc.returncode == 0, proc.stderr
    entry = file_entry(summary(tmp_path / "t"), out)
    assert abs(entry["device_write_bytes"] - 16 * MIB) <= 0.01 * 16 * MIB
    (writeback,), = rows(trace, """
        select count(*) from events e join files f using (file_id)
        where e.op = 'block_rq' and f.path = ? and e.eflags & 8 != 0""", str(out))
    (by_job,), = rows(trace, """
        select count(*) from events e join files f using (file_id)
        where e.op = 'block_rq' and f.path = ? and e.eflags & 8 = 0""", str(out))
    assert writeback + by_job > 0


def findings_of(out: Path) -> dict:
    proc = iotrace_cmd("report", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return {f["id"]: f for f in json.loads(proc.stdout)["findings"]}


def test_throttled_device_rate_and_its_finding(tmp_path, blockdir):
    """A cgroup throttle makes real slow storage: the device's rate in the
    summary, and the device-at-limit finding naming the ceiling, within 10%,
    over the time from dd's first read (from_first_ask)."""
    data = random_file(blockdir / "slow.bin", 24)
    bps = 12 * 1000 * 1000
    with cold_throttled_reads(data, bps) as prefix:
        proc, trace = trace_run(tmp_path / "t", *prefix, "dd", f"if={data}", "of=/dev/null",
                                "bs=1M")
    assert proc.returncode == 0, proc.stderr
    s = summary(tmp_path / "t")
    dev = max(s["devices"], key=lambda d: d["read_bytes"])
    st = os.stat(data)
    assert (dev["major"], dev["minor"]) == (os.major(st.st_dev), os.minor(st.st_dev)) \
        or dev["read_bytes"] >= data.stat().st_size
    rate = from_first_ask(trace, data, dev["read_bytes"], dev["read_bytes_per_s"], "issue")
    assert abs(rate - bps) <= 0.10 * bps, (rate, dev)
    f = findings_of(tmp_path / "t").get("device-at-limit")
    assert f, "no device-at-limit finding on a throttled device"
    ev = f["evidence"]
    ceiling = from_first_ask(trace, data, ev["read_bytes"], ev["ceiling_bytes_per_s"],
                             "completion")
    assert abs(ceiling - bps) <= 0.10 * bps, (ceiling, ev)
    assert ev["device"] == dev["name"]
    assert ev["bound"] == "bandwidth"   # dd's 1 MiB reads: large requests


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_throttled_o_direct_reads_find_the_limit_not_the_cache(tmp_path, blockdir):
    """fio's O_DIRECT reads through a throttle: every read is flagged direct
    (fio's own count), none is taken for a page-cache hit, and the device's
    limit is found, as for buffered reads (an O_DIRECT read adds nothing to
    the page cache: it is a storage wait by its flag)."""
    data = random_file(blockdir / "slow-direct.bin", 24)
    bps = 12 * 1000 * 1000
    report = tmp_path / "fio.json"
    with cold_throttled_reads(data, bps) as prefix:
        proc, trace = trace_run(tmp_path / "t", *prefix, "fio", "--name=d",
                                f"--filename={data}", "--ioengine=psync", "--direct=1",
                                "--rw=read", "--bs=1M", "--size=24M", "--output-format=json",
                                f"--output={report}")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(report.read_text())["jobs"][0]["read"]
    (direct, nbytes, buffered), = rows(trace, """
        select count(*) filter (where e.eflags & 256 != 0),
               sum(e.ret) filter (where e.eflags & 256 != 0),
               count(*) filter (where e.eflags & 256 = 0)
        from events e join files f using (file_id)
        where e.op = 'pread64' and f.path = ?""", str(data))
    assert (direct, nbytes, buffered) == (job["total_ios"], job["io_bytes"], 0)
    entry = file_entry(summary(tmp_path / "t"), data)
    assert entry["direct_read_bytes"] == job["io_bytes"]
    assert (entry["cache_hit_bytes"], entry["cache_miss_bytes"]) == (0, 0)
    found = findings_of(tmp_path / "t")
    assert "page-cache-hides-storage" not in found
    f = found.get("device-at-limit")
    assert f, f"no device-at-limit finding on O_DIRECT reads: {sorted(found)}"
    ev = f["evidence"]
    assert ev["storage_wait_share"] >= 0.8, ev
    ceiling = from_first_ask(trace, data, ev["read_bytes"], ev["ceiling_bytes_per_s"],
                             "completion")
    assert abs(ceiling - bps) <= 0.10 * bps, (ceiling, ev)


def test_direct_flag_follows_the_file_not_the_open(tmp_path, blockdir):
    """The DIRECT flag is the file's state at each call: buffered reads, then
    the same fd switched to O_DIRECT with fcntl, then a dup of it: exactly the
    calls after the switch are flagged."""
    data = random_file(blockdir / "switch.bin", 1)
    script = (
        "import fcntl, mmap, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "for i in range(5): os.pread(fd, 4096, i * 4096)\n"
        "fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)\n"
        "buf = mmap.mmap(-1, 4096)\n"
        "for i in range(7): os.preadv(fd, [buf], i * 4096)\n"
        "fd2 = os.dup(fd)\n"
        "for i in range(3): os.preadv(fd2, [buf], i * 4096)\n")
    proc, trace = trace_run(tmp_path / "t", sys.executable, "-c", script, str(data))
    assert proc.returncode == 0, proc.stderr
    got = rows(trace, """
        select e.op, e.eflags & 256 != 0, count(*) from events e join files f using (file_id)
        where e.op in ('pread64', 'preadv', 'preadv2') and f.path = ? group by all order by all""",
               str(data))
    # glibc's preadv is the preadv2 system call
    assert [(op.replace('preadv2', 'preadv'), d, n) for op, d, n in got] == \
        [("pread64", False, 5), ("preadv", True, 10)], got


def test_throttled_direct_reads_are_the_jobs(tmp_path, blockdir):
    """O_DIRECT reads held back by a cgroup throttle reach the device from a
    kernel worker (and may be split there): every byte of dd's 24 reads of
    1 MiB is still the job's, on its file."""
    data = random_file(blockdir / "direct.bin", 24)
    with cold_throttled_reads(data, 24 * 1000 * 1000) as prefix:
        proc, trace = trace_run(tmp_path / "t", *prefix, "dd", f"if={data}", "of=/dev/null",
                                "bs=1M", "iflag=direct")
    assert proc.returncode == 0, proc.stderr
    (path_bytes, n, by_worker), = rows(trace, """
        select sum(e.req_bytes), count(*), count(*) filter (where e.eflags & 8 <> 0)
        from events e join files f using (file_id)
        where e.op = 'block_rq' and f.path = ?""", str(data))
    # every byte, in 24 requests or more (a request may be split in two)
    assert path_bytes == 24 * MIB and n >= 24, (path_bytes, n)
    assert by_worker >= 1, by_worker      # some went through the throttle's worker


def test_no_device_finding_when_the_device_keeps_up(tmp_path, blockdir):
    """The same file read cold without a throttle: the device serves it in a
    fraction of a second, too short to call a limit (min_span_s)."""
    data = random_file(blockdir / "fast.bin", 24)
    evict(data)
    proc, _ = trace_run(tmp_path / "t", "dd", f"if={data}", "of=/dev/null", "bs=1M")
    assert proc.returncode == 0, proc.stderr
    assert "device-at-limit" not in findings_of(tmp_path / "t")


def test_page_cache_finding_on_a_warm_run_only(tmp_path, blockdir):
    """The same 80 MiB read cold once: no finding. Read ten times in one job
    right after an untraced read: the finding, with its share. (This host
    reclaims idle page cache within seconds; even if the job's first pass
    missed entirely, the other nine make the share at least 0.9.)"""
    data = random_file(blockdir / "warm.bin", 80)
    size = data.stat().st_size
    dd = f"dd if={data} of=/dev/null bs=1M status=none"

    def findings(out):
        proc = iotrace_cmd("report", str(out), "--format", "json")
        assert proc.returncode == 0, proc.stderr
        return {f["id"]: f for f in json.loads(proc.stdout)["findings"]}

    evict(data)
    proc, _ = trace_run(tmp_path / "cold", "sh", "-c", dd)
    assert proc.returncode == 0, proc.stderr
    assert "page-cache-hides-storage" not in findings(tmp_path / "cold")

    subprocess.run(["sh", "-c", dd], check=True)
    proc, _ = trace_run(tmp_path / "warm", "sh", "-c", "; ".join([dd] * 10))
    assert proc.returncode == 0, proc.stderr
    f = findings(tmp_path / "warm")["page-cache-hides-storage"]
    assert f["evidence"]["read_bytes"] == 10 * size
    assert f["evidence"]["hit_share"] >= 0.9
    assert f["files"][0]["path"] == str(data)


@contextlib.contextmanager
def loop_ext4(image: Path, mib: int = 64):
    """An ext4 on a loop device over `image`, mounted; the loop device reads
    its backing file with O_DIRECT, so each of its requests waits on the
    backing file's device (and on a throttle of that device)."""
    subprocess.run(["truncate", "-s", f"{mib}M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    lo = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", str(image)],
                        capture_output=True, text=True)
    if lo.returncode:
        pytest.skip(f"no loop device: {lo.stderr.strip()}")
    dev, mnt = lo.stdout.strip(), image.parent / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(["mount", dev, str(mnt)], check=True)
        try:
            yield mnt
        finally:
            subprocess.run(["umount", str(mnt)])
    finally:
        subprocess.run(["losetup", "-d", dev])


@pytest.mark.skipif(shutil.which("losetup") is None or shutil.which("mkfs.ext4") is None,
                    reason="losetup or mkfs.ext4 missing")
def test_requests_in_flight_when_tracing_ends_are_kept(tmp_path):
    """A trace that ends while block requests are in flight keeps them, with
    what they were issued with (eflags NO_COMPLETION, dur_ns 0, counted in
    counters.block_no_completion). dd reads 1 MiB at a time with O_DIRECT
    from an ext4 on a loop device whose backing file is read through a
    1 MB/s throttle: each read's requests stay in flight for up to a second,
    one read follows the other at once, and `attach --duration` ends mid-read.
    So the requests left at the end are the last read's (issued together,
    1 MiB in all with those of it that finished), and every read's bytes are
    whole."""
    with loop_ext4(tmp_path / "disk.img") as mnt:
        data = random_file(mnt / "data.bin", 8)
        evict(data)   # written back first: dd's direct reads would flush it
        with cold_throttled_reads(tmp_path / "disk.img", 1_000_000) as prefix:
            dd = subprocess.Popen([*prefix, "dd", f"if={data}", "of=/dev/null", "bs=1M",
                                   "iflag=direct", "status=none"])
            try:
                out = tmp_path / "t"
                proc = iotrace_cmd("attach", "-q", "--pid", str(dd.pid), "--duration", "2.5",
                                   "-o", str(out))
                assert proc.returncode == 0, proc.stderr
                assert dd.poll() is None, "dd ended before the trace did"
            finally:
                dd.kill()
                dd.wait()
        trace = iotrace.open_trace(out)
        # (a request of an earlier read may lack its completion too: the kernel
        # does not always run the completion probe (bpf/block.bpf.c), and the
        # request is recorded unfinished when its slot is reused: once in a
        # clean clone's run, a 544 KiB request of the second of three reads)
        last = scalar(trace, f"select max(ts_ns) from events where op = 'read' "
                             f"and req_bytes = {MIB}")
        requests = rows(trace, f"""
            select e.eflags & 512 != 0 as unfinished, count(*), sum(e.req_bytes),
                   count(*) filter (where e.dur_ns > 0), min(f.path), max(f.path)
            from events e left join files f using (file_id)
            where e.op = 'block_rq' and e.flags & 255 = 0
              and (e.eflags & 512 = 0 or e.ts_ns >= {last}) group by 1 order by 1""")
        missed, missed_bytes = rows(trace, f"""
            select count(*), coalesce(sum(req_bytes), 0) from events
            where op = 'block_rq' and flags & 255 = 0 and eflags & 512 != 0
              and ts_ns < {last}""")[0]
        print("completions not seen before the last read:", missed, missed_bytes)
        assert [r[0] for r in requests] == [False, True], requests
        (_, done, done_bytes, done_timed, *done_paths), (_, n, nbytes, timed, *paths) = requests
        assert 0 < nbytes <= MIB and timed == 0, requests
        assert paths == [str(data)] * 2 and done_paths == [str(data)] * 2, requests
        assert done == done_timed and (done_bytes + nbytes + missed_bytes) % MIB == 0, requests
        # the last read: its requests were issued within a millisecond
        last_read = scalar(trace, f"""
            with b as (select ts_ns, req_bytes, eflags from events
                       where op = 'block_rq' and flags & 255 = 0)
            select sum(req_bytes) from b where ts_ns >= (
                select min(ts_ns) - 1000000 from b where eflags & 512 != 0
                and ts_ns >= {last})""")
        assert last_read == MIB, requests
        assert trace.meta["counters"]["block_no_completion"] == n + missed
        # the device's bytes count both; its service times only the finished ones
        dev = max(summary(out)["devices"], key=lambda d: d["read_bytes"])
        assert dev["read_bytes"] == done_bytes + nbytes + missed_bytes, dev
        p50 = scalar(trace, """select median(dur_ns) / 1e6 from events
                              where op = 'block_rq' and eflags & 512 = 0""")
        assert dev["service_ms_p50"] == pytest.approx(p50) and p50 > 0, dev
