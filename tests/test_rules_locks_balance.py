"""The lock-contention and imbalance rules.

Unit tests build synthetic traces whose numbers are known exactly and walk
each threshold's edge. Real tests trace workloads whose ground truth the
program itself prints or the trace's own read intervals give:
  - 4 threads reading one HDF5 file through h5py: serialised by h5py's lock;
  - tests/workloads/lockwait.c: threads on one pthread mutex, each timing its
    own waits;
  - a fork pool of 4 workers, one slow (lb_pool.py), and the same pool balanced;
  - fio, 1 MiB sequential psync reads, one job: clean, no high finding.
"""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys

import pytest

from conftest import WORKLOADS, needs_root, rows, trace_run
from synth import ev, synth_trace

from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report

MS = 1_000_000
MiB = 1 << 20
ADDR = 0x7F00_0000_1000


def findings(trace, rule, config=None):
    r = build_report(trace, Targets(), thresholds_path=config, only=[rule])
    assert not r.errors, r.errors
    return r.findings


def one(trace, rule, config=None):
    got = findings(trace, rule, config)
    assert len(got) == 1, [f.summary for f in got]
    return got[0]


# ---------------------------------------------------------------- lock-contention, synthetic

N_READS = 30


def lock_trace(tmp, shares, *, serial=True, shared=True, pid=100, cmdline="job",
               op="futex", ret=0, flags=128, addr=ADDR, extra=(), files=None, processes=None):
    """Threads pid+1.. each pread 30 x 4 KiB of /data/x.bin, one every 1 ms
    (offset 0.2 ms per thread, 0.1 ms long: serial; or all at the same time),
    and wait once, inside the I/O window, for share x window. Returns (trace,
    window ns): the window is the first read's start to the last read's end."""
    n = len(shares)
    step = 200_000 if serial else 0
    window = (N_READS - 1) * MS + (n - 1) * step + 100_000
    events = []
    for k, share in enumerate(shares):
        tid = pid + 1 + k
        events += [ev("pread64", ts=j * MS + k * step, dur=100_000, pid=pid, tid=tid,
                      off=j * 4096, req=4096, ret=4096, file_id=0) for j in range(N_READS)]
        if share:
            events.append(ev(op, ts=MS // 2, dur=int(share * window), pid=pid, tid=tid, fd=-1,
                             arg=addr if shared else addr + 4096 * (k + 1), ret=ret,
                             flags=flags))
    events += list(extra)
    procs = processes or [(pid, 1, cmdline)]
    return synth_trace(tmp, events, files=files or [(0, "/data/x.bin")], processes=procs), window


def test_serialised_readers_are_high_below_the_high_share(tmp_path):
    t, window = lock_trace(tmp_path, [0.3] * 4)
    f = one(t, "lock-contention")
    assert f.rule_severity == "high"
    e = f.evidence
    assert (e["pid"], e["io_threads"], e["readers"], e["reads"]) == (100, 4, 4, 4 * N_READS)
    assert e["max_concurrent_reads"] == 1
    assert e["io_window_s"] == pytest.approx(window / 1e9)
    assert e["wait_share"] == pytest.approx(0.3, abs=1e-6)
    assert e["total_wait_s"] == pytest.approx(4 * int(0.3 * window) / 1e9)
    assert e["top_address"] == hex(ADDR) and e["top_lock_threads"] == 4
    assert e["top_lock_waits"] == 4 and e["lock_kind"] == "futex"
    assert sorted(p["tid"] for p in f.processes) == [101, 102, 103, 104]
    assert all(p["wait_share"] == pytest.approx(0.3, abs=1e-6) for p in f.processes)
    assert "never ran at the same time" in f.summary
    assert len(f.examples) == 3 and all(x["ts_ns"] == MS // 2 for x in f.examples)


@pytest.mark.parametrize("share,severity", [(0.19, None), (0.21, "warn"), (0.9, "warn")])
def test_private_waits_warn_edge(tmp_path, share, severity):
    # concurrent reads, each thread on its own futex: never high, warn from 20%
    t, _ = lock_trace(tmp_path, [share] * 4, serial=False, shared=False)
    got = findings(t, "lock-contention")
    assert [f.rule_severity for f in got] == ([severity] if severity else [])
    if got:
        assert got[0].evidence["max_concurrent_reads"] == 4
        assert got[0].evidence["top_lock_threads"] == 1


@pytest.mark.parametrize("share,severity", [(0.49, "warn"), (0.51, "high")])
def test_shared_lock_high_edge(tmp_path, share, severity):
    t, _ = lock_trace(tmp_path, [share] * 4, serial=False)
    f = one(t, "lock-contention")
    assert f.rule_severity == severity
    assert f.evidence["wait_share"] == pytest.approx(share, abs=1e-6)


def test_serialisation_needs_enough_reads_and_two_readers(tmp_path):
    # one reader: max_concurrent_reads 1 proves nothing, and a lock no other thread
    # waits on is not contention between threads -> warn, even at the high share
    t, _ = lock_trace(tmp_path / "a", [0.5])
    f = one(t, "lock-contention")
    assert (f.rule_severity, f.evidence["readers"], f.evidence["max_concurrent_reads"]) == \
        ("warn", 1, 1)
    cfg = tmp_path / "th.toml"
    cfg.write_text("[lock-contention]\nmin_serial_reads = 121\n")
    t, _ = lock_trace(tmp_path / "b", [0.3] * 4)
    assert one(t, "lock-contention", str(cfg)).rule_severity == "warn"
    cfg.write_text("[lock-contention]\nmin_serial_reads = 120\n")
    assert one(t, "lock-contention", str(cfg)).rule_severity == "high"


def test_thresholds_override(tmp_path):
    t, _ = lock_trace(tmp_path, [0.3] * 4, serial=False, shared=False)
    cfg = tmp_path / "th.toml"
    cfg.write_text("[lock-contention]\nwarn_wait_share = 0.35\n")
    assert findings(t, "lock-contention", str(cfg)) == []
    cfg.write_text("[lock-contention]\nhigh_wait_share = 0.25\n")
    assert one(t, "lock-contention", str(cfg)).rule_severity == "warn"   # not shared: still warn


def test_min_wait_edge(tmp_path):
    # 4 x 0.8 x 29.7 ms = 95 ms of waits: above 0.095 s, below 0.096 s
    t, window = lock_trace(tmp_path, [0.8] * 4)
    total = 4 * int(0.8 * window) / 1e9
    cfg = tmp_path / "th.toml"
    cfg.write_text(f"[lock-contention]\nmin_wait_s = {total + 1e-6}\n")
    assert findings(t, "lock-contention", str(cfg)) == []
    cfg.write_text(f"[lock-contention]\nmin_wait_s = {total - 1e-6}\n")
    assert one(t, "lock-contention", str(cfg)).rule_severity == "high"


def test_waits_outside_the_io_window_do_not_count(tmp_path):
    # a start-up barrier before the first read and a join after the last one
    extra = [ev("futex", ts=-500 * MS, dur=499 * MS, pid=100, tid=101, fd=-1, arg=ADDR),
             ev("futex", ts=40 * MS, dur=500 * MS, pid=100, tid=102, fd=-1, arg=ADDR)]
    t, _ = lock_trace(tmp_path, [0, 0, 0.1, 0.1], extra=extra)
    assert findings(t, "lock-contention") == []


def test_a_wait_across_the_window_edge_is_cut(tmp_path):
    # half of a 20 ms wait lies before the first read
    extra = [ev("futex", ts=-10 * MS, dur=20 * MS, pid=100, tid=101, fd=-1, arg=ADDR)]
    t, window = lock_trace(tmp_path, [0, 0.3, 0.3, 0.3], extra=extra)
    f = one(t, "lock-contention")
    by_tid = {p["tid"]: p for p in f.processes}
    assert by_tid[101]["wait_s"] == pytest.approx(0.010)
    assert f.evidence["total_wait_s"] == pytest.approx((10 * MS + 3 * int(0.3 * window)) / 1e9)


def test_threads_off_the_io_path_do_not_count(tmp_path):
    # a thread that only waits, and a thread that only read Python code: not I/O threads
    extra = [ev("futex", ts=0, dur=29 * MS, pid=100, tid=200, fd=-1, arg=ADDR),
             ev("read", ts=0, dur=1000, pid=100, tid=201, req=MiB, ret=MiB, file_id=1),
             ev("futex", ts=MS, dur=28 * MS, pid=100, tid=201, fd=-1, arg=ADDR)]
    t, _ = lock_trace(tmp_path, [0.1] * 4, extra=extra,
                      files=[(0, "/data/x.bin"), (1, "/usr/lib/python3.11/os.pyc")])
    assert findings(t, "lock-contention") == []


def test_hdf5_library_mapped_is_a_hint_not_the_lock(tmp_path):
    """A library loaded is not evidence of its lock (Keras loads h5py whatever
    it reads): without stacks, HDF5 is named only as a possibility."""
    extra = [ev("mmap", ts=-MS, pid=100, tid=100, fd=3, req=4 * MiB, ret=0x7F1234560000,
                file_id=1)]
    t, _ = lock_trace(tmp_path, [0.3] * 4, extra=extra, cmdline="python load.py",
                      files=[(0, "/data/x.bin"),
                             (1, "/venv/site-packages/h5py.libs/libhdf5-9e18.so.320.0.0")])
    f = one(t, "lock-contention")
    assert f.evidence["lock_kind"] == "python-lock"
    assert "loaded HDF5" in f.evidence["likely_lock"]


def test_hdf5_inherited_by_a_forked_worker_or_named_by_the_file(tmp_path):
    # the parent loaded libhdf5 (openat), the forked child's threads wait: a hint
    extra = [ev("openat", ts=-MS, pid=50, tid=50, fd=3, ret=3, file_id=1,
                path="/usr/lib/x86_64-linux-gnu/libhdf5_serial.so.103")]
    t, _ = lock_trace(tmp_path / "a", [0.3] * 4, extra=extra,
                      processes=[(50, 1, "python train.py"), (100, 50, "python train.py")],
                      files=[(0, "/data/x.bin"), (1, "/usr/lib/libhdf5_serial.so.103")])
    f = one(t, "lock-contention")
    assert f.evidence["lock_kind"] != "hdf5" and "loaded HDF5" in f.evidence["likely_lock"]
    # the readers read an HDF5 file: evidence
    t, _ = lock_trace(tmp_path / "b", [0.3] * 4, files=[(0, "/data/train.H5")])
    assert one(t, "lock-contention").evidence["lock_kind"] == "hdf5"


def test_gil_and_python_lock(tmp_path):
    # all threads of a Python process on one lock; waits that time out: the GIL
    timeouts = [ev("futex", ts=25 * MS, dur=5 * MS, pid=100, tid=101 + k, fd=-1, arg=ADDR + 4,
                   ret=-110, flags=137) for k in range(4)]
    t, _ = lock_trace(tmp_path / "a", [0.3] * 4, cmdline="python3 train.py", extra=timeouts)
    f = one(t, "lock-contention")
    assert (f.evidence["lock_kind"], f.evidence["likely_lock"]) == ("gil", "the Python GIL")
    assert f.evidence["top_lock_timed_out_waits"] == 4
    assert f.evidence["top_lock_waits"] == 8          # ADDR and ADDR + 4: one 64-byte line
    assert f.evidence["top_address"] == hex(ADDR)     # the word waited on most
    assert "multiprocessing" in f.recommendation
    t, _ = lock_trace(tmp_path / "b", [0.3] * 4, cmdline="python3 train.py")
    assert one(t, "lock-contention").evidence["lock_kind"] == "python-lock"
    t, _ = lock_trace(tmp_path / "c", [0.3] * 4, cmdline="./train")   # not Python
    assert one(t, "lock-contention").evidence["lock_kind"] == "futex"


def test_kernel_lock(tmp_path):
    inode_lock = -0x7777_D3A0_0000    # kernel addresses are negative as int64
    t, window = lock_trace(tmp_path, [0.6] * 4, serial=False, op="lock_contention", flags=4,
                           addr=inode_lock)
    f = one(t, "lock-contention")
    assert f.rule_severity == "high"                       # over 0.5, on a kernel lock
    e = f.evidence
    assert (e["lock_kind"], e["likely_lock"]) == ("kernel", "kernel rw semaphore (writer)")
    assert e["top_address"] == hex(inode_lock & (2**64 - 1))
    assert e["kernel_lock_wait_s"] == pytest.approx(4 * int(0.6 * window) / 1e9)
    assert e["futex_wait_s"] == 0 and e["wait_share"] == pytest.approx(0.6, abs=1e-6)
    # a kernel lock is named as such even in a process that loaded HDF5
    hdf5 = [ev("mmap", ts=-MS, pid=100, tid=100, fd=3, req=MiB, ret=0x7F1234560000,
               file_id=1)]
    t, _ = lock_trace(tmp_path / "h", [0.6] * 4, serial=False, op="lock_contention",
                      flags=4, addr=inode_lock, extra=hdf5,
                      files=[(0, "/data/x.bin"), (1, "/opt/hdf5/lib/libhdf5.so.310")])
    assert one(t, "lock-contention").evidence["lock_kind"] == "kernel"


def test_no_io_no_finding(tmp_path):
    t = synth_trace(tmp_path, [ev("futex", ts=0, dur=10**9, fd=-1, arg=ADDR)])
    assert findings(t, "lock-contention") == []


# ---------------------------------------------------------------- imbalance, synthetic

def reads_over(pid, span, n=11, size=MiB, dur=100_000, start=0, tid=None, file_id=0):
    """n reads of `size`, evenly from `start` so that the last one ends at start + span."""
    gap = (span - dur) // (n - 1)
    assert gap * (n - 1) + dur == span
    return [ev("read", ts=start + j * gap, dur=dur, pid=pid, tid=tid or pid, off=j * size,
               req=size, ret=size, file_id=file_id) for j in range(n)]


def pool_trace(tmp, spans, sizes=None, extra=(), files=None):
    events = []
    for k, span in enumerate(spans):
        events += reads_over(1000 + k, span, size=(sizes or [MiB] * len(spans))[k],
                             file_id=k)
    events += list(extra)
    files = files or [(k, f"/data/shard_{k}.bin") for k in range(len(spans))]
    return synth_trace(tmp, events, files=files,
                       processes=[(1000 + k, 1, "python worker") for k in range(len(spans))]
                       + [(999, 1, "python train.py")])


def test_balanced_workers_no_finding(tmp_path):
    t = pool_trace(tmp_path, [100 * MS] * 4)
    assert findings(t, "imbalance") == []


@pytest.mark.parametrize("factor,severity", [(1.9, None), (2.1, "warn"), (3.9, "warn"),
                                             (4.1, "high")])
def test_slow_worker_rate_skew_edges(tmp_path, factor, severity):
    t = pool_trace(tmp_path, [100 * MS, 100 * MS, round(factor * 100 * MS), 100 * MS])
    got = findings(t, "imbalance")
    assert [f.rule_severity for f in got] == ([severity] if severity else [])
    if got:
        e = got[0].evidence
        assert (e["workers"], e["worker_kind"], e["skew_kind"]) == (4, "process", "rate")
        assert e["rate_skew_ratio"] == pytest.approx(factor)
        assert e["skew_ratio"] == e["rate_skew_ratio"] and e["bytes_skew_ratio"] == 1
        assert (e["slowest_pid"], e["slowest_worker"]) == (1002, 1002)
        assert e["slowest_read_bytes_per_s"] == pytest.approx(11 * MiB / (factor * 0.1))
        assert e["median_read_bytes_per_s"] == pytest.approx(11 * MiB / 0.1)
        assert e["slowest_mean_latency_ns"] == pytest.approx(1e5)
        assert got[0].processes[0]["pid"] == 1002           # slowest first
        assert str(1002) in got[0].summary


@pytest.mark.parametrize("factor,severity", [(1.9, None), (2.1, "warn"), (4.5, "high")])
def test_bytes_skew_edges(tmp_path, factor, severity):
    t = pool_trace(tmp_path, [100 * MS] * 4, sizes=[MiB, MiB, MiB, int(factor * MiB)])
    got = findings(t, "imbalance")
    assert [f.rule_severity for f in got] == ([severity] if severity else [])
    if got:
        e = got[0].evidence
        assert e["skew_kind"] == "bytes"
        assert e["bytes_skew_ratio"] == pytest.approx(factor, rel=1e-6)
        assert e["max_worker_bytes"] == 11 * int(factor * MiB)
        assert e["median_worker_bytes"] == 11 * MiB
        assert "1003" in got[0].summary


def test_code_and_small_readers_are_not_workers(tmp_path):
    # the main process reads 100 MiB of Python code and a 4 KiB index, slowly
    main = [ev("read", ts=j * 50 * MS, dur=1000, pid=999, req=10 * MiB, ret=10 * MiB,
               file_id=10) for j in range(10)]
    main += [ev("read", ts=j * 90 * MS, dur=1000, pid=999, req=4096, ret=4096, file_id=11)
             for j in range(5)]
    t = pool_trace(tmp_path, [100 * MS] * 4, extra=main,
                   files=[(k, f"/data/shard_{k}.bin") for k in range(4)]
                   + [(10, "/opt/venv/lib/python3.11/site-packages/torch/_C.so"),
                      (11, "/data/index.json")])
    cfg = tmp_path / "th.toml"
    cfg.write_text("[imbalance]\nidle_share = 1.1\n")
    assert findings(t, "imbalance", str(cfg)) == []
    cfg.write_text("[imbalance]\nidle_share = 1.1\nmin_worker_bytes_ratio = 0.0001\n")
    f = one(t, "imbalance", str(cfg))            # the index reader now counts, and is slow
    assert (f.evidence["workers"], f.evidence["slowest_pid"]) == (5, 999)


def test_in_flight_sweep(tmp_path):
    # three workers whose reads overlap pairwise and all three at once, then touching reads
    events = [ev("pread64", ts=0, dur=10 * MS, pid=1, req=4096, ret=4096, file_id=0),
              ev("pread64", ts=2 * MS, dur=10 * MS, pid=2, req=4096, ret=4096, file_id=0),
              ev("pread64", ts=4 * MS, dur=10 * MS, pid=3, req=4096, ret=4096, file_id=0),
              ev("pread64", ts=14 * MS, dur=6 * MS, pid=1, req=4096, ret=4096, file_id=0),
              ev("pread64", ts=20 * MS, dur=5 * MS, pid=2, req=4096, ret=4096, file_id=0)]
    t = synth_trace(tmp_path, events, files=[(0, "/data/a")])
    cfg = tmp_path / "th.toml"
    cfg.write_text("[imbalance]\nidle_share = 0\nmin_worker_reads = 1\n")
    e = one(t, "imbalance", str(cfg)).evidence
    assert e["max_in_flight"] == 3
    assert e["mean_in_flight"] == pytest.approx(41 / 25)
    assert e["reading_span_s"] == pytest.approx(0.025)
    assert (e["idle_gap_count"], e["idle_share"]) == (0, 0)
    t = synth_trace(tmp_path / "b", events[3:], files=[(0, "/data/a")])   # 14-20, 20-25
    assert one(t, "imbalance", str(cfg)).evidence["max_in_flight"] == 1


def test_numpy_sweep_matches_a_brute_force_count():
    # the in-flight count and the idle gaps of random reads, ties included
    # (an end equal to a start has ended), against counting each case directly
    import numpy as np
    from iotrace.analyzers.imbalance import sweep_numpy
    rng = np.random.default_rng(7)
    for n in [1, 2, 3, 5, 8, 13, 40] * 20:
        s = rng.integers(0, 4 * n, n)
        e = s + rng.integers(1, 6, n)
        flight = max(int(((s <= x) & (e > x)).sum()) for x in s)
        spans = sorted(zip(s.tolist(), e.tolist()))
        gaps, reach = [], spans[0][1]
        for a, b in spans[1:]:
            if a - reach > 2:
                gaps.append((a - reach, reach))
            reach = max(reach, b)
        top = [{"t": t, "gap": g} for g, t in sorted(gaps, key=lambda x: (-x[0], x[1]))[:3]]
        want = (flight, len(gaps), max((g for g, _ in gaps), default=0),
                sum(g for g, _ in gaps), top)
        assert sweep_numpy(s, e, 2) == want, (s, e)


def test_idle_gaps_edges(tmp_path):
    # one reader: reads of 1 ms, gaps of 0.1 s (not counted), 0.1 s + 1 ns, 0.3 s and 0.5 s
    starts, t = [], 0
    for gap in (0, 100 * MS, 100 * MS + 1, 300 * MS, 500 * MS):
        t += gap
        starts.append(t)
        t += MS
    events = [ev("pread64", ts=s, dur=MS, req=4096, ret=4096, file_id=0) for s in starts]
    trace = synth_trace(tmp_path, events, files=[(0, "/data/a")])
    f = one(trace, "imbalance")
    e = f.evidence
    span = 5 * MS + 1000 * MS + 1
    assert f.rule_severity == "info" and e["workers"] == 1
    assert (e["idle_gap_count"], e["longest_idle_gap_s"]) == (3, 0.5)
    assert e["idle_s"] == pytest.approx((900 * MS + 1) / 1e9)
    assert e["idle_share"] == pytest.approx((900 * MS + 1) / span)
    assert [x["ts_ns"] for x in f.examples] == [starts[4] - 500 * MS, starts[3] - 300 * MS,
                                                starts[2] - 100 * MS - 1]
    cfg = tmp_path / "th.toml"
    cfg.write_text(f"[imbalance]\nidle_share = {(900 * MS + 1) / span + 1e-9}\n")
    assert findings(trace, "imbalance", str(cfg)) == []


def test_threads_are_workers_in_one_process(tmp_path):
    events = []
    for k, span in enumerate([100 * MS, 100 * MS, 500 * MS]):
        events += reads_over(7, span, tid=70 + k, file_id=k)
    t = synth_trace(tmp_path, events, files=[(k, f"/data/{k}") for k in range(3)])
    f = one(t, "imbalance")
    e = f.evidence
    assert (f.rule_severity, e["worker_kind"], e["workers"]) == ("high", "thread", 3)
    assert (e["slowest_worker"], e["slowest_pid"]) == (72, 7)
    assert e["rate_skew_ratio"] == pytest.approx(5)
    assert f.processes[0]["tid"] == 72


def test_failed_reads_and_no_reads(tmp_path):
    t = synth_trace(tmp_path / "a", [ev("futex", ts=0, dur=10, fd=-1)])
    assert findings(t, "imbalance") == []
    # EAGAIN reads far from the others do not stretch the reading span
    events = reads_over(1, 100 * MS, file_id=0) + [
        ev("read", ts=5 * 10**9, dur=10, pid=1, req=4096, ret=-11, file_id=0)]
    t = synth_trace(tmp_path / "b", events, files=[(0, "/data/a")])
    assert findings(t, "imbalance") == []


# ---------------------------------------------------------------- real workloads

def sweep_max(intervals):
    """Most intervals open at once (an end and a start at the same time don't overlap)."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    cur = best = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


@needs_root()
def test_h5py_threads_serialise_on_its_lock(tmp_path):
    pytest.importorskip("h5py", reason="h5py is not installed (make test installs it)")
    h5 = tmp_path / "data.h5"
    script = str(WORKLOADS / "lb_h5threads.py")
    subprocess.run([sys.executable, script, "make", str(h5), "4"], check=True)
    # 200 rounds: about 0.3 s of reads here, so each thread waits on the lock many
    # times (40 rounds took 20-60 ms a thread, and a slower machine once saw one
    # reader without a wait on the top lock in the window)
    proc, trace = trace_run(tmp_path / "trace", sys.executable, script, "read", str(h5), "4",
                            "200")
    assert proc.returncode == 0, proc.stderr
    assert trace.meta["drops"] == 0
    tids = {int(line.split()[0]): line.split()[1] for line in proc.stdout.split("\n") if line}
    assert len(tids) == 4

    f = one(trace, "lock-contention")
    e = f.evidence
    assert f.rule_severity == "high", f.summary
    assert e["lock_kind"] == "hdf5" and "h5py" in e["likely_lock"]
    assert "h5py" in f.summary and "processes, not threads" in f.recommendation
    assert e["readers"] == 4 and e["max_concurrent_reads"] == 1
    assert e["pid"] == trace.meta["root_pid"]
    # the readers are the four named threads, and each waited
    readers = {p["tid"]: p for p in f.processes if p["reads"] > 0}
    assert set(readers) == set(tids)
    assert all(readers[t]["thread"] == name for t, name in tids.items())
    assert all(p["wait_s"] > 0 for p in readers.values())
    assert e["top_lock_threads"] == 4

    # the trace's own read intervals: 4 threads x 200 rounds x 4 slices of 1 MiB,
    # never two at once
    reads = rows(trace, f"""select e.tid, e.ts_ns, e.ts_ns + e.dur_ns, e.ret from events e
                            join files f using (file_id)
                            where f.path = ? and e.op in ('pread64', 'read')
                              and e.tid in ({', '.join(map(str, tids))})""", str(h5))
    assert {r[0] for r in reads} == set(tids)
    assert sum(r[3] for r in reads) >= 4 * 200 * 4 * MiB
    assert sweep_max([(s, end) for _, s, end, _ in reads]) == 1
    assert e["reads"] == len(reads)


@needs_root()
def test_lockwait_per_thread_wait_matches_program(lockwait_run):
    trace, _, mutex, measured = lockwait_run

    f = one(trace, "lock-contention")
    e = f.evidence
    assert f.rule_severity == "high"
    assert e["top_address"] == hex(mutex) and e["top_lock_threads"] == 4
    assert (e["readers"], e["max_concurrent_reads"], e["reads"]) == (4, 1, 240)
    assert e["lock_kind"] == "futex"
    by_tid = {p["tid"]: p for p in f.processes}
    assert set(by_tid) == set(measured)
    for tid, waited in measured.items():
        assert waited > 10_000_000, "the workload should make threads wait"
        assert by_tid[tid]["wait_s"] * 1e9 == pytest.approx(waited, rel=0.10), tid
    assert e["total_wait_s"] * 1e9 == pytest.approx(sum(measured.values()), rel=0.10)
    # each thread holds the lock 1 ms of every ~4: it waits most of its time
    assert all(p["wait_share"] > 0.5 for p in f.processes)


def run_pool(tmp_path, slow):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(64):
        (data / f"sample_{i:02d}.bin").write_bytes(bytes([i]) * MiB)
    proc, trace = trace_run(tmp_path / "trace", sys.executable, str(WORKLOADS / "lb_pool.py"),
                            str(data), "4", str(slow))
    assert proc.returncode == 0, proc.stderr
    assert trace.meta["drops"] == 0
    pids = {int(k): int(pid) for _, k, pid in (line.split() for line in proc.stdout.split("\n")
                                               if line.startswith("worker"))}
    assert len(pids) == 4
    return trace, pids, data


@needs_root()
def test_pool_with_a_slow_worker(tmp_path):
    trace, pids, data = run_pool(tmp_path, slow=2)
    f = one(trace, "imbalance")
    e = f.evidence
    assert f.rule_severity == "high", f.summary
    assert (e["worker_kind"], e["workers"], e["skew_kind"]) == ("process", 4, "rate")
    assert e["slowest_pid"] == pids[2] and str(pids[2]) in f.summary
    assert {p["pid"] for p in f.processes} == set(pids.values())
    # each worker read 16 files of 1 MiB
    assert all(p["bytes"] == 16 * MiB for p in f.processes) and e["bytes_skew_ratio"] == 1

    # the rates again, from the trace: bytes over first-read-to-last-read-end per pid
    got = rows(trace, f"""select e.pid, sum(e.ret), max(e.ts_ns + e.dur_ns) - min(e.ts_ns),
                                 avg(e.dur_ns)
                          from events e join files f using (file_id)
                          where f.path like '{data}/sample_%' and e.op = 'read' and e.ret >= 0
                          group by e.pid""")
    rate = {pid: b / (span / 1e9) for pid, b, span, _ in got}
    lat = {pid: avg for pid, _, _, avg in got}
    assert set(rate) == set(pids.values())
    assert e["rate_skew_ratio"] == pytest.approx(statistics.median(rate.values())
                                                 / rate[pids[2]], rel=1e-9)
    assert e["slowest_read_bytes_per_s"] == pytest.approx(rate[pids[2]], rel=1e-9)
    assert e["slowest_mean_latency_ns"] == pytest.approx(lat[pids[2]], rel=1e-9)
    # 16 x (5 + 60) ms against 16 x 5 ms between reads: the slow worker is ~10x slower
    assert e["rate_skew_ratio"] >= 4
    assert min(rate, key=rate.get) == pids[2]


@needs_root()
def test_balanced_pool_is_not_high(tmp_path):
    trace, pids, _ = run_pool(tmp_path, slow=-1)
    got = findings(trace, "imbalance")
    assert not [f for f in got if f.rule_severity == "high"], [f.summary for f in got]
    for f in got:
        assert f.evidence["skew_ratio"] < 4
    assert findings(trace, "lock-contention") == []


@needs_root()
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_fio_sequential_is_clean(tmp_path):
    data = tmp_path / "data.bin"
    with open(data, "wb") as fh:
        for _ in range(64):
            fh.write(b"\x5a" * MiB)
    report = tmp_path / "fio.json"
    proc, trace = trace_run(tmp_path / "trace", "fio", "--name=job", f"--filename={data}",
                            "--ioengine=psync", "--rw=read", "--bs=1M", "--size=64M",
                            "--output-format=json", f"--output={report}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(report.read_text())["jobs"][0]["read"]["total_ios"] == 64
    for rule in ("lock-contention", "imbalance"):
        high = [f.summary for f in findings(trace, rule) if f.rule_severity == "high"]
        assert high == [], (rule, high)
    assert findings(trace, "lock-contention") == []
