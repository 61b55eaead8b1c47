"""The metadata-storm and checkpoint-burst rules.

Synthetic traces pin each threshold at its edge (exactly at the threshold fires,
one unit below does not). Real workloads traced by the recorder check the
findings' numbers exactly against what the workload did: 20,000 small files
opened, stat'ed and read once each; torch.save / np.save checkpoints every N
steps, each fsync'ed once.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys

import pytest

from conftest import WORKLOADS, needs_root, rows, scalar, trace_run
from synth import ev, synth_trace

from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report

MiB = 1 << 20
KiB = 1 << 10
SEC = 10**9
AT_EMPTY_PATH = 0x1000
O_WRONLY_CREAT_TRUNC = 0o1101


def findings(trace, rule_id, config: dict | None = None, tmp_path=None, **targets):
    """Run one rule (with thresholds overridden by `config`); its findings."""
    path = None
    if config:
        path = tmp_path / f"{rule_id}.toml"
        path.write_text(f"[{rule_id}]\n" + "".join(f"{k} = {v}\n" for k, v in config.items()))
    r = build_report(trace, Targets(**targets), thresholds_path=path and str(path),
                     only=[rule_id])
    assert not r.errors, r.errors
    return [f for f in r.findings if f.id == rule_id]


def one(trace, rule_id, **kw):
    got = findings(trace, rule_id, **kw)
    assert len(got) == 1, got
    return got[0]


# ---------------------------------------------------------------- metadata-storm
MS = "metadata-storm"


def end_marker(ts):
    """A call that is neither metadata nor data: it sets the trace's end."""
    return ev("futex", ts=ts - 1000, dur=1000, fd=-1)


def small_files(tmp_path, dirs: dict[str, int], size: int, read_dur=1000, step=100_000):
    """For each directory, `n` files opened, read whole (`size` bytes), closed.
    Each open and close takes 1 us, a read `read_dur`, one file per `step` ns."""
    events, files, i = [], [], 0
    for d, n in dirs.items():
        for _ in range(n):
            path, ts = f"{d}/f{i:06d}.bin", i * step
            files.append((i, path))
            events += [ev("openat", ts=ts, dur=1000, fd=3, ret=3, file_id=i, path=path),
                       ev("read", ts=ts + 2000, dur=read_dur, fd=3, off=0, req=size + 1,
                          ret=size, file_id=i),
                       ev("close", ts=ts + 3000 + read_dur, dur=1000, fd=3, file_id=i)]
            i += 1
    return synth_trace(tmp_path, events, files=files)


@pytest.mark.parametrize("n,severity", [(10_000, "high"), (9_999, "warn")])
def test_small_file_dataset_at_defaults(tmp_path, n, severity):
    # 1 KiB files, 2 us of metadata per 100 us: only the data-set size decides
    f = one(small_files(tmp_path, {"/data/train": n}, 1 * KiB), MS)
    assert f.rule_severity == severity
    e = f.evidence
    assert (e["opens"], e["closes"], e["stats"], e["metadata_calls"]) == (n, n, 0, 2 * n)
    assert (e["distinct_files"], e["dataset_files"], e["dataset_dirs"]) == (n, n, 1)
    assert e["median_file_bytes"] == 1 * KiB
    assert e["read_bytes"] == n * KiB
    assert e["opens_per_mib_read"] == pytest.approx(1024)
    assert e["metadata_wall_share"] < 0.05
    assert f.files[0]["path"] == "/data/train" and f.files[0]["distinct_files"] == n


EDGE = {"min_metadata_calls": 1, "dataset_dir_files": 5, "warn_files": 10, "high_files": 20}


@pytest.mark.parametrize("size,expect", [(MiB, "high"), (MiB + 1, None)])
def test_small_file_bytes_edge(tmp_path, size, expect):
    # slow reads: metadata is not the time sink, only the file size decides
    t = small_files(tmp_path, {"/data/train": 20}, size, read_dur=10**7)
    got = findings(t, MS, config=EDGE, tmp_path=tmp_path)
    assert [f.rule_severity for f in got] == ([expect] if expect else [])


@pytest.mark.parametrize("dirs,expect", [({"/d/a": 10}, "warn"),
                                         ({"/d/a": 9, "/d/b": 9}, None)])
def test_dataset_dir_files_edge(tmp_path, dirs, expect):
    t = small_files(tmp_path, dirs, 1 * KiB, read_dur=10**6)
    cfg = dict(EDGE, dataset_dir_files=10, high_files=1000)
    got = findings(t, MS, config=cfg, tmp_path=tmp_path)
    assert [f.rule_severity for f in got] == ([expect] if expect else [])


def stat_storm(tmp_path, stat_dur):
    """1000 path stats of `stat_dur` ns over 0.5 s, one 1 GiB read of 0.3 s,
    trace 1 s long, one thread: metadata_wall_share = 1000 x stat_dur / 1 s."""
    events = [ev("newfstatat", ts=i * 500_000, dur=stat_dur, fd=-1, path=f"/x/d{i % 20}/s{i}")
              for i in range(1000)]
    events += [ev("read", ts=6 * SEC // 10, dur=3 * SEC // 10, off=0, req=1 << 30,
                  ret=1 << 30, file_id=0), end_marker(SEC)]
    return synth_trace(tmp_path, events, files=[(0, "/x/big.bin")])


@pytest.mark.parametrize("stat_dur,expect", [(49_999, None), (50_000, "warn"),
                                             (249_999, "warn"), (250_000, "high")])
def test_wall_share_edges(tmp_path, stat_dur, expect):
    got = findings(stat_storm(tmp_path, stat_dur), MS)
    assert [f.rule_severity for f in got] == ([expect] if expect else [])
    if got:
        e = got[0].evidence
        assert e["metadata_wall_share"] == pytest.approx(stat_dur * 1000 / SEC)
        assert (e["stats"], e["opens"], e["io_threads"]) == (1000, 0, 1)
        assert e["stats_per_second"] == pytest.approx(1000)
        assert e["metadata_time_share"] == pytest.approx(stat_dur * 1000 / (stat_dur * 1000
                                                                            + 3 * SEC // 10))


def opens_and_reads(tmp_path, n=500, read_size=KiB, read_dur=10_000, drop_last_close=False):
    """n files in 50 directories (10 each: no data set), each opened (10 us),
    read once, closed (0 us), one per 1 ms: metadata_time_share =
    10 us / (10 us + read_dur), wall share 1%."""
    events, files = [], []
    for i in range(n):
        path, ts = f"/data/c{i % 50}/s{i}.jpg", i * 1_000_000
        files.append((i, path))
        events += [ev("openat", ts=ts, dur=10_000, fd=4, ret=4, file_id=i, path=path),
                   ev("read", ts=ts + 20_000, dur=read_dur, fd=4, off=0, req=read_size,
                      ret=read_size, file_id=i)]
        if not (drop_last_close and i == n - 1):
            events.append(ev("close", ts=ts + 40_000, dur=0, fd=4, file_id=i))
    return synth_trace(tmp_path, events + [end_marker(SEC)], files=files)


@pytest.mark.parametrize("kw,expect", [
    ({}, "info"),                                     # time share 0.5, 1024 opens/MiB
    ({"read_dur": 10_001}, None),                     # time share just under 0.5
    ({"drop_last_close": True}, None),                # 999 metadata calls
    ({"read_size": MiB}, "info"),                     # exactly 1 open per MiB read
    ({"read_size": MiB + 1}, None),                   # just under 1 open per MiB
])
def test_metadata_bound_edges(tmp_path, kw, expect):
    got = findings(opens_and_reads(tmp_path, **kw), MS)
    assert [f.rule_severity for f in got] == ([expect] if expect else [])
    if got:
        e = got[0].evidence
        assert (e["opens"], e["closes"], e["metadata_calls"]) == (500, 500, 1000)
        assert e["metadata_time_share"] == pytest.approx(0.5)
        assert e["dataset_files"] == 0 and e["median_file_bytes"] is None
        assert e["distinct_files"] == 500


def test_call_kinds_and_directories(tmp_path):
    """What counts as an open, a stat, a close; getdents charged to the directory
    listed (through the fd its open returned); calls on pipes and devices left out."""
    d = "/data/set"
    events = [
        ev("openat", ts=0, fd=5, ret=5, path=d, fd_kind="dir"),                   # listing
        ev("getdents64", ts=10_000, fd=5, req=32768, ret=4096, fd_kind="dir"),    # getdents
        ev("getdents64", ts=20_000, fd=5, req=32768, ret=0, fd_kind="dir"),       # getdents
        ev("close", ts=30_000, fd=5, fd_kind="dir"),                              # other
        ev("newfstatat", ts=40_000, fd=-1, path=f"{d}/a.bin"),                    # stat
        ev("lstat", ts=50_000, fd=-1, path=f"{d}/b.bin", flags=0x100),            # stat
        ev("openat", ts=60_000, fd=6, ret=6, file_id=0, path=f"{d}/a.bin"),       # open
        ev("newfstatat", ts=70_000, fd=6, file_id=0, path=f"{d}/a.bin",
           flags=AT_EMPTY_PATH),                                                  # fstat
        ev("fstat", ts=80_000, fd=6, file_id=0),                                  # fstat
        ev("read", ts=90_000, fd=6, off=0, req=5000, ret=3000, file_id=0),
        ev("close", ts=100_000, fd=6, file_id=0),                                 # close
        ev("openat", ts=110_000, fd=-1, ret=-2, path=f"{d}/missing.bin"),         # open
        ev("unlink", ts=120_000, fd=-1, path=f"{d}/old.bin"),                     # other
        ev("close", ts=130_000, fd=7, fd_kind="pipe"),                            # not counted
        ev("fstat", ts=140_000, fd=1, fd_kind="chr"),                             # not counted
        ev("openat", ts=150_000, fd=8, ret=8, path="/dev/null", fd_kind="chr"),   # not counted
        end_marker(SEC),
    ]
    t = synth_trace(tmp_path, events, files=[(0, f"{d}/a.bin")])
    f = one(t, MS, config={"min_metadata_calls": 1}, tmp_path=tmp_path)
    e = f.evidence
    assert {k: e[k] for k in ("opens", "listings", "getdents", "stats", "fstats", "closes",
                              "other_metadata_calls", "metadata_calls")} == {
        "opens": 2, "listings": 1, "getdents": 2, "stats": 2, "fstats": 2, "closes": 1,
        "other_metadata_calls": 2, "metadata_calls": 12}
    assert e["metadata_time_s"] == pytest.approx(12 * 1000 / SEC)
    assert e["data_time_s"] == pytest.approx(1000 / SEC)
    assert f.rule_severity == "info"      # metadata-bound, 12 calls: only by the override
    assert len(f.files) == 1
    assert f.files[0] == {"path": d, "opens": 2, "stats": 2, "closes": 1, "getdents": 2,
                          "distinct_files": 1, "median_file_bytes": 3000, "share": 1.0}


def test_pseudo_file_systems_are_not_storage_metadata(tmp_path):
    """fio stats /sys/block/*/queue and opens sysfs files per device at start-up
    (767 stats, 112 opens on a host with many loop devices): those ask the
    kernel, not storage. Counted as pseudo_fs_calls, not in the rates."""
    events = [ev("newfstatat", ts=i * 10_000, fd=-1, path=f"/sys/block/loop{i % 8}/queue")
              for i in range(800)]
    events += [ev("openat", ts=9 * SEC // 10 + i * 1000, fd=4, ret=4, file_id=1 + i % 2,
                  path=p) for i, p in enumerate(["/proc/self/maps", "/sys/block/loop0/stat"] * 60)]
    events += [ev("read", ts=SEC // 10 + i * 100_000, dur=50_000, fd=3, off=i * MiB, req=MiB,
                  ret=MiB, file_id=0) for i in range(8)]
    events += [ev("newfstatat", ts=SEC // 2 + i, fd=-1, path=f"/data/x{i}") for i in range(3)]
    files = [(0, "/data/big.bin"), (1, "/proc/self/maps", "proc"),
             (2, "/sys/block/loop0/stat", "sysfs")]
    t = synth_trace(tmp_path, events + [end_marker(SEC)], files=files)
    assert findings(t, MS) == []
    f = one(t, MS, config={"min_metadata_calls": 1, "max_time_share": 0,
                           "max_opens_per_mib": 0}, tmp_path=tmp_path)
    assert (f.evidence["stats"], f.evidence["opens"], f.evidence["metadata_calls"]) == (3, 0, 3)
    assert f.evidence["pseudo_fs_calls"] == 920
    assert [r["path"] for r in f.files] == ["/data"]


def test_directory_of_top_level_and_relative_paths(tmp_path):
    events = [ev("newfstatat", ts=0, fd=-1, path="/top.bin"),
              ev("newfstatat", ts=10_000, fd=-1, path="/a/b/c.bin"),
              ev("newfstatat", ts=20_000, fd=-1, path="unresolved.bin"), end_marker(SEC)]
    f = one(synth_trace(tmp_path, events), MS, config={"min_metadata_calls": 1},
            tmp_path=tmp_path)
    assert sorted(r["path"] for r in f.files) == [".", "/", "/a/b"]


def test_no_finding_below_min_calls_or_without_metadata(tmp_path):
    assert findings(opens_and_reads(tmp_path / "a", n=499), MS) == []
    big_reads = [ev("pread64", ts=i * 1_000_000, dur=500_000, off=i * MiB, req=MiB, ret=MiB,
                    file_id=0) for i in range(100)]
    assert findings(synth_trace(tmp_path / "b", big_reads, files=[(0, "/d/x.bin")]), MS) == []


# ---------------------------------------------------------------- checkpoint-burst
CB = "checkpoint-burst"


def burst(start, file_id, nwrites, wsize, wdur, fsync_dur, pid=100, tid=None, fd=5):
    """Open for writing, `nwrites` back-to-back writes, fsync, close; one file.
    Open and close take no time. Returns (events, end_ns)."""
    out = [ev("openat", ts=start, dur=0, pid=pid, tid=tid, fd=fd, ret=fd, file_id=file_id,
              flags=O_WRONLY_CREAT_TRUNC, path=f"/ckpt/f{file_id}")]
    t = start
    for k in range(nwrites):
        out.append(ev("write", ts=t, dur=wdur, pid=pid, tid=tid, fd=fd, off=k * wsize,
                      req=wsize, ret=wsize, file_id=file_id))
        t += wdur
    out.append(ev("fsync", ts=t, dur=fsync_dur, pid=pid, tid=tid, fd=fd, file_id=file_id))
    t += fsync_dur
    out.append(ev("close", ts=t, dur=0, pid=pid, tid=tid, fd=fd, file_id=file_id))
    return out, t


def periodic(tmp_path, n=4, every=10 * SEC, first=5 * SEC, nwrites=8, wsize=MiB,
             wdur=1_000_000, fsync_dur=20_000_000, extra=()):
    """`n` checkpoints, one new file each, `every` ns apart, in a 60 s trace."""
    events, files = [ev("futex", ts=0, dur=0, fd=-1)], []
    for k in range(n):
        evs, _ = burst(first + k * every, k, nwrites, wsize, wdur, fsync_dur)
        events += evs
        files.append((k, f"/ckpt/step{k}.pt"))
    extra_events, extra_files = extra or ([], [])
    return synth_trace(tmp_path, events + extra_events + [end_marker(60 * SEC)],
                       files=files + extra_files)


def test_periodic_bursts_numbers(tmp_path):
    f = one(periodic(tmp_path), CB)
    e = f.evidence
    assert f.rule_severity == "info"
    assert (e["count"], e["fsyncs"], e["writes"], e["files"]) == (4, 4, 32, 4)
    assert (e["total_bytes"], e["median_bytes"]) == (32 * MiB, 8 * MiB)
    assert e["mean_bytes"] == 8 * MiB
    assert e["mean_interval_s"] == pytest.approx(10.0)
    assert e["stdev_interval_s"] == pytest.approx(0.0)
    assert e["mean_duration_s"] == pytest.approx(0.028)        # 8 x 1 ms + 20 ms fsync
    assert e["max_duration_s"] == pytest.approx(0.028)
    assert e["write_bytes_per_s"] == pytest.approx(8 * MiB / 0.028)
    assert e["fsync_time_s"] == pytest.approx(0.08)
    assert e["mean_blocked_s"] == pytest.approx(0.028)
    assert e["blocked_share"] == pytest.approx(0.0028)
    assert (e["median_write_bytes"], e["weighted_median_write_bytes"]) == (MiB, MiB)
    assert "target_duration_s" not in e
    assert [x["bytes"] for x in f.examples] == [8 * MiB] * 4
    assert [x["ts_ns"] for x in f.examples] == [5 * SEC + k * 10 * SEC for k in range(4)]
    assert [x["path"] for x in f.examples] == [f"/ckpt/step{k}.pt" for k in range(4)]
    assert all(x["fsyncs"] == 1 and x["writes"] == 8 for x in f.examples)
    assert [r["path"] for r in f.files] == [f"/ckpt/step{k}.pt" for k in range(4)]
    assert f.processes[0]["pid"] == 100 and f.processes[0]["share"] == 1.0


def test_write_target(tmp_path):
    e = one(periodic(tmp_path), CB, write_bps=100 * MiB).evidence
    assert e["target_write_bytes_per_s"] == 100 * MiB
    assert e["target_duration_s"] == pytest.approx(0.08)
    assert e["target_blocked_share"] == pytest.approx(0.008)


@pytest.mark.parametrize("gap,count", [(SEC, 2), (SEC - 1, None)])
def test_gap_edge(tmp_path, gap, count):
    """Two 2 MiB pieces written to one file `gap` apart (end of the close to the
    next write): a full second apart they are two bursts, else one (no finding)."""
    a, end = burst(SEC, 0, 2, MiB, 1_000_000, 1_000_000)
    b, _ = burst(end + gap, 0, 2, MiB, 1_000_000, 1_000_000)
    b = b[1:]                                       # same file, same fd: no second open
    t = synth_trace(tmp_path, a + b + [end_marker(10 * SEC)], files=[(0, "/ckpt/last.pt")])
    got = findings(t, CB)
    assert [f.evidence["count"] for f in got] == ([count] if count else [])


@pytest.mark.parametrize("same_path", [False, True])
def test_checkpoints_half_a_second_apart_are_each_found(tmp_path, same_path):
    """Four 48 MiB checkpoints 0.9 s apart (start to start), each opened for
    writing, written, synced and closed: four bursts, whether each goes to a
    new file or the same path is rewritten."""
    events, files = [ev("futex", ts=0, dur=0, fd=-1)], []
    for k in range(4):
        fid = 0 if same_path else k
        evs, _ = burst(SEC + k * 9 * SEC // 10, fid, 48, MiB, 4_000_000, 50_000_000)
        events += evs
        if fid == k:
            files.append((fid, f"/ckpt/step{k}.pt"))
    f = one(synth_trace(tmp_path, events + [end_marker(5 * SEC)], files=files), CB)
    assert f.evidence["count"] == 4
    assert f.evidence["mean_interval_s"] == pytest.approx(0.9)
    assert [x["bytes"] for x in f.examples] == [48 * MiB] * 4
    # the job only checkpoints: its writing thread is the loop, blocked 0.242 s each time
    assert [x["loop_blocked_s"] for x in f.examples] == [pytest.approx(0.242)] * 4


@pytest.mark.parametrize("gap,count", [(SEC // 4 - 1, 2), (SEC // 4, 4)])
def test_shards_written_one_after_the_other_are_one_checkpoint(tmp_path, gap, count):
    """Each checkpoint: model.pt, then optim.pt `gap` after it closed (one
    thread, two files); two checkpoints 5 s apart. Under merge_gap_s (0.25 s)
    apart the two files are one checkpoint."""
    events, files = [ev("futex", ts=0, dur=0, fd=-1)], []
    for k in range(2):
        a, end = burst(SEC + k * 5 * SEC, 2 * k, 4, MiB, 1_000_000, 1_000_000)
        b, _ = burst(end + gap, 2 * k + 1, 4, MiB, 1_000_000, 1_000_000, fd=6)
        events += a + b
        files += [(2 * k, f"/ckpt/{k}/model.pt"), (2 * k + 1, f"/ckpt/{k}/optim.pt")]
    f = one(synth_trace(tmp_path, events + [end_marker(10 * SEC)], files=files), CB)
    assert f.evidence["count"] == count


@pytest.mark.parametrize("size,found", [(MiB, True), (MiB - 1, False)])
def test_min_burst_bytes_edge(tmp_path, size, found):
    got = findings(periodic(tmp_path, nwrites=1, wsize=size), CB)
    assert [f.evidence["count"] for f in got] == ([4] if found else [])


def test_sharded_checkpoint_by_two_ranks_is_one_burst(tmp_path):
    """Each checkpoint: two ranks (processes) write their shard at the same time,
    rank 1 slower. One burst per checkpoint; blocked time is the slower rank's."""
    events, files = [ev("futex", ts=0, dur=0, fd=-1)], []
    for k in range(3):
        start = 5 * SEC + k * 10 * SEC
        for rank, wdur in ((0, 1_000_000), (1, 3_000_000)):
            fid = 2 * k + rank
            evs, _ = burst(start, fid, 4, MiB, wdur, 10_000_000, pid=200 + rank)
            events += evs
            files.append((fid, f"/ckpt/step{k}/rank{rank}.distcp"))
    t = synth_trace(tmp_path, events + [end_marker(40 * SEC)], files=files)
    f = one(t, CB)
    e = f.evidence
    assert (e["count"], e["files"], e["fsyncs"]) == (3, 6, 6)
    assert [(x["bytes"], x["files"]) for x in f.examples] == [(8 * MiB, 2)] * 3
    assert all(x["pid"] == 201 for x in f.examples)
    assert e["mean_blocked_s"] == pytest.approx(0.022)          # 4 x 3 ms + 10 ms
    assert e["mean_duration_s"] == pytest.approx(0.022)
    assert len(f.processes) == 2


def trickle_log():
    """A log file written 16 KiB every 0.5 s for 60 s: 1.9 MiB at 32 KiB/s."""
    evs = [ev("write", ts=i * SEC // 2, dur=10_000, fd=9, off=i * 16 * KiB, req=16 * KiB,
              ret=16 * KiB, file_id=99) for i in range(120)]
    return evs, [(99, "/logs/train.log")]


def test_trickle_log_is_not_a_checkpoint(tmp_path):
    e = one(periodic(tmp_path / "a", extra=trickle_log()), CB).evidence
    assert (e["count"], e["files"], e["total_bytes"]) == (4, 4, 32 * MiB)
    # without the rate guard the log joins every checkpoint into one 60 s burst
    got = findings(periodic(tmp_path / "b", extra=trickle_log()), CB,
                   config={"min_burst_bytes_per_s": 0}, tmp_path=tmp_path)
    assert got == []


@pytest.mark.parametrize("fsync_dur,expect", [(100_000_000 - 1, "info"), (100_000_000, "warn"),
                                              (1_600_000_000 - 1, "warn"),
                                              (1_600_000_000, "high")])
def test_blocked_share_edges(tmp_path, fsync_dur, expect):
    """Every 10 s: 8 writes of 50 ms, then an fsync: blocked 0.4 s + fsync."""
    f = one(periodic(tmp_path, wdur=50_000_000, fsync_dur=fsync_dur), CB)
    assert f.rule_severity == expect
    assert f.evidence["blocked_share"] == pytest.approx((0.4 + fsync_dur / SEC) / 10)


@pytest.mark.parametrize("wsize,expect", [(65536, "info"), (65535, "high")])
def test_small_writes_edge(tmp_path, wsize, expect):
    f = one(periodic(tmp_path, nwrites=128, wsize=wsize, wdur=10_000), CB)
    assert f.rule_severity == expect
    assert f.evidence["weighted_median_write_bytes"] == wsize
    assert ("many small writes" in f.summary) == (expect == "high")


def test_weighted_median_ignores_header_writes(tmp_path):
    """Each checkpoint: 100 header writes of 1 KiB and one 8 MiB write. The count
    median is 1 KiB; half the bytes went in the 8 MiB write: not small writes."""
    events, files = [ev("futex", ts=0, dur=0, fd=-1)], []
    for k in range(2):
        hdr, end = burst(5 * SEC + k * 10 * SEC, k, 100, KiB, 1000, 1_000_000)
        body, _ = burst(end, k, 1, 8 * MiB, 5_000_000, 1_000_000)
        events += hdr + body[1:]
        files.append((k, f"/ckpt/{k}.npz"))
    f = one(synth_trace(tmp_path, events + [end_marker(30 * SEC)], files=files), CB)
    e = f.evidence
    assert (e["median_write_bytes"], e["weighted_median_write_bytes"]) == (KiB, 8 * MiB)
    assert f.rule_severity == "info" and e["count"] == 2 and e["fsyncs"] == 4


def test_one_burst_is_not_periodic(tmp_path):
    assert findings(periodic(tmp_path / "a", n=1), CB) == []
    e = one(periodic(tmp_path / "b", n=1), CB, config={"min_bursts": 1},
            tmp_path=tmp_path).evidence
    assert e["count"] == 1 and e["mean_interval_s"] is None
    assert e["blocked_share"] == pytest.approx(0.028 / 60)


def test_empty_trace(tmp_path):
    t = synth_trace(tmp_path, [])
    assert findings(t, MS, config={"min_metadata_calls": 0}, tmp_path=tmp_path) == []
    assert findings(t, CB, config={"min_bursts": 0}, tmp_path=tmp_path) == []


# ---------------------------------------------------------------- real workloads
N_FILES = 20_000


@needs_root()
def test_small_files_traced(tmp_path):
    """20,000 small files, made before tracing; traced: one listing, then an
    os.stat, an open, a whole-file read and a close of each."""
    data = tmp_path / "dataset"
    subprocess.run([sys.executable, str(WORKLOADS / "mc_small_files.py"), "make", str(data),
                    str(N_FILES)], check=True)
    sizes = [os.path.getsize(data / f"f{i:05d}.bin") for i in range(N_FILES)]
    proc, trace = trace_run(tmp_path / "trace", sys.executable,
                            str(WORKLOADS / "mc_small_files.py"), "read", str(data))
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == sum(sizes)
    assert trace.meta["drops"] == 0
    f = one(trace, MS)
    assert f.rule_severity == "high"
    row = [r for r in f.files if r["path"] == str(data)]
    assert len(row) == 1, f.files
    row = row[0]
    assert (row["opens"], row["stats"], row["closes"]) == (N_FILES, N_FILES, N_FILES)
    assert row["distinct_files"] == N_FILES
    assert row["median_file_bytes"] == statistics.median_low(sizes)
    # the directory was listed once: its getdents are those on the fd its open returned
    fd, t_open, t_close = rows(trace, """
        select o.fd, o.ts_ns, min(c.ts_ns) from events o join events c
          on c.op = 'close' and c.pid = o.pid and c.fd = o.fd and c.ts_ns > o.ts_ns
        where o.op = 'openat' and o.path = ? group by o.fd, o.ts_ns""", str(data))[0]
    assert row["getdents"] == scalar(trace, """
        select count(*) from events where op = 'getdents64' and fd = ? and ts_ns > ?
        and ts_ns < ?""", fd, t_open, t_close) > 0
    e = f.evidence
    assert (e["dataset_files"], e["dataset_dirs"]) == (N_FILES, 1)
    assert e["median_file_bytes"] == statistics.median_low(sizes)
    assert e["opens"] >= N_FILES and e["stats"] >= N_FILES and e["fstats"] >= 2 * N_FILES
    assert f.files[0]["path"] == str(data)           # the most metadata time


@needs_root()
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_fio_sequential_reads_are_clean(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"\xa5" * (64 * MiB))
    proc, trace = trace_run(tmp_path / "trace", "fio", "--name=job", f"--filename={data}",
                            "--ioengine=psync", "--rw=read", "--bs=1M", "--size=64M",
                            "--output-format=json", f"--output={tmp_path / 'fio.json'}")
    assert proc.returncode == 0, proc.stderr
    assert findings(trace, MS) == []
    assert findings(trace, CB) == []
    r = build_report(trace, Targets())
    assert not [f for f in r.findings if f.rule_severity == "high"
                and f.id in (MS, CB)]


def run_checkpoints(tmp_path, kind, n=3, every=15, step_s=0.1):
    """Checkpoints 1.5 s apart: gaps well over the 1 s default `gap_s`."""
    out = tmp_path / "ckpt"
    out.mkdir()
    proc, trace = trace_run(tmp_path / "trace", sys.executable,
                            str(WORKLOADS / "mc_checkpoint.py"), kind, str(out), str(n),
                            str(every), str(step_s))
    assert proc.returncode == 0, proc.stderr
    assert trace.meta["drops"] == 0
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(done["checkpoints"]) == n
    return trace, done


def write_sizes(trace, path):
    return sorted(r[0] for r in rows(trace, """select e.ret from events e join files f
        using (file_id) where f.path = ? and e.op = 'write'""", path))


def check_bursts(trace, done):
    """One burst per checkpoint file, its bytes the file's size on disk, one fsync."""
    f = one(trace, CB)
    e = f.evidence
    paths = done["checkpoints"]
    assert e["count"] == len(paths)
    assert [x["path"] for x in f.examples] == paths
    assert [x["bytes"] for x in f.examples] == [os.path.getsize(p) for p in paths]
    assert e["total_bytes"] == sum(os.path.getsize(p) for p in paths)
    assert [x["fsyncs"] for x in f.examples] == [1] * len(paths)
    assert e["fsyncs"] == len(paths)
    assert [x["files"] for x in f.examples] == [1] * len(paths)
    assert [x["writes"] for x in f.examples] == [len(write_sizes(trace, p)) for p in paths]
    # 15 steps of at least 0.1 s between checkpoint opens (sleep pads each step)
    assert 1.45 <= e["mean_interval_s"] < 3.0
    return f


def test_torch_save_checkpoints(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (make test installs it)")
    if os.geteuid() != 0:
        pytest.skip("tracing needs root (real BPF)")
    trace, done = run_checkpoints(tmp_path, "torch")
    f = check_bursts(trace, done)
    # torch.save writes each tensor's storage in one call: half the bytes went in
    # writes of the largest tensor's size (4 MiB), whatever the small record headers
    assert f.evidence["weighted_median_write_bytes"] == done["largest_array_bytes"] == 4 * MiB
    assert "many small writes" not in f.summary


@needs_root()
@pytest.mark.parametrize("kind", ["numpy", "numpy-small"])
def test_numpy_checkpoints(tmp_path, kind):
    trace, done = run_checkpoints(tmp_path, kind)
    f = check_bursts(trace, done)
    e = f.evidence
    nbytes = done["largest_array_bytes"]
    for p in done["checkpoints"]:
        header = os.path.getsize(p) - nbytes
        if kind == "numpy":       # np.save: the header, then the array in one write
            assert write_sizes(trace, p) == sorted([header, nbytes])
        else:                     # 8 MiB, 4 KiB at a time, unbuffered
            assert header == 0 and write_sizes(trace, p) == [4096] * (nbytes // 4096)
    if kind == "numpy":
        assert e["weighted_median_write_bytes"] == nbytes
        assert e["writes"] == 2 * 3
        assert "many small writes" not in f.summary
    else:
        assert e["weighted_median_write_bytes"] == e["median_write_bytes"] == 4096
        assert e["writes"] == 3 * 2048
        assert f.rule_severity == "high" and "many small writes" in f.summary
