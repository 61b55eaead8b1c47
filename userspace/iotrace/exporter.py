"""`iotrace exporter`: the node's training jobs' I/O as Prometheus metrics.

One recorder in profile mode follows every process below a cgroup root
(live_feed.py); each job is a cgroup below it (live_jobs.py). This module
sums what the recorder sends into counters per job and serves them on
/metrics (prometheus_client). Metric names and labels: docs/exporter.md.

Labels are bounded: `cgroup` (the job), `op` (the system call, a fixed set),
`device` (block devices). No file names.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Optional

import numpy as np

from .abi import COPY_OPS, OP_NAMES, READ_OPS, RECV_OPS, SEND_OPS, SYNC_OPS, WRITE_OPS
from .live_files import WINDOW_S as FILES_WINDOW_S, TopFiles
from .live_http import Requests
from .live_jobs import Jobs
from .live_loops import LoopWaits
from .storage_io import _kernel_dev, device_names
from .tracedir import mount_table

OP = {name: i for i, name in enumerate(OP_NAMES)}
READ_CODES = {OP[o] for o in READ_OPS + RECV_OPS}
WRITE_CODES = {OP[o] for o in WRITE_OPS + SEND_OPS}
COPY_CODES = {OP[o] for o in COPY_OPS}
FILE_READ_CODES = {OP[o] for o in READ_OPS}
FILE_WRITE_CODES = {OP[o] for o in WRITE_OPS}
SYNC_CODES = {OP[o] for o in SYNC_OPS}
S_IFREG_TYPE = 8          # a rate row's ftype (S_IFMT >> 12) for a regular file
FORK, EXIT, BLOCK = OP["proc_fork"], OP["proc_exit"], OP["block_rq"]
# device request latency buckets (seconds): 50 us to 5 s
LATENCY_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0)


class Sums:
    """The exporter's counters, keyed by job; read by the collector under a lock."""

    def __init__(self, jobs: Jobs, top_files: int = 0):
        self.jobs = jobs
        self.top_files = top_files
        self.files = TopFiles() if top_files else None
        self.lock = threading.Lock()
        self.io: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.calls: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.device: dict[tuple[str, str, str], float] = defaultdict(float)
        self.latency: dict[tuple[str, str], list] = {}
        self.devnames = device_names()
        # (job, mount) -> read_bytes, storage_read_bytes, write_bytes,
        # read_s, write_s, sync_s: the calls on regular files, per mount
        self.mounts: dict[tuple[str, str], dict[str, float]] = \
            defaultdict(lambda: defaultdict(float))
        self._mount_of: dict[int, str] = {}
        self._table: dict = {}
        self._mounts_read = 0.0
        self.rows = 0
        self.loops = LoopWaits()
        # (job, rank) -> seconds the loop waited for its loader's workers
        self.data_wait: dict[tuple[str, str], float] = defaultdict(float)
        self.loops_now: dict[str, int] = {}          # job -> loops found in the window
        self.http = Requests()
        # (job, endpoint, method, status class) -> [requests, throttled, retries]
        self.requests: dict[tuple, list] = defaultdict(lambda: [0, 0, 0])
        self.unattributed_calls = 0.0
        self.recorder: dict = {}
        self.tracing = False       # the recorder's probes are in and it follows the jobs

    def _device(self, dev: int) -> str:
        key = "%d:%d" % _kernel_dev(int(dev))
        if key not in self.devnames:
            self.devnames = device_names()
        return self.devnames.get(key, key)

    def _mount(self, dev: int) -> str:
        """A kernel dev_t's mount point (the first mounted, in this mount
        namespace), else "dev:MAJOR:MINOR"."""
        if dev not in self._mount_of:
            if time.monotonic() - self._mounts_read > 5.0:
                self._table = mount_table()
                self._mounts_read = time.monotonic()
            majmin = _kernel_dev(dev)
            found = self._table.get(majmin)
            if found is None:
                return "dev:%d:%d" % majmin       # looked up again later: a mount may come
            self._mount_of[dev] = found[0]
        return self._mount_of[dev]

    def add_rates(self, rows: np.ndarray) -> None:
        """Per-second sums (pid, op): calls, bytes, seconds, bytes from storage."""
        if not len(rows):
            return
        job_of = {int(p): self.jobs.job_of(int(p)) for p in np.unique(rows["pid"])}
        with self.lock:
            self.rows += len(rows)
            for r in rows:
                job = job_of[int(r["pid"])]
                if job is None:
                    self.unattributed_calls += int(r["calls"])
                    continue
                op = int(r["op"])
                c = self.calls[(job, OP_NAMES[op] if op < len(OP_NAMES) else str(op))]
                c[0] += int(r["calls"])
                c[1] += int(r["dur_ns"]) / 1e9
                io = self.io[job]
                if op in READ_CODES:
                    io["read_bytes"] += int(r["bytes"])
                    io["storage_read_bytes"] += int(r["cache_bytes"])
                elif op in WRITE_CODES:
                    io["write_bytes"] += int(r["bytes"])
                elif op in COPY_CODES:
                    io["read_bytes"] += int(r["bytes"])
                    io["write_bytes"] += int(r["bytes"])
                if int(r["ftype"]) == S_IFREG_TYPE and r["dev"]:
                    self._add_mount(job, op, r)

    def _add_mount(self, job: str, op: int, r) -> None:
        """A rate row of calls on regular files: into its mount's sums."""
        m = self.mounts[(job, self._mount(int(r["dev"])))]
        secs = int(r["dur_ns"]) / 1e9
        if op in FILE_READ_CODES:
            m["read_bytes"] += int(r["bytes"])
            m["storage_read_bytes"] += int(r["cache_bytes"])
            m["read_s"] += secs
        elif op in FILE_WRITE_CODES:
            m["write_bytes"] += int(r["bytes"])
            m["write_s"] += secs
        elif op in SYNC_CODES:
            m["sync_s"] += secs

    def add_wakes(self, rows: np.ndarray) -> None:
        """Per-second wake-up sums: the loops' data waits (live_loops.py)."""
        if not len(rows):
            return
        waited = self.loops.add(rows)
        with self.lock:
            for pid, secs in waited.items():
                job = self.jobs.job_of(pid)
                if job is not None:
                    self.data_wait[(job, self.loops.rank(pid))] += secs
            now: dict[str, int] = defaultdict(int)
            for pid in self.loops.loops:
                job = self.jobs.job_of(pid)
                if job is not None:
                    now[job] += 1
            self.loops_now = dict(now)

    def add_joined(self, pids: list[int]) -> None:
        """Processes the recorder found in the tree (not by their fork)."""
        for pid in pids:
            self.loops.joined(pid)
            self.jobs.job_of(pid)       # placed while /proc has it (its sums come 1-2 s later)

    def add_files(self, rows: np.ndarray) -> None:
        """Per (process, file) sums of a drain (--top-files)."""
        if self.files is not None:
            with self.lock:
                self.files.add(rows, self.jobs.job_of)

    def add_records(self, recs: np.ndarray, payloads: Optional[dict] = None) -> None:
        """Process life (whose job a new process is), block-device requests,
        and HTTP message starts (object-storage requests, live_http.py)."""
        if not len(recs):
            return
        if payloads and self.files is not None:
            self.files.add_opens(recs, payloads)
        if payloads:
            answered = self.http.add(recs, payloads, self.jobs.job_of)
            with self.lock:
                for key, (n, thr, retries) in answered.items():
                    row = self.requests[key]
                    row[0] += n
                    row[1] += thr
                    row[2] += retries
        ops = recs["op"]
        for r in recs[ops == FORK]:
            self.jobs.forked(int(r["pid"]), int(r["ret"]))
            self.loops.forked(int(r["pid"]), int(r["ret"]))
        for r in recs[ops == EXIT]:
            self.jobs.exited(int(r["pid"]))
            self.loops.exited(int(r["pid"]))
        blk = recs[ops == BLOCK]
        if not len(blk):
            return
        with self.lock:
            for r in blk:
                job = self.jobs.job_of(int(r["pid"])) if r["pid"] > 0 else None
                kind = {0: "read", 1: "write"}.get(int(r["flags"]) & 0xFF, "other")
                dev = self._device(int(r["mode"]))
                if job is not None:
                    self.device[(job, dev, kind)] += int(r["req_bytes"])
                h = self.latency.setdefault((dev, kind), [0] * (len(LATENCY_BUCKETS) + 1)
                                            + [0.0])
                s = int(r["dur_ns"]) / 1e9
                h[int(np.searchsorted(LATENCY_BUCKETS, s))] += 1
                h[-1] += s

    def forget(self, jobs: set[str]) -> None:
        """Jobs whose cgroups are gone: their series leave /metrics."""
        with self.lock:
            for j in jobs:
                self.io.pop(j, None)
                for k in [k for k in self.calls if k[0] == j]:
                    del self.calls[k]
                for k in [k for k in self.device if k[0] == j]:
                    del self.device[k]
                for k in [k for k in self.data_wait if k[0] == j]:
                    del self.data_wait[k]
                for k in [k for k in self.mounts if k[0] == j]:
                    del self.mounts[k]
                for k in [k for k in self.requests if k[0] == j]:
                    del self.requests[k]
                self.loops_now.pop(j, None)
            if self.files is not None:
                self.files.forget(jobs)


class Collector:
    """prometheus_client collector over Sums (read at each scrape)."""

    def __init__(self, sums: Sums):
        self.sums = sums

    def collect(self):
        from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                            HistogramMetricFamily)
        s = self.sums
        with s.lock:
            jobs = sorted(set(s.io) | s.jobs.live)
            fams = {name: CounterMetricFamily(f"iotrace_{name}", help_, labels=["cgroup"])
                    for name, help_ in (
                        ("read_bytes", "Bytes the job's read calls returned (files, pipes, "
                                       "sockets; in-kernel copies count both ways)."),
                        ("write_bytes", "Bytes the job's write calls wrote."),
                        ("storage_read_bytes", "Of the bytes read, those the page cache had "
                                               "to bring from storage (or read O_DIRECT)."))}
            for job in jobs:
                io = s.io.get(job, {})
                for name, fam in fams.items():
                    fam.add_metric([job], io.get(name, 0.0))
            yield from fams.values()
            calls = CounterMetricFamily("iotrace_calls", "System calls of the job, by op.",
                                        labels=["cgroup", "op"])
            secs = CounterMetricFamily("iotrace_call_seconds",
                                       "Time the job's threads spent in the calls, by op.",
                                       labels=["cgroup", "op"])
            for (job, op), (n, t) in sorted(s.calls.items()):
                calls.add_metric([job, op], n)
                secs.add_metric([job, op], t)
            yield calls
            yield secs
            dev = CounterMetricFamily("iotrace_device_bytes",
                                      "Bytes of the block-device requests made for the job.",
                                      labels=["cgroup", "device", "op"])
            for (job, d, kind), v in sorted(s.device.items()):
                dev.add_metric([job, d, kind], v)
            yield dev
            lat = HistogramMetricFamily("iotrace_device_request_seconds",
                                        "Block-device requests of the traced jobs, from issue "
                                        "to completion.", labels=["device", "op"])
            for (d, kind), h in sorted(s.latency.items()):
                cum, buckets = 0, []
                for le, n in zip(LATENCY_BUCKETS, h):
                    cum += n
                    buckets.append((repr(le), cum))
                cum += h[len(LATENCY_BUCKETS)]
                buckets.append(("+Inf", cum))
                lat.add_metric([d, kind], buckets, h[-1])
            yield lat
            mfams = {name: CounterMetricFamily(f"iotrace_mount_{name}", help_,
                                               labels=["cgroup", "mount"])
                     for name, help_ in (
                         ("read_bytes", "Bytes the job's reads of regular files returned, by "
                                        "the files' mount."),
                         ("storage_read_bytes", "Of those, the bytes the page cache had to "
                                                "bring from storage."),
                         ("write_bytes", "Bytes the job wrote to regular files, by mount "
                                         "(checkpoints show as bursts)."))}
            msecs = CounterMetricFamily("iotrace_mount_io_seconds",
                                        "The job's threads' time in reads, writes and syncs "
                                        "(fsync, fdatasync, sync_file_range) of regular files, "
                                        "by mount: a checkpoint's write and sync time.",
                                        labels=["cgroup", "mount", "op"])
            for (job, mount), m in sorted(s.mounts.items()):
                for name, fam in mfams.items():
                    fam.add_metric([job, mount], m.get(name, 0.0))
                for kind in ("read", "write", "sync"):
                    msecs.add_metric([job, mount, kind], m.get(f"{kind}_s", 0.0))
            yield from mfams.values()
            yield msecs
            req = CounterMetricFamily("iotrace_http_requests", "The job's HTTP requests "
                                      "(object storage: S3 and others) answered, by endpoint "
                                      "(Host header), method and status class.",
                                      labels=["cgroup", "endpoint", "method", "status"])
            thr = CounterMetricFamily("iotrace_http_throttled", "Of those, the answers that "
                                      "refused the request for its rate (429, 503, an S3 "
                                      "SlowDown code).", labels=["cgroup", "endpoint"])
            rty = CounterMetricFamily("iotrace_http_retries", "Of those, the requests that "
                                      "were a retry (the SDK's attempt > 1, or the same "
                                      "request again after a 429/5xx).",
                                      labels=["cgroup", "endpoint"])
            per_endpoint: dict[tuple, list] = defaultdict(lambda: [0, 0])
            for (job, endpoint, method, status), (n, t, r) in sorted(s.requests.items()):
                req.add_metric([job, endpoint, method, status], n)
                per_endpoint[(job, endpoint)][0] += t
                per_endpoint[(job, endpoint)][1] += r
            for (job, endpoint), (t, r) in sorted(per_endpoint.items()):
                thr.add_metric([job, endpoint], t)
                rty.add_metric([job, endpoint], r)
            yield req
            yield thr
            yield rty
            wait = CounterMetricFamily(
                "iotrace_loop_data_wait_seconds",
                "Time the job's training loop was blocked until its loader's worker "
                "processes handed it data; rate() is the data-wait share (1 - AU). Only "
                "loops fed by worker processes are measured live.", labels=["cgroup", "rank"])
            for (job, rank), v in sorted(s.data_wait.items()):
                wait.add_metric([job, rank], v)
            yield wait
            loops = GaugeMetricFamily("iotrace_loops", "Training loops fed by worker processes "
                                      "found in the job's last 10 s (0: its data wait is not "
                                      "measured live).", labels=["cgroup"])
            for job in jobs:
                loops.add_metric([job], s.loops_now.get(job, 0))
            yield loops
            g = GaugeMetricFamily("iotrace_tracing", "1 once the probes are loaded and the "
                                  "jobs are followed; 0 while the exporter starts (the "
                                  "counters miss what the jobs do before).")
            g.add_metric([], 1 if s.tracing else 0)
            yield g
            g = GaugeMetricFamily("iotrace_jobs", "Jobs (cgroups) followed now.")
            g.add_metric([], len(s.jobs.live))
            yield g
            c = CounterMetricFamily("iotrace_records_dropped", "Records the kernel could not "
                                    "hand to the recorder (their calls are missing).")
            c.add_metric([], float(s.recorder.get("drops", 0)))
            yield c
            c = CounterMetricFamily("iotrace_page_faults_unresolved", "User page faults of the "
                                    "jobs whose mapping the kernel could not look up at that "
                                    "moment (not counted, whether or not on a file).")
            c.add_metric([], float(s.recorder.get("faults_unresolved", 0)))
            yield c
            c = CounterMetricFamily("iotrace_wakes_dropped", "Wake-ups between the jobs' threads "
                                    "the recorder could not sum (the data waits miss them).")
            c.add_metric([], float(s.recorder.get("wakes_lost", 0)))
            yield c
            if s.files is not None:
                fr = GaugeMetricFamily(
                    "iotrace_top_file_read_bytes", f"Bytes the job read from each of its "
                    f"{s.top_files} most used files in the last {FILES_WINDOW_S:.0f} s "
                    "(--top-files).", labels=["cgroup", "file"])
                fw = GaugeMetricFamily(
                    "iotrace_top_file_write_bytes", f"Bytes the job wrote to each of its "
                    f"{s.top_files} most used files in the last {FILES_WINDOW_S:.0f} s.",
                    labels=["cgroup", "file"])
                for job, files in sorted(s.files.top(s.top_files).items()):
                    for name, rd, wr in files:
                        fr.add_metric([job, name], rd)
                        fw.add_metric([job, name], wr)
                yield fr
                yield fw
                c = CounterMetricFamily("iotrace_file_sums_dropped", "Calls left out of the "
                                        "top files (more files a second than the recorder's "
                                        "table holds).")
                c.add_metric([], float(s.recorder.get("file_sums_lost", 0)))
                yield c
            c = CounterMetricFamily("iotrace_http_unanswered", "HTTP requests whose answer "
                                    "was never seen (not counted in iotrace_http_requests).")
            c.add_metric([], float(s.http.dropped))
            yield c
            u = CounterMetricFamily("iotrace_unattributed_calls",
                                    "Calls of processes in the tree but in no job's cgroup.")
            u.add_metric([], s.unattributed_calls)
            yield u


def serve(listen: str, cgroup_root: str, match: Optional[str], spool,
          stop: threading.Event, ready: Optional[callable] = None,
          poll_s: float = 0.5, forget_after_s: float = 15.0, loop_waits: bool = True,
          http: bool = True, top_files: int = 0) -> None:
    """Runs until stop is set: the recorder, the sums and the HTTP server.
    Raises IotraceError if the recorder ends first."""
    from prometheus_client import start_http_server
    from prometheus_client.core import CollectorRegistry

    from .live_feed import LiveRecorder

    host, _, port = listen.rpartition(":")
    jobs = Jobs(cgroup_root, match, forget_after_s)
    sums = Sums(jobs, top_files)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(sums))
    # the port first: a port in use is an error before any probe is loaded
    server, _ = start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    rec = LiveRecorder(spool, cgroup_root=str(jobs.root), loop_waits=loop_waits, http=http,
                       file_sums=top_files > 0)
    try:
        rec.start()
    except BaseException:
        server.shutdown()
        raise
    sums.tracing = True
    if ready:
        ready(rec)
    last_scan = 0.0
    try:
        while not stop.is_set() and rec.alive():
            rec.read_status(poll_s)
            sums.add_joined(rec.take_joined())
            sums.add_records(*rec.take_records())
            sums.add_wakes(rec.take_wakes())
            sums.add_files(rec.take_files())
            sums.add_rates(rec.take_rates())
            sums.recorder = dict(rec.stats)
            if time.monotonic() - last_scan >= 1.0:
                _, forget = jobs.scan()
                sums.forget(forget)
                last_scan = time.monotonic()
    finally:
        sums.tracing = False
        rec.stop()
        sums.add_records(*rec.take_records())
        sums.add_wakes(rec.take_wakes())
        sums.add_rates(rec.take_rates())
        server.shutdown()
    if not stop.is_set():
        # the recorder ended on its own: the metrics would silently stop growing
        from .errors import EXIT_ENV, IotraceError
        end = rec.end or {}
        why = end.get("reason") or end.get("message") or "it exited"
        raise IotraceError(f"the recorder stopped ({why}): the exporter cannot go on; "
                           "see `iotrace doctor`", EXIT_ENV)
