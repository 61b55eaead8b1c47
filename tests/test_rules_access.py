"""The access-pattern rules: small-reads, random-access, redundant-io.

Unit tests build synthetic traces at the edges of every threshold (just at
and just past it). Real tests trace workloads with `iotrace run` and check the
rules' numbers against ground truth that does not come from the trace: fio's
own I/O log and counts, numpy's and Python's buffer sizes, and counts fixed by
construction in tests/workloads/acc_*.py.
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import sys

import pytest

from conftest import WORKLOADS, needs_root, trace_run
from synth import ev, synth_trace

from iotrace.abi import EF_DIRECT
from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report

KiB, MiB = 1 << 10, 1 << 20
OURS = ("small-reads", "random-access", "redundant-io")


def findings(trace, rule_id, config: str | None = None):
    r = build_report(trace, Targets(), thresholds_path=config, only=[rule_id])
    assert r.errors == []
    return [f for f in r.findings if f.id == rule_id]


def one(trace, rule_id, config=None):
    fs = findings(trace, rule_id, config)
    assert len(fs) == 1, [f.title for f in fs]
    return fs[0]


def reads(offsets, size, *, file_id=0, fd=3, pid=100, t0=0, step=10_000, rets=None,
          dur=lambda n: 1000, op="pread64"):
    """One read of `size` at each offset, `step` ns apart; rets: bytes returned."""
    rets = rets or [size] * len(offsets)
    return [ev(op, ts=t0 + i * step, dur=dur(r), pid=pid, fd=fd, off=o, req=size, ret=r,
               file_id=file_id) for i, (o, r) in enumerate(zip(offsets, rets))]


def writes(n, size, *, file_id=0, fd=4, t0=0, step=10_000, sync_every=0, nsyncs=None):
    """n writes of `size`; an fsync after each of the first `nsyncs` writes when
    sync_every (default: none)."""
    out, nsyncs = [], n if nsyncs is None else nsyncs
    for i in range(n):
        out.append(ev("write", ts=t0 + i * step, fd=fd, off=i * size, req=size, ret=size,
                      file_id=file_id))
        if sync_every and i < nsyncs:
            out.append(ev("fsync", ts=t0 + i * step + step // 2, fd=fd, file_id=file_id))
    return out


def trace(path, events, nfiles=2, meta=None):
    return synth_trace(path, events, files=[(i, f"/data/f{i}.bin") for i in range(nfiles)],
                       meta=meta)


def config(tmp_path, text):
    p = tmp_path / "th.toml"
    p.write_text(text)
    return str(p)


# ───────────────────────────── small-reads, synthetic ─────────────────────────────

def test_small_reads_npz_pattern(tmp_path):
    """np.load's pattern: per 256 KiB, a 4 KiB read then a 252 KiB read; time per
    call = 1000 ns + bytes / 64 ns, so the fitted per-call overhead is 1000 ns."""
    offs, sizes = [], []
    for c in range(64):
        offs += [c * 256 * KiB, c * 256 * KiB + 4 * KiB]
        sizes += [4 * KiB, 252 * KiB]
    evs = [ev("read", ts=i * 10_000, dur=1000 + s // 64, off=o, req=s, ret=s, file_id=0)
           for i, (o, s) in enumerate(zip(offs, sizes))]
    f = one(trace(tmp_path, evs), "small-reads")
    e = f.evidence
    assert f.rule_severity == "high"
    assert (e["files"], e["reads"], e["read_bytes"]) == (1, 128, 16 * MiB)
    assert e["read_bytes_share"] == 1.0
    assert e["calls_per_mib"] == 8.0
    assert (e["p10_request_bytes"], e["median_request_bytes"], e["p90_request_bytes"],
            e["weighted_median_request_bytes"]) == (4 * KiB, 4 * KiB, 252 * KiB, 252 * KiB)
    assert e["request_size_histogram"] == ("4.0 KiB+: 64 calls, 256.0 KiB; "
                                           "128.0 KiB+: 64 calls, 15.8 MiB")
    assert e["read_time_s"] == pytest.approx((128 * 1000 + 16 * MiB // 64) / 1e9)
    assert e["per_call_overhead_method"] == "intercept"
    assert e["per_call_overhead_ns"] == pytest.approx(1000)
    assert e["calls_saved"] == 127
    assert e["est_time_saved_s"] == pytest.approx(127 * 1000 / 1e9)
    assert f.files[0] == {"path": "/data/f0.bin", "file_bytes": 16 * MiB, "reads": 128,
                          "median_request_bytes": 4 * KiB,
                          "weighted_median_request_bytes": 252 * KiB, "share": 1.0}
    assert [x["ts_ns"] for x in f.examples] == [0, 10_000, 20_000]


@pytest.mark.parametrize("size,fires", [(512 * KiB, True), (512 * KiB + 1, False)])
def test_small_reads_request_size_edge(tmp_path, size, fires):
    t = trace(tmp_path, reads([i * size for i in range(16)], size))
    fs = findings(t, "small-reads")
    assert bool(fs) == fires
    if fires:   # 2 calls per MiB: below high_calls_per_mib
        assert fs[0].rule_severity == "warn" and fs[0].evidence["calls_per_mib"] == 2.0


@pytest.mark.parametrize("last_ret,fires", [(64 * KiB, True), (64 * KiB - 1, False)])
def test_small_reads_min_file_bytes_edge(tmp_path, last_ret, fires):
    """16 sequential 64 KiB reads: the file's extent is 1 MiB, or 1 MiB - 1."""
    t = trace(tmp_path, reads([i * 64 * KiB for i in range(16)], 64 * KiB,
                              rets=[64 * KiB] * 15 + [last_ret]))
    fs = findings(t, "small-reads")
    assert bool(fs) == fires
    if fires:
        assert fs[0].files[0]["file_bytes"] == MiB


@pytest.mark.parametrize("calls,fires", [(16, True), (15, False)])
def test_small_reads_min_calls_edge(tmp_path, calls, fires):
    t = trace(tmp_path, reads([i * MiB for i in range(calls)], 4 * KiB))
    assert bool(findings(t, "small-reads")) == fires


@pytest.mark.parametrize("extra,fires", [(0, True), (1, False)])
def test_small_reads_min_bytes_share_edge(tmp_path, extra, fires):
    """1 MiB in 64 KiB reads next to 9 MiB (+ extra bytes) in 1 MiB reads: 10%."""
    small = reads([i * 64 * KiB for i in range(16)], 64 * KiB)
    big = reads([i * MiB for i in range(9)], MiB, file_id=1, t0=10**9, fd=4)
    if extra:
        big += reads([9 * MiB], extra, file_id=1, t0=2 * 10**9, fd=4)
    fs = findings(trace(tmp_path, small + big), "small-reads")
    assert bool(fs) == fires
    if fires:
        assert fs[0].evidence["read_bytes_share"] == pytest.approx(0.1)
        assert fs[0].rule_severity == "warn"


@pytest.mark.parametrize("extra,sev", [(0, "high"), (1, "warn")])
def test_small_reads_high_share_edge(tmp_path, extra, sev):
    """256 KiB in 4 KiB reads (256 calls per MiB) next to 256 KiB (+ extra) read
    in one call: the small reads carry 50% of the bytes, or just under."""
    small = reads([i * 64 * KiB for i in range(64)], 4 * KiB)
    big = reads([0], 256 * KiB + extra, file_id=1, fd=4, t0=10**9)
    f = one(trace(tmp_path, small + big), "small-reads")
    assert f.rule_severity == sev
    assert f.evidence["calls_per_mib"] == 256.0


@pytest.mark.parametrize("size,sev", [(256 * KiB, "high"), (256 * KiB + 1, "warn")])
def test_small_reads_high_calls_per_mib_edge(tmp_path, size, sev):
    f = one(trace(tmp_path, reads([i * size for i in range(16)], size)), "small-reads")
    assert f.rule_severity == sev
    assert f.evidence["calls_per_mib"] == pytest.approx(MiB / size)


def test_small_reads_byte_median_ignores_header_reads(tmp_path):
    """100 reads of 100 B (headers) and 20 of 1 MiB: the count median is 100 B,
    but the bytes come in 1 MiB requests: not a small-reads file."""
    evs = reads([0] * 100, 100) + reads([i * MiB for i in range(20)], MiB, t0=10**9)
    assert findings(trace(tmp_path, evs), "small-reads") == []


def test_small_reads_overhead_falls_back_to_median_call(tmp_path):
    """One request size: no fit; the median call time is the estimate."""
    durs = iter([5000, 7000, 9000] * 6)
    f = one(trace(tmp_path, reads([i * MiB for i in range(18)], 4 * KiB,
                                  dur=lambda n: next(durs))), "small-reads")
    assert f.evidence["per_call_overhead_method"] == "median-call"
    assert f.evidence["per_call_overhead_ns"] == 7000
    assert f.evidence["calls_saved"] == 17


def test_small_reads_threshold_override(tmp_path):
    t = trace(tmp_path, reads([i * MiB for i in range(16)], MiB))
    assert findings(t, "small-reads") == []
    cfg = config(tmp_path, "[small-reads]\nmax_median_request_bytes = 1048576\n")
    assert one(t, "small-reads", cfg).evidence["weighted_median_request_bytes"] == MiB


# ──────────────────────────── random-access, synthetic ────────────────────────────

def expected_nonseq(offsets, size):
    """The rule's definition, in Python: offset != previous end and != 0."""
    return [abs(o - (p + size)) for p, o in zip(offsets, offsets[1:])
            if o != p + size and o != 0]


def nearest_rank_median(xs):
    return sorted(xs)[math.ceil(len(xs) * 0.5) - 1]


def test_median_of_counts_is_quantile_disc():
    """random-access takes its request-size medians from (size, count) pairs:
    the same value as DuckDB's quantile_disc(x, 0.5) over the values."""
    import collections
    import duckdb
    from iotrace.analyzers.random_access import median_of_counts
    rng = random.Random(7)
    assert median_of_counts([]) is None
    for _ in range(200):
        xs = [rng.choice([512, 4096, 65536, 1 << 20]) for _ in range(rng.randint(1, 40))]
        (want,) = duckdb.execute("select quantile_disc(x, 0.5) from unnest(?) t(x)",
                                 [xs]).fetchall()[0]
        assert median_of_counts(sorted(collections.Counter(xs).items())) == want, xs
        assert want == nearest_rank_median(xs)


def test_random_access_shuffled_4k(tmp_path):
    offs = [b * 4 * KiB for b in random.Random(1).sample(range(1, 4096), 200)]
    jumps = expected_nonseq(offs, 4 * KiB)
    f = one(trace(tmp_path, reads(offs, 4 * KiB)), "random-access")
    e = f.evidence
    assert f.rule_severity == "high" and f.title == "Files read out of order"
    assert (e["reads"], e["non_sequential_reads"]) == (200, len(jumps))
    assert len(jumps) >= 195
    assert e["non_sequential_share"] == len(jumps) / 200
    assert e["median_jump_bytes"] == nearest_rank_median(jumps)
    assert (e["seeks"], e["rewinds"], e["median_request_bytes"]) == (0, 0, 4 * KiB)
    assert f.files[0]["non_sequential_share"] == len(jumps) / 200


def test_random_access_sequential_is_clean(tmp_path):
    t = trace(tmp_path, reads([i * MiB for i in range(64)], MiB))
    assert findings(t, "random-access") == []


def skipping(n, jumps, size=4 * KiB):
    """n reads of `size` from offset `size`, skipping one block before reads 1..jumps."""
    offs, pos = [], size
    for i in range(n):
        off = pos + (size if 1 <= i <= jumps else 0)
        offs.append(off)
        pos = off + size
    return offs


@pytest.mark.parametrize("jumps,fires", [(8, True), (7, False)])
def test_random_access_share_edge(tmp_path, jumps, fires):
    offs = skipping(16, jumps)
    assert len(expected_nonseq(offs, 4 * KiB)) == jumps
    fs = findings(trace(tmp_path, reads(offs, 4 * KiB)), "random-access")
    assert bool(fs) == fires
    if fires:
        assert fs[0].evidence["non_sequential_share"] == 0.5
        assert fs[0].evidence["median_jump_bytes"] == 4 * KiB


@pytest.mark.parametrize("n,fires", [(8, True), (7, False)])
def test_random_access_min_reads_edge(tmp_path, n, fires):
    offs = [(7 - i) * MiB + 4 * KiB for i in range(n)]      # backwards: every read jumps
    assert bool(findings(trace(tmp_path, reads(offs, 4 * KiB)), "random-access")) == fires


@pytest.mark.parametrize("nseeks,whence,fires", [(8, 0, True), (7, 0, False), (16, 1, False)])
def test_random_access_seeks_edge(tmp_path, nseeks, whence, fires):
    """16 sequential 4 MiB reads with an lseek(SEEK_SET) before 8 (or 7) of them;
    lseek(fd, 0, SEEK_CUR) is a position query and does not count."""
    evs = reads([i * 4 * MiB for i in range(16)], 4 * MiB, t0=1000)
    evs += [ev("lseek", ts=i * 10_000, fd=3, off=i * 4 * MiB, ret=i * 4 * MiB, flags=whence,
               arg=0 if whence == 1 else i * 4 * MiB, file_id=0) for i in range(nseeks)]
    fs = findings(trace(tmp_path, evs), "random-access")
    assert bool(fs) == fires
    if fires:
        e = fs[0].evidence
        assert fs[0].rule_severity == "warn" and fs[0].title == "A seek before each read"
        assert (e["reads"], e["seeks"], e["seeks_per_read"]) == (16, 8, 0.5)
        assert e["non_sequential_reads"] == 0


@pytest.mark.parametrize("packed", [True, False])
def test_random_access_rewinds_are_not_random(tmp_path, monkeypatch, packed):
    """A 4-chunk file read from the start 10 times: 9 rewinds, nothing random."""
    import iotrace.analyzers.views as views
    monkeypatch.setattr(views, "streams_pack", lambda con: packed)
    offs = [c * MiB for _ in range(10) for c in range(4)]
    t = trace(tmp_path, reads(offs, MiB))
    assert findings(t, "random-access") == []
    cfg = config(tmp_path, "[random-access]\nmin_non_sequential_share = 0\n")
    e = one(t, "random-access", cfg).evidence
    assert (e["reads"], e["rewinds"], e["non_sequential_reads"]) == (40, 9, 0)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("key", ["fd", "pid"])
def test_random_access_streams_are_per_process_and_fd(tmp_path, monkeypatch, key, packed):
    """Two sequential readers of one file, interleaved: each stream is sequential
    (the stream's key packed in one BIGINT, or three keys)."""
    import iotrace.analyzers.views as views
    monkeypatch.setattr(views, "streams_pack", lambda con: packed)
    a = reads([i * 64 * KiB for i in range(32)], 64 * KiB, step=20_000)
    b = reads([(32 + i) * 64 * KiB for i in range(32)], 64 * KiB, step=20_000, t0=10_000,
              **{key: 4 if key == "fd" else 101})
    assert findings(trace(tmp_path, a + b), "random-access") == []


@pytest.mark.parametrize("extra,sev", [(0, "high"), (1, "warn")])
def test_random_access_high_share_edge(tmp_path, extra, sev):
    offs = [(63 - i) * 64 * KiB + 4 * KiB for i in range(64)]  # 64 backward 4 KiB reads
    other = reads([0], 256 * KiB + extra, file_id=1, fd=4, t0=10**9)
    f = one(trace(tmp_path, reads(offs, 4 * KiB) + other), "random-access")
    assert f.rule_severity == sev
    assert f.evidence["random_read_bytes_share"] == pytest.approx(0.5, rel=1e-5)


@pytest.mark.parametrize("size,sev", [(512 * KiB, "high"), (512 * KiB + 1, "warn")])
def test_random_access_high_request_size_edge(tmp_path, size, sev):
    offs = [(15 - i) * MiB + 4096 for i in range(16)]
    f = one(trace(tmp_path, reads(offs, size)), "random-access")
    assert f.rule_severity == sev and f.evidence["median_request_bytes"] == size


@pytest.mark.parametrize("extra,fires", [(0, True), (1, False)])
def test_random_access_min_bytes_share_edge(tmp_path, extra, fires):
    offs = [(15 - i) * MiB + 4096 for i in range(16)]         # 16 x 64 KiB = 1 MiB
    big = reads([i * MiB for i in range(9)], MiB, file_id=1, fd=4, t0=10**9)
    big += reads([9 * MiB], extra, file_id=1, fd=4, t0=2 * 10**9) if extra else []
    fs = findings(trace(tmp_path, reads(offs, 64 * KiB) + big), "random-access")
    assert bool(fs) == fires


# ──────────────────────────── redundant-io, synthetic ─────────────────────────────

def by_title(fs):
    return {f.title: f for f in fs}


def test_reread_exact(tmp_path):
    f = one(trace(tmp_path, reads([0] * 20, MiB)), "redundant-io")
    e = f.evidence
    assert f.title == "The same bytes read many times" and f.rule_severity == "warn"
    assert (e["reads"], e["read_bytes"], e["distinct_read_bytes"]) == (20, 20 * MiB, MiB)
    assert (e["reread_factor"], e["redundant_read_bytes"]) == (20.0, 19 * MiB)
    assert e["redundant_read_share"] == 0.95


@pytest.mark.parametrize("extra,fires", [(0, True), (1, False)])
def test_reread_factor_edge(tmp_path, extra, fires):
    """An 8 MiB file read 4 times (factor 4), or with one more distinct byte."""
    evs = reads([0] * 4, 8 * MiB) + (reads([8 * MiB], 1, t0=10**9) if extra else [])
    fs = findings(trace(tmp_path, evs), "redundant-io")
    assert bool(fs) == fires
    if fires:
        assert fs[0].evidence["reread_factor"] == 4.0


@pytest.mark.parametrize("last_ret,fires", [(MiB, True), (MiB - 1, False)])
def test_reread_min_redundant_bytes_edge(tmp_path, last_ret, fires):
    """A 1 MiB file read 17 times: 16 MiB redundant, or 16 MiB - 1."""
    t = trace(tmp_path, reads([0] * 17, MiB, rets=[MiB] * 16 + [last_ret]))
    fs = findings(t, "redundant-io")
    assert bool(fs) == fires


@pytest.mark.parametrize("extra,sev", [(0, "warn"), (1, "info")])
def test_reread_warn_share_edge(tmp_path, extra, sev):
    """16 MiB redundant of 32 MiB read (50%), or of 32 MiB + 1."""
    evs = reads([0] * 17, MiB)
    evs += reads([i * MiB for i in range(15)], MiB, file_id=1, fd=4, t0=10**9)
    evs += reads([15 * MiB], extra, file_id=1, fd=4, t0=2 * 10**9) if extra else []
    f = one(trace(tmp_path, evs), "redundant-io")
    assert f.rule_severity == sev


@pytest.mark.parametrize("packed", [True, False])
def test_reread_distinct_bytes_are_a_union(tmp_path, monkeypatch, packed):
    """[0,100) [50,150) [200,300) [150,200): 400 bytes read, 300 distinct; a
    second file's [0,60) twice after it adds 120 read, 60 distinct (its ranges
    are not reached by the first file's). Both ways of taking the union: file
    and offset packed in one key, and three keys."""
    import iotrace.analyzers.redundant_io as rio
    monkeypatch.setattr(rio, "_packs", lambda ctx: packed)
    evs = [ev("pread64", ts=i, off=o, req=100 if o != 150 else 50,
              ret=100 if o != 150 else 50, file_id=0)
           for i, o in enumerate([0, 50, 200, 150])]
    evs += [ev("pread64", ts=10 + i, off=0, req=60, ret=60, file_id=1, fd=4) for i in range(2)]
    cfg = config(tmp_path, "[redundant-io]\nmin_reread_factor = 1\n"
                           "min_redundant_read_bytes = 0\n")
    e = one(trace(tmp_path, evs), "redundant-io", cfg).evidence
    assert (e["read_bytes"], e["distinct_read_bytes"]) == (470, 360)
    assert e["reread_factor"] == pytest.approx(470 / 360)


def test_fsync_after_every_small_write(tmp_path):
    f = one(trace(tmp_path, writes(100, 100, sync_every=1)), "redundant-io")
    e = f.evidence
    assert f.title == "An fsync after every small write" and f.rule_severity == "high"
    assert (e["writes"], e["syncs"], e["syncs_per_write"]) == (100, 100, 1.0)
    assert (e["median_write_bytes"], e["write_bytes"]) == (100, 10_000)
    assert e["sync_time_s"] == pytest.approx(100 * 1000 / 1e9)


@pytest.mark.parametrize("n,nsyncs,size,titles", [
    (100, 99, 100, ["Tiny writes"]),                       # 99 syncs < min_syncs_per_file
    (200, 100, 100, ["An fsync after every small write"]),  # 0.5 syncs per write
    (201, 100, 100, ["Tiny writes"]),                      # just under 0.5
    (100, 100, MiB, ["An fsync after every small write"]),  # median write 1 MiB
    (100, 100, MiB + 1, []),                               # larger: neither
])
def test_fsync_edges(tmp_path, n, nsyncs, size, titles):
    t = trace(tmp_path, writes(n, size, sync_every=1, nsyncs=nsyncs))
    assert [f.title for f in findings(t, "redundant-io")] == titles


@pytest.mark.parametrize("n,size,sev", [(100, 4096, "info"), (99, 4096, None),
                                        (100, 4097, None), (256, 4096, "warn"),
                                        (255, 4096, "info")])
def test_tiny_writes_edges(tmp_path, n, size, sev):
    fs = findings(trace(tmp_path, writes(n, size)), "redundant-io")
    assert [f.rule_severity for f in fs] == ([sev] if sev else [])
    if sev:
        assert fs[0].title == "Tiny writes"
        assert (fs[0].evidence["writes"], fs[0].evidence["write_bytes"]) == (n, n * size)


def direct_trace(tmp_path, calls, flags=0o40000 | os.O_RDWR, arch="x86_64", reopen=False,
                 schema=None):
    """Open fd 5 with `flags`, then (offset, size, ret) preads, each flagged
    DIRECT as the recorder does for a file open with O_DIRECT; with reopen, the
    fd is closed and reopened without O_DIRECT before the calls. With `schema`
    (before 1.7: no DIRECT flag), the open flags alone say it."""
    evs = [ev("openat", ts=0, fd=5, ret=5, flags=flags, file_id=0, path="/data/f0.bin")]
    if reopen:
        evs += [ev("close", ts=10, fd=5, file_id=0),
                ev("openat", ts=20, fd=5, ret=5, flags=os.O_RDWR, file_id=0,
                   path="/data/f0.bin")]
    direct = 0 if reopen or schema else EF_DIRECT
    evs += [ev("pread64", ts=100 + i, fd=5, off=o, req=n, ret=r, file_id=0, eflags=direct)
            for i, (o, n, r) in enumerate(calls)]
    return trace(tmp_path, evs, meta={"arch": arch, **({"schema_version": schema}
                                                         if schema else {})})


ALIGNED = [(0, 4096, 4096), (8192, 65536, 65536)]


@pytest.mark.parametrize("calls,sev,bad,einval", [
    (ALIGNED, None, 0, 0),
    (ALIGNED + [(512, 4096, 4096)], "warn", 1, 0),          # worked: 512-byte sectors
    (ALIGNED + [(100, 4096, -22), (4096, 1000, -22)], "high", 2, 2),
])
def test_misaligned_direct_io(tmp_path, calls, sev, bad, einval):
    fs = findings(direct_trace(tmp_path, calls), "redundant-io")
    assert [f.rule_severity for f in fs] == ([sev] if sev else [])
    if sev:
        e = fs[0].evidence
        assert fs[0].title == "Misaligned O_DIRECT I/O"
        assert (e["direct_calls"], e["misaligned_calls"], e["einval_calls"]) == \
            (len(calls), bad, einval)


def test_direct_io_follows_the_flag(tmp_path):
    bad = ALIGNED + [(100, 4096, -22)]
    assert findings(direct_trace(tmp_path / "a", bad, reopen=True), "redundant-io") == []


def test_direct_io_of_older_traces_from_the_opens_and_the_arch(tmp_path):
    """A trace made before the DIRECT flag: a file every open of which asked
    for O_DIRECT (the trace's arch's value) has its calls taken as direct."""
    bad = ALIGNED + [(100, 4096, -22)]
    assert len(findings(direct_trace(tmp_path / "o", bad, schema="1.6"), "redundant-io")) == 1
    assert findings(direct_trace(tmp_path / "a", bad, reopen=True, schema="1.6"),
                    "redundant-io") == []
    # on aarch64 O_DIRECT is 0o200000 (0o40000 is O_DIRECTORY there)
    assert findings(direct_trace(tmp_path / "b", bad, arch="aarch64", schema="1.6"),
                    "redundant-io") == []
    assert len(findings(direct_trace(tmp_path / "c", bad, flags=0o200000 | os.O_RDWR,
                                     arch="aarch64", schema="1.6"), "redundant-io")) == 1


# ───────────────────────────────── real workloads ─────────────────────────────────

real = needs_root()
has_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
FIO_MB = 64
PY = sys.executable


def ours(trace):
    r = build_report(trace, Targets(), only=list(OURS))
    assert r.errors == []
    return r.findings


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("acc")
    with open(d / "data.bin", "wb") as f:
        for i in range(FIO_MB):
            f.write(bytes([i]) * MiB)
    return d


def fio(tmp, datafile, *args):
    """fio psync on datafile; returns (trace, fio's job report, fio's I/O log rows)."""
    report, iolog = tmp / "fio.json", tmp / "iolog"
    proc, t = trace_run(tmp / "trace", "fio", "--name=job", f"--filename={datafile}",
                        "--ioengine=psync", f"--size={FIO_MB}M", "--output-format=json",
                        f"--output={report}", f"--write_iolog={iolog}", *args)
    assert proc.returncode == 0, proc.stderr
    log = [line.split() for line in iolog.read_text().splitlines()[1:]]
    return t, json.loads(report.read_text())["jobs"][0], [
        (int(x[3]), int(x[4])) for x in log if len(x) == 5 and x[2] == "read"]


@pytest.fixture(scope="module")
def fio_rand(tmp_path_factory, data):
    return fio(tmp_path_factory.mktemp("rand"), data / "data.bin", "--rw=randread",
               "--bs=4k", "--io_size=16M")


@pytest.fixture(scope="module")
def fio_seq(tmp_path_factory, data):
    return fio(tmp_path_factory.mktemp("seq"), data / "data.bin", "--rw=read", "--bs=1M")


@pytest.fixture(scope="module")
def whole_reads(tmp_path_factory):
    """8 samples of 4 MiB, each read with one os.read."""
    d = tmp_path_factory.mktemp("whole")
    files = []
    for i in range(8):
        (d / f"s{i}.bin").write_bytes(bytes([i]) * (4 * MiB))
        files.append(str(d / f"s{i}.bin"))
    proc, t = trace_run(d / "trace", PY, str(WORKLOADS / "acc_whole_reads.py"), *files)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"bytes {32 * MiB}"
    return t


@real
@has_fio
def test_fio_random_4k_reads_are_small_and_random(fio_rand, data):
    t, job, log = fio_rand
    path = str(data / "data.bin")
    assert job["read"]["total_ios"] == len(log) == 4096
    offs = [o for o, n in log]
    assert {n for o, n in log} == {4096}
    by_id = {f.id: f for f in ours(t)}
    assert set(by_id) == {"small-reads", "random-access"}

    s = by_id["small-reads"]
    assert s.rule_severity == "high" and s.files[0]["path"] == path
    e = s.evidence
    assert (e["files"], e["reads"], e["read_bytes"]) == (1, 4096, 16 * MiB)
    assert e["read_bytes"] == job["read"]["io_bytes"]
    assert (e["median_request_bytes"], e["p90_request_bytes"]) == (4096, 4096)
    assert e["calls_per_mib"] == 256.0
    assert s.files[0]["file_bytes"] == max(offs) + 4096     # the furthest block fio read
    assert e["calls_saved"] == 4095
    assert e["per_call_overhead_method"] == "median-call"

    r = by_id["random-access"]
    jumps = expected_nonseq(offs, 4096)
    assert r.rule_severity == "high" and r.files[0]["path"] == path
    e = r.evidence
    assert (e["reads"], e["non_sequential_reads"], e["seeks"]) == (4096, len(jumps), 0)
    assert e["non_sequential_share"] == len(jumps) / 4096 >= 0.99
    assert e["median_jump_bytes"] == nearest_rank_median(jumps)
    assert t.meta["drops"] == 0


@real
@has_fio
def test_fio_sequential_1m_reads_are_clean(fio_seq):
    t, job, log = fio_seq
    assert job["read"]["total_ios"] == len(log) == FIO_MB
    assert ours(t) == []


@real
def test_one_read_per_sample_is_clean(whole_reads):
    assert ours(whole_reads) == []


@real
def test_np_load_npz_reads_in_numpy_chunks(tmp_path):
    """np.load of a .npz: numpy reads the zip member in numpy.lib.format.BUFFER_SIZE
    (256 KiB) pieces; Python's buffered file (buffer = st_blksize, 4 KiB here)
    hands each to the kernel as one st_blksize read and one BUFFER_SIZE - st_blksize
    read (plus an lseek(SEEK_CUR) position query). Measured once with this trace:
    a 32 MiB float32 array = 128 chunks = 263 reads (7 more for the zip directory)."""
    np = pytest.importorskip("numpy")
    from numpy.lib import format as npformat
    sample = tmp_path / "sample.npz"
    array = np.arange(8 * MiB, dtype=np.float32)               # 32 MiB
    np.savez(sample, x=array)
    chunk, blk = npformat.BUFFER_SIZE, os.stat(sample).st_blksize
    assert chunk == 256 * KiB
    chunks = math.ceil(array.nbytes / chunk)
    proc, t = trace_run(tmp_path / "trace", PY, str(WORKLOADS / "acc_npz_load.py"),
                        str(sample))
    assert proc.returncode == 0, proc.stderr
    fs = [f for f in ours(t) if f.id == "small-reads"]
    assert len(fs) == 1
    f, e = fs[0], fs[0].evidence
    assert f.rule_severity == "high"
    assert e["files"] == 1 and f.files[0]["path"] == str(sample)
    assert f.files[0]["file_bytes"] == os.path.getsize(sample)
    reads = f.files[0]["reads"]
    assert 2 * chunks <= reads <= 2 * chunks + 10
    assert f.files[0]["median_request_bytes"] == blk
    assert f.files[0]["weighted_median_request_bytes"] == chunk - blk
    assert e["calls_per_mib"] == pytest.approx(reads / (os.path.getsize(sample) / MiB),
                                               rel=1e-3)
    assert e["calls_saved"] == reads - 1
    # zipfile's lseeks are position queries: not a seek pattern, and reads are in order
    assert not [x for x in ours(t) if x.id == "random-access"]


@real
def test_lseek_before_each_4m_read(tmp_path, data):
    proc, t = trace_run(tmp_path / "trace", PY, str(WORKLOADS / "acc_seek_chunks.py"),
                        str(data / "data.bin"), str(4 * MiB))
    assert proc.returncode == 0 and proc.stdout.strip() == "reads 16", proc.stderr
    fs = ours(t)
    assert [(f.id, f.rule_severity) for f in fs] == [("random-access", "warn")]
    e = fs[0].evidence
    assert (e["reads"], e["seeks"], e["seeks_per_read"]) == (16, 16, 1.0)
    assert (e["non_sequential_reads"], e["median_request_bytes"]) == (0, 4 * MiB)
    assert fs[0].files[0]["path"] == str(data / "data.bin")


@real
def test_reread_factor_exact(tmp_path):
    f1 = tmp_path / "index.bin"
    f1.write_bytes(b"i" * MiB)
    proc, t = trace_run(tmp_path / "trace", PY, str(WORKLOADS / "acc_reread.py"),
                        str(f1), "20")
    assert proc.returncode == 0, proc.stderr
    fs = ours(t)
    assert [f.id for f in fs] == ["redundant-io"]
    f, e = fs[0], fs[0].evidence
    assert f.title == "The same bytes read many times" and f.rule_severity == "warn"
    assert (e["files"], e["reads"], e["read_bytes"], e["distinct_read_bytes"]) == \
        (1, 20, 20 * MiB, MiB)
    assert e["reread_factor"] == 20.0
    assert f.files[0] == {"path": str(f1), "distinct_read_bytes": MiB,
                          "read_bytes": 20 * MiB, "reread_factor": 20.0, "opens": 20}


@real
@pytest.mark.parametrize("mode", ["sync", "nosync"])
def test_small_writes_exact(tmp_path, mode):
    log = tmp_path / "records.log"
    proc, t = trace_run(tmp_path / "trace", PY, str(WORKLOADS / "acc_fsync_writes.py"),
                        str(log), "1000", "100", mode)
    assert proc.returncode == 0, proc.stderr
    fs = ours(t)
    assert [f.id for f in fs] == ["redundant-io"]
    f, e = fs[0], fs[0].evidence
    assert (e["files"], e["writes"], e["write_bytes"], e["median_write_bytes"]) == \
        (1, 1000, 100_000, 100)
    assert f.files[0]["path"] == str(log)
    if mode == "sync":
        assert (f.title, f.rule_severity) == ("An fsync after every small write", "high")
        assert (e["syncs"], e["syncs_per_write"]) == (1000, 1.0)
        assert e["sync_time_s"] > 0
    else:
        assert (f.title, f.rule_severity) == ("Tiny writes", "info")   # 100 kB < 1 MiB


@real
def test_misaligned_o_direct(tmp_path):
    target = tmp_path / "direct.bin"
    proc, t = trace_run(tmp_path / "trace", PY, str(WORKLOADS / "acc_odirect.py"),
                        str(target), "8", "6")
    if proc.returncode != 0 and "Invalid argument" in proc.stderr:
        pytest.skip("this filesystem refuses O_DIRECT")
    assert proc.returncode == 0 and proc.stdout.strip() == "failed 6", proc.stderr
    fs = ours(t)
    assert [(f.id, f.title, f.rule_severity) for f in fs] == [
        ("redundant-io", "Misaligned O_DIRECT I/O", "high")]
    e = fs[0].evidence
    assert (e["direct_calls"], e["misaligned_calls"], e["einval_calls"]) == (14, 6, 6)
    assert (e["misaligned_offset_calls"], e["misaligned_size_calls"]) == (3, 3)
