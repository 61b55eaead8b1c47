"""NFS events on a real NFS client (runs inside the Debian 6.1 VM that
tests/test_vm.py boots; skipped elsewhere). The workload's ground truth:
dd's byte counts and the mount's rsize/wsize."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from conftest import rows, trace_run  # noqa: E402

W = os.environ.get("IOTRACE_VM_NFS")
pytestmark = pytest.mark.skipif(not W, reason="runs inside the NFS VM (tests/test_vm.py)")
MiB = 1 << 20
SIZE = 8 * MiB


def mount_opt(mnt: str, key: str) -> int:
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if parts[1] == mnt:
            for opt in parts[3].split(","):
                if opt.startswith(key + "="):
                    return int(opt.split("=")[1])
    raise AssertionError(f"{mnt} not mounted")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    script = []
    for v in ("nfs3", "nfs4"):
        for kind in ("buffered", "direct"):
            # written on the server side: the client's cache is cold
            Path(f"{W}/export/{v}_{kind}_read.bin").write_bytes(b"n" * SIZE)
        mnt = f"{W}/{v}"
        script += [
            f"dd if={mnt}/{v}_buffered_read.bin of=/dev/null bs=1M status=none",
            f"dd if={mnt}/{v}_direct_read.bin of=/dev/null bs=1M iflag=direct status=none",
            f"dd if=/dev/zero of={mnt}/{v}_buffered_write.bin bs=1M count=8 conv=fsync "
            "status=none",
            f"dd if=/dev/zero of={mnt}/{v}_direct_write.bin bs=1M count=8 oflag=direct "
            "status=none",
        ]
    # fio on the v3 mount, O_DIRECT and buffered: its JSON is the ground truth
    for kind, direct in (("direct", 1), ("buffered", 0)):
        Path(f"{W}/export/fio_read_{kind}.bin").write_bytes(b"f" * SIZE)
        for rw in ("read", "write"):
            script.append(f"fio --name=nfs{rw} --filename={W}/nfs3/fio_{rw}_{kind}.bin "
                          f"--rw={rw} --bs=256k --size={SIZE} --direct={direct} "
                          f"--ioengine=psync --end_fsync={1 - direct} --output-format=json "
                          f"--output={W}/fio_{rw}_{kind}.json")
    out = tmp_path_factory.mktemp("nfs") / "trace"
    proc, trace = trace_run(out, "sh", "-c", " && ".join(script))
    assert proc.returncode == 0, proc.stderr
    return trace


@pytest.mark.parametrize("kind", ["direct", "buffered"])
@pytest.mark.parametrize("rw", ["read", "write"])
def test_fio_on_nfs_matches_fio(traced, rw, kind):
    import json
    job = json.loads(Path(f"{W}/fio_{rw}_{kind}.json").read_text())["jobs"][0][rw]
    path = f"{W}/nfs3/fio_{rw}_{kind}.bin"
    syscalls = rows(traced, f"""select count(*), sum(e.ret) from events e join files f
                                using (file_id) where f.path = ? and e.op = 'p{rw}64'""",
                    path)[0]
    assert syscalls == (job["total_ios"], job["io_bytes"])
    calls, nbytes, _ = nfs(traced, f"nfs_{rw}", path)
    # O_DIRECT: every byte is one RPC's; buffered: a cold cache reads each byte
    # once (readahead stops at end of file) and end_fsync flushes each byte once
    assert nbytes == job["io_bytes"] == SIZE


def nfs(trace, op, path):
    return rows(trace, """select count(*), coalesce(sum(e.ret), 0), count(distinct e.pid)
                          from events e join files f using (file_id)
                          where e.op = ? and f.path = ?""", op, path)[0]


@pytest.mark.parametrize("v", ["nfs3", "nfs4"])
def test_nfs_probes_attached(traced, v):
    attached = traced.meta["probes"]["attached"]
    assert "NFS read done" in attached and "RPC latency (sunrpc)" in attached


@pytest.mark.parametrize("v", ["nfs3", "nfs4"])
def test_nfs_reads_match_dd(traced, v):
    mnt = f"{W}/{v}"
    rsize = mount_opt(mnt, "rsize")
    calls, nbytes, pids = nfs(traced, "nfs_read", f"{mnt}/{v}_direct_read.bin")
    assert (nbytes, pids) == (SIZE, 1)
    assert calls >= SIZE // rsize                     # no READ larger than rsize
    assert rows(traced, "select max(req_bytes) from events where op = 'nfs_read'")[0][0] <= rsize
    calls, nbytes, pids = nfs(traced, "nfs_read", f"{mnt}/{v}_buffered_read.bin")
    assert nbytes == SIZE and calls >= SIZE // rsize  # readahead: rsize-sized READs


@pytest.mark.parametrize("v", ["nfs3", "nfs4"])
def test_buffered_reads_come_from_readahead(traced, v):
    # dd's buffered reads: the page cache reads ahead, and each READ RPC is
    # initiated inside a readahead of the reading thread, on the same file
    path = f"{W}/{v}/{v}_buffered_read.bin"
    count, nbytes = rows(traced, """select count(*), coalesce(sum(req_bytes), 0)
                                    from events e join files f using (file_id)
                                    where e.op = 'nfs_readahead' and f.path = ?""", path)[0]
    assert count > 0 and nbytes >= SIZE
    outside = rows(traced, """
        select count(*) from events r join files f using (file_id)
        where r.op = 'nfs_read' and f.path = ?
          and not exists (select 1 from events a where a.op = 'nfs_readahead'
                          and a.tid = r.tid and a.file_id = r.file_id
                          and r.ts_ns between a.ts_ns and a.ts_ns + a.dur_ns)""", path)[0][0]
    assert outside == 0


@pytest.mark.parametrize("v", ["nfs3", "nfs4"])
def test_nfs_writes_match_dd(traced, v):
    mnt = f"{W}/{v}"
    wsize = mount_opt(mnt, "wsize")
    calls, nbytes, _ = nfs(traced, "nfs_write", f"{mnt}/{v}_direct_write.bin")
    assert nbytes == SIZE and calls == SIZE // min(wsize, MiB)
    calls, nbytes, _ = nfs(traced, "nfs_write", f"{mnt}/{v}_buffered_write.bin")
    assert nbytes == SIZE


def test_rpc_counts_match_nfs_calls(traced):
    nfs_reads = rows(traced, "select count(*) from events where op = 'nfs_read'")[0][0]
    nfs_writes = rows(traced, "select count(*) from events where op = 'nfs_write'")[0][0]
    rpc = dict(rows(traced, """select path2, count(*) from events where op = 'rpc'
                               and path = 'nfs' group by path2"""))
    seen = rows(traced, """select path, path2, pid, count(*) from events where op = 'rpc'
                           group by all order by 4 desc limit 20""")
    assert rpc.get("READ", 0) == nfs_reads, (seen, traced.meta["probes"])
    assert rpc.get("WRITE", 0) == nfs_writes
    # COMMITs are not checked: whether the client writes unstable (and then
    # COMMITs) or stable depends on how much is dirty when it flushes
    # every RPC splits into queue (backlog), network+server (rtt) and the rest
    bad = rows(traced, """select count(*) from events where op = 'rpc'
                          and (req_bytes + "offset" > dur_ns or dur_ns <= 0)""")[0][0]
    assert bad == 0


def test_report_shows_the_nfs_finding(traced):
    from iotrace.analyzers.base import Targets
    from iotrace.analyzers.report import build_report
    report = build_report(traced, Targets())
    nfs = [f for f in report.findings if f.id == "nfs"]
    assert len(nfs) == 1
    e = nfs[0].evidence
    nfs_reads = rows(traced, "select count(*) from events where op = 'nfs_read'")[0][0]
    assert e["per_procedure"]["READ"]["calls"] == nfs_reads == e["nfs_reads"]
    assert 0 < e["network_server_share"] <= 1 and e["mount_rsize_bytes"] > 0
