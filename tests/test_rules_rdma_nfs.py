"""The rdma-registration rule and the NFS rule's per-mount, fsync and RDMA
parts, on synthetic traces at and past their thresholds (the real NFS over
RDMA and verbs runs are in tests/vm/test_rdma_vm.py and tests/test_verbs.py)."""
from __future__ import annotations

import pytest

from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report
from synth import ev, synth_trace

MiB = 1 << 20
MS = 1_000_000


def finding(trace, rule, targets=None):
    found = [f for f in build_report(trace, targets or Targets()).findings if f.id == rule]
    assert len(found) <= 1
    return found[0] if found else None


def reg(ts, length, mr, pid=100):
    return ev("ibv_reg_mr", ts=ts, dur=50_000, pid=pid, fd=-1, req=length, ret=mr,
              arg=0x7F0000000000)


def dereg(ts, mr, pid=100):
    return ev("ibv_dereg_mr", ts=ts, dur=20_000, pid=pid, fd=-1, arg=mr)


def test_failed_registration_is_high_with_the_peak_registered(tmp_path):
    events = [reg(0, 1 * MiB, 0xA000), reg(1 * MS, 2 * MiB, 0xB000),
              dereg(2 * MS, 0xA000), reg(3 * MS, 4 * MiB, 0xC000),
              reg(4 * MS, 64 * MiB, 0),                      # refused
              dereg(5 * MS, 0xB000), dereg(6 * MS, 0xC000)]
    f = finding(synth_trace(tmp_path, events), "rdma-registration")
    assert f.rule_severity == "high"
    e = f.evidence
    assert (e["verbs_registered"], e["verbs_failed"]) == (3, 1)
    assert e["verbs_failed_bytes"] == e["largest_failed_bytes"] == 64 * MiB
    assert e["peak_registered_bytes"] == 6 * MiB            # B and C, after A went
    assert f.examples[0]["ts_ns"] == 4 * MS


@pytest.mark.parametrize("nomrs,severity", [(5, "warn"), (6, "high")])
def test_nfs_rdma_out_of_mrs(tmp_path, nomrs, severity):
    # 100 RPCs marshalled: 5 out of MRs is 5% (at the threshold), 6 is over
    events = [ev("rpcrdma_marshal", ts=i * MS, pid=100, tid=-1, fd=-1, arg=i)
              for i in range(100)]
    events += [ev("rpcrdma_nomrs", ts=i * MS - 1000, pid=100, tid=-1, fd=-1, arg=i,
                  path="10.0.0.1", path2="20049") for i in range(1, nomrs + 1)]
    f = finding(synth_trace(tmp_path, events), "rdma-registration")
    assert f.rule_severity == severity and f.evidence["nfs_rdma_out_of_mrs"] == nomrs
    assert f.evidence["nfs_rdma_rpcs_marshalled"] == 100
    n = finding(synth_trace(tmp_path / "n", events), "nfs")
    assert n.rule_severity == "warn" and n.evidence["rdma"]["out_of_mrs"] == nomrs


@pytest.mark.parametrize("count,span_ms,severity", [
    (200, 100, "warn"),      # 2000 registrations/s
    (200, 250, "info"),      # 800/s: under 1000/s
    (99, 10, "info"),        # fewer than min_registrations: rate not judged
])
def test_registration_per_transfer(tmp_path, count, span_ms, severity):
    step = span_ms * MS // count
    events = []
    for i in range(count):
        events += [reg(i * step, MiB, 0x1000 + i), dereg(i * step + step // 2, 0x1000 + i)]
    f = finding(synth_trace(tmp_path, events), "rdma-registration")
    assert f.rule_severity == severity
    assert f.evidence["peak_registered_bytes"] == MiB


def test_no_rdma_no_finding(tmp_path):
    events = [ev("pread64", ts=0, off=0, req=4096, ret=4096, file_id=0)]
    assert finding(synth_trace(tmp_path, events, files=[(0, "/data/a")]),
                   "rdma-registration") is None


def nfs_reads(n, size, step, file_id=0):
    return [ev("pread64", ts=i * step, dur=step // 2, off=i * size, req=size, ret=size,
               file_id=file_id) for i in range(n)]


def test_mount_under_the_read_target_is_a_warn(tmp_path):
    # 100 MiB in 1 MiB reads over 1 s (the last ends at 0.995 s): ~100 MiB/s
    events = nfs_reads(100, MiB, 10 * MS)
    files = [(0, "/mnt/nfs/a.bin", "nfs", "rw,vers=3,proto=rdma,rsize=1048576")]
    t = synth_trace(tmp_path, events, files=files)
    slow = finding(t, "nfs", Targets(read_bps=1 << 30))
    assert slow.rule_severity == "warn" and "under the 1.0 GiB/s target" in slow.summary
    m = slow.evidence["mounts"]["/"]
    assert m["proto"] == "rdma" and m["read_bytes"] == 100 * MiB
    assert m["read_bytes_per_s"] == pytest.approx(100 * MiB / 0.995)
    ok = finding(synth_trace(tmp_path / "ok", events, files=files), "nfs",
                 Targets(read_bps=50 * MiB))
    assert ok.rule_severity == "info"


@pytest.mark.parametrize("fsyncs,severity", [(2, "info"), (3, "warn")])
def test_fsyncs_per_mib_written_on_nfs(tmp_path, fsyncs, severity):
    # 2 MiB written: 2 fsyncs is 1 per MiB (at the threshold), 3 is over it
    events = [ev("nfs_write", ts=i * MS, off=i * MiB, req=MiB, ret=MiB, file_id=0, fd=-1)
              for i in range(2)]
    events += [ev("fsync", ts=10 * MS + i * MS, file_id=0) for i in range(fsyncs)]
    f = finding(synth_trace(tmp_path, events, files=[(0, "/mnt/nfs/c.pt", "nfs4", "rw")]),
                "nfs")
    assert f.rule_severity == severity and f.evidence["nfs_fsyncs"] == fsyncs


def test_fsyncs_judged_from_write_calls_without_nfs_probes(tmp_path):
    # no nfs_write rows (NFS probes not loaded): the job's own 1 MiB of
    # pwrite64 calls on the NFS file is what was written; 4 fsyncs is a storm
    events = [ev("pwrite64", ts=i * MS, off=i * 4096, req=4096, ret=4096, file_id=0)
              for i in range(256)]
    events += [ev("fsync", ts=300 * MS + i * MS, file_id=0) for i in range(4)]
    f = finding(synth_trace(tmp_path, events, files=[(0, "/mnt/nfs/c.pt", "nfs", "rw")]),
                "nfs")
    assert f.rule_severity == "warn" and "4 fsyncs for 1.0 MiB written" in f.summary
