"""Profile mode (`iotrace run --profile`): the kernel's sums must equal what a
full trace records call by call, and fio's own counts; a full sum table
loses keys, never calls; and a full ring buffer's losses in a full trace
are counted exactly, by op."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import iotrace
from conftest import (IOTRACE, WORKLOADS, attached, evict, iotrace_cmd, needs_root, rows, scalar,
                      trace_run, wait_for)

pytestmark = [needs_root()]

MIX_ROUNDS = 3


def fio_args(datafile, report, *args):
    return ("fio", "--name=job", f"--filename={datafile}", "--ioengine=psync", "--size=16M",
            "--invalidate=0", "--output-format=json", f"--output={report}", *args)


@pytest.fixture(scope="module")
def datafile(tmp_path_factory):
    path = tmp_path_factory.mktemp("prof") / "data.bin"
    path.write_bytes(b"\x5a" * (16 << 20))
    return path


def kids(pid: int) -> list[int]:
    """The children of all of pid's threads."""
    return [int(c) for t in os.listdir(f"/proc/{pid}/task")
            for c in open(f"/proc/{pid}/task/{t}/children").read().split()]


def job_reading(recorder: int, calls: int = 1000) -> bool:
    """Whether a process under the recorder (the traced job and its
    children) has made `calls` read calls."""
    todo = kids(recorder)
    while todo:
        pid = todo.pop()
        try:
            io = dict(line.split(": ") for line in open(f"/proc/{pid}/io").read().splitlines())
            if int(io["syscr"]) >= calls:
                return True
            todo += kids(pid)
        except (OSError, KeyError, ValueError):
            continue
    return False


def run_reader_stopped(out, command, *extra):
    """`iotrace run --ringbuf-mb 1 [extra] -o out -- command` with its reader
    (the recorder) stopped for a second once the command is reading (1000
    read calls: a fio started under load had not begun its reads a second
    after tracing began, and nothing overflowed), so that the ring fills
    while the command runs. (exit code, stdout, stderr)."""
    tracer = subprocess.Popen([*IOTRACE, "run", "-q", "--no-node-summary", "--ringbuf-mb", "1",
                               *extra, "-o", str(out), "--", *command],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (out / "meta.json").exists()), "tracing never began"
        recorder = next(c for c in kids(tracer.pid)
                        if open(f"/proc/{c}/comm").read().startswith("iotrace-recorde"))
        assert wait_for(lambda: job_reading(recorder)), "the command never read"
        os.kill(recorder, signal.SIGSTOP)
        time.sleep(1.0)
        os.kill(recorder, signal.SIGCONT)
        stdout, stderr = tracer.communicate(timeout=300)
    finally:
        tracer.kill()
    return tracer.returncode, stdout, stderr


def per_op_on(trace, prefix: str, table: str) -> dict:
    """{(path, op): (calls, bytes, errors, req_bytes)} for the files under prefix."""
    if table == "events":
        q = """select f.path, e.op, count(*), coalesce(sum(e.ret) filter (where e.ret > 0
                   and (e.op like '%read%' or e.op like '%write%')), 0),
                   count(*) filter (where e.ret < 0), coalesce(sum(e.req_bytes), 0)
               from events e join files f using (file_id)
               where f.path like ? and e.op != 'block_rq' group by all"""
    else:   # block requests stay records in a profile (one per device request)
        q = """select f.path, c.op, sum(c.calls), sum(c.bytes), sum(c.errors), sum(c.req_bytes)
               from profile_calls c join files f using (file_id)
               where f.path like ? group by all"""
    return {(p, op): tuple(int(x) for x in v) for p, op, *v in rows(trace, q, prefix + "%")}


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_profile_sums_equal_fio(tmp_path, datafile):
    report = tmp_path / "fio.json"
    proc, trace = trace_run(tmp_path / "t", *fio_args(datafile, report, "--rw=randread",
                                                      "--bs=4k", "--io_size=32M"),
                            extra=("--profile",))
    assert proc.returncode == 0, proc.stderr
    job = json.loads(report.read_text())["jobs"][0]
    assert trace.meta["capture"] == "profile"
    calls, nbytes, req = rows(trace, """
        select sum(calls), sum(bytes), sum(req_bytes) from profile_calls c
        join files f using (file_id) where f.path = ? and op = 'pread64'""", str(datafile))[0]
    assert calls == job["read"]["total_ios"] == 8192
    assert nbytes == req == job["read"]["io_bytes"]
    # every 4 KiB request in the bucket that 4096 tops
    assert rows(trace, """select distinct req_bytes_min, req_bytes_max from profile_calls c
                          join files f using (file_id) where f.path = ? and op = 'pread64'""",
                str(datafile)) == [(2049, 4096)]
    # no record per read: only what names files and processes
    assert scalar(trace, "select count(*) from events where op = 'pread64'") == 0
    assert trace.meta["events"] < 2000
    # per second: the same reads, split over the seconds they ran in
    assert scalar(trace, "select sum(calls) from profile_rates where op = 'pread64'") == \
        scalar(trace, "select sum(calls) from profile_calls where op = 'pread64'")
    assert trace.meta["counters"]["profile_overflow"] == 0
    # the summary and the report read the sums
    s = json.loads(iotrace_cmd("summary", "--format", "json", str(tmp_path / "t")).stdout)
    assert s["capture"] == "profile" and s["profile_calls"] == trace.meta["profile_calls"]
    assert next(o for o in s["ops"] if o["op"] == "pread64")["calls"] >= 8192
    rep = iotrace_cmd("report", "--format", "json", "--target-read", "100GiB/s",
                      str(tmp_path / "t"))
    assert rep.returncode == 0, rep.stderr
    r = json.loads(rep.stdout)
    assert r["verdict"]["status"] == "profile" and r["verdict"]["needs_full_trace"]
    ids = {f["id"]: f for f in r["findings"]}
    assert ids["small-reads"]["evidence"]["read_calls"] == 8192
    assert ids["small-reads"]["evidence"]["weighted_median_request_bytes_at_most"] == 4096
    assert "below-target" in ids
    html = iotrace_cmd("report", "--format", "html", str(tmp_path / "t"))
    assert html.returncode == 2 and "profile" in html.stderr and "Traceback" not in html.stderr


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_profile_o_direct_reads_come_from_storage(tmp_path, datafile):
    """fio's O_DIRECT reads add nothing to the page cache: in a profile every
    byte they read is summed as from storage (cache_bytes), as fio read it."""
    report = tmp_path / "fio.json"
    proc, trace = trace_run(tmp_path / "t", *fio_args(datafile, report, "--rw=randread",
                                                      "--bs=4k", "--io_size=4M", "--direct=1"),
                            extra=("--profile",))
    assert proc.returncode == 0, proc.stderr
    job = json.loads(report.read_text())["jobs"][0]["read"]
    calls, nbytes, storage = rows(trace, """
        select sum(calls), sum(bytes), sum(cache_bytes) from profile_calls c
        join files f using (file_id) where f.path = ? and op = 'pread64'""", str(datafile))[0]
    assert (calls, nbytes, storage) == (job["total_ios"], job["io_bytes"], job["io_bytes"])


def test_profile_equals_full_trace(tmp_path):
    """The same fixed mix of calls, traced in full and as a profile: per file
    and op, equal calls, bytes, errors and requested bytes; equal request-size
    histograms."""
    traces = {}
    for mode in ("full", "profile"):
        d = tmp_path / f"data-{mode}"
        proc, trace = trace_run(tmp_path / mode, "python3", str(WORKLOADS / "profile_mix.py"),
                                str(d), str(MIX_ROUNDS),
                                extra=("--profile",) if mode == "profile" else ())
        assert proc.returncode == 0, proc.stderr
        traces[mode] = (trace, str(d) + "/")
    full, fd = traces["full"]
    prof, pd = traces["profile"]

    def rel(m, prefix):
        return {(p[len(prefix):], op): v for (p, op), v in m.items()}

    got_full = rel(per_op_on(full, fd, "events"), fd)
    got_prof = rel(per_op_on(prof, pd, "profile"), pd)
    assert got_prof == got_full
    # by construction: 5 sizes x 8 preads + 5 past the end, per round
    assert got_prof[("data.bin", "pread64")][0] == 45 * MIX_ROUNDS
    assert got_prof[("data.bin", "readv")] == (4 * MIX_ROUNDS, 4 * 14196 * MIX_ROUNDS, 0,
                                              4 * 14196 * MIX_ROUNDS)
    assert got_prof[("small-3.bin", "read")][:2] == (MIX_ROUNDS, 1003 * MIX_ROUNDS)
    # request sizes: the full trace's, bucketed as the kernel buckets them
    full_hist = {(op, lo, hi): n for op, lo, hi, n in rows(full, """
        select e.op, b.lo, b.hi, count(*) from events e join files f using (file_id),
        (select i, case when i <= 1 then i else (1::bigint << (i - 2)) + 1 end as lo,
                case when i <= 1 then i else 1::bigint << (i - 1) end as hi
         from range(0, 40) t(i)) b
        where f.path like ? and e.op in ('pread64', 'read', 'write', 'readv')
          and e.req_bytes between b.lo and b.hi
        group by all""", fd + "%")}
    prof_hist = {(op, lo, hi): n for op, lo, hi, n in rows(prof, """
        select c.op, req_bytes_min, req_bytes_max, sum(calls)::bigint
        from profile_calls c join files f using (file_id)
        where f.path like ? and c.op in ('pread64', 'read', 'write', 'readv')
        group by all""", pd + "%")}
    assert prof_hist == full_hist
    assert (("pread64", 2049, 4096)) in prof_hist


def test_profile_table_full_keeps_totals(tmp_path):
    """A sum table too small for the keys: calls beyond it lose their key
    (process, file, buckets), not their count, and are counted."""
    d = tmp_path / "data"
    proc, trace = trace_run(tmp_path / "t", "python3", str(WORKLOADS / "profile_mix.py"),
                            str(d), str(MIX_ROUNDS), extra=("--profile",),
                            env={**os.environ, "IOTRACE_PROFILE_MAX_KEYS": "16"})
    assert proc.returncode == 0, proc.stderr
    keyless = trace.meta["counters"]["profile_overflow"]
    assert keyless > 0
    assert trace.meta["profile_rows"] <= 16 + 200     # 16 keys + one keyless row per op
    assert scalar(trace, "select sum(calls) from profile_calls where keyless") == keyless
    # the totals by op still equal the per-second sums (kept whole)
    by_op = dict(rows(trace, "select op, sum(calls) from profile_calls group by op"))
    by_rate = dict(rows(trace, "select op, sum(calls) from profile_rates group by op"))
    assert by_op == by_rate
    assert by_op["pread64"] >= 45 * MIX_ROUNDS
    out = iotrace_cmd("summary", str(tmp_path / "t"))
    assert "profile overflow" in out.stderr + out.stdout


def test_profile_names_each_file_once(tmp_path):
    """A profile writes an open's record only to name a file: 300 files read
    in 3 passes (epochs) are named once each, although the kernel's table of
    named files holds 16 (the recorder catches the repeats it lets through);
    every open and read is in the sums. By construction."""
    n, rounds = 300, 3
    d = tmp_path / "data"
    proc, trace = trace_run(tmp_path / "t", "python3", str(WORKLOADS / "reopen_files.py"),
                            str(d), str(n), str(rounds), extra=("--profile",),
                            env={**os.environ, "IOTRACE_PROFILE_MAX_KEYS": "16"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["opens", str(n * rounds), "reads", str(n * rounds)]
    prefix = str(d) + "/"
    # the files' names: each from one open record
    assert scalar(trace, """select count(*) from events e join files f using (file_id)
                            where e.op = 'openat' and starts_with(f.path, ?)""", prefix) == n
    assert scalar(trace, "select count(*) from files where starts_with(path, ?)", prefix) == n
    # the sums: all the calls (the 16-key table keeps the rest keyless)
    by_op = dict(rows(trace, "select op, sum(calls)::bigint from profile_calls group by op"))
    assert by_op["openat"] >= n * rounds and by_op["read"] >= n * rounds


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_ring_overflow_counted_exactly(tmp_path, datafile):
    """A 1 MiB ring buffer under fio's 4 KiB page-cache reads, its reader
    stopped (SIGSTOP) for a second so that it overflows for certain: every
    pread64 fio made is either in the trace or counted as dropped (when the
    drops happened: tests/test_faults.py). fio reads for 3 s, not a number
    of reads: a fast machine did 512 MiB of them before the reader was
    stopped."""
    report = tmp_path / "fio.json"
    out = tmp_path / "t"
    rc, _, stderr = run_reader_stopped(out, fio_args(datafile, report, "--rw=randread",
                                                     "--bs=4k", "--time_based",
                                                     "--runtime=3s"))
    assert rc == 0, stderr
    trace = iotrace.open_trace(out)
    job = json.loads(report.read_text())["jobs"][0]
    captured = scalar(trace, """select count(*) from events e join files f using (file_id)
                                where f.path = ? and op = 'pread64'""", str(datafile))
    dropped = trace.meta["drops_by_op"].get("pread64", 0)
    assert dropped > 0, "the ring buffer did not overflow: nothing was tested"
    assert captured + dropped == job["read"]["total_ios"]
    assert job["read"]["total_ios"] > 131072      # more than the 512 MiB that ran too soon
    assert trace.meta["drops"] >= dropped
    out = iotrace_cmd("summary", str(tmp_path / "t"))
    assert "dropped" in out.stderr + out.stdout


def test_profile_ring_overflow_keeps_totals(tmp_path, datafile):
    """The threads' sums reach the recorder through a ring buffer of their
    own (1 MiB with --ringbuf-mb 1), its reader stopped for a second while
    every call brings a new key: the sums that find it full lose their key,
    not their calls, and are counted. By construction: N preads of the file."""
    n = 1_500_000
    out = tmp_path / "t"
    rc, stdout, stderr = run_reader_stopped(
        out, (sys.executable, str(WORKLOADS / "key_churn.py"), str(datafile), str(n)),
        "--profile")
    assert rc == 0, stderr
    assert stdout.strip().endswith("done"), "the workload ended before its N calls"
    trace = iotrace.open_trace(out)
    counters = trace.meta["counters"]
    lost = counters["profile_overflow"]
    assert lost > 0, "the sums' ring buffer did not overflow: nothing was tested"
    keyed = scalar(trace, """select sum(c.calls) from profile_calls c join files f
                             using (file_id) where f.path = ? and c.op = 'pread64'""",
                   str(datafile))
    keyless = scalar(trace, "select sum(calls) from profile_calls where keyless and op = 'pread64'")
    assert keyed + keyless == n
    assert scalar(trace, "select sum(calls) from profile_calls where keyless") == lost
    # what the ring lost is missing from the per-second sums, and counted there too
    assert counters["profile_rate_lost"] == lost
    assert (scalar(trace, "select sum(calls) from profile_rates") + lost
            == scalar(trace, "select sum(calls) from profile_calls"))


def test_attach_profile_sums_threads_that_never_exit(tmp_path):
    """Each thread sums its calls in its own state before it sends them to
    the recorder (bpf/profile.h): an attach that stops while the threads still live (and
    have been idle since their calls) must add those sums at the end. By
    construction: 3 threads x (N of 4 KiB + N of 100 B), then N of 4 KiB and
    one write in the main thread."""
    n, threads = 5000, 3
    data = tmp_path / "data.bin"
    data.write_bytes(b"\x11" * (1 << 20))
    target = subprocess.Popen([sys.executable, str(WORKLOADS / "calls_then_idle.py"),
                               str(data), str(n), str(threads)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = tmp_path / "trace"
    try:
        assert target.stdout.readline().strip() == "ready"
        with attached(target.pid, out, "--profile"):
            target.stdin.write("go\n")
            target.stdin.flush()
            assert target.stdout.readline().strip() == "done"
    finally:
        target.kill()
    trace = iotrace.open_trace(out)
    by_size = dict(rows(trace, """
        select c.req_bytes_max, sum(c.calls)::bigint from profile_calls c
        join files f using (file_id) where f.path = ? and c.op = 'pread64'
        group by all""", str(data)))
    assert by_size == {4096: (threads + 1) * n, 128: threads * n}, by_size   # bucket tops
    total = scalar(trace, """select sum(c.bytes) from profile_calls c join files f
                             using (file_id) where f.path = ?""", str(data))
    assert total == (threads + 1) * n * 4096 + threads * n * 100
    # the per-second table sums the same calls
    assert scalar(trace, """select sum(calls) from profile_rates where op = 'pread64'
                            and pid = ?""", target.pid) == (2 * threads + 1) * n
    # the main thread's last two calls, still in its own sums when tracing stopped
    assert rows(trace, """select sum(calls)::bigint, sum(bytes)::bigint from profile_calls
                          where op = 'write' and pid = ?""", target.pid) == [(1, 5)]
    # the main thread's last two calls, still in its own sums when tracing stopped
    assert rows(trace, """select sum(calls)::bigint, sum(bytes)::bigint from profile_calls
                          where op = 'write' and pid = ?""", target.pid) == [(1, 5)]
    assert trace.meta["counters"]["profile_overflow"] == 0


FAULTS_SCRIPT = """
import mmap, resource, sys
f = open(sys.argv[1], 'rb')
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
r0 = resource.getrusage(resource.RUSAGE_SELF)
s = 0
for i in range(0, len(m), 4096):
    s += m[i]
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(r1.ru_minflt - r0.ru_minflt, r1.ru_majflt - r0.ru_majflt, s)
"""


def faults_on(trace, path, table: str) -> tuple[int, int]:
    """(faults, page-cache bytes they added) on path."""
    if table == "events":
        q = """select count(*), coalesce(sum(e.ret), 0) from events e join files f
               using (file_id) where e.op = 'page_fault' and f.path = ?"""
    else:
        q = """select coalesce(sum(c.calls), 0), coalesce(sum(c.cache_bytes), 0)
               from profile_calls c join files f using (file_id)
               where c.op = 'page_fault' and f.path = ?"""
    return tuple(int(x) for x in rows(trace, q, str(path))[0])


def test_profile_counts_file_faults_as_a_full_trace(tmp_path):
    """A page-cached file read through a memory map, a byte a page: a profile
    (which, where the kernel has the filemap fault tracepoints, sees only
    faults on files) counts the same faults on it as a full trace (every user
    fault), and both match the kernel's own count of the loop's faults."""
    path = tmp_path / "mapped.bin"
    path.write_bytes(b"\x5a" * (32 << 20))
    got = {}
    for mode in ("full", "profile"):
        proc, trace = trace_run(tmp_path / mode, sys.executable, "-c", FAULTS_SCRIPT, str(path),
                                extra=("--profile",) if mode == "profile" else ())
        assert proc.returncode == 0, proc.stderr
        minflt, majflt, total = (int(x) for x in proc.stdout.split()[-3:])
        assert total == 0x5a * (32 << 20) // 4096
        got[mode] = faults_on(trace, path, "events" if mode == "full" else "profile"), minflt
    (full, _), minflt_full = got["full"]
    (prof, added), minflt_prof = got["profile"]
    assert full == prof, got
    # the kernel's count of the loop's faults includes the interpreter's own
    # (few: no allocation grows the heap in this loop)
    assert full <= minflt_full <= full + 16, got
    assert prof <= minflt_prof <= prof + 16, got
    assert added == 0   # cached: the faults brought nothing in


def test_profile_file_faults_bring_a_cold_file_in(tmp_path, blockdir):
    """Cold, the faults of a profile add the file's bytes to the page cache."""
    path = blockdir / "cold.bin"
    path.write_bytes(os.urandom(1 << 20) * 32)
    size = path.stat().st_size
    evict(path)
    proc, trace = trace_run(tmp_path / "t", sys.executable, "-c", FAULTS_SCRIPT, str(path),
                            extra=("--profile",))
    assert proc.returncode == 0, proc.stderr
    minflt, majflt, _ = (int(x) for x in proc.stdout.split()[-3:])
    faults, added = faults_on(trace, path, "profile")
    assert majflt > 0 and faults >= majflt, (faults, majflt, minflt)
    assert abs(added - size) <= 0.10 * size, (added, size)


REMAP_SCRIPT = """
import mmap, resource, sys
paths = sys.argv[1:3]
faults = {p: 0 for p in paths}
for i in range(20):
    p = paths[i % 2]
    with open(p, 'rb') as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    # an anonymous mapping made and dropped between: the same addresses
    # change owner again and again
    a = mmap.mmap(-1, 1 << 20)
    a[0] = 1
    a.close()
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    s = 0
    for off in range(0, len(m), 4096):
        s += m[off]
    faults[p] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0
    m.close()
print(*[faults[p] for p in paths])
"""


@pytest.mark.parametrize("mode", ["full", "profile"])
def test_faults_follow_remapped_addresses(tmp_path, mode):
    """Two files mapped in turn, each unmapped before the next (so the same
    addresses hold one file, then the other, with anonymous memory between):
    each file's faults, as the kernel counts them, go to that file."""
    paths = []
    for name in ("a.bin", "b.bin"):
        p = tmp_path / name
        p.write_bytes(os.urandom(1 << 20) * 4)
        paths.append(p)
    proc, trace = trace_run(tmp_path / "t", sys.executable, "-c", REMAP_SCRIPT,
                            *map(str, paths), extra=("--profile",) if mode == "profile" else ())
    assert proc.returncode == 0, proc.stderr
    kernel = [int(x) for x in proc.stdout.split()[-2:]]
    got = [faults_on(trace, p, "events" if mode == "full" else "profile")[0] for p in paths]
    assert all(k > 0 for k in kernel), kernel
    # the kernel's count of each loop's faults would include the
    # interpreter's own (none in such a loop, in practice)
    for g, k in zip(got, kernel):
        assert g <= k <= g + 3, (got, kernel)
