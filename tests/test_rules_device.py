"""device-at-limit and the device summary on synthetic traces, where the
device's rate is known by construction: the reading span does not stretch
for a stray read before the bulk, and requests recorded without their
completion (eflags NO_COMPLETION, dur_ns 0) count their bytes but give no
service time. The real throttled runs are in test_storage.py and
test_async_io.py."""
from __future__ import annotations

from synth import ev, synth_trace

from iotrace.abi import EF_NO_COMPLETION
from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report
from iotrace.storage_io import files_and_devices

KiB, MiB = 1 << 10, 1 << 20
DEV = (254 << 20) | 0           # the kernel's dev_t of 254:0
RATE = 12e6                     # bytes/s the synthetic device delivers
SERVICE = 2_000_000             # ns each completed request spends in the device


LIB_KIB = 640                    # a library paged in before the bulk: 3% of the bytes


def throttled_reader(tmp_path, stray: bool, unseen: int = 0, libs: bool = False,
                     data_path: str = "/data/train.bin", readahead: int = 0):
    """A job reads 20 MiB in 1 MiB preads that miss the page cache, each
    waiting for its one block request: the device completes one every
    1 MiB / RATE. `stray`: a 28 KiB read of another file 2 s before the
    bulk. `unseen`: that many requests (every third) recorded without their
    completion. `libs`: the program's library paged in (LIB_KIB in 16 KiB
    requests) 0.3 s before the bulk, more bytes than the span's trim.
    `readahead`: three reads in four find their pages added by an earlier
    read's readahead but still in flight (they add nothing to the cache) and
    wait for them off CPU in that task state (offcpu flags)."""
    events = []
    t = 3_000_000_000
    step = int(MiB / RATE * 1e9)
    if stray:
        events.append(ev("pread64", ts=t - 2_000_000_000, dur=SERVICE, fd=4, off=0,
                         req=28 * KiB, ret=28 * KiB, file_id=1, arg=28 * KiB))
        events.append(ev("block_rq", ts=t - 2_000_000_000, dur=SERVICE, fd=-1, off=0,
                         req=28 * KiB, ret=0, file_id=1, mode=DEV))
    if libs:
        lib_t = t - 300_000_000
        for i in range(LIB_KIB // 16):
            events.append(ev("block_rq", ts=lib_t + i * 1_000_000, dur=SERVICE, fd=-1,
                             off=i * 16 * KiB, req=16 * KiB, ret=0, file_id=2, mode=DEV))
    left = unseen
    for i in range(20):
        in_flight = readahead and i % 4 != 0
        events.append(ev("pread64", ts=t, dur=step, fd=3, off=i * MiB, req=MiB, ret=MiB,
                         file_id=0, arg=0 if in_flight else MiB))
        if in_flight:
            events.append(ev("offcpu", ts=t + 10_000, dur=step - 20_000, fd=-1,
                             flags=readahead))
        issue = t + step - SERVICE
        if left and i % 3 == 1:
            left -= 1
            events.append(ev("block_rq", ts=issue, dur=0, fd=-1, off=i * MiB, req=MiB,
                             ret=0, file_id=0, mode=DEV, eflags=EF_NO_COMPLETION))
        else:
            events.append(ev("block_rq", ts=issue, dur=SERVICE, fd=-1, off=i * MiB, req=MiB,
                             ret=0, file_id=0, mode=DEV))
        t += step
    assert left == 0
    return synth_trace(tmp_path, events, files=[(0, data_path), (1, "/etc/job.yaml"),
                                                (2, "/usr/lib/x86_64-linux-gnu/libceph.so.2")])


def device_finding(trace) -> dict:
    r = build_report(trace, Targets(), only=["device-at-limit"])
    assert r.errors == []
    found = [f for f in r.findings if f.id == "device-at-limit"]
    assert len(found) == 1, [f.title for f in found]
    return found[0].evidence


def test_ceiling_is_the_rate_of_the_bulk(tmp_path):
    """Without the stray read the span is the bulk's; with it, the span and
    the ceiling stay the same (over the whole first-to-last span the rate
    would read 20 MiB / 3.7 s = 5.7 MB/s)."""
    plain = device_finding(throttled_reader(tmp_path / "plain", stray=False))
    stray = device_finding(throttled_reader(tmp_path / "stray", stray=True))
    for ev_ in (plain, stray):
        assert abs(ev_["ceiling_bytes_per_s"] - RATE) <= 0.01 * RATE, ev_
        assert ev_["storage_wait_share"] >= 0.99, ev_
        assert ev_["bound"] == "bandwidth"
    assert stray["read_bytes"] == plain["read_bytes"] + 28 * KiB
    assert stray["span_s"] == plain["span_s"]


def test_libraries_paged_in_before_the_bulk(tmp_path):
    """A program's libraries paged in through the same limit before it reads
    its data (fio's, under a cgroup throttle: 3% of the bytes, 0.3 s before)
    do not place the span: the data files' requests do, and the ceiling is
    the bulk's; the libraries' bytes count in the device's total. Where the
    job read no data file (its data under /usr/share), all its requests
    place the span, as before."""
    plain = device_finding(throttled_reader(tmp_path / "plain", stray=False))
    libs = device_finding(throttled_reader(tmp_path / "libs", stray=False, libs=True))
    assert abs(libs["ceiling_bytes_per_s"] - RATE) <= 0.01 * RATE, libs
    assert libs["span_s"] == plain["span_s"]
    assert libs["read_bytes"] == plain["read_bytes"] + LIB_KIB * KiB
    assert libs["storage_wait_share"] >= 0.99, libs
    shared = device_finding(throttled_reader(tmp_path / "shared", stray=True,
                                             data_path="/usr/share/train.bin"))
    assert abs(shared["ceiling_bytes_per_s"] - RATE) <= 0.01 * RATE, shared
    assert shared["span_s"] == plain["span_s"]


def test_reads_waiting_for_readahead_in_flight(tmp_path):
    """Reads that find their pages in the cache, added by an earlier read's
    readahead but still being read in through the limit (dd's 1 MiB reads
    under a cgroup throttle, the readahead window grown to 8 MiB), add
    nothing to the cache yet wait for storage: their thread blocks
    uninterruptibly inside the read (offcpu flags 258, TASK_KILLABLE). That
    time counts in storage_wait_share. Asleep interruptibly inside a read
    (flags 1) it does not. Before, only reads that added pages counted: a
    quarter of the span here, and no finding."""
    ra = device_finding(throttled_reader(tmp_path / "ra", stray=False, readahead=258))
    assert ra["storage_wait_share"] >= 0.99, ra
    assert abs(ra["ceiling_bytes_per_s"] - RATE) <= 0.01 * RATE, ra
    r = build_report(throttled_reader(tmp_path / "int", stray=False, readahead=1), Targets(),
                     only=["device-at-limit"])
    assert r.errors == [] and not [f for f in r.findings if f.id == "device-at-limit"]


def test_requests_without_their_completion(tmp_path):
    """Three of the twenty requests were recorded without their completion:
    their bytes count in the device's and the file's totals, their zero
    duration in no service time."""
    trace = throttled_reader(tmp_path, stray=False, unseen=3)
    ev_ = device_finding(trace)
    assert ev_["read_bytes"] == 20 * MiB and ev_["requests"] == 20
    assert ev_["service_ms_p50"] == ev_["service_ms_p99"] == SERVICE / 1e6
    assert abs(ev_["ceiling_bytes_per_s"] - RATE) <= 0.01 * RATE, ev_
    s = files_and_devices(trace)
    dev, = s["devices"]
    assert (dev["read_bytes"], dev["reads"]) == (20 * MiB, 20)
    assert dev["service_ms_p50"] == SERVICE / 1e6
    data = next(f for f in s["files"] if f["path"] == "/data/train.bin")
    assert data["device_read_bytes"] == 20 * MiB
