"""Userspace RDMA verbs: uprobes on libibverbs, checked against a program
that makes a known sequence of verbs calls (tests/workloads/verbs_mr.c).

Here (no RDMA device) only device discovery can run; in the test VM, with
Soft-RoCE (rxe0), the whole sequence runs, including a registration that
the kernel refuses, and the report names it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import needs_root, rows, scalar, trace_run

pytestmark = needs_root()
KiB = 1024
SYSTEM_LIB = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"


def have_device() -> bool:
    d = Path("/sys/class/infiniband_verbs")
    return d.is_dir() and any(p.name.startswith("uverbs") for p in d.iterdir())


@pytest.fixture(scope="module")
def traced(tmp_path_factory, verbs_bin):
    out = tmp_path_factory.mktemp("verbs") / "trace"
    # 3 device lists; with a device: 4 MRs of 256 KiB, then 4 MiB over the limit.
    # --verbs-lib: without an RDMA device (here) the probes are off by default
    proc, trace = trace_run(out, str(verbs_bin), "3", "4", "256", "4096",
                            extra=("--verbs-lib", SYSTEM_LIB))
    assert proc.returncode == 0, proc.stderr
    return trace, json.loads(proc.stdout)


def calls(trace, op):
    return rows(trace, "select pid, req_bytes, ret, dur_ns, arg, mode, path from events "
                       "where op = ? order by ts_ns", op)


def test_verbs_probes_attach_to_the_default_symbol_version(traced):
    trace, _ = traced
    attached = trace.meta["probes"]["attached"]
    # exported twice (@IBVERBS_1.0 and @@IBVERBS_1.1): the default one is probed,
    # or the calls below would not be seen
    assert {"ibv_get_device_list", "ibv_reg_mr", "ibv_dereg_mr"} <= set(attached)


def test_verbs_probes_on_by_default_only_with_a_device(tmp_path, verbs_bin):
    """Without an RDMA device the verbs probes stay off, and say why (a job can
    only find no device); with one (the Soft-RoCE VM) they are on."""
    proc, trace = trace_run(tmp_path / "t", str(verbs_bin), "1", "0", "4")
    assert proc.returncode == 0, proc.stderr
    why = {s["probe"]: s["why"] for s in trace.meta["probes"]["skipped"]}
    if have_device():
        assert "ibv_reg_mr" not in why and trace.meta["probes"]["verbs_library"]
        assert len(calls(trace, "ibv_get_device_list")) == 1
    else:
        assert why["ibv_reg_mr"].startswith("no RDMA device")
        assert trace.meta["probes"]["verbs_library"] is None
        assert calls(trace, "ibv_get_device_list") == []


def test_device_lists_counted_exactly(traced):
    trace, truth = traced
    lists = calls(trace, "ibv_get_device_list")
    job = scalar(trace, "select pid from processes where cmdline like '%verbs_mr%'")
    assert len(lists) == truth["lists"] == 3
    assert all(c[0] == job for c in lists)
    assert [c[1] for c in lists] == [truth["devices"]] * 3   # devices found, read at return
    assert all(c[3] > 0 for c in lists)                      # entry to return


def test_control_path_with_a_device(traced):
    trace, truth = traced
    if truth["devices"] == 0:
        pytest.skip("no RDMA device here (runs in the Soft-RoCE VM: tests/test_vm.py)")
    assert [c[6] for c in calls(trace, "ibv_open_device")] == [truth["device"]]
    assert len(calls(trace, "ibv_alloc_pd")) == 1
    assert [c[1] for c in calls(trace, "ibv_create_cq")] == [16]
    assert [c[2] != 0 for c in calls(trace, "ibv_create_qp")] == [True]
    assert [(c[5], c[2]) for c in calls(trace, "ibv_modify_qp")] == [(1, 0)]  # INIT, ok
    for op in ("ibv_destroy_qp", "ibv_destroy_cq", "ibv_dealloc_pd", "ibv_close_device"):
        assert len(calls(trace, op)) == 1, op


def test_memory_registrations_and_the_refused_one(traced):
    trace, truth = traced
    if truth["devices"] == 0:
        pytest.skip("no RDMA device here (runs in the Soft-RoCE VM: tests/test_vm.py)")
    regs = calls(trace, "ibv_reg_mr")
    ok = [r for r in regs if r[2] != 0]
    failed = [r for r in regs if r[2] == 0]
    assert len(ok) == truth["registered"] == 4
    assert {r[1] for r in ok} == {truth["mr_bytes"]} == {256 * KiB}
    assert [r[1] for r in failed] == [truth["fail_bytes"]] == [4096 * KiB]
    # ibv_reg_mr tail-calls ibv_reg_mr_iova2: one call, one record
    assert calls(trace, "ibv_reg_mr_iova2") == []
    # every deregistration names an MR a registration returned
    deregs = {r[4] for r in calls(trace, "ibv_dereg_mr")}
    assert deregs == {r[2] for r in ok}
    # the kernel side of the same MRs (ib_core mr_dereg, owned by the job)
    kernel = rows(trace, "select req_bytes from events where op = 'rdma_mr_dereg' "
                         "and pid = ?", ok[0][0])
    assert [k[0] for k in kernel] == [256 * KiB] * 4


def test_report_names_the_refused_registration(traced):
    trace, truth = traced
    if truth["devices"] == 0:
        pytest.skip("no RDMA device here (runs in the Soft-RoCE VM: tests/test_vm.py)")
    from iotrace.analyzers.base import Targets
    from iotrace.analyzers.report import build_report
    report = build_report(trace, Targets())
    found = [f for f in report.findings if f.id == "rdma-registration"]
    assert len(found) == 1
    e = found[0].evidence
    assert e["verbs_failed"] == 1 and e["verbs_failed_bytes"] == 4096 * KiB
    assert e["verbs_registered"] == 4
    assert e["peak_registered_bytes"] == 4 * 256 * KiB   # all four, then the deregs


def test_a_private_libibverbs_is_reported_then_probed_with_verbs_lib(tmp_path, verbs_bin):
    """A job that loads its own libibverbs copy (a conda env's) is not seen by
    uprobes on the system's: the trace says so, and --verbs-lib fixes it."""
    import shutil
    from conftest import iotrace_cmd
    system = SYSTEM_LIB
    if not Path(system).exists():
        pytest.skip("no system libibverbs at " + system)
    private = tmp_path / "env" / "lib"
    private.mkdir(parents=True)
    shutil.copy(system, private / "libibverbs.so.1")
    env = dict(os.environ, LD_LIBRARY_PATH=str(private))
    # the probes on the system's copy (forced: this machine may have no device)
    proc, trace = trace_run(tmp_path / "t1", str(verbs_bin), "2", "0", "4", env=env,
                            extra=("--verbs-lib", system))
    assert proc.returncode == 0, proc.stderr
    assert calls(trace, "ibv_get_device_list") == []
    assert trace.meta["counters"]["verbs_libraries_not_probed"] == 1
    assert trace.meta["probes"]["verbs_libraries_not_probed"] == [
        str(private / "libibverbs.so.1")]
    summary = iotrace_cmd("summary", str(tmp_path / "t1"))
    assert f"--verbs-lib {private / 'libibverbs.so.1'}" in summary.stdout.replace("\n", "")
    proc, trace = trace_run(tmp_path / "t2", str(verbs_bin), "2", "0", "4", env=env,
                            extra=("--verbs-lib", str(private / "libibverbs.so.1")))
    assert proc.returncode == 0, proc.stderr
    assert len(calls(trace, "ibv_get_device_list")) == 2
    assert trace.meta["counters"]["verbs_libraries_not_probed"] == 0


def test_attach_probes_the_libibverbs_the_process_mapped(tmp_path):
    """`iotrace attach` puts the verbs uprobes on the library copy the running
    process has mapped (here a private copy loaded with ctypes), not the
    system's: the calls made after the attach are all recorded."""
    import shutil
    import subprocess
    import sys
    from conftest import IOTRACE, wait_for
    system = SYSTEM_LIB
    if not Path(system).exists():
        pytest.skip("no system libibverbs at " + system)
    private = tmp_path / "libibverbs.so.1"
    shutil.copy(system, private)
    go = tmp_path / "go"
    script = f"""
import ctypes, os, sys, time
lib = ctypes.CDLL({str(private)!r})
lib.ibv_get_device_list.restype = ctypes.c_void_p
num = ctypes.c_int()
print("ready", flush=True)
while not os.path.exists({str(go)!r}):
    time.sleep(0.02)
for _ in range(5):
    lib.ibv_get_device_list(ctypes.byref(num))
"""
    target = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "attach", "-q", "--pid", str(target.pid), "-o", str(out)],
                              stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (out / "meta.json").exists()), "attach never became ready"
        go.touch()
        assert target.wait(timeout=60) == 0
        assert tracer.wait(timeout=60) == 0, tracer.stderr.read()
    finally:
        target.kill()
        tracer.kill()
    import iotrace
    trace = iotrace.open_trace(out)
    assert trace.meta["probes"]["verbs_library"] == str(private)
    lists = calls(trace, "ibv_get_device_list")
    assert len(lists) == 5 and {c[0] for c in lists} == {target.pid}
