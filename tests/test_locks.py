"""Lock waits. User space: threads contend on a pthread mutex while reading;
the futex wait time iotrace records per thread (on that mutex's address) must
be within 10% of what each thread measured itself. Kernel: writers contending
on one inode; every rwsem-writer wait lies inside a pwrite64 of its thread."""
from __future__ import annotations

import sys

import pytest

from conftest import WORKLOADS, needs_root, rows, trace_run, workload_data

pytestmark = needs_root()


def test_futex_wait_per_thread_matches_program(lockwait_run):
    trace, data, mutex, measured = lockwait_run
    assert len(measured) == 4
    traced = dict(rows(trace, """select tid, sum(dur_ns) from events
                                 where op = 'futex' and arg = ? group by tid""", mutex))
    for tid, waited in measured.items():
        assert waited > 10_000_000, "the workload should make threads wait"
        assert tid in traced, f"thread {tid} has no futex wait on the mutex"
        assert abs(traced[tid] - waited) <= 0.10 * waited, (tid, traced[tid], waited)
    # the reads under the lock are there too: 4 threads x 60 preads of 4 KiB
    assert rows(trace, """select count(*), sum(ret) from events e join files f
                          using (file_id) where f.path = ? and op = 'pread64'""",
                str(data)) == [(240, 240 * 4096)]


def test_kernel_lock_contention_inside_writes(tmp_path):
    target = tmp_path / "shared.bin"
    proc, trace = trace_run(tmp_path / "trace", sys.executable,
                            str(WORKLOADS / "kernel_lock.py"), str(target))
    assert proc.returncode == 0, proc.stderr
    if "kernel lock contention (begin)" not in trace.meta["probes"]["attached"]:
        pytest.skip("this kernel has no lock:contention_begin")
    # LCB_F_WRITE (4): a writer waiting on an rw semaphore, here the inode's
    waits = rows(trace, "select tid, ts_ns, dur_ns, arg from events "
                        "where op = 'lock_contention' and flags = 4")
    writers = rows(trace, """select distinct tid from events e join files f using (file_id)
                             where f.path = ? and op = 'pwrite64'""", str(target))
    assert len(writers) == 4
    assert len(waits) > 0, "4 writers on one inode should contend"
    # the inode's rwsem is the lock most waited on (an mmap_lock writer wait of
    # the interpreter may add a few on another address)
    by_lock: dict[int, int] = {}
    for w in waits:
        by_lock[w[3]] = by_lock.get(w[3], 0) + 1
    inode_lock = max(by_lock, key=by_lock.get)
    assert by_lock[inode_lock] >= len(waits) / 2
    assert {(w[0],) for w in waits if w[3] == inode_lock} <= set(writers)
    outside = rows(trace, """
        select count(*) from events l where op = 'lock_contention' and flags = 4
          and arg = ? and not exists (
            select 1 from events w join files f using (file_id)
            where f.path = ? and w.tid = l.tid and w.op = 'pwrite64'
              and l.ts_ns >= w.ts_ns and l.ts_ns + l.dur_ns <= w.ts_ns + w.dur_ns)""",
                   inode_lock, str(target))[0][0]
    assert outside == 0


@pytest.fixture(scope="module")
def pool_files(tmp_path_factory):
    return workload_data(tmp_path_factory, "pool", "pool_waits.py", "make", "16")


def lock_finding(trace, **kw):
    from iotrace.analyzers.base import Targets
    from iotrace.analyzers.report import build_report
    r = build_report(trace, Targets(), **kw)
    return next((f for f in r.findings if f.id == "lock-contention"), None)


def test_pool_threads_waiting_for_work_are_not_contention(tmp_path, pool_files):
    """A ThreadPoolExecutor's reader waits for its next task (the main thread
    computes 20 ms a file) on a futex 90% of its time: the Python stacks show
    it in the pool's loop taking its next task, so those waits are idle, not
    lock contention. The kernel alone (--kernel-only) cannot tell them apart."""
    import iotrace
    proc, trace = trace_run(tmp_path / "t", sys.executable, str(WORKLOADS / "pool_waits.py"),
                            str(pool_files), "idle", "6")
    assert proc.returncode == 0, proc.stderr
    kernel = lock_finding(iotrace.open_trace(tmp_path / "t"), kernel_only=True)
    assert kernel is not None and kernel.evidence["wait_share"] > 0.5
    f = lock_finding(trace)
    assert f is None or (f.evidence["idle_wait_s"] > 0.8 * kernel.evidence["total_wait_s"]
                         and f.rule_severity != "high"), f and f.summary


def test_a_library_loaded_is_not_the_lock(tmp_path, pool_files):
    """4 threads read under one threading.Lock in a process that imported
    h5py and never used it: the lock is the Python lock the threads share,
    not h5py's (before, a library loaded named it). 100 passes over the
    files (0.3 s of reads): with 20 (57 ms) a thread now and then read all
    its files before the last one started, and 3 of the 4 readers waiting
    on the lock made it "a user-space lock", not one all of them share."""
    proc, trace = trace_run(tmp_path / "t", sys.executable, str(WORKLOADS / "pool_waits.py"),
                            str(pool_files), "lock", "100")
    assert proc.returncode == 0, proc.stderr
    f = lock_finding(trace)
    assert f is not None
    assert f.evidence["lock_kind"] in ("python-lock", "gil"), f.evidence
    assert f.evidence["max_concurrent_reads"] == 1 and f.evidence["readers"] == 4
