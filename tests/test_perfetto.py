"""The Perfetto export (viewers/perfetto.py) and `iotrace export/view`
(cli_perfetto.py). The file is decoded with the generated protobuf classes of
the `perfetto` PyPI package (independent of our hand-written encoder) and its
structure checked: every track used is described, slices nest and close per
track, timestamps never go back within a sequence, interned names are defined
before use, one slice per call (no reduction under the size limit), counters
sum to the trace's bytes."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import iotrace
from iotrace.cli_perfetto import TraceServer, deep_link, export_perfetto, register
from iotrace.viewers import perfetto as pf

from conftest import needs_root, trace_run
from synth import ev, synth_trace

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                         reason="the `perfetto` package decodes the file")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from report_speed import make_trace  # noqa: E402

BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
READS = pf.READ_OPS
WRITES = pf.WRITE_OPS


def decode(path):
    return pb.Trace.FromString(Path(path).read_bytes())


def check(tr) -> dict:
    """Structural checks; returns what a test needs to compare with the trace."""
    desc = {}
    for p in tr.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in desc, f"track {d.uuid} described twice"
            desc[d.uuid] = d
    for d in desc.values():
        if d.HasField("parent_uuid"):
            assert d.parent_uuid in desc, f"parent of {d.uuid} not described"
    last_ts: dict[int, int] = {}
    names: dict[int, dict[int, str]] = defaultdict(dict)
    ann_names: dict[int, dict[int, str]] = defaultdict(dict)
    strings: dict[int, dict[int, bytes]] = defaultdict(dict)
    cleared: set[int] = set()
    stack: dict[int, list] = defaultdict(list)
    slices = []              # (track, name, ts, end, {annotation: value})
    instants = []            # (track, name, ts)
    counters = defaultdict(list)
    flows_out: dict[int, tuple] = {}    # flow id -> (track, name, ts) of the slice it leaves
    flows_in: dict[int, tuple] = {}     # flow id -> (track, name, ts) of the event it ends at
    for p in tr.packet:
        seq = p.trusted_packet_sequence_id
        assert seq, "every packet has a sequence id"
        if p.HasField("timestamp"):
            assert p.timestamp >= last_ts.get(seq, 0), f"time goes back on sequence {seq}"
            last_ts[seq] = p.timestamp
        if p.sequence_flags & 1:
            cleared.add(seq)
            names[seq].clear()
            strings[seq].clear()
        if p.HasField("interned_data"):
            assert seq in cleared or p.sequence_flags & 1
            for e in p.interned_data.event_names:
                names[seq][e.iid] = e.name
            for e in p.interned_data.debug_annotation_names:
                ann_names[seq][e.iid] = e.name
            for e in p.interned_data.debug_annotation_string_values:
                strings[seq][e.iid] = e.str
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        assert te.track_uuid in desc, f"track {te.track_uuid} used but not described"
        if te.HasField("name_iid"):
            assert p.sequence_flags & 2 and seq in cleared
            assert te.name_iid in names[seq], "event name used before it was interned"
            name = names[seq][te.name_iid]
        else:
            name = te.name
        anns = {}
        for a in te.debug_annotations:
            key = ann_names[seq][a.name_iid] if a.HasField("name_iid") else a.name
            if a.HasField("string_value_iid"):
                anns[key] = strings[seq][a.string_value_iid].decode()
            else:
                anns[key] = getattr(a, a.WhichOneof("value"))
        for f in te.flow_ids:
            assert f not in flows_out, f"flow {f} leaves two events"
            flows_out[f] = (te.track_uuid, name, p.timestamp)
        for f in te.terminating_flow_ids:
            assert f not in flows_in, f"flow {f} ends twice"
            flows_in[f] = (te.track_uuid, name, p.timestamp)
        if te.type == BEGIN:
            stack[te.track_uuid].append((name, p.timestamp, anns))
        elif te.type == END:
            assert stack[te.track_uuid], f"END without BEGIN on track {te.track_uuid}"
            n, ts, an = stack[te.track_uuid].pop()
            assert p.timestamp >= ts
            slices.append((te.track_uuid, n, ts, p.timestamp, an))
        elif te.type == INSTANT:
            instants.append((te.track_uuid, name, p.timestamp, anns))
        elif te.type == COUNTER:
            assert desc[te.track_uuid].HasField("counter")
            counters[te.track_uuid].append((p.timestamp, te.double_counter_value))
    open_ = {k: v for k, v in stack.items() if v}
    assert not open_, f"slices left open: {open_}"
    assert set(flows_out) == set(flows_in), "every flow has both ends"
    by_name = {d.name: u for u, d in desc.items() if d.name}
    return dict(desc=desc, slices=slices, instants=instants, counters=counters,
                by_name=by_name, flows=[(flows_out[f], flows_in[f]) for f in flows_out])


def counter_bytes(points, bin_ns=pf.BIN_NS) -> float:
    """Bytes under a MB/s counter: each value holds until the next point."""
    total = 0.0
    for (t, v), (t2, _) in zip(points, points[1:]):
        total += v * 1e6 * (t2 - t) / 1e9
    assert points[-1][1] == 0
    return total


def file_bytes(trace, ops) -> int:
    return trace.con.execute(
        f"select coalesce(sum(ret), 0) from events where file_id >= 0 and ret > 0 "
        f"and op in {pf.sql_list(ops)}").fetchone()[0]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("pf") / "synthetic"
    make_trace(root, 60_000)        # 8 processes x 2 threads, overlapping calls
    return root


def test_synthetic_one_slice_per_call(synthetic, tmp_path):
    t = iotrace.open_trace(synthetic)
    stats = pf.export(t, tmp_path / "t.pftrace")
    assert stats["merged_calls"] == 0
    r = check(decode(tmp_path / "t.pftrace"))
    calls = [s for s in r["slices"] if s[0] not in (r["by_name"]["phases"],)]
    assert len(calls) == stats["events"] == 60_000
    # names: op + file basename; annotations as documented
    ops = Counter(n.split(" ")[0] for _, n, *_ in calls)
    want = dict(t.con.execute("select op, count(*) from events group by op").fetchall())
    assert ops == want
    s = next(s for s in calls if s[1].startswith("pread64 "))
    assert s[1].endswith(".npz") and s[4]["path"].startswith("/data/shard_")
    assert {"offset", "bytes", "result", "dur_ns"} <= set(s[4])
    # counters: job read/write MB/s sum to the trace's file bytes
    read = counter_bytes(r["counters"][r["by_name"]["job: file read MB/s"]])
    write = counter_bytes(r["counters"][r["by_name"]["job: file write MB/s"]])
    assert read == pytest.approx(file_bytes(t, READS), rel=1e-6)
    assert write == pytest.approx(file_bytes(t, WRITES), rel=1e-6)
    # per process: 8 processes, each with read and write counters under it
    per_proc = [u for u, d in r["desc"].items() if d.name == "file read MB/s"]
    assert len(per_proc) == 8
    total = sum(counter_bytes(r["counters"][u]) for u in per_proc)
    assert total == pytest.approx(file_bytes(t, READS), rel=1e-6)
    assert r["counters"][r["by_name"]["job: file I/Os in flight"]]


def test_size_limit_merges_short_calls_and_keeps_counters(synthetic, tmp_path):
    t = iotrace.open_trace(synthetic)
    stats = pf.export(t, tmp_path / "m.pftrace", max_slices=5_000)
    assert stats["slices"] <= 5_000 and stats["merged_calls"] > 0
    r = check(decode(tmp_path / "m.pftrace"))
    merged = [s for s in r["slices"] if s[1].endswith("(merged)")]
    assert len(merged) == stats["merged_slices"]
    single = [s for s in r["slices"] if "calls" not in s[4] and s[1] != "phases"
              and s[0] != r["by_name"]["phases"]]
    assert sum(s[4]["calls"] for s in merged) + len(single) == stats["events"]
    read = counter_bytes(r["counters"][r["by_name"]["job: file read MB/s"]])
    assert read == pytest.approx(file_bytes(t, READS), rel=1e-6)


def test_overlapping_calls_nest_and_errors(tmp_path):
    """Two calls of one thread that overlap (clock skew) are cut to nest; a lock
    wait inside a call goes to the thread's lock track; failures get errno."""
    t = synth_trace(tmp_path / "t", events=[
        ev("pread64", ts=1000, dur=5000, fd=3, off=0, req=4096, ret=4096, file_id=0),
        ev("pread64", ts=3000, dur=5000, fd=3, off=4096, req=4096, ret=4096, file_id=0),
        ev("lock_contention", ts=3500, dur=100, fd=-1),
        ev("openat", ts=9000, dur=100, fd=-1, ret=-2, path="/nope/missing.bin"),
        ev("futex", ts=10000, dur=3000, fd=-1, tid=101),
        ev("proc_exit", ts=20000, dur=0, fd=-1),
    ], files=[(0, "/data/a.bin")], processes=[(100, 1, "python train.py --epochs 1")])
    pf.export(t, tmp_path / "o.pftrace")
    r = check(decode(tmp_path / "o.pftrace"))
    sl = {(s[1], s[2]): s for s in r["slices"]}
    first = sl[("pread64 a.bin", 1000)]
    assert first[3] == 3000 and first[4]["dur_ns"] == 5000
    err = sl[("openat missing.bin", 9000)]
    assert err[4]["errno"] == "ENOENT (2)" and "result" not in err[4]
    lock = sl[("lock_contention", 3500)]
    lock_track = r["desc"][lock[0]]
    assert lock_track.name == "kernel lock waits"
    assert r["desc"][lock_track.parent_uuid].thread.tid == 100
    futex = sl[("futex", 10000)]
    assert r["desc"][futex[0]].thread.tid == 101
    procs = [d for d in r["desc"].values() if d.HasField("process")]
    assert [d.process.process_name for d in procs] == ["python train.py --epochs 1"]
    assert [i[1] for i in r["instants"]] == ["process exit (exit 0)"]


def test_findings_track(synthetic, tmp_path):
    from iotrace.analyzers.base import Targets
    from iotrace.analyzers.report import build_report
    t = iotrace.open_trace(synthetic)
    report = build_report(iotrace.open_trace(synthetic), Targets(read_bps=8 * 2**30))
    stats = pf.export(t, tmp_path / "f.pftrace", report=report)
    r = check(decode(tmp_path / "f.pftrace"))
    fu = r["by_name"]["findings"]
    inst = [i for i in r["instants"] if i[0] == fu]
    n_examples = sum(1 for f in report.findings for e in f.examples if e.get("ts_ns") is not None)
    assert len(inst) == stats["findings"] == n_examples + (1 if report.verdict.get("summary")
                                                           else 0)
    if report.findings:
        f = report.findings[0]
        assert any(i[3].get("summary") == f.summary for i in inst)


WORKLOAD = r'''
import ctypes, os, sys, threading
d = sys.argv[1]
libc = ctypes.CDLL(None)
for i in range(4):
    with open(f"{d}/data_{i}.bin", "wb") as f:
        f.write(os.urandom(256 * 1024))
def reader(i):
    libc.prctl(15, f"loader{i}".encode(), 0, 0, 0)      # PR_SET_NAME: the thread's name
    fd = os.open(f"{d}/data_{i}.bin", os.O_RDONLY)
    for k in range(16):
        os.pread(fd, 16384, k * 16384)
    os.close(fd)
def main():
    ts = [threading.Thread(target=reader, args=(i,), name=f"loader{i}") for i in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
pid = os.fork()
if pid == 0:
    main(); os._exit(0)
main()
os.waitpid(pid, 0)
'''


@needs_root()
def test_real_trace(tmp_path):
    (tmp_path / "w.py").write_text(WORKLOAD)
    (tmp_path / "d").mkdir()
    proc, t = trace_run(tmp_path / "trace", sys.executable, str(tmp_path / "w.py"),
                        str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    stats = export_perfetto(tmp_path / "trace", tmp_path / "real.pftrace")
    r = check(decode(tmp_path / "real.pftrace"))
    life = t.con.execute(f"select count(*) from events where op in "
                         f"{pf.sql_list(pf.LIFE_OPS)}").fetchone()[0]
    assert stats["merged_calls"] == 0
    calls = [s for s in r["slices"]
             if r["desc"][s[0]].name not in ("phases", "training loop", pf.STACK_TRACK)]
    assert len(calls) + life == t.meta["events"] == stats["events"]
    proc_tracks = [i for i in r["instants"] if r["desc"][i[0]].HasField("process")]
    assert len(proc_tracks) == life
    preads = [s for s in calls if s[1].startswith("pread64 data_")]
    assert len(preads) == 2 * 2 * 16          # 2 processes x 2 threads x 16
    threads = {r["desc"][s[0]].thread.thread_name for s in preads}
    assert threads == {"loader0", "loader1"}
    pids = {r["desc"][s[0]].thread.pid for s in preads}
    assert len(pids) == 2
    names = [d.process.process_name for d in r["desc"].values() if d.HasField("process")]
    assert any("w.py" in n for n in names)
    read = counter_bytes(r["counters"][r["by_name"]["job: file read MB/s"]])
    assert read == pytest.approx(file_bytes(t, READS), rel=1e-6)
    assert read >= 64 * 16384


SPINS = r'''
import json, sys, time
def spin(s):
    end = time.monotonic() + s
    while time.monotonic() < end:
        pass
def spin_a(): spin(0.4)
def spin_b(): spin(0.3)
def main():
    out = {}
    time.sleep(1.0)             # the sampler starts reading a new process
    for f in (spin_a, spin_b, spin_a):
        t = time.monotonic_ns(); f(); out.setdefault(f.__name__, []).append((t, time.monotonic_ns()))
    json.dump(out, open(sys.argv[1], "w"))
main()
'''


@needs_root()
def test_python_stack_track(tmp_path):
    """The Python stack samples as nested slices on a child track of their
    thread: each call of spin_a and spin_b (busy 0.4 and 0.3 s, timed by the
    script's own clock) is one slice named by its function under main(),
    its edges within 8 mean sampling intervals of the script's: the
    intervals are exponential, and the first sample after an edge is later
    than 8 of them once in 3,000 (at 2, the bound first tried, 1 in 7)."""
    (tmp_path / "w.py").write_text(SPINS)
    proc, t = trace_run(tmp_path / "trace", sys.executable, str(tmp_path / "w.py"),
                        str(tmp_path / "truth.json"), extra=("--py-stacks", "200"))
    assert proc.returncode == 0, proc.stderr
    truth = __import__("json").loads((tmp_path / "truth.json").read_text())
    stats = export_perfetto(tmp_path / "trace", tmp_path / "s.pftrace")
    r = check(decode(tmp_path / "s.pftrace"))
    stack = [x for x in r["slices"] if r["desc"][x[0]].name == pf.STACK_TRACK]
    assert stats["stack_slices"] == len(stack) > 0 and stats["stack_depth_cut"] is None
    tol = 8 * 1e9 / t.meta["py_stacks"]["rate_hz"]
    for fn in ("spin_a", "spin_b"):
        got = sorted((a, b) for _, name, a, b, _ in stack if name.startswith(f"{fn} (w.py)"))
        assert len(got) == len(truth[fn]), (fn, got)
        for (a, b), (ta, tb) in zip(got, sorted(truth[fn])):
            assert abs(a - ta) < tol and abs(b - tb) < tol, (fn, a - ta, b - tb)
    mains = [x for x in stack if x[1].startswith("main (w.py)")]
    assert len(mains) == 1 and mains[0][2] <= min(a for a, _ in truth["spin_a"])


def test_trace_processor_counts(synthetic, tmp_path):
    tp = shutil.which("trace_processor_shell")
    if not tp:
        pytest.skip("trace_processor_shell is not on PATH (it cannot be downloaded here)")
    t = iotrace.open_trace(synthetic)
    stats = pf.export(t, tmp_path / "t.pftrace")
    q = tmp_path / "q.sql"
    q.write_text("select count(*) from slice where name not like 'phase%' "
                 "and track_id not in (select id from track where name = 'phases');")
    out = subprocess.run([tp, "-q", str(q), str(tmp_path / "t.pftrace")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert str(stats["events"]) in out.stdout


# ---- the server `iotrace view` runs -------------------------------------------

def test_server_serves_file_with_cors(tmp_path):
    f = tmp_path / "x.pftrace"
    f.write_bytes(b"\x0a\x00" * 5000)
    srv = TraceServer(f, port=0)
    done = {}
    th = threading.Thread(target=lambda: done.setdefault(
        "fetched", srv.serve_until_fetched(grace_s=0.3, timeout_s=20)))
    th.start()
    ui = {"Origin": "https://ui.perfetto.dev"}     # only the UI's page gets it
    with urllib.request.urlopen(urllib.request.Request(srv.url(), headers=ui),
                                timeout=10) as resp:
        body = resp.read()
        assert resp.status == 200
        assert resp.headers["Content-Length"] == str(f.stat().st_size)
        assert resp.headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
    assert body == f.read_bytes()
    req = urllib.request.Request(srv.url(), method="OPTIONS", headers={
        "Origin": "https://ui.perfetto.dev", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Private-Network": "true"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Access-Control-Allow-Private-Network"] == "true"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(srv.url().rsplit("/", 1)[0] + "/other", timeout=10)
    assert e.value.code == 404
    th.join(30)
    assert done["fetched"] is True
    assert deep_link(9001, "x.pftrace") == \
        "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/x.pftrace"


def _group():
    @click.group()
    def g():
        pass

    def say(m):
        click.echo(f"iotrace: {m}", err=True)

    def fail(m, code=2):
        raise click.ClickException(m)
    register(g, say, fail)
    return g


def test_cli_export_and_view(tmp_path):
    t = synth_trace(tmp_path / "tr", events=[
        ev("read", ts=1000, dur=500, req=100, ret=100, file_id=0)], files=[(0, "/d/a")])
    runner = CliRunner()
    res = runner.invoke(_group(), ["export", "--perfetto", str(t.root)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "tr.pftrace"
    assert "1 events -> 1 slices" in res.output and out.exists()
    check(decode(out))
    res = runner.invoke(_group(), ["export", "--perfetto", str(t.root), "-o",
                                   str(tmp_path / "o.pftrace"), "--no-findings"])
    assert res.exit_code == 0 and (tmp_path / "o.pftrace").exists()
    # view: reuses the fresh export, prints the deep link, stops on --timeout
    res = runner.invoke(_group(), ["view", str(t.root), "--no-browser", "--port", "0",
                                   "--timeout", "0.3"])
    assert res.exit_code == 0, res.output
    assert "up to date" in res.output
    assert "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:" in res.output
    assert "/tr.pftrace" in res.output


def test_nfs_and_rpc_on_their_own_track(tmp_path):
    """RPCs (completed in rpciod, tid -1) and NFS calls get a process's
    "NFS / RPC" track; an RPC is named by its program and procedure and keeps
    its xid, which its NFS call carries too."""
    t = synth_trace(tmp_path / "t", events=[
        ev("rpc", ts=1000, dur=5000, tid=-1, fd=1, off=3000, req=500, path="nfs",
           path2="READ", arg=0x1234),
        ev("nfs_read", ts=900, dur=5200, fd=-1, off=0, req=65536, ret=65536, file_id=0,
           arg=0x1234),
        ev("pread64", ts=800, dur=6000, fd=3, off=0, req=65536, ret=65536, file_id=0),
    ], files=[(0, "/mnt/nfs/a.bin", "nfs4")], processes=[(100, 1, "python train.py")])
    pf.export(t, tmp_path / "o.pftrace")
    r = check(decode(tmp_path / "o.pftrace"))
    sl = {s[1]: s for s in r["slices"]}
    assert {"RPC nfs READ", "nfs_read a.bin", "pread64 a.bin"} <= set(sl)
    assert r["desc"][sl["RPC nfs READ"][0]].name == "NFS / RPC"
    assert r["desc"][sl["nfs_read a.bin"][0]].name == "NFS / RPC (tid 100)"
    assert r["desc"][sl["pread64 a.bin"][0]].thread.tid == 100


def test_rdma_events_on_their_own_track_and_kernel_process(tmp_path):
    """RPC-over-RDMA events of the job's RPCs go on its "RDMA" track; events of
    kernel consumers (pid 0) on the RDMA track of a process named for them;
    verbs calls on the calling thread's track."""
    t = synth_trace(tmp_path / "t", events=[
        ev("rpcrdma_marshal", ts=1000, dur=0, tid=-1, fd=-1, arg=0x77, flags=1, mode=5),
        ev("rpcrdma_chunk_write", ts=1000, dur=0, tid=-1, fd=1, req=262144, arg=0x77),
        ev("rdma_cq_poll", ts=2000, dur=0, pid=0, tid=-1, fd=-1, req=16, ret=1, arg=4,
           path="rpcrdma"),
        ev("ibv_reg_mr", ts=3000, dur=40000, fd=-1, req=1 << 20, ret=0x5000),
    ], processes=[(100, 1, "python train.py")])   # pid 0 has no processes row
    pf.export(t, tmp_path / "o.pftrace")
    r = check(decode(tmp_path / "o.pftrace"))
    sl = {s[1]: s for s in r["slices"]}
    assert {"rpcrdma_marshal", "rpcrdma_chunk_write", "rdma_cq_poll rpcrdma",
            "ibv_reg_mr"} <= set(sl)
    assert r["desc"][sl["rpcrdma_chunk_write"][0]].name == "RDMA"
    kernel_track = r["desc"][sl["rdma_cq_poll rpcrdma"][0]]
    assert kernel_track.name == "RDMA"
    kernel = r["desc"][kernel_track.parent_uuid].process
    assert kernel.pid == 0 and kernel.process_name.startswith("kernel (RDMA")
    assert r["desc"][sl["ibv_reg_mr"][0]].thread.tid == 100
