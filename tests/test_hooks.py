"""System calls are hooked with fentry/fexit on their kernel functions where
the kernel allows it, else with the sys_enter/sys_exit tracepoints. Both ways
must record the same calls of the same workload. This machine's kernel
refuses fentry; Debian's 6.1 runs this file under QEMU (tests/test_vm.py)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import WORKLOADS, iotrace_cmd, needs_root, rows, trace_run
from iotrace.session import recorder_path

pytestmark = [needs_root()]


def hooks_here(kind: str) -> bool:
    """Whether the recorder loads and attaches with IOTRACE_HOOKS=kind."""
    proc = subprocess.run([recorder_path(), "--check"], capture_output=True, text=True,
                          env={**os.environ, "IOTRACE_HOOKS": kind})
    return proc.returncode == 0 and json.loads(proc.stdout)["syscall_hooks"] == kind


def calls_on(trace, prefix: str) -> dict:
    return {(p[len(prefix):], op): tuple(v) for p, op, *v in rows(trace, """
        select f.path, e.op, count(*), coalesce(sum(e.ret) filter (where e.ret > 0), 0),
               count(*) filter (where e.ret < 0), coalesce(sum(e.req_bytes), 0),
               count(distinct e.tid)
        from events e join files f using (file_id)
        where f.path like ? and e.op not in ('block_rq', 'page_fault', 'cache_fill',
                                             'file_release')
        group by all""", prefix + "%")}
# (file_release: a close's release work kept where it took 20 us or more, which
# under emulation a plain file's last close takes or not, run to run)


AUTO_ENV = {k: v for k, v in os.environ.items() if k != "IOTRACE_HOOKS"}


@pytest.mark.parametrize("var, value, message", [
    ("IOTRACE_HOOKS", "kprobe", "IOTRACE_HOOKS=kprobe: give fentry, tracepoint or auto"),
    ("IOTRACE_KERNEL_READS", "fast", "IOTRACE_KERNEL_READS=fast: give direct, probe or auto"),
])
def test_bad_setting_is_one_line(tmp_path, var, value, message):
    proc = iotrace_cmd("run", "-q", "-o", str(tmp_path / "t"), "--", "true",
                       env={**os.environ, var: value})
    assert proc.returncode == 3
    # said once, by iotrace: not the recorder's line and then iotrace's
    assert proc.stderr.splitlines() == [f"iotrace: {message}"]
    assert not (tmp_path / "t").exists()


def test_default_hooks_are_named_and_fentry_matches_tracepoints(tmp_path):
    """The default (auto) run names its hooks. Where it got fentry (the 6.1 VM),
    a run on the tracepoints must record the same calls; where the kernel
    refused fentry (this host), the default run must say why. One test, not
    two, so that the VM runs fentry once: each fentry run takes minutes there."""
    traces = {}
    for kind in ("auto", "tracepoint"):
        d = tmp_path / f"data-{kind}"
        env = AUTO_ENV if kind == "auto" else {**os.environ, "IOTRACE_HOOKS": kind}
        proc, trace = trace_run(tmp_path / kind, "python3", str(WORKLOADS / "profile_mix.py"),
                                str(d), "2", env=env)
        assert proc.returncode == 0, proc.stderr
        probes = trace.meta["probes"]
        assert trace.meta["drops"] == 0
        # the job's wait for the go-ahead began before it was traced: not a lost call
        assert trace.meta["counters"]["calls_entry_unseen"] == 0
        traces[probes["syscall_hooks"]] = (trace, str(d) + "/")
        if kind == "tracepoint":
            assert probes["syscall_hooks"] == "tracepoint"
        elif probes["syscall_hooks"] == "tracepoint":
            assert probes["syscall_hooks_why"]        # why not fentry, for the user
            assert "syscalls (sys_enter)" in probes["attached"]
            assert not hooks_here("fentry")
            print("this kernel refuses fentry: the comparison runs in the 6.1 VM")
            return
        else:
            assert probes["syscall_hooks"] == "fentry"
            assert any(p.startswith("syscalls (fentry on") for p in probes["attached"])
            assert not probes["syscall_hooks_why"]
    (fe, fd), (tp, td) = traces["fentry"], traces["tracepoint"]
    got_fe, got_tp = calls_on(fe, fd), calls_on(tp, td)
    assert got_fe == got_tp
    assert got_fe[("data.bin", "pread64")][0] == 45 * 2
    # call by call on the data file: the same ops, offsets, sizes and results
    seq = """select e.op, e."offset", e.req_bytes, e.ret, e.flags from events e
             join files f using (file_id) where f.path = ? order by e.ts_ns"""
    assert rows(fe, seq, fd + "data.bin") == rows(tp, seq, td + "data.bin")
    # paths of the opens resolve the same way
    assert sorted(p[len(fd):] for (p,) in rows(fe, "select path from files where path like ?",
                                                 fd + "%")) == \
        sorted(p[len(td):] for (p,) in rows(tp, "select path from files where path like ?",
                                            td + "%"))


def test_direct_and_probe_reads_record_the_same_calls(tmp_path):
    """The core object's two builds read a call's file identity (its file,
    inode and super block; its position; O_DIRECT; a socket's family, a
    device's number) with direct loads (bpf_rdonly_cast, kernels 6.2+) or
    with helper calls: call by call, on every kind of fd, the same records.
    A kernel without the kfunc (the 6.1 VM) runs the helper reads, and says
    why."""
    traces = {}
    base = {k: v for k, v in os.environ.items() if k != "IOTRACE_KERNEL_READS"}
    for want in ("auto", "probe"):
        env = {**base, "IOTRACE_KERNEL_READS": want} if want == "probe" else base
        d = tmp_path / f"data-{want}"
        proc, trace = trace_run(tmp_path / want, "python3", str(WORKLOADS / "identity_mix.py"),
                                str(d), env=env)
        assert proc.returncode == 0, proc.stderr
        assert trace.meta["drops"] == 0
        traces[want] = (trace, str(d) + "/")
        probes = trace.meta["probes"]
        if want == "probe":
            assert probes["kernel_reads"] == "probe"
            assert probes["kernel_reads_why"] == "IOTRACE_KERNEL_READS=probe"
        elif probes["kernel_reads"] == "probe":
            assert "bpf_rdonly_cast" in probes["kernel_reads_why"]
            print("no bpf_rdonly_cast here: only the helper reads run")
            return
        else:
            assert probes["kernel_reads"] == "direct" and not probes["kernel_reads_why"]

    def calls(trace, d):
        start = rows(trace, """select min(e.ts_ns) from events e join files f using (file_id)
                               where f.path = ?""", d + "start")[0][0]
        assert start is not None
        return rows(trace, """
            select e.op, e.fd_kind, e."offset", e.req_bytes, e.ret, e.mode, e.eflags,
                   replace(f.path, ?, 'D/'), f.fs_type, f.dev_major, f.dev_minor,
                   f.ino is not null
            from events e left join files f using (file_id)
            where e.ts_ns > ? and e.pid = (select min(pid) from events where ts_ns > ?)
              and e.fd_kind <> 'none' and e.op not in ('mmap', 'munmap')
            order by e.ts_ns""", d, start, start)

    (a, ad), (p, pd) = traces["auto"], traces["probe"]
    got_a, got_p = calls(a, ad), calls(p, pd)
    assert got_a == got_p
    assert {r[1] for r in got_a} == {"chr", "file", "pipe", "socket"}, got_a
    direct = [r for r in got_a if r[0] == "preadv2"]   # none where O_DIRECT is refused
    assert all(r[6] & 256 for r in direct), direct      # eflags DIRECT, from f_flags
    # read's offset comes from the file position read in the kernel
    reads = [r for r in got_a if r[0] == "read" and r[7] == "D/data.bin"]
    assert [r[2] for r in reads] == [i * 4096 for i in range(8)] + [65536], reads
